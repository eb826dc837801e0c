package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestLeaseLostIsFenced plays pod a step by step: it claims work, its lease runs out
// and pod b claims the row (attempt bumped), then a finishes. a's commit must roll back
// (errLeaseLost) so that b's run is the only one recorded.
func TestLeaseLostIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// bump simulates b's claim after a's lease expired.
	const bump = `UPDATE run_queue SET attempt = attempt + 1, claimed_by = 'b' WHERE id = $1`

	t.Run("run", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, h.workflow("lease", []obj{
			node("first", "http", obj{"url": "@{_vars.svc}/first"}),
			node("second", "http", obj{"url": "@{_vars.svc}/second"}),
		}, []obj{edge("first", "second", "")}))
		id := h.start(t, name, nil)

		jobs, err := h.ex.ClaimRun(ctx, 10)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, "first", jobs[0].NodeID)
		require.EqualValues(t, 1, h.exec(t, bump, jobs[0].ID))
		require.ErrorIs(t, h.ex.RunJob(ctx, jobs[0]), executor.ErrLeaseLost)

		// The call was made (at least once), but nothing of a's run was recorded.
		require.Equal(t, 1, h.fake.count("/first"))
		v := h.view(t, id)
		require.Equal(t, vocab.ExecRunning, v.Status)
		require.Equal(t, vocab.NodeRunning, nodeOf(t, v, "first").Status)
		require.Nil(t, nodeOf(t, v, "first").Output)
		require.Equal(t, vocab.NodePending, nodeOf(t, v, "second").Status)
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE node_id = 'first' AND attempt = 2 AND claimed_by = 'b'`))
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue`))

		// b finishes the work (its lease is made to run out so a live pod takes it).
		require.EqualValues(t, 1, h.exec(t, `UPDATE run_queue SET visible_at = now()`))
		newPod(t, h.pool, config(t, "b")).run(t)
		v = h.waitStatus(t, id, "completed")
		require.Equal(t, int32(2), nodeOf(t, v, "first").Attempts)
		reqs := h.fake.requests("/first")
		require.Len(t, reqs, 2)
		require.Equal(t, reqs[0].Header.Get("Idempotency-Key"), reqs[1].Header.Get("Idempotency-Key"),
			"a rerun is recognisable as the same call")
		stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/second") == 1 })
		require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
	})

	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, h.workflow("lease", []obj{
			node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
			node("after", "http", obj{"url": "@{_vars.svc}/after"}),
		}, []obj{edge("wait", "after", "")}))
		id := h.start(t, name, nil) // the root wait registers in the start's transaction
		ws := waitOf(t, h.view(t, id), "wait")
		require.Equal(t, aggregator.Completed, h.applyQueued(t, id, ws.CorrelationID, obj{"ok": true}))

		jobs, err := h.ex.ClaimRun(ctx, 10)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, vocab.KindResume, jobs[0].Kind)
		require.EqualValues(t, 1, h.exec(t, bump, jobs[0].ID))
		require.ErrorIs(t, h.ex.RunJob(ctx, jobs[0]), executor.ErrLeaseLost)

		v := h.view(t, id)
		require.Nil(t, waitOf(t, v, "wait").ResumedAt, "a's resume rolled back")
		require.Equal(t, vocab.NodePending, nodeOf(t, v, "after").Status)
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue`))

		require.EqualValues(t, 1, h.exec(t, `UPDATE run_queue SET visible_at = now()`))
		newPod(t, h.pool, config(t, "b")).run(t)
		v = h.waitStatus(t, id, "completed")
		require.Equal(t, "b", errText(waitOf(t, v, "wait").ResumedBy))
		stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 })
	})

	t.Run("outbox", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, h.waitDef("lease", nil))
		id := h.start(t, name, obj{"order": 1}) // the wait and its call queued at the start

		items, err := h.ex.ClaimOutbox(ctx, 10)
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.EqualValues(t, 1, h.exec(t, `UPDATE outbox SET attempt = attempt + 1, claimed_by = 'b' WHERE id = $1`, items[0].ID))
		require.ErrorIs(t, h.ex.SendOutbox(ctx, items[0]), executor.ErrOutboxLeaseLost)
		require.Equal(t, 1, h.fake.count("/process"))
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM outbox WHERE attempt = 2`), "b's claim stands")

		require.EqualValues(t, 1, h.exec(t, `UPDATE outbox SET visible_at = now()`))
		newPod(t, h.pool, config(t, "b")).run(t)
		eventually(t, func() bool { return h.count(t, `SELECT count(*) FROM outbox`) == 0 })
		reqs := h.fake.requests("/process")
		require.Len(t, reqs, 2)
		corr := waitOf(t, h.view(t, id), "wait").CorrelationID.String()
		for _, r := range reqs {
			require.Equal(t, corr, r.Header.Get("Idempotency-Key"))
		}
	})
}

