// Command rendezvous-chaos runs the seeded chaos harness (harness/chaos) against real
// processes: the embedded Kafka broker, several `rendezvous serve` replicas on one fresh
// database, and a fake external service, with replicas killed and stopped and the
// database taken away while executions run. It prints the seed first, then a summary
// table, and exits 1 on any violated invariant.
//
//	go run ./cmd/rendezvous-chaos                       # a random seed, 300 executions
//	go run ./cmd/rendezvous-chaos --seed 42 --executions 5000 --pg-restart ctl
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rendezvous-run/rendezvous/harness/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rendezvous-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg chaos.Config
	var jsonPath string
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the schedule (default: random, printed first)")
	fs.IntVar(&cfg.Executions, "executions", chaos.ExecutionsDefault, "executions to run")
	fs.IntVar(&cfg.Replicas, "replicas", chaos.ReplicasDefault, "rendezvous serve processes")
	fs.StringVar(&cfg.DatabaseURL, "database-url", chaos.DatabaseURLDefault, "PostgreSQL server (a database of the run is created there and dropped at the end)")
	fs.StringVar(&cfg.Binary, "binary", "", "a built rendezvous binary (default: go build ./cmd/rendezvous into the work directory)")
	fs.StringVar(&cfg.PGRestart, "pg-restart", chaos.PGRestartProxy, "how the database goes away once: proxy (cut a TCP proxy in front of it; other clients unaffected) or ctl (pg_ctlcluster restart of the real cluster)")
	fs.Float64Var(&cfg.Rate, "rate", chaos.RateDefault, "executions started per second")
	fs.DurationVar(&cfg.WaitTimeout, "wait-timeout", chaos.WaitTimeoutDefault, "base overall timeout of the wait nodes")
	fs.IntVar(&cfg.Kills, "kills", 0, "replica SIGKILLs (default: one per 90 s of starting executions, at least one)")
	fs.IntVar(&cfg.Terms, "terms", 0, "replica SIGTERMs, each making its consumer leave the group (default 1; negative for none)")
	fs.DurationVar(&cfg.SessionTimeout, "session-timeout", chaos.SessionTimeoutDefault, "the replicas' --kafka-session-timeout: how long the broker keeps a killed replica in the group")
	fs.DurationVar(&cfg.KafkaLatency, "kafka-latency", chaos.KafkaLatencyDefault, "produce → applied bound for records while no fault disturbs the consumers")
	fs.DurationVar(&cfg.MaxDuration, "max-duration", chaos.MaxDurationDefault, "stop and report after this long")
	fs.DurationVar(&cfg.Quiesce, "quiesce", chaos.QuiesceDefault, "how long to wait after the last delivery for everything to finish")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the database and the work directory (logs)")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "directory for logs and the built binary, kept (default: a temporary one, removed unless a violation is found)")
	fs.StringVar(&jsonPath, "json", "", "write the report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if cfg.Seed == 0 {
		cfg.Seed = chaos.RandomSeed()
	}
	cfg.Out = stdout

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	report, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rendezvous-chaos: seed %d: %v\n", cfg.Seed, err)
		return 1
	}
	report.Print(stdout)
	if jsonPath != "" {
		raw, err := json.MarshalIndent(report, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonPath, raw, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "rendezvous-chaos: write %s: %v\n", jsonPath, err)
			return 1
		}
	}
	if !report.OK() {
		return 1
	}
	return 0
}
