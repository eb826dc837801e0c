package db_test

// A wait_events node's outcome is written in its wait's row; node_executions reads it
// from there while the node's stored row (node_execution_rows) still reads as waiting.
// These tests hold the view, the statements that move nodes, the trigger that hands an
// outcome over when its wait goes, and the previous release's statements, which still
// read and write node_executions as the table it was.

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// nodeFixture is an execution with two nodes: "wait", stored as waiting with its open
// wait, and "next", pending.
type nodeFixture struct {
	pool *pgxpool.Pool
	exec uuid.UUID
	wait uuid.UUID
}

func newNodeFixture(t *testing.T, pool *pgxpool.Pool, workflow bool) nodeFixture {
	t.Helper()
	ctx := context.Background()
	f := nodeFixture{pool: pool, exec: uuid.New(), wait: uuid.New()}
	if workflow {
		_, err := pool.Exec(ctx, `INSERT INTO workflows (name, version, definition) VALUES ('wf', 1, '{}')`)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO executions (id, workflow_name, workflow_version, status) VALUES ($1, 'wf', 1, 'waiting')`, f.exec)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO node_execution_rows (execution_id, node_id, status, output, attempts, started_at)
		VALUES ($1, 'wait', 'waiting_for_events', '{"status":"waiting"}', 1, now()), ($1, 'next', 'pending', NULL, 0, NULL)`, f.exec)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy,
		expires_at, next_deadline_at, wait_type, status)
		VALUES ($1, $2, 'wait', $3, 'all', now() + interval '1 hour', now() + interval '1 hour', 'events', 'waiting')`,
		f.wait, f.exec, uuid.New())
	require.NoError(t, err)
	return f
}

// node reads a node through the view and from its stored row: status, output, error,
// whether it finished.
func (f nodeFixture) node(t *testing.T, nodeID string) (view, stored string) {
	t.Helper()
	const cols = `concat_ws('|', status, coalesce(output::text, '<null>'), coalesce(error, '<null>'), (finished_at IS NOT NULL)::text)`
	ctx := context.Background()
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT `+cols+` FROM node_executions WHERE execution_id = $1 AND node_id = $2`,
		f.exec, nodeID).Scan(&view))
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT `+cols+` FROM node_execution_rows WHERE execution_id = $1 AND node_id = $2`,
		f.exec, nodeID).Scan(&stored))
	return view, stored
}

// decide writes the wait as this release's WaitStateWrite ends it: its status and its
// node's outcome.
func (f nodeFixture) decide(t *testing.T, waitStatus, nodeStatus, output, nodeError string) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), `UPDATE execution_wait_states
		SET status = $2, node_status = $3, node_output = $4::json, node_error = nullif($5, ''), node_finished_at = now()
		WHERE id = $1`, f.wait, waitStatus, nodeStatus, output, nodeError)
	require.NoError(t, err)
}

func TestNodeExecutionsReadsItsWaitsOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := dbsqlc.New()
	f := newNodeFixture(t, pool, true)
	const waiting = `waiting_for_events|{"status":"waiting"}|<null>|false`

	view, stored := f.node(t, "wait")
	require.Equal(t, waiting, view)
	require.Equal(t, waiting, stored)

	// An outcome is read only from a wait that has ended.
	f.decide(t, "waiting", "completed", `{"a":1}`, "")
	view, _ = f.node(t, "wait")
	require.Equal(t, waiting, view)

	f.decide(t, "completed", "completed", `{"a":1}`, "")
	view, stored = f.node(t, "wait")
	require.Equal(t, `completed|{"a":1}|<null>|true`, view)
	require.Equal(t, waiting, stored, "the wait's write leaves the node's row alone")
	nodes, err := q.NodeExecutionListByExecutions(ctx, pool, []uuid.UUID{f.exec})
	require.NoError(t, err)
	require.Len(t, nodes, 2)
	for _, n := range nodes {
		if n.NodeID == "wait" {
			require.EqualValues(t, "completed", n.Status)
			require.JSONEq(t, `{"a":1}`, string(n.Output))
			require.NotNil(t, n.FinishedAt)
		}
	}

	// Nothing moves a node its wait decided: not a cancel, not a stale finish, not the
	// graph queueing it.
	require.NoError(t, q.NodeExecutionCancelOpen(ctx, pool, dbsqlc.NodeExecutionCancelOpenParams{ExecutionID: f.exec, Error: "stop"}))
	reason := "late"
	require.NoError(t, q.NodeExecutionFinish(ctx, pool, dbsqlc.NodeExecutionFinishParams{Status: "failed", Error: &reason, ExecutionID: f.exec, NodeID: "wait"}))
	require.NoError(t, q.NodeExecutionSetStatusMany(ctx, pool, dbsqlc.NodeExecutionSetStatusManyParams{
		ExecutionIds: []uuid.UUID{f.exec}, NodeIds: []string{"wait"}, Statuses: []string{"running"}}))
	view, stored = f.node(t, "wait")
	require.Equal(t, `completed|{"a":1}|<null>|true`, view)
	require.Equal(t, waiting, stored)
	view, _ = f.node(t, "next")
	require.Equal(t, `cancelled|<null>|stop|true`, view, "the open node is cancelled")

	// A redrive hands back the nodes that failed, one its wait failed included.
	f.decide(t, "timeout", "failed", `{"timeout":true}`, "timed out")
	view, _ = f.node(t, "wait")
	require.Equal(t, `failed|{"timeout":true}|timed out|true`, view)
	require.NoError(t, q.NodeExecutionReopen(ctx, pool, f.exec))
	for _, id := range []string{"wait", "next"} {
		view, stored = f.node(t, id)
		require.Equal(t, `pending|<null>|<null>|false`, view, id)
		require.Equal(t, view, stored, id)
	}
}

// TestAWaitHandsItsOutcomeOverAsItGoes: deleting a wait that decided its node (retention,
// a redrive) writes the outcome into the node's row; deleting an execution takes its
// nodes and waits and writes nothing more.
func TestAWaitHandsItsOutcomeOverAsItGoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := dbsqlc.New()
	f := newNodeFixture(t, pool, true)
	f.decide(t, "completed", "completed", `{"a":1}`, "")
	_, err := pool.Exec(ctx, `UPDATE execution_wait_states SET resumed_at = now(), updated_at = now() - interval '2 days' WHERE id = $1`, f.wait)
	require.NoError(t, err)
	deleted, err := q.WaitStateDeleteFinishedBefore(ctx, pool, dbsqlc.WaitStateDeleteFinishedBeforeParams{Cutoff: time.Now().Add(-24 * time.Hour), Max: 10})
	require.NoError(t, err)
	require.EqualValues(t, 1, deleted)
	view, stored := f.node(t, "wait")
	require.Equal(t, `completed|{"a":1}|<null>|true`, view)
	require.Equal(t, view, stored)

	// A cascade from the execution: the trigger writes nothing into the node rows that
	// go with it.
	g := newNodeFixture(t, pool, false)
	g.decide(t, "completed", "completed", `{"b":2}`, "")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The counters also hold what earlier transactions of the connection did and have
	// not reported yet: read before and after.
	written := func() (updated, deleted int) {
		require.NoError(t, tx.QueryRow(ctx, `SELECT n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables
			WHERE schemaname = current_schema() AND relname = 'node_execution_rows'`).Scan(&updated, &deleted))
		return updated, deleted
	}
	updatedBefore, deletedBefore := written()
	_, err = tx.Exec(ctx, `DELETE FROM executions WHERE id = $1`, g.exec)
	require.NoError(t, err)
	updated, deletedNodes := written()
	require.Equal(t, 2, deletedNodes-deletedBefore)
	updated -= updatedBefore
	require.Zero(t, updated, "a cascade writes no outcome into rows it deletes")
}

// TestPreviousReleaseReadsAndWritesNodes: during a rolling update the previous release
// runs on this schema, with node_executions as the table it was. Its statements (as it
// sends them) still insert and move nodes, and their conditions see the outcomes this
// release keeps in the waits.
func TestPreviousReleaseReadsAndWritesNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	f := newNodeFixture(t, pool, true)
	exec := func(sql string, args ...any) int64 {
		t.Helper()
		tag, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
		return tag.RowsAffected()
	}

	// Its NodeExecutionInsert: the table's defaults apply.
	exec(`INSERT INTO node_executions (execution_id, node_id, status, output, attempts, started_at)
		SELECT $1::uuid, n.node_id, n.status, NULLIF(n.output, '')::json, 0, NULL
		FROM (SELECT unnest($2::text[]) AS node_id, unnest($3::text[]) AS status, unnest($4::text[]) AS output) AS n`,
		f.exec, []string{"extra"}, []string{"pending"}, []string{""})
	var defaulted bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT created_at IS NOT NULL AND updated_at IS NOT NULL FROM node_execution_rows
		WHERE execution_id = $1 AND node_id = 'extra'`, f.exec).Scan(&defaulted))
	require.True(t, defaulted)

	// Its NodeExecutionMarkRunning and NodeExecutionFinish move a node as they did.
	require.EqualValues(t, 1, exec(`UPDATE node_executions SET status = 'running', attempts = attempts + 1,
		started_at = coalesce(started_at, now()), updated_at = now()
		WHERE execution_id = $1::uuid AND node_id = $2::text AND status IN ('pending', 'running')`, f.exec, "extra"))
	require.EqualValues(t, 1, exec(`UPDATE node_executions SET status = $1::text, output = $2::json, error = $3::text,
		updated_at = now(), finished_at = CASE WHEN $1::text IN ('completed', 'failed', 'skipped') THEN now() ELSE NULL END
		WHERE execution_id = $4::uuid AND node_id = $5::text AND status NOT IN ('completed', 'failed', 'skipped', 'cancelled')`,
		"completed", `{"x":1}`, nil, f.exec, "extra"))
	_, stored := f.node(t, "extra")
	require.Equal(t, `completed|{"x":1}|<null>|true`, stored)

	// A wait this release decided: its finish and its cancel pass the node by.
	f.decide(t, "completed", "completed", `{"a":1}`, "")
	require.Zero(t, exec(`UPDATE node_executions SET status = $1::text, output = $2::json, error = $3::text,
		updated_at = now(), finished_at = now()
		WHERE execution_id = $4::uuid AND node_id = $5::text AND status NOT IN ('completed', 'failed', 'skipped', 'cancelled')`,
		"failed", nil, "late", f.exec, "wait"))
	require.EqualValues(t, 1, exec(`UPDATE node_executions SET status = 'cancelled', error = $1::text, updated_at = now(), finished_at = now()
		WHERE execution_id = $2::uuid AND status IN ('pending', 'running', 'waiting_for_events')`, "stop", f.exec), "only next")
	view, _ := f.node(t, "wait")
	require.Equal(t, `completed|{"a":1}|<null>|true`, view)

	// Its redrive reopens a node its wait failed, then its wait (which it leaves holding
	// the old outcome) and marks the node waiting again: the node reads waiting.
	f.decide(t, "timeout", "failed", `{"timeout":true}`, "timed out")
	require.EqualValues(t, 2, exec(`UPDATE node_executions SET status = 'pending', output = NULL, error = NULL,
		updated_at = now(), finished_at = NULL WHERE execution_id = $1::uuid AND status IN ('failed', 'cancelled')`, f.exec))
	exec(`UPDATE execution_wait_states SET status = 'waiting', error = NULL, version = version + 1 WHERE id = $1`, f.wait)
	require.EqualValues(t, 1, exec(`UPDATE node_executions SET status = 'waiting_for_events', output = $1::json, error = NULL,
		updated_at = now(), finished_at = NULL
		WHERE execution_id = $2::uuid AND node_id = 'wait' AND status NOT IN ('completed', 'failed', 'skipped', 'cancelled')`,
		`{"status":"waiting"}`, f.exec))
	view, stored = f.node(t, "wait")
	require.Equal(t, `waiting_for_events|{"status":"waiting"}|<null>|false`, view)
	require.Equal(t, view, stored)

	// Its WaitStateWrite ends the wait and writes the node, as it did.
	exec(`UPDATE execution_wait_states SET status = 'completed', version = version + 1 WHERE id = $1`, f.wait)
	require.EqualValues(t, 1, exec(`UPDATE node_executions AS ne SET status = w.node_status, output = w.output,
		error = NULL, warning = NULL, updated_at = now(), finished_at = now()
		FROM (SELECT $1::uuid AS execution_id, 'wait'::text AS node_id, 'completed'::text AS node_status, '{"b":2}'::json AS output) AS w
		WHERE ne.execution_id = w.execution_id AND ne.node_id = w.node_id
		  AND ne.status NOT IN ('completed', 'failed', 'skipped', 'cancelled')`, f.exec))
	view, stored = f.node(t, "wait")
	require.Equal(t, `completed|{"b":2}|<null>|true`, view)
	require.Equal(t, view, stored)
}

