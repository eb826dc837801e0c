package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// CPU is what the writes took per event, when it can be read here.
	CPU *CPUUse `json:"cpu,omitempty"`
	// RowsPerEvent is the rows the floor's statement inserted, updated and deleted per
	// event, as PostgreSQL counted them for the first batch (pg_stat_xact_user_tables);
	// zero where they are not counted (the Kafka floor with the broker).
	RowsPerEvent float64 `json:"rows_per_event,omitempty"`
	// RowsReadPerEvent is the rows the floor read back per event, for a floor that reads
	// what a decision needs (the Kafka floor with the reads); zero for the others.
	RowsReadPerEvent float64 `json:"rows_read_per_event,omitempty"`
	// Runs, when the floor was run more than once, is how many runs this one is the
	// median of (by rate).
	Runs int `json:"runs,omitempty"`
}

// EventFloor parks events waits set-based on the schema at url, then times the bare
// writes of one event completing each: the wait decided (the event recorded, status
// completed, its node's outcome completed with its output), and its execution continued
// to completion — the two rows every delivered event must change — by set-based
// statements of batch waits each, workers of them in flight, each its own transaction.
// batch and workers are the service's for the path: the consumer's batch size and lanes
// for Kafka, the aggregator's group commit for callbacks and sent events. Path
// "kafka-reads" is the Kafka floor with the reads a decision needs first (kafkaReadsFloor).
func EventFloor(ctx context.Context, url, path string, events, batch, workers int) (FloorResult, error) {
	pool, err := parkFloor(ctx, url, events, workers)
	if err != nil {
		return FloorResult{}, err
	}
	defer pool.Close()
	write, args := statement(eventFloorStmt), idsOnly
	switch path {
	case "kafka":
		write = statement(kafkaFloorStmt("id"))
	case "kafka-reads":
		if write, args, err = kafkaReadsFloor(ctx, pool, byWaitID); err != nil {
			return FloorResult{}, err
		}
	case "send":
		write = statement(sendFloorStmt)
	}
	w, err := batchedWrites(ctx, pool, batch, workers, args, write)
	if err != nil {
		return FloorResult{}, fmt.Errorf("%s floor: %w", path, err)
	}
	return FloorResult{Path: path, Events: events, Batch: batch, Workers: workers,
		Seconds: w.took.Seconds(), PerSecond: float64(events) / w.took.Seconds(), CPU: w.cpu, RowsPerEvent: w.rowsPerEvent,
		RowsReadPerEvent: float64(write.read.Load()) / float64(events)}, nil
}

