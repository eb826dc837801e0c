// Package chaos is a seeded, reproducible fault-injection harness that proves the
// service's promises across real processes: it builds the rendezvous binary, starts the
// embedded Kafka broker and several `rendezvous serve` replicas on one fresh database,
// plays the external service on loopback, runs executions of mixed strategies and
// onTimeout modes while killing replicas, forcing consumer-group rebalances and cutting
// the database, and then checks, execution by execution, that every outcome is the one
// the delivered events dictate, that every wait resumed exactly once, that no event
// reached a foreign execution, and that versions count the applied changes.
//
// Everything random comes from one math/rand/v2 source seeded by Config.Seed, drawn up
// front into a Plan: which definitions run, when each execution starts, which events are
// delivered when and through which replica, which records are produced twice, which
// replica is killed when. The same seed replays the same schedule; what may differ
// between two runs is only how the processes interleave. The expected outcome of each
// execution is computed from the plan and the measured delivery windows by a model of
// the documented semantics (Simulate), never read back from the service.
//
// It is used by cmd/rendezvous-chaos (the long `make chaos` run) and by TestChaosShort
// (a short run inside `make test`). It is not part of the service.
package chaos

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Defaults for Config.
const (
	ExecutionsDefault   = 300
	ReplicasDefault     = 3
	RateDefault         = 12.0
	WaitTimeoutDefault  = 10 * time.Second
	KafkaLatencyDefault = 2 * time.Second
	// SessionTimeoutDefault is the replicas' --kafka-session-timeout: short, so that a
	// killed replica holds the group's partitions seconds rather than the 45 s of the
	// service's default, and more of the run delivers records with the group settled.
	SessionTimeoutDefault = 10 * time.Second
	MaxDurationDefault    = 30 * time.Minute
	QuiesceDefault        = 3 * time.Minute
	DatabaseURLDefault    = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

// Ways to take the database away once during a run.
const (
	// PGRestartProxy routes the replicas through an in-process TCP proxy and cuts it for
	// a few seconds: to the replicas the server is gone, while every other client of the
	// server (other test runs on a shared machine) is untouched.
	PGRestartProxy = "proxy"
	// PGRestartCtl restarts the real cluster with pg_ctlcluster. Every client of the
	// server sees it, so it is meant for a machine (or cluster) of its own.
	PGRestartCtl = "ctl"
)

// Config configures a run.
type Config struct {
	// Seed draws the whole schedule. Required (the command picks a random one and prints
	// it).
	Seed uint64
	// Executions to start. Default ExecutionsDefault.
	Executions int
	// Replicas is the number of `rendezvous serve` processes. Default ReplicasDefault.
	Replicas int
	// DatabaseURL names the server (and a database to connect to for administration);
	// the run creates a database of its own there. Default DatabaseURLDefault.
	DatabaseURL string
	// Binary is a built rendezvous binary; empty builds one with `go build` from the
	// module that contains the working directory.
	Binary string
	// PGRestart is PGRestartProxy or PGRestartCtl. Default PGRestartProxy.
	PGRestart string
	// Rate is how many executions start per second; the run starts them over
	// Executions/Rate seconds. Default RateDefault.
	Rate float64
	// WaitTimeout is the base overall timeout of the wait nodes; definitions use it,
	// 1.5 times it, and fractions of it for per-event timeouts. Default
	// WaitTimeoutDefault.
	WaitTimeout time.Duration
	// Kills is how many times a replica is SIGKILLed (and restarted). Default: one per
	// 90 s of starting executions, at least one.
	Kills int
	// SessionTimeout is the replicas' Kafka session timeout: how long the broker keeps a
	// killed replica in the group. Default SessionTimeoutDefault.
	SessionTimeout time.Duration
	// Terms is how many times a replica is stopped with SIGTERM (and restarted), which
	// makes its consumer leave the group. Default 1; negative for none.
	Terms int
	// KafkaLatency bounds produce → applied for a record while no fault is disturbing
	// the consumers; a record produced closer than this to a deadline races it. Default
	// KafkaLatencyDefault.
	KafkaLatency time.Duration
	// MaxDuration bounds the whole run; past it the run stops and reports what it has.
	// Default MaxDurationDefault.
	MaxDuration time.Duration
	// Quiesce bounds the wait, after the last deadline, for every execution to finish and
	// every queue to drain. Default QuiesceDefault.
	Quiesce time.Duration
	// Keep leaves the database and the work directory in place.
	Keep bool
	// WorkDir holds the processes' logs and the built binary; it is never removed.
	// Default: a new temporary directory, removed at the end unless Keep or a violation
	// was found.
	WorkDir string
	// Out receives progress lines. Default io.Discard.
	Out io.Writer
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Executions <= 0 {
		c.Executions = ExecutionsDefault
	}
	if c.Replicas <= 0 {
		c.Replicas = ReplicasDefault
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = DatabaseURLDefault
	}
	if c.PGRestart == "" {
		c.PGRestart = PGRestartProxy
	}
	if c.Rate <= 0 {
		c.Rate = RateDefault
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = WaitTimeoutDefault
	}
	if c.Kills <= 0 {
		// A SIGKILLed member unsettles the consumer group until its session times out,
		// and a rebalance begun meanwhile stalls every partition: one kill per 90 s
		// leaves calm stretches in which Kafka delivery is bounded and outcomes are
		// certain.
		c.Kills = max(1, int(c.Spread()/(90*time.Second)))
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = SessionTimeoutDefault
	}
	if c.Terms == 0 {
		c.Terms = 1
	}
	if c.KafkaLatency <= 0 {
		c.KafkaLatency = KafkaLatencyDefault
	}
	if c.MaxDuration <= 0 {
		c.MaxDuration = MaxDurationDefault
	}
	if c.Quiesce <= 0 {
		c.Quiesce = QuiesceDefault
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return c
}

// Spread is how long the run takes to start every execution.
func (c Config) Spread() time.Duration {
	rate := c.Rate
	if rate <= 0 {
		rate = RateDefault
	}
	return time.Duration(float64(c.Executions) / rate * float64(time.Second))
}

func (c Config) validate() error {
	var errs []error
	if c.Seed == 0 {
		errs = append(errs, errors.New("seed: must not be 0 (the command draws a random one)"))
	}
	if c.Replicas < 2 {
		errs = append(errs, fmt.Errorf("replicas: %d is too few: killing one must leave another", c.Replicas))
	}
	if c.Executions < 2 {
		errs = append(errs, fmt.Errorf("executions: %d is too few (at least 2)", c.Executions))
	}
	if c.PGRestart != PGRestartProxy && c.PGRestart != PGRestartCtl {
		errs = append(errs, fmt.Errorf("pg_restart: %q is not %q or %q", c.PGRestart, PGRestartProxy, PGRestartCtl))
	}
	if c.WaitTimeout < 4*time.Second {
		errs = append(errs, fmt.Errorf("wait_timeout: %s is too short to deliver events before per-event deadlines (at least 4s)", c.WaitTimeout))
	}
	return errors.Join(errs...)
}

// RandomSeed draws a seed for a run that was not given one (never 0).
func RandomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])>>1 + 1
}