// TestShutdownFinishesInFlightWork: cancelling Run (SIGTERM) while an http node is in
// flight lets the node finish and be recorded before Run returns; what it enqueued
// stays queued for the next pod.
func TestShutdownFinishesInFlightWork(t *testing.T) {
	t.Parallel()
	h := setup(t)
	const slow = 300 * time.Millisecond
	h.fake.on("/slow", func(int, recorded) reply { return reply{status: 200, body: `{"done":true}`, delay: slow} })
	name := h.put(t, h.workflow("shutdown", []obj{
		node("slow", "http", obj{"url": "@{_vars.svc}/slow"}),
		node("after", "http", obj{"url": "@{_vars.svc}/after"}),
	}, []obj{edge("slow", "after", "")}))
	stop := h.run(t)
	id := h.start(t, name, nil)
	eventually(t, func() bool { return h.fake.count("/slow") == 1 })

	began := time.Now()
	stop() // returns once Run has returned
	require.Greater(t, time.Since(began), slow/3, "Run waited for the node in flight")

	v := h.view(t, id)
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "slow").Status, dump(v))
	require.Equal(t, obj{"done": true}, output(t, nodeOf(t, v, "slow"))["body"])
	require.Equal(t, vocab.NodeRunning, nodeOf(t, v, "after").Status)
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE node_id = 'after' AND attempt = 0`))
	require.Zero(t, h.fake.count("/after"))

	newPod(t, h.pool, config(t, "b")).run(t)
	h.waitStatus(t, id, "completed")
	require.Equal(t, 1, h.fake.count("/slow"), "finished work is not redone")
	require.Equal(t, 1, h.fake.count("/after"))
}

// TestShutdownBudgetSpent: work still in flight when the shutdown budget is spent is
// abandoned, not lost: another pod runs it again.
func TestShutdownBudgetSpent(t *testing.T) {
	t.Parallel()
	h := setup(t, func(c *executor.Config) { c.ShutdownTimeout = 50 * time.Millisecond })
	h.fake.on("/slow", func(n int, _ recorded) reply {
		if n == 1 {
			return reply{status: 200, delay: 5 * time.Second}
		}
		return reply{status: 200}
	})
	name := h.put(t, h.workflow("budget", []obj{node("slow", "http", obj{"url": "@{_vars.svc}/slow"})}, nil))
	stop := h.run(t)
	id := h.start(t, name, nil)
	eventually(t, func() bool { return h.fake.count("/slow") == 1 })
	began := time.Now()
	stop()
	require.Less(t, time.Since(began), 3*time.Second, "Run gave up after its budget")
	require.Equal(t, vocab.NodeRunning, nodeOf(t, h.view(t, id), "slow").Status)
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue`), "the work is still queued")

	// a hands the abandoned row back; were it killed instead, its lease would run out.
	h.exec(t, `UPDATE run_queue SET visible_at = now()`)
	newPod(t, h.pool, config(t, "b")).run(t)
	v := h.waitStatus(t, id, "completed")
	require.Equal(t, 2, h.fake.count("/slow"))
	require.Equal(t, int32(2), nodeOf(t, v, "slow").Attempts)
}
