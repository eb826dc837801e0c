// Command rendezvous-bench measures the callback path against a baseline run in the same
// process on the same database at the same concurrency, and prints both with their
// ratio. Figures from shared machines are noisy; the ratio is what to compare.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/internal/bench"
)

func main() {
	url := flag.String("database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL server (a throwaway schema is created and dropped)")
	concurrency := flag.Int("concurrency", 8, "concurrent clients, for the baseline and the callbacks alike")
	waits := flag.Int("waits", 4000, "waits answered by callbacks")
	baselineFor := flag.Duration("baseline-duration", 5*time.Second, "how long the baseline loop runs")
	out := flag.String("json", "", "also write the results to this file")
	flag.Parse()

	if err := run(*url, *concurrency, *waits, *baselineFor, *out); err != nil {
		fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type results struct {
	Baseline  bench.BaselineResult `json:"baseline"`
	Callbacks bench.CallbackResult `json:"callbacks"`
	Ratio     float64              `json:"callbacks_to_baseline"`
}

func run(url string, concurrency, waits int, baselineFor time.Duration, out string) error {
	ctx := context.Background()
	schema, err := bench.NewSchema(ctx, url)
	if err != nil {
		return err
	}
	defer schema.Drop()
	pool, err := db.Connect(ctx, schema.URL, int32(concurrency+2))
	if err != nil {
		return err
	}
	fmt.Printf("baseline: UPDATE … WHERE version = $v loop, %d connections, %s …\n", concurrency, baselineFor)
	base, err := bench.Baseline(ctx, pool, concurrency, baselineFor)
	pool.Close()
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	fmt.Printf("callbacks: %d waits answered by %d concurrent clients …\n", waits, concurrency)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	cb, err := bench.Callbacks(ctx, schema.URL, concurrency, waits, logger)
	if err != nil {
		return fmt.Errorf("callbacks: %w", err)
	}
	r := results{Baseline: base, Callbacks: cb, Ratio: cb.PerSecond / base.PerSecond}

	fmt.Println()
	fmt.Printf("%-44s %12s %10s\n", "measure", "value", "× baseline")
	fmt.Printf("%-44s %12.0f %10s\n", "baseline versioned UPDATEs/s", base.PerSecond, "1.00")
	fmt.Printf("%-44s %12.0f %10.2f\n", "callbacks correlated/s (202 answered)", cb.PerSecond, r.Ratio)
	fmt.Printf("%-44s %12.0f %10.2f\n", "continuations committed/s", cb.ResumedPerSecond, cb.ResumedPerSecond/base.PerSecond)
	fmt.Printf("%-44s %12s\n", "callback → continuation committed p50", ms(cb.ToContinuation.P50))
	fmt.Printf("%-44s %12s\n", "callback → continuation committed p99", ms(cb.ToContinuation.P99))
	fmt.Printf("%-44s %12s\n", "callback HTTP round trip p50", ms(cb.Response.P50))
	fmt.Printf("%-44s %12s\n", "callback HTTP round trip p99", ms(cb.Response.P99))
	fmt.Printf("%-44s %12s\n", "baseline UPDATE p50", ms(base.Latency.P50))
	fmt.Printf("%-44s %12s\n", "baseline UPDATE p99", ms(base.Latency.P99))
	if out != "" {
		raw, _ := json.MarshalIndent(r, "", "  ")
		if err := os.WriteFile(out, raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
