package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Retention: executions are made to have finished (and waits to have changed) a month
// ago by moving their timestamps; Purge runs with a cutoff a week ago.

const (
	ageExecution = `UPDATE executions SET finished_at = now() - interval '30 days' WHERE id = $1 AND finished_at IS NOT NULL`
	ageWait      = `UPDATE execution_wait_states SET updated_at = now() - interval '30 days' WHERE execution_id = $1 AND node_id = $2`
)

func weekAgo() time.Time { return time.Now().Add(-7 * 24 * time.Hour) }

// retentionWorkflows stores "one" (a wait, then a node) and "two" (two waits, then a
// join); the nodes after the waits complete at once.
func (h *harness) retentionWorkflows(t *testing.T) (one, two string) {
	one = h.put(t, h.workflow("one", []obj{
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("after", "wait_events", obj{}),
	}, []obj{edge("wait", "after", "")}))
	two = h.put(t, h.workflow("two", []obj{
		node("w1", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("w2", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("join", "wait_events", obj{}),
	}, []obj{edge("w1", "join", ""), edge("w2", "join", "")}))
	return one, two
}

// startWaiting starts an execution and returns it once all its waits are registered.
func (h *harness) startWaiting(t *testing.T, name string, waits int) uuid.UUID {
	t.Helper()
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id) == waits
	})
	return id
}

// satisfy completes the wait of nodeID with its event.
func (h *harness) satisfy(t *testing.T, id uuid.UUID, nodeID string) {
	t.Helper()
	require.Equal(t, aggregator.Completed, h.apply(t, id, waitOf(t, h.view(t, id), nodeID).CorrelationID, aggregator.EventKafka, obj{}))
}

// rows counts an execution's rows: itself, its nodes, its waits.
func (h *harness) rows(t *testing.T, id uuid.UUID) [3]int {
	t.Helper()
	return [3]int{
		h.count(t, `SELECT count(*) FROM executions WHERE id = $1`, id),
		h.count(t, `SELECT count(*) FROM node_executions WHERE execution_id = $1`, id),
		h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id),
	}
}

// nodeOutcome is a node of an execution as node_executions reads it: status, output,
// error, warning, whether it finished.
func (h *harness) nodeOutcome(t *testing.T, id uuid.UUID, nodeID string) string {
	t.Helper()
	var out string
	require.NoError(t, h.pool.QueryRow(context.Background(), `SELECT concat_ws('|', status, output::text,
		coalesce(error, '<null>'), coalesce(warning, '<null>'), finished_at IS NOT NULL)
		FROM node_executions WHERE execution_id = $1 AND node_id = $2`, id, nodeID).Scan(&out))
	return out
}

