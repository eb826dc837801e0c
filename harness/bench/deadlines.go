package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
)

// DeadlineResult is the sweeper's figure for a burst of deadlines.
type DeadlineResult struct {
	// Kind: "events" (event waits timing out) or "timers" (wait nodes resuming).
	Kind    string  `json:"kind"`
	Due     int     `json:"due"`
	Workers int     `json:"sweep_workers"`
	Batch   int     `json:"sweep_batch"`
	Seconds float64 `json:"seconds"`
	// PerSecond: waits timed out (decision committed) per second, from the deadline to
	// the last commit.
	PerSecond float64 `json:"per_second"`
	// Lateness: from the deadline to the commit of the wait's timeout.
	Lateness Latencies `json:"lateness"`
	// FloorSeconds is how long the rows the sweeper's decisions write take to write alone,
	// with nothing decided: each wait's status, its node's status, and its continuation
	// queued (the execution itself is failed later, by the executor), by bare set-based
	// statements of the sweeper's batch of waits each, as many in flight as it runs. With
	// FloorSeconds past a lateness target, no sweeper writing these rows meets the target
	// on this machine. Measured for event waits only (zero for timers).
	FloorSeconds float64 `json:"floor_seconds"`
	// CPU is what the sweep took per wait, from the park to the last commit (nothing else
	// runs meanwhile), and FloorCPU what the floor's writes took, when they can be read
	// here.
	CPU      *CPUUse `json:"cpu,omitempty"`
	FloorCPU *CPUUse `json:"floor_cpu,omitempty"`
	// ClaimFloorSeconds is how long the same writes take with the claims before them
	// (claimedTimeouts): the bare SQL the sweeper sends, its rows received and not decided on.
	// A sweeper that decides from the rows it claims ends no sooner than this; its CPU is
	// ClaimFloorCPU. Measured for event waits only.
	ClaimFloorSeconds float64 `json:"claim_floor_seconds"`
	ClaimFloorCPU     *CPUUse `json:"claim_floor_cpu,omitempty"`
}

// Deadlines parks due waits (executions, nodes and wait states, written set-based as
// Register would write them) with one shared deadline a few seconds ahead, then runs one
// replica's sweeper and measures how late each wait's timeout commits. The waits use the
// default onTimeout fail, so each timeout also fails its node and enqueues the
// continuation that fails the execution; the executor itself is not running, so the
// figure is the deadline decisions alone. With timers, the waits are wait nodes' timers
// instead (status scheduled), and each fire resumes its node.
func Deadlines(ctx context.Context, url string, due, workers, batch int, timers bool, logger *slog.Logger) (DeadlineResult, error) {
	pool, err := db.Connect(ctx, url, int32(workers+2))
	if err != nil {
		return DeadlineResult{}, err
	}
	defer pool.Close()
	kind, waitCols := "events", `'events', NULL, 'waiting'`
	if timers {
		kind, waitCols = "timers", `'timer', '{"for":"4s"}', 'scheduled'`
	}
	// The shared deadline must still be ahead once the rows carry it and are vacuumed,
	// which takes about as long again as inserting them did (every row and its deadline
	// index entry are rewritten): twice the insert time ahead, at least 4 s, so that a
	// loaded machine does not fail the part. The park's own time is known only after it,
	// so the rows carry a far deadline first (parkDue).
	deadline, err := parkDue(ctx, pool, due, waitCols, func(parked time.Duration) time.Time {
		return time.Now().Add(max(4*time.Second, 2*parked))
	})
	if err != nil {
		return DeadlineResult{}, err
	}
	if time.Until(deadline) < time.Second {
		return DeadlineResult{}, fmt.Errorf("parking %d waits took too long to measure a shared deadline", due)
	}

	cpuSince := startCPU(ctx, pool)
	var mu sync.Mutex
	lateness := make([]time.Duration, 0, due)
	var last time.Time
	allFired := make(chan struct{})
	agg, err := aggregator.New(pool, aggregator.Config{
		InstanceID: "bench", Logger: logger, SweepWorkers: workers, SweepBatch: batch,
		OnExpired: func(ex []aggregator.Expired) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range ex {
				lateness = append(lateness, e.Lateness)
			}
			last = time.Now()
			if len(lateness) == due {
				close(allFired)
			}
		},
	})
	if err != nil {
		return DeadlineResult{}, err
	}
	sweepCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() { agg.RunSweeper(sweepCtx); close(done) }()
	var cpu *CPUUse
	select {
	case <-allFired:
		cpu = cpuSince(due)
	case <-time.After(time.Until(deadline) + 5*time.Minute):
		stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return DeadlineResult{}, fmt.Errorf("only %d of %d deadlines fired", len(lateness), due)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	secs := last.Sub(deadline).Seconds()
	var floor, claimFloor time.Duration
	var floorCPU, claimFloorCPU *CPUUse
	if !timers {
		if floor, floorCPU, err = statusFloor(ctx, pool, due, batch, workers, timeoutFloor); err != nil {
			return DeadlineResult{}, fmt.Errorf("floor: %w", err)
		}
		if claimFloor, claimFloorCPU, err = statusFloor(ctx, pool, due, batch, workers, claimedTimeouts); err != nil {
			return DeadlineResult{}, fmt.Errorf("floor with the claims: %w", err)
		}
	}
	return DeadlineResult{
		Kind: kind, Due: due, Workers: workers, Batch: batch, Seconds: secs, PerSecond: float64(due) / secs,
		Lateness: Summarise(lateness), FloorSeconds: floor.Seconds(), CPU: cpu, FloorCPU: floorCPU,
		ClaimFloorSeconds: claimFloor.Seconds(), ClaimFloorCPU: claimFloorCPU,
	}, nil
}

