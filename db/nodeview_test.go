package db_test

// A wait_events node's outcome is written in its wait's row; node_executions reads it
// from there while the node's stored row (node_execution_rows) still reads as waiting.
// These tests hold the view, the statements that move nodes, the trigger that hands an
// outcome over when its wait goes, and the reopen of a wait, which forgets the outcome.

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

// TestNodeExecutionsIsARead: node_executions is where a node is read, never written:
// the shim that took the writes of the release before 017 into the stored rows is gone,
// and a write through the view fails instead of landing somewhere unseen.
func TestNodeExecutionsIsARead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	f := newNodeFixture(t, pool, true)
	for _, sql := range []string{
		`INSERT INTO node_executions (execution_id, node_id, status, attempts) VALUES ($1, 'extra', 'pending', 0)`,
		`UPDATE node_executions SET status = 'running' WHERE execution_id = $1 AND node_id = 'next'`,
		`DELETE FROM node_executions WHERE execution_id = $1 AND node_id = 'next'`,
	} {
		_, err := pool.Exec(ctx, sql, f.exec)
		require.ErrorContains(t, err, `view "node_executions"`, sql)
	}
	view, stored := f.node(t, "next")
	require.Equal(t, `pending|<null>|<null>|false`, view)
	require.Equal(t, view, stored)
}

// TestReopenForgetsTheNodesOutcome: a redrive reopens a wait that had decided its node;
// the reopened wait holds no outcome, so the node reads as its stored row (waiting) until
// the wait ends again. This release's WaitStateReopen clears the outcome itself (checked
// with the trigger that did it for the previous release turned off); the trigger still
// does it for the previous release's reopen, which runs beside this one during a rolling
// update and leaves the outcome in place.
func TestReopenForgetsTheNodesOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := dbsqlc.New()
	const waiting = `waiting_for_events|{"status":"waiting"}|<null>|false`
	t.Run("this release", func(t *testing.T) {
		f := newNodeFixture(t, pool, true)
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `ALTER TABLE execution_wait_states DISABLE TRIGGER execution_wait_states_forget_node`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `UPDATE execution_wait_states SET status = 'timeout', node_status = 'failed',
			node_output = '{"timeout":true}', node_error = 'timed out', node_finished_at = now() WHERE id = $1`, f.wait)
		require.NoError(t, err)
		var version int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT version FROM execution_wait_states WHERE id = $1`, f.wait).Scan(&version))
		_, err = q.WaitStateReopen(ctx, tx, dbsqlc.WaitStateReopenParams{ID: f.wait, Version: version,
			ExpectedEvents: []byte(`[]`), ExpiresAt: time.Now().Add(time.Hour), NextDeadlineAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		var held bool
		require.NoError(t, tx.QueryRow(ctx, `SELECT node_status IS NOT NULL OR node_output IS NOT NULL OR node_error IS NOT NULL
			OR node_finished_at IS NOT NULL FROM execution_wait_states WHERE id = $1`, f.wait).Scan(&held))
		require.False(t, held, "the reopened wait holds no outcome")
		var view string
		require.NoError(t, tx.QueryRow(ctx, `SELECT concat_ws('|', status, coalesce(output::text, '<null>'), coalesce(error, '<null>'),
			(finished_at IS NOT NULL)::text) FROM node_executions WHERE execution_id = $1 AND node_id = 'wait'`, f.exec).Scan(&view))
		require.Equal(t, waiting, view)
	})

	t.Run("the previous release", func(t *testing.T) {
		f := newNodeFixture(t, pool, false)
		f.decide(t, "timeout", "failed", `{"timeout":true}`, "timed out")
		view, _ := f.node(t, "wait")
		require.Equal(t, `failed|{"timeout":true}|timed out|true`, view)
		// Its reopen, as it sends it: the outcome columns untouched.
		_, err := pool.Exec(ctx, `UPDATE execution_wait_states SET status = 'waiting', error = NULL, version = version + 1 WHERE id = $1`, f.wait)
		require.NoError(t, err)
		view, _ = f.node(t, "wait")
		require.Equal(t, waiting, view)
	})
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