// TestNodeStatementsSeeAConcurrentFinish races two writers of one node for real: one has
// finished it and not yet committed when a stale finish arrives, waits for its lock, and
// must then find it finished. PostgreSQL re-checks the row it waited for at its latest
// version, but the view's row joined to it at the version the statement began with, so
// the statement's test of the stored status is what holds here.
func TestNodeStatementsSeeAConcurrentFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := dbsqlc.New()
	f := newNodeFixture(t, pool, true)

	first, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	var holder int
	require.NoError(t, first.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	require.NoError(t, q.NodeExecutionFinish(ctx, first, dbsqlc.NodeExecutionFinishParams{
		Status: "completed", Output: []byte(`{"first":true}`), ExecutionID: f.exec, NodeID: "next"}))

	late := make(chan error, 1)
	go func() {
		reason := "late"
		late <- q.NodeExecutionFinish(ctx, pool, dbsqlc.NodeExecutionFinishParams{
			Status: "failed", Error: &reason, ExecutionID: f.exec, NodeID: "next"})
	}()
	require.Eventually(t, func() bool {
		var blocked int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`,
			holder).Scan(&blocked))
		return blocked == 1
	}, 10*time.Second, 10*time.Millisecond, "the late finish never waited for the first")
	require.NoError(t, first.Commit(ctx))
	require.NoError(t, <-late)

	view, stored := f.node(t, "next")
	require.Equal(t, `completed|{"first":true}|<null>|true`, view, "the first finish stands")
	require.Equal(t, view, stored)
}
