package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/db"
)

// FloorResult is how fast bare SQL writes the rows an event path's decisions write,
// with nothing decided: no correlation, no locks taken first, no bookkeeping. A path's
// rate over its floor's is the share of what the machine allows that the path reaches.
type FloorResult struct {
	// Path is the event path whose rows these are: "kafka", "callbacks" or "send".
	Path    string `json:"path"`
	Events  int    `json:"events"`
	Batch   int    `json:"batch"`
	Workers int    `json:"workers"`
	// Seconds is from the first statement to the last commit.
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

// EventFloor parks events waits set-based on the schema at url, then times the bare
// writes of one event completing each: the wait decided (the event recorded, status
// completed), its node completed with its output, and its execution continued to
// completion — the three rows every delivered event must change — by set-based
// statements of batch waits each, workers of them in flight, each its own transaction.
// batch and workers are the service's for the path: the consumer's batch size and lanes
// for Kafka, the aggregator's group commit for callbacks and sent events.
func EventFloor(ctx context.Context, url, path string, events, batch, workers int) (FloorResult, error) {
	pool, err := db.Connect(ctx, url, int32(workers+2))
	if err != nil {
		return FloorResult{}, err
	}
	defer pool.Close()
	if err := parkBare(ctx, pool, "bench-floor", events, time.Now().Add(24*time.Hour), `'events', NULL, 'waiting'`); err != nil {
		return FloorResult{}, err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE executions, node_executions, execution_wait_states`); err != nil {
		return FloorResult{}, err
	}
	took, err := batchedWrites(ctx, pool, batch, workers, `
WITH w AS (
    UPDATE execution_wait_states
    SET status = 'completed', version = version + 1, updated_at = now(), resumed_at = now(),
        received_events = received_events || '[{"name":"api_response","data":{"result":"ok"}}]'::jsonb
    WHERE id = ANY($1::uuid[]) AND status = 'waiting'
    RETURNING execution_id, node_id
), n AS (
    UPDATE node_executions AS n SET status = 'completed', output = '{"api_response":{"result":"ok"}}',
        updated_at = now(), finished_at = now()
    FROM w WHERE n.execution_id = w.execution_id AND n.node_id = w.node_id
)
UPDATE executions AS e SET status = 'completed', updated_at = now(), finished_at = now()
FROM w WHERE e.id = w.execution_id`)
	if err != nil {
		return FloorResult{}, fmt.Errorf("%s floor: %w", path, err)
	}
	return FloorResult{Path: path, Events: events, Batch: batch, Workers: workers,
		Seconds: took.Seconds(), PerSecond: float64(events) / took.Seconds()}, nil
}

// GroupBatch is the batch a group commit of groups transactions forms when clients
// callers are in flight at once: they spread over the groups.
func GroupBatch(clients, groups, maxGroup int) int {
	return max(1, min((clients+groups-1)/groups, maxGroup))
}

// batchedWrites runs stmt, whose $1 is a uuid[] of waits, over every waiting wait of
// the schema in id order, batch ids a statement, on workers connections at once, and
// returns how long they all took.
func batchedWrites(ctx context.Context, pool *pgxpool.Pool, batch, workers int, stmt string) (time.Duration, error) {
	rows, err := pool.Query(ctx, `SELECT id FROM execution_wait_states WHERE status = 'waiting' ORDER BY id`)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	batches := make(chan []uuid.UUID, len(ids)/max(batch, 1)+1)
	for lo := 0; lo < len(ids); lo += batch {
		batches <- ids[lo:min(lo+batch, len(ids))]
	}
	close(batches)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				if _, err := pool.Exec(ctx, stmt, b); err != nil {
					errs[i] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// parkBare writes n parked waits of workflow name set-based, as registering writes
// them: each an execution waiting, its node waiting for events and its wait state (a
// callback and a Kafka record required) with deadline at, waitCols giving its
// wait_type, timer and status.
func parkBare(ctx context.Context, pool *pgxpool.Pool, name string, n int, at time.Time, waitCols string) error {
	if _, err := pool.Exec(ctx, `INSERT INTO workflows (name, version, definition) VALUES ($1, 1, '{}')`, name); err != nil {
		return err
	}
	const chunk = 20000
	for left := n; left > 0; left -= chunk {
		if _, err := pool.Exec(ctx, `
WITH e AS (
    INSERT INTO executions (id, workflow_name, workflow_version, status)
    SELECT `+uuidV7("now()")+`, $3, 1, 'waiting' FROM generate_series(1, $1::integer)
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
FROM e`, min(left, chunk), at, name); err != nil {
			return fmt.Errorf("park waits: %w", err)
		}
	}
	return nil
}