// parkFloor connects to the schema at url with a connection for each of workers and two
// more, parks n waits there set-based with a far deadline (parkBare), and settles the
// tables as every measured phase finds them.
func parkFloor(ctx context.Context, url string, n, workers int) (*pgxpool.Pool, error) {
	pool, err := db.Connect(ctx, url, int32(workers+2))
	if err != nil {
		return nil, err
	}
	if err := parkBare(ctx, pool, "bench-floor", n, time.Now().Add(24*time.Hour), `'events', NULL, 'waiting'`); err != nil {
		pool.Close()
		return nil, err
	}
	if err := settle(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// settle leaves the tables the event paths write as a measured phase should find them,
// the same for the service and for its floor: vacuumed and analyzed, as autovacuum leaves
// freshly parked rows (hint bits set, statistics taken), then checkpointed. Every phase
// so starts at the same point of the checkpoint cycle: none pays for the dirty pages of
// the one before, a checkpoint of the server's own rarely falls inside one, and each pays
// the full-page image of every page it first changes, as events do that arrive a
// checkpoint after their waits were parked. CHECKPOINT needs a superuser or the
// pg_checkpoint role, as the bench's default URL has.
func settle(ctx context.Context, pool *pgxpool.Pool) error {
	for _, q := range []string{
		`VACUUM ANALYZE executions, node_execution_rows, execution_wait_states, run_queue`,
		`CHECKPOINT`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("settle: %w", err)
		}
	}
	return nil
}

// eventFloorWaits decides the waits, each with its node's outcome in its own row as the
// service writes it: the first of the two rows of an event completing a wait, the waits
// decided returned as w.
const eventFloorWaits = `
WITH w AS (
    UPDATE execution_wait_states
    SET status = 'completed', version = version + 1, updated_at = now(), resumed_at = now(),
        received_events = '[{"name":"api_response","data":{"result":"ok"}}]',
        node_status = 'completed', node_output = '{"api_response":{"result":"ok"}}', node_finished_at = now()
    WHERE id = ANY($1::uuid[]) AND status = 'waiting'
    RETURNING execution_id, node_id
)`

// eventFloorStmt writes the two rows of a callback completing a wait.
const eventFloorStmt = eventFloorWaits + `
UPDATE executions AS e SET status = 'completed', updated_at = now(), finished_at = now()
FROM w WHERE e.id = w.execution_id`

// sendFloorStmt writes the rows of an event sent through the API completing a wait: the
// same two, and the audit row every change made through the API writes in its own
// transaction (its principal, address, action, target, outcome and detail as the
// service writes them).
const sendFloorStmt = eventFloorWaits + `, e AS (
    UPDATE executions AS e SET status = 'completed', updated_at = now(), finished_at = now()
    FROM w WHERE e.id = w.execution_id
    RETURNING e.id
)
INSERT INTO audit_log (principal, remote_addr, action, target, outcome, detail)
SELECT 'bench-sender', '127.0.0.1', 'event.send', 'execution/' || id, 'delivered', 'type go' FROM e`

// kafkaFloorStmt writes the same two rows as a Kafka record completing its wait writes
// them, for the waits whose column key (id, or correlation_id) is in $1: every column
// the service's write changes, with values of the size the bench's records give
// (computed in Go by the service, constants or cheap builders here) — the received event
// as the aggregator records it, the record's payload in kafka_event_data, the node's
// output as Output builds it, the wait marked resumed by the instance continuing it.
func kafkaFloorStmt(key string) string {
	const payload = `json_build_object('execution_id', execution_id, 'correlation_id', correlation_id, 'status', 'done')`
	return `
WITH w AS (
    UPDATE execution_wait_states
    SET status = 'completed', version = version + 1, updated_at = now(), resumed_at = now(), resumed_by = 'bench-kafka',
        received_events = json_build_array(json_build_object('name', 'kafka_event',
            'received_at', now(), 'source', '{"kind":"kafka","topic":"bench.events","partition":3,"offset":12345}'::json,
            'key', 'sha256:0f343b0931126a20f133d67c2b018a3b1e5e5e8a1d2c3b4a5f60718293a4b5c6')),
        kafka_event_data = ` + payload + `,
        event_data = '{}',
        node_status = 'completed',
        node_output = json_build_object('kafkaEvent', ` + payload + `,
            'events', json_build_array(json_build_object('name', 'kafka_event', 'received_at', now(),
                'source', '{"kind":"kafka","topic":"bench.events","partition":3,"offset":12345}'::json)),
            'arrival_order', '["kafka_event"]'::json, 'correlation_id', correlation_id, 'strategy', 'all',
            'timeout', false, 'timed_out_events', '[]'::json, 'missing_required_events', '[]'::json),
        node_finished_at = now()
    WHERE ` + key + ` = ANY($1::uuid[]) AND status = 'waiting'
    RETURNING execution_id
)
UPDATE executions AS e SET status = 'completed', updated_at = now(), finished_at = now()
FROM w WHERE e.id = w.execution_id`
}

// GroupBatch is the batch a group commit of groups transactions forms when clients
// callers are in flight at once: they spread over the groups.
func GroupBatch(clients, groups, maxGroup int) int {
	return max(1, min((clients+groups-1)/groups, maxGroup))
}

// idsOnly is batchedWrites' arguments for a statement that takes only the batch's ids.
func idsOnly(ids []uuid.UUID) []any { return []any{ids} }

// floorWrite is what a floor does with one batch of waits, given the batch's arguments:
// run does it as a transaction of its own, inTx inside tx, a transaction the caller
// holds (the batch whose rows are counted). read counts the rows it reads back, for a
// floor that reads.
type floorWrite struct {
	run  func(ctx context.Context, pool *pgxpool.Pool, args []any) error
	inTx func(ctx context.Context, tx pgx.Tx, args []any) error
	read *atomic.Int64
}

// statement is the floorWrite of one statement, its own transaction.
func statement(stmt string) floorWrite {
	return floorWrite{
		run: func(ctx context.Context, pool *pgxpool.Pool, args []any) error {
			_, err := pool.Exec(ctx, stmt, args...)
			return err
		},
		inTx: func(ctx context.Context, tx pgx.Tx, args []any) error {
			_, err := tx.Exec(ctx, stmt, args...)
			return err
		},
		read: new(atomic.Int64),
	}
}

// floorRun is what batchedWrites measured.
type floorRun struct {
	took time.Duration
	cpu  *CPUUse
	// rowsPerEvent: see FloorResult.RowsPerEvent.
	rowsPerEvent float64
}

// batchedWrites runs write over every waiting wait of the schema in id order, batch ids
// at a time, on workers connections at once, and returns how long they all took, the
// CPU they took per wait when it can be read here (startCPU), and the rows written per
// wait. args gives a batch's arguments for its ids (for a statement, its $1 is the
// uuid[] of them); they are built before the clock starts. The first batch runs in a
// transaction that reads PostgreSQL's counters before and after it (countedWrite): a
// few statements more in the whole run.
func batchedWrites(ctx context.Context, pool *pgxpool.Pool, batch, workers int, args func([]uuid.UUID) []any, write floorWrite) (floorRun, error) {
	rows, err := pool.Query(ctx, `SELECT id FROM execution_wait_states WHERE status = 'waiting' ORDER BY id`)
	if err != nil {
		return floorRun{}, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return floorRun{}, err
	}
	type work struct {
		waits int
		args  []any
	}
	batches := make(chan work, len(ids)/max(batch, 1)+1)
	for lo := 0; lo < len(ids); lo += batch {
		b := ids[lo:min(lo+batch, len(ids))]
		batches <- work{len(b), args(b)}
	}
	close(batches)
	first, ok := <-batches
	if !ok {
		return floorRun{}, errors.New("no waiting wait to write")
	}
	var counted int64
	wait := timedWorkers(ctx, pool, workers, func(i int) error {
		if i == 0 {
			var err error
			if counted, err = countedWrite(ctx, pool, write, first.args); err != nil {
				return err
			}
		}
		for b := range batches {
			if err := write.run(ctx, pool, b.args); err != nil {
				return err
			}
		}
		return nil
	})
	took, cpuSince, err := wait()
	return floorRun{took: took, cpu: cpuSince(len(ids)), rowsPerEvent: float64(counted) / float64(max(first.waits, 1))}, err
}

// timedWorkers starts the clock and the CPU meter (startCPU), then workers goroutines,
// each running work with its index. The function it returns waits for them all and
// gives the time since the start, the meter's reading (to be taken at once, before
// anything else runs), and their errors.
func timedWorkers(ctx context.Context, pool *pgxpool.Pool, workers int, work func(i int) error) (wait func() (time.Duration, func(events int) *CPUUse, error)) {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	cpuSince := startCPU(ctx, pool)
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = work(i)
		}()
	}
	return func() (time.Duration, func(int) *CPUUse, error) {
		wg.Wait()
		return time.Since(start), cpuSince, errors.Join(errs...)
	}
}

// countedWrite runs write in a transaction and returns the rows it inserted, updated and
// deleted, as PostgreSQL counts them for the transaction: the counters read before and
// after it, since they also hold what earlier transactions of the same connection did
// and have not yet been reported (a backend reports when idle, at most once a second).
func countedWrite(ctx context.Context, pool *pgxpool.Pool, write floorWrite, args []any) (int64, error) {
	const written = `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint
		FROM pg_stat_xact_user_tables WHERE schemaname = current_schema()`
	var before, after int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, written).Scan(&before); err != nil {
			return err
		}
		if err := write.inTx(ctx, tx, args); err != nil {
			return err
		}
		return tx.QueryRow(ctx, written).Scan(&after)
	})
	return after - before, err
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
    INSERT INTO node_execution_rows (execution_id, node_id, status, started_at)
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
