// Package bench measures rendezvous against a baseline run in the same process, on the
// same database, at the same concurrency — so that results are ratios that survive a
// noisy shared machine. It is used by cmd/rendezvous-bench; it is not part of the service.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/db"
)

// Schema is a throwaway schema for one bench run.
type Schema struct {
	Name string
	URL  string
	drop func()
}

// NewSchema creates and migrates a fresh schema on the server at url.
func NewSchema(ctx context.Context, url string) (*Schema, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rdv_bench_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return nil, err
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s := &Schema{Name: name, URL: url + sep + "search_path=" + name}
	s.drop = func() {
		c, err := pgx.Connect(context.Background(), url)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE")
			c.Close(context.Background())
		}
	}
	pool, err := db.Connect(ctx, s.URL, 2)
	if err != nil {
		s.drop()
		return nil, err
	}
	defer pool.Close()
	if err := db.Migrate(ctx, pool, slog.New(slog.DiscardHandler)); err != nil {
		s.drop()
		return nil, err
	}
	return s, nil
}

// Drop removes the schema.
func (s *Schema) Drop() { s.drop() }

// Latencies summarises a set of durations.
type Latencies struct {
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// Summarise computes percentiles (nearest rank).
func Summarise(d []time.Duration) Latencies {
	if len(d) == 0 {
		return Latencies{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Latencies{P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

// medianOf is the median of f over items, each figure taken on its own (the upper middle
// one of an even count). items must not be empty.
func medianOf[T any](items []T, f func(T) float64) float64 {
	v := make([]float64, len(items))
	for i, it := range items {
		v[i] = f(it)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// medianCPU is each share of the CPU of runs at its median, or nil when a run has none.
func medianCPU[T any](runs []T, of func(T) *CPUUse) *CPUUse {
	if slices.ContainsFunc(runs, func(r T) bool { return of(r) == nil }) {
		return nil
	}
	return &CPUUse{
		PostgresUS:        medianOf(runs, func(r T) float64 { return of(r).PostgresUS }),
		ProcessUS:         medianOf(runs, func(r T) float64 { return of(r).ProcessUS }),
		SubprocessUS:      medianOf(runs, func(r T) float64 { return of(r).SubprocessUS }),
		ProcessAllocs:     medianOf(runs, func(r T) float64 { return of(r).ProcessAllocs }),
		ProcessAllocBytes: medianOf(runs, func(r T) float64 { return of(r).ProcessAllocBytes }),
		WALBytes:          medianOf(runs, func(r T) float64 { return of(r).WALBytes }),
	}
}

// medianLatencies is each percentile of f over items at its own median.
func medianLatencies[T any](items []T, f func(T) Latencies) Latencies {
	at := func(p func(Latencies) time.Duration) time.Duration {
		return time.Duration(medianOf(items, func(it T) float64 { return float64(p(f(it))) }))
	}
	return Latencies{
		P50: at(func(l Latencies) time.Duration { return l.P50 }),
		P99: at(func(l Latencies) time.Duration { return l.P99 }),
		Max: at(func(l Latencies) time.Duration { return l.Max }),
	}
}

// BaselineResult is the versioned-UPDATE loop's figure.
type BaselineResult struct {
	Concurrency int       `json:"concurrency"`
	Updates     int64     `json:"updates"`
	Seconds     float64   `json:"seconds"`
	PerSecond   float64   `json:"per_second"`
	Latency     Latencies `json:"latency"`
}

// Baseline runs the reference loop: each of concurrency workers repeatedly updates its
// own rows of a table shaped like execution_wait_states with UPDATE … WHERE version = $v,
// the cheapest possible optimistic write. Anything rendezvous does per event is this
// plus correlation, bookkeeping and the continuation.
func Baseline(ctx context.Context, pool *pgxpool.Pool, concurrency int, d time.Duration) (BaselineResult, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_versioned (LIKE execution_wait_states INCLUDING ALL)`); err != nil {
		return BaselineResult{}, err
	}
	const rowsPerWorker = 64
	ids := make([][]uuid.UUID, concurrency)
	for w := range concurrency {
		for range rowsPerWorker {
			id := uuid.New()
			ids[w] = append(ids[w], id)
			if _, err := pool.Exec(ctx, `INSERT INTO bench_versioned (id, execution_id, node_id, correlation_id, aggregation_strategy, expires_at, next_deadline_at)
				VALUES ($1, $2, 'wait', $3, 'all', now() + interval '1 hour', now() + interval '1 hour')`, id, uuid.New(), uuid.New()); err != nil {
				return BaselineResult{}, err
			}
		}
	}
	var total atomic.Int64
	lat := make([][]time.Duration, concurrency)
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	deadline := time.Now().Add(d)
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			versions := make([]int64, rowsPerWorker)
			for i := range versions {
				versions[i] = 1
			}
			for i := 0; time.Now().Before(deadline); i++ {
				k := i % rowsPerWorker
				t0 := time.Now()
				tag, err := pool.Exec(ctx, `UPDATE bench_versioned SET version = version + 1, updated_at = now(),
					received_events = $3 WHERE id = $1 AND version = $2`, ids[w][k], versions[k], `[{"name":"api_response"}]`)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				if tag.RowsAffected() != 1 {
					errOnce.Do(func() { firstErr = fmt.Errorf("baseline: version fence missed on own row") })
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
				versions[k]++
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return BaselineResult{}, firstErr
	}
	secs := time.Since(start).Seconds()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return BaselineResult{Concurrency: concurrency, Updates: total.Load(), Seconds: secs,
		PerSecond: float64(total.Load()) / secs, Latency: Summarise(all)}, nil
}