// MedianDeadlines is each figure of runs at its median: the lateness percentiles, the
// sweep's time and rate, and the floor's time, each over the runs separately.
func MedianDeadlines(runs []DeadlineResult) DeadlineResult {
	if len(runs) == 0 {
		return DeadlineResult{}
	}
	med := func(f func(DeadlineResult) float64) float64 { return medianOf(runs, f) }
	out := runs[0]
	out.Seconds = med(func(r DeadlineResult) float64 { return r.Seconds })
	out.PerSecond = med(func(r DeadlineResult) float64 { return r.PerSecond })
	out.FloorSeconds = med(func(r DeadlineResult) float64 { return r.FloorSeconds })
	out.ClaimFloorSeconds = med(func(r DeadlineResult) float64 { return r.ClaimFloorSeconds })
	out.Lateness = medianLatencies(runs, func(r DeadlineResult) Latencies { return r.Lateness })
	out.CPU = medianCPU(runs, func(r DeadlineResult) *CPUUse { return r.CPU })
	out.FloorCPU = medianCPU(runs, func(r DeadlineResult) *CPUUse { return r.FloorCPU })
	out.ClaimFloorCPU = medianCPU(runs, func(r DeadlineResult) *CPUUse { return r.ClaimFloorCPU })
	return out
}

// statusFloor parks due waits afresh, exactly as the sweep's were parked (parkDue), so
// that the floor writes rows in the same state — pages as full, indexes as large, the
// run queue as empty — then times floor over them: timeoutFloor or claimedTimeouts.
func statusFloor(ctx context.Context, pool *pgxpool.Pool, due, batch, workers int,
	floor func(context.Context, *pgxpool.Pool, int, int) (time.Duration, *CPUUse, error)) (time.Duration, *CPUUse, error) {
	if _, err := parkDue(ctx, pool, due, `'events', NULL, 'waiting'`, func(time.Duration) time.Time {
		return time.Now().Add(-time.Second)
	}); err != nil {
		return 0, nil, err
	}
	return floor(ctx, pool, batch, workers)
}

// timeoutFloor times the bare writes of every waiting wait timing out (timeoutFloorStmt),
// and reads their CPU per wait where it can (batchedWrites).
func timeoutFloor(ctx context.Context, pool *pgxpool.Pool, batch, workers int) (time.Duration, *CPUUse, error) {
	w, err := batchedWrites(ctx, pool, batch, workers, idsOnly, statement(timeoutFloorStmt))
	return w.took, w.cpu, err
}