func (h *harness) waitNodes(t *testing.T, id uuid.UUID) []string {
	t.Helper()
	rows, err := h.pool.Query(context.Background(), `SELECT node_id FROM execution_wait_states WHERE execution_id = $1 ORDER BY node_id`, id)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestPurge: old finished executions go with their nodes and waits, whatever they ended
// as; recent ones stay. Of executions still running, old finished waits go — once their
// continuation ran — and open waits stay however old.
func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	one, two := h.retentionWorkflows(t)
	stop := h.run(t)

	oldCompleted := h.startWaiting(t, one, 1)
	h.satisfy(t, oldCompleted, "wait")
	oldFailed := h.startWaiting(t, one, 1)
	require.NoError(t, h.ex.CancelWait(ctx, oldFailed, "wait", executor.ThenFail, ""))
	oldCancelled := h.startWaiting(t, one, 1)
	_, err := h.ex.CancelExecution(ctx, oldCancelled, "")
	require.NoError(t, err)
	recentCompleted := h.startWaiting(t, one, 1)
	h.satisfy(t, recentCompleted, "wait")
	recentCancelled := h.startWaiting(t, one, 1)
	_, err = h.ex.CancelExecution(ctx, recentCancelled, "")
	require.NoError(t, err)

	// Running, each still waiting for w2: w1 completed and resumed / cancelled (the
	// workflow went on) / completed and resumed recently / completed, continuation not
	// run yet (below, with the pod stopped).
	resumedOld := h.startWaiting(t, two, 2)
	h.satisfy(t, resumedOld, "w1")
	cancelledOld := h.startWaiting(t, two, 2)
	require.NoError(t, h.ex.CancelWait(ctx, cancelledOld, "w1", executor.ThenContinue, ""))
	resumedRecent := h.startWaiting(t, two, 2)
	h.satisfy(t, resumedRecent, "w1")
	unresumedOld := h.startWaiting(t, two, 2)

	h.waitStatus(t, oldCompleted, "completed")
	h.waitStatus(t, recentCompleted, "completed")
	for _, id := range []uuid.UUID{resumedOld, resumedRecent} {
		eventually(t, func() bool { return h.waitRow(t, id, "w1").Resumed })
	}
	stop()
	require.Equal(t, aggregator.Completed, h.applyQueued(t, unresumedOld, waitOf(t, h.view(t, unresumedOld), "w1").CorrelationID, obj{}))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND kind = 'resume'`, unresumedOld))

	for _, id := range []uuid.UUID{oldCompleted, oldFailed, oldCancelled} {
		require.EqualValues(t, 1, h.exec(t, ageExecution, id))
	}
	for _, id := range []uuid.UUID{resumedOld, cancelledOld, unresumedOld} {
		require.EqualValues(t, 1, h.exec(t, ageWait, id, "w1"))
		require.EqualValues(t, 1, h.exec(t, ageWait, id, "w2"), "an old open wait")
	}
	// A recent execution's old wait goes only with its execution.
	require.EqualValues(t, 1, h.exec(t, ageWait, recentCompleted, "wait"))

	before := map[uuid.UUID][3]int{}
	for _, id := range []uuid.UUID{recentCompleted, recentCancelled, resumedOld, cancelledOld, resumedRecent, unresumedOld} {
		before[id] = h.rows(t, id)
	}
	// The old finished waits hold their node's outcome; the node's stored row still
	// reads as registration left it.
	outcomes := map[uuid.UUID]string{}
	for _, id := range []uuid.UUID{resumedOld, cancelledOld} {
		outcomes[id] = h.nodeOutcome(t, id, "w1")
		require.Contains(t, outcomes[id], "completed|{")
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM node_execution_rows
			WHERE execution_id = $1 AND node_id = 'w1' AND status = 'waiting_for_events'`, id))
	}

	p, err := h.ex.Purge(ctx, weekAgo())
	require.NoError(t, err)
	require.Equal(t, executor.Purged{Executions: 3, Waits: 2}, p)

	for _, id := range []uuid.UUID{oldCompleted, oldFailed, oldCancelled} {
		require.Equal(t, [3]int{0, 0, 0}, h.rows(t, id), "old finished execution %s and its rows", id)
	}
	for _, id := range []uuid.UUID{recentCompleted, recentCancelled, resumedRecent, unresumedOld} {
		require.Equal(t, before[id], h.rows(t, id), "execution %s must be untouched", id)
	}
	require.Equal(t, []string{"w2"}, h.waitNodes(t, resumedOld), "the old resumed wait goes, the open one stays")
	require.Equal(t, []string{"w2"}, h.waitNodes(t, cancelledOld), "the old cancelled wait goes, the open one stays")
	require.Equal(t, []string{"w1", "w2"}, h.waitNodes(t, unresumedOld), "a wait whose continuation has not run stays")
	for _, id := range []uuid.UUID{resumedOld, cancelledOld} {
		require.Equal(t, [3]int{1, 3, 1}, h.rows(t, id), "the execution and its nodes stay")
		require.Equal(t, vocab.ExecWaiting, h.view(t, id).Status)
		require.Equal(t, outcomes[id], h.nodeOutcome(t, id, "w1"), "the node keeps the outcome its wait held")
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM node_execution_rows
			WHERE execution_id = $1 AND node_id = 'w1' AND status = 'completed'`, id), "now in the node's own row")
	}
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1`, unresumedOld))

	// Nothing more is due.
	p, err = h.ex.Purge(ctx, weekAgo())
	require.NoError(t, err)
	require.Equal(t, executor.Purged{}, p)

	// What stayed still works: the executions go on to complete.
	h.run(t)
	for _, id := range []uuid.UUID{resumedOld, cancelledOld, unresumedOld} {
		h.satisfy(t, id, "w2")
		v := h.waitStatus(t, id, "completed")
		require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "join").Status)
	}
}

