package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
	// FloorSeconds is how long the rows a timeout must change take to change alone: for
	// each wait, its own status, its node's and its execution's (onTimeout fail fails
	// both), by bare UPDATEs — one statement per sweeper transaction in flight, each over
	// its share of the waits — and nothing else (no output, no continuation, no
	// decision). No sweeper can record its decisions faster, so with FloorSeconds past a
	// lateness target, the target is out of this machine's reach whatever the sweeper does.
	FloorSeconds float64 `json:"floor_seconds"`
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
	if _, err := pool.Exec(ctx, `INSERT INTO workflows (name, version, definition) VALUES ('bench-deadlines', 1, '{}')`); err != nil {
		return DeadlineResult{}, err
	}
	far := time.Now().Add(24 * time.Hour)
	kind, waitCols := "events", `'events', NULL, 'waiting'`
	if timers {
		kind, waitCols = "timers", `'timer', '{"for":"4s"}', 'scheduled'`
	}
	const chunk = 20000
	parkStart := time.Now()
	for left := due; left > 0; left -= chunk {
		n := min(left, chunk)
		if _, err := pool.Exec(ctx, `
WITH e AS (
    INSERT INTO executions (id, workflow_name, workflow_version, status)
    SELECT `+uuidV7("now()")+`, 'bench-deadlines', 1, 'waiting' FROM generate_series(1, $1::integer)
    RETURNING id
), n AS (
    INSERT INTO node_executions (execution_id, node_id, status, started_at)
    SELECT id, 'wait', 'waiting_for_events', now() FROM e
)
INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy,
    required_events, enabled_events, expected_events, api_call_enabled, kafka_event_enabled,
    on_timeout, output_mapping, expires_at, next_deadline_at, wait_type, timer, status)
SELECT `+uuidV7("now()")+`, id, 'wait', `+uuidV7("now()")+`, 'all',
    '["api_response","kafka_event"]', '["api_response","kafka_event"]',
    '[{"name":"api_response","source":"callback","required":true,"timeout_ms":5000},{"name":"kafka_event","source":"kafka","topic":"bench","required":true,"timeout_ms":5000}]',
    true, true, 'fail', '{"apiResponse":"api_response","kafkaEvent":"kafka_event"}', $2, $2, `+waitCols+`
FROM e`, n, far); err != nil {
			return DeadlineResult{}, fmt.Errorf("park waits: %w", err)
		}
	}
	// The shared deadline must still be ahead once the rows carry it and are vacuumed,
	// which takes about as long again as inserting them did (every row and its deadline
	// index entry are rewritten): twice the insert time ahead, at least 4 s, so that a
	// loaded machine does not fail the part.
	deadline := time.Now().Add(max(4*time.Second, 2*time.Since(parkStart))).UTC().Truncate(time.Microsecond)
	if _, err := pool.Exec(ctx, `UPDATE execution_wait_states SET expires_at = $1, next_deadline_at = $1`, deadline); err != nil {
		return DeadlineResult{}, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE execution_wait_states`); err != nil {
		return DeadlineResult{}, err
	}
	if time.Until(deadline) < time.Second {
		return DeadlineResult{}, fmt.Errorf("parking %d waits took too long to measure a shared deadline", due)
	}

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
	select {
	case <-allFired:
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
	floor, err := statusFloor(ctx, pool, workers)
	if err != nil {
		return DeadlineResult{}, fmt.Errorf("floor: %w", err)
	}
	return DeadlineResult{
		Kind: kind, Due: due, Workers: workers, Batch: batch, Seconds: secs, PerSecond: float64(due) / secs,
		Lateness: Summarise(lateness), FloorSeconds: floor.Seconds(),
	}, nil
}

// statusFloor puts the swept waits, their nodes and executions back as they were parked,
// vacuumed as before the sweep, then times the bare status change of all of them, split
// over workers statements in flight at once.
func statusFloor(ctx context.Context, pool *pgxpool.Pool, workers int) (time.Duration, error) {
	for _, q := range []string{
		`UPDATE execution_wait_states
		 SET status = CASE wait_type WHEN 'timer' THEN 'scheduled' ELSE 'waiting' END, version = 1, error = NULL,
		     next_deadline_at = now() - interval '1 second'`,
		`UPDATE node_executions SET status = 'waiting_for_events', finished_at = NULL, error = NULL`,
		`UPDATE executions SET status = 'waiting', finished_at = NULL`,
		`VACUUM ANALYZE execution_wait_states, node_executions, executions`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A UUIDv7's last byte is random: shares of about equal size.
			_, errs[i] = pool.Exec(ctx, `
WITH w AS (
    UPDATE execution_wait_states
    SET status = 'timeout', version = version + 1, updated_at = now(), error = 'timed out'
    WHERE status IN ('waiting', 'scheduled') AND next_deadline_at <= now()
      AND get_byte(uuid_send(id), 15) % $1::integer = $2::integer
    RETURNING execution_id, node_id
), n AS (
    UPDATE node_executions AS n SET status = 'failed', error = 'timed out', updated_at = now(), finished_at = now()
    FROM w WHERE n.execution_id = w.execution_id AND n.node_id = w.node_id
)
UPDATE executions AS x SET status = 'failed', updated_at = now(), finished_at = now()
FROM w WHERE x.id = w.execution_id`, workers, i)
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}