// claimedTimeouts times the bare SQL the sweeper sends for every due wait: in each
// transaction, up to batch due waits claimed as the sweeper claims them (every column,
// locked, the locked ones skipped, earliest deadline first: claimDueStmt), their rows
// received but neither decoded nor decided on, then the timeouts of the waits claimed
// written by their ids (timeoutFloorStmt); workers transactions at once, each until a
// claim finds none. It reads the CPU per wait where it can (startCPU).
func claimedTimeouts(ctx context.Context, pool *pgxpool.Pool, batch, workers int) (time.Duration, *CPUUse, error) {
	var due atomic.Int64
	claim := func(ctx context.Context) (int, error) {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, claimDueStmt, batch)
			if err != nil {
				return err
			}
			idAt := slices.IndexFunc(rows.FieldDescriptions(), func(f pgconn.FieldDescription) bool { return f.Name == "id" })
			if idAt < 0 {
				rows.Close()
				return errors.New("the claim returned no id column")
			}
			ids := make([]uuid.UUID, 0, batch)
			for rows.Next() {
				// The id's binary encoding, the row's other columns only received.
				id, err := uuid.FromBytes(rows.RawValues()[idAt])
				if err != nil {
					rows.Close()
					return err
				}
				ids = append(ids, id)
			}
			if err := rows.Err(); err != nil || len(ids) == 0 {
				return err
			}
			n = len(ids)
			_, err = tx.Exec(ctx, timeoutFloorStmt, ids)
			return err
		})
		return n, err
	}
	took, cpuSince, err := timedWorkers(ctx, pool, workers, func(int) error {
		for {
			n, err := claim(ctx)
			if err != nil || n == 0 {
				return err
			}
			due.Add(int64(n))
		}
	})()
	return took, cpuSince(int(due.Load())), err
}

// claimDueStmt is the sweeper's claim of due waits (WaitStateClaimDue) with the floor's
// clock: now() rather than the replica's.
const claimDueStmt = `SELECT * FROM execution_wait_states
WHERE status IN ('waiting', 'scheduled') AND next_deadline_at <= now()
ORDER BY next_deadline_at
LIMIT $1::integer
FOR UPDATE SKIP LOCKED`

// parkDue empties the schema's executions (and with them every row that belongs to
// one), then parks n waits as registering writes them (parkBare), waitCols giving their
// wait_type, timer and status, all due at the deadline at returns given how long the
// park took. The rows are parked with a far deadline, then given theirs by one update,
// and the tables settled (vacuumed, analyzed, checkpointed).
func parkDue(ctx context.Context, pool *pgxpool.Pool, n int, waitCols string, at func(parked time.Duration) time.Time) (time.Time, error) {
	if _, err := pool.Exec(ctx, `TRUNCATE executions, workflows CASCADE`); err != nil {
		return time.Time{}, err
	}
	start := time.Now()
	if err := parkBare(ctx, pool, "bench-deadlines", n, time.Now().Add(24*time.Hour), waitCols); err != nil {
		return time.Time{}, err
	}
	deadline := at(time.Since(start)).UTC().Truncate(time.Microsecond)
	if _, err := pool.Exec(ctx, `UPDATE execution_wait_states SET expires_at = $1, next_deadline_at = $1`, deadline); err != nil {
		return time.Time{}, err
	}
	return deadline, settle(ctx, pool)
}

// timeoutFloorStmt writes the two rows of a parked wait timing out under onTimeout fail
// as the sweeper's write (WaitStateWrite) leaves them, every column it changes: the wait
// timed out with the events that timed out, its next deadline moved to its expiry and the
// reason, and its node's outcome — failed with that reason and the output Output builds
// (the same keys and values, the correlation id per row); its continuation queued. The
// sweeper computes these values in Go; here they are constants or cheap builders, so the
// statement stays one set-based write by id.
const timeoutFloorStmt = `
WITH w AS (
    UPDATE execution_wait_states
    SET status = 'timeout', version = version + 1, updated_at = clock_timestamp(),
        timed_out_events = '["api_response","kafka_event"]', next_deadline_at = expires_at,
        error = 'timed out waiting for api_response, kafka_event',
        node_status = 'failed',
        node_output = json_build_object('apiResponse', null, 'kafkaEvent', null, 'events', '[]'::json,
            'arrival_order', '[]'::json, 'correlation_id', correlation_id, 'strategy', aggregation_strategy,
            'timeout', true, 'timed_out_events', '["api_response","kafka_event"]'::json,
            'missing_required_events', '["api_response","kafka_event"]'::json),
        node_error = 'timed out waiting for api_response, kafka_event', node_warning = NULL,
        node_finished_at = clock_timestamp()
    WHERE id = ANY($1::uuid[]) AND status = 'waiting' AND next_deadline_at <= now()
    RETURNING execution_id, node_id
)
INSERT INTO run_queue (execution_id, node_id, kind)
SELECT execution_id, node_id, 'resume' FROM w
ON CONFLICT (execution_id, node_id, kind) DO NOTHING`