// TestPurgeInBatches: with RetentionBatch 3, ten old executions (3+3+3+1) and six old
// finished waits (3+3, then an empty batch) all go; a recent execution stays.
func TestPurgeInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t, func(c *executor.Config) { c.RetentionBatch = 3 })
	_, two := h.retentionWorkflows(t)
	quick := h.put(t, h.workflow("quick", []obj{node("n", "wait_events", obj{})}, nil))
	h.run(t)

	var old []uuid.UUID
	for range 10 {
		old = append(old, h.start(t, quick, nil))
	}
	recent := h.start(t, quick, nil)
	for _, id := range append(old, recent) {
		h.waitStatus(t, id, "completed")
	}
	var running []uuid.UUID
	for range 6 {
		id := h.startWaiting(t, two, 2)
		h.satisfy(t, id, "w1")
		running = append(running, id)
	}
	for _, id := range running {
		eventually(t, func() bool { return h.waitRow(t, id, "w1").Resumed })
		require.EqualValues(t, 1, h.exec(t, ageWait, id, "w1"))
	}
	for _, id := range old {
		require.EqualValues(t, 1, h.exec(t, ageExecution, id))
	}

	p, err := h.ex.Purge(ctx, weekAgo())
	require.NoError(t, err)
	require.Equal(t, executor.Purged{Executions: 10, Waits: 6}, p)
	require.Zero(t, h.count(t, `SELECT count(*) FROM executions WHERE id = ANY($1)`, old))
	require.Zero(t, h.count(t, `SELECT count(*) FROM node_executions WHERE execution_id = ANY($1)`, old))
	require.Equal(t, [3]int{1, 1, 0}, h.rows(t, recent))
	require.Equal(t, 6, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = ANY($1) AND node_id = 'w2' AND status = 'waiting'`, running))
	require.Equal(t, 6, h.count(t, `SELECT count(*) FROM execution_wait_states`))
	require.Equal(t, 7, h.count(t, `SELECT count(*) FROM executions`))
}

// TestPurgeSkippedWhileLocked: while another session holds this schema's retention lock
// (another pod purging), Purge skips without waiting and deletes nothing; a pod on
// another schema is not affected. Once the lock is free Purge runs, and it leaves the
// lock free again.
func TestPurgeSkippedWhileLocked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	quick := h.put(t, h.workflow("quick", []obj{node("n", "wait_events", obj{})}, nil))
	h.run(t)
	id := h.start(t, quick, nil)
	h.waitStatus(t, id, "completed")
	require.EqualValues(t, 1, h.exec(t, ageExecution, id))

	// The pool's connections have the test schema on their search_path, so this is the
	// key Purge uses.
	const key = `hashtext(current_schema() || ':rendezvous-retention')`
	holder, err := h.pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, `SELECT pg_advisory_lock(`+key+`)`)
	require.NoError(t, err)

	purgeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := h.ex.Purge(purgeCtx, weekAgo())
	require.NoError(t, err, "Purge must not wait for the lock")
	require.Equal(t, executor.Purged{Skipped: true}, p)
	require.Equal(t, [3]int{1, 1, 0}, h.rows(t, id), "a skipped pass deletes nothing")

	other := setup(t)
	p, err = other.ex.Purge(ctx, weekAgo())
	require.NoError(t, err)
	require.False(t, p.Skipped, "the lock is per schema")

	var unlocked bool
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_advisory_unlock(`+key+`)`).Scan(&unlocked))
	require.True(t, unlocked)
	p, err = h.ex.Purge(ctx, weekAgo())
	require.NoError(t, err)
	require.Equal(t, executor.Purged{Executions: 1}, p)
	require.Equal(t, [3]int{0, 0, 0}, h.rows(t, id))

	// Purge released its lock: another session takes it at once.
	var locked bool
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+key+`)`).Scan(&locked))
	require.True(t, locked, "Purge left the retention lock held")
	require.NoError(t, holder.QueryRow(ctx, `SELECT pg_advisory_unlock(`+key+`)`).Scan(&unlocked))
	require.True(t, unlocked)
}

// TestRetentionPurgesTheAuditLog: the audit log is kept as long as finished executions,
// by the same pass.
func TestRetentionPurgesTheAuditLog(t *testing.T) {
	t.Parallel()
	h := setup(t)
	ctx := context.Background()
	e := &audit.Entry{Principal: "token:ci", RemoteAddr: "127.0.0.1", Action: audit.ActionExecutionStart}
	for range 3 {
		require.NoError(t, audit.Refused(ctx, h.pool, e, "/api/v1/workflows/x/executions", 404, ""))
	}
	_, err := h.pool.Exec(ctx, `UPDATE audit_log SET at = now() - interval '30 days' WHERE id IN (SELECT id FROM audit_log ORDER BY id LIMIT 2)`)
	require.NoError(t, err)
	p, err := h.ex.Purge(ctx, weekAgo())
	require.NoError(t, err)
	require.Equal(t, executor.Purged{Audit: 2}, p)
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM audit_log`))
}
