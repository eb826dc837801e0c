// Command rendezvous-bench measures the callback path against a baseline run in the same
// process on the same database at the same concurrency, and prints both with their
// ratio. Figures from shared machines are noisy; the ratio is what to compare.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/internal/bench"
)

func main() {
	url := flag.String("database-url", envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL server (a throwaway schema is created and dropped)")
	concurrency := flag.Int("concurrency", 8, "concurrent clients, for the baseline and the callbacks alike")
	waits := flag.Int("waits", 4000, "waits answered by callbacks")
	records := flag.Int("records", 20000, "Kafka records (one per wait)")
	partitions := flag.Int("partitions", 8, "partitions of the Kafka topic")
	baselineFor := flag.Duration("baseline-duration", 5*time.Second, "how long the baseline loop runs")
	out := flag.String("json", "", "also write the results to this file")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	due := flag.Int("due", 100000, "waits whose deadline falls at the same moment")
	sweepWorkers := flag.Int("sweep-workers", aggregator.SweepWorkersDefault, "sweeper transactions in flight")
	sweepBatch := flag.Int("sweep-batch", aggregator.SweepBatchDefault, "due waits decided per sweeper transaction")
	rounds := flag.Int("kafka-rounds", 3, "Kafka runs with tracing off and on, alternating; the median of each is reported")
	only := flag.String("only", "", "run only this part besides the baseline: callbacks, kafka, deadlines or timers")
	flag.Parse()
	onlyPart = *only
	kafkaRounds = max(*rounds, 1)
	dueWaits, sweepers, sweepBatchSize = *due, *sweepWorkers, *sweepBatch
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	if err := run(*url, *concurrency, *waits, *records, *partitions, *baselineFor, *out); err != nil {
		fmt.Fprintln(os.Stderr, "rendezvous-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// onlyPart restricts a run to one part (for profiling).
var onlyPart string

// kafkaRounds is how many times the Kafka part runs in each tracing mode.
var kafkaRounds int

// dueWaits and sweepers configure the deadline part.
var dueWaits, sweepers, sweepBatchSize int

// runs reports whether a part is to run.
func runs(part string) bool { return onlyPart == "" || onlyPart == part }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

type results struct {
	Baseline   bench.BaselineResult `json:"baseline"`
	Callbacks  bench.CallbackResult `json:"callbacks"`
	Ratio      float64              `json:"callbacks_to_baseline"`
	Kafka      bench.KafkaResult    `json:"kafka"`
	KafkaRatio float64              `json:"kafka_to_baseline"`
	// KafkaUntraced is the same run with a no-op tracer; TracingCost is the share of
	// throughput tracing costs (1 − traced / untraced).
	KafkaUntraced bench.KafkaResult    `json:"kafka_untraced"`
	TracingCost   float64              `json:"tracing_cost"`
	Deadlines     bench.DeadlineResult `json:"deadlines"`
	// DeadlineRatio: timed-out waits per second against the baseline's updates per second.
	DeadlineRatio float64 `json:"deadlines_to_baseline"`
	// Timers: the same burst of wait-node timers resuming.
	Timers     bench.DeadlineResult `json:"timers"`
	TimerRatio float64              `json:"timers_to_baseline"`
}

func run(url string, concurrency, waits, records, partitions int, baselineFor time.Duration, out string) error {
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
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var cb bench.CallbackResult
	if runs("callbacks") {
		fmt.Printf("callbacks: %d waits answered by %d concurrent clients …\n", waits, concurrency)
		if cb, err = bench.Callbacks(ctx, schema.URL, concurrency, waits, logger); err != nil {
			return fmt.Errorf("callbacks: %w", err)
		}
	}
	// Each Kafka run gets a schema of its own, so its waits are the only ones there: first
	// without tracing, then as deployed — every span recorded and exported — for the
	// cost of tracing.
	var kr, kOff bench.KafkaResult
	if runs("kafka") {
		// Off and on alternate, rounds times, and each mode's median run is reported:
		// on a shared machine one pair alone says more about the neighbours than about
		// tracing.
		var offs, ons []bench.KafkaResult
		for round := range kafkaRounds * 2 {
			tracing := round%2 == 1
			kschema, err := bench.NewSchema(ctx, url)
			if err != nil {
				return err
			}
			defer kschema.Drop()
			fmt.Printf("kafka: %d records over %d partitions, one per waiting state, tracing %v …\n", records, partitions, tracing)
			res, err := bench.Kafka(ctx, kschema.URL, partitions, records, tracing, logger)
			if err != nil {
				return fmt.Errorf("kafka: %w", err)
			}
			if tracing {
				ons = append(ons, res)
			} else {
				offs = append(offs, res)
			}
		}
		kr, kOff = medianRun(ons), medianRun(offs)
	}
	var dr bench.DeadlineResult
	if runs("deadlines") {
		dschema, err := bench.NewSchema(ctx, url)
		if err != nil {
			return err
		}
		defer dschema.Drop()
		fmt.Printf("deadlines: %d waits due at the same moment, %d sweeper transactions in flight …\n", dueWaits, sweepers)
		if dr, err = bench.Deadlines(ctx, dschema.URL, dueWaits, sweepers, sweepBatchSize, false, logger); err != nil {
			return fmt.Errorf("deadlines: %w", err)
		}
	}
	var tr bench.DeadlineResult
	if runs("timers") {
		tschema, err := bench.NewSchema(ctx, url)
		if err != nil {
			return err
		}
		defer tschema.Drop()
		fmt.Printf("timers: %d wait-node timers due at the same moment, %d sweeper transactions in flight …\n", dueWaits, sweepers)
		if tr, err = bench.Deadlines(ctx, tschema.URL, dueWaits, sweepers, sweepBatchSize, true, logger); err != nil {
			return fmt.Errorf("timers: %w", err)
		}
	}
	r := results{KafkaUntraced: kOff, TracingCost: 1 - kr.PerSecond/kOff.PerSecond, Baseline: base, Callbacks: cb, Ratio: cb.PerSecond / base.PerSecond, Kafka: kr, KafkaRatio: kr.PerSecond / base.PerSecond,
		Deadlines: dr, DeadlineRatio: dr.PerSecond / base.PerSecond, Timers: tr, TimerRatio: tr.PerSecond / base.PerSecond}

	fmt.Println()
	fmt.Printf("%-44s %12s %10s\n", "measure", "value", "× baseline")
	fmt.Printf("%-44s %12.0f %10s\n", "baseline versioned UPDATEs/s", base.PerSecond, "1.00")
	if cb.Waits > 0 {
		fmt.Printf("%-44s %12.0f %10.2f\n", "callbacks correlated/s (202 answered)", cb.PerSecond, r.Ratio)
		fmt.Printf("%-44s %12.0f %10.2f\n", "continuations committed/s", cb.ResumedPerSecond, cb.ResumedPerSecond/base.PerSecond)
		fmt.Printf("%-44s %12s\n", "callback → continuation committed p50", ms(cb.ToContinuation.P50))
		fmt.Printf("%-44s %12s\n", "callback → continuation committed p99", ms(cb.ToContinuation.P99))
		fmt.Printf("%-44s %12s\n", "callback HTTP round trip p50", ms(cb.Response.P50))
		fmt.Printf("%-44s %12s\n", "callback HTTP round trip p99", ms(cb.Response.P99))
	}
	if kr.Records > 0 {
		fmt.Printf("%-44s %12.0f %10.2f\n", "kafka records applied/s", kr.PerSecond, r.KafkaRatio)
		fmt.Printf("%-44s %12.0f %10.2f\n", "kafka records applied/s, tracing off", kOff.PerSecond, kOff.PerSecond/base.PerSecond)
		fmt.Printf("%-44s %11.1f%%\n", "tracing cost (1 − on/off)", 100*r.TracingCost)
		fmt.Printf("%-44s %12s\n", "kafka produce → state committed p50", ms(kr.ToState.P50))
		fmt.Printf("%-44s %12s\n", "kafka produce → state committed p99", ms(kr.ToState.P99))
		fmt.Printf("%-44s %12s\n", "kafka produce → continuation committed p50", ms(kr.ToContinuation.P50))
		fmt.Printf("%-44s %12s\n", "kafka produce → continuation committed p99", ms(kr.ToContinuation.P99))
	}
	if dr.Due > 0 {
		fmt.Printf("%-44s %12.0f %10.2f\n", fmt.Sprintf("deadlines timed out/s (%d due at once)", dr.Due), dr.PerSecond, r.DeadlineRatio)
		fmt.Printf("%-44s %12s\n", "deadline → timeout committed p50", ms(dr.Lateness.P50))
		fmt.Printf("%-44s %12s\n", "deadline → timeout committed p99", ms(dr.Lateness.P99))
		fmt.Printf("%-44s %12s\n", "deadline → timeout committed max", ms(dr.Lateness.Max))
	}
	if tr.Due > 0 {
		fmt.Printf("%-44s %12.0f %10.2f\n", fmt.Sprintf("timers resumed/s (%d due at once)", tr.Due), tr.PerSecond, r.TimerRatio)
		fmt.Printf("%-44s %12s\n", "timer → resume committed p50", ms(tr.Lateness.P50))
		fmt.Printf("%-44s %12s\n", "timer → resume committed p99", ms(tr.Lateness.P99))
		fmt.Printf("%-44s %12s\n", "timer → resume committed max", ms(tr.Lateness.Max))
	}
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

// medianRun is the run with the median throughput.
func medianRun(runs []bench.KafkaResult) bench.KafkaResult {
	slices.SortFunc(runs, func(a, b bench.KafkaResult) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
	return runs[len(runs)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
