package executor_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestResumeBatch drives one batch of continuations through the set-based path: two
// waits of one execution resumed together, a skipped branch, a join that runs once, a
// claim lost to another pod, and an execution that finished meanwhile.
func TestResumeBatch(t *testing.T) {
	t.Parallel()
	h := setup(t)
	ctx := context.Background()
	name := h.put(t, h.workflow("fan", []obj{
		node("w1", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("w2", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("skipme", "http", obj{"url": "@{_vars.svc}/skip"}),
		node("join", "http", obj{"url": "@{_vars.svc}/join"}),
	}, []obj{
		edge("w1", "skipme", "output.kafkaEvent.go == true"),
		edge("w1", "join", ""),
		edge("w2", "join", ""),
	}))
	stop := h.run(t)
	execs := make([]uuid.UUID, 5)
	for i := range execs {
		execs[i] = h.start(t, name, nil)
	}
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`) == 2*len(execs)
	})
	stop() // from here on the test plays the pod

	for _, id := range execs {
		v := h.view(t, id)
		for _, w := range v.Waits {
			require.Equal(t, aggregator.Completed, h.applyQueued(t, id, w.CorrelationID, obj{"go": false}))
		}
	}
	finishedMeanwhile, lost := execs[4], execs[3]
	h.exec(t, `UPDATE executions SET status = 'failed' WHERE id = $1`, finishedMeanwhile)

	jobs, err := h.ex.ClaimRun(ctx, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 2*len(execs), "one unit claims every resume")
	var lostJob int64
	for _, j := range jobs {
		require.Equal(t, vocab.KindResume, j.Kind)
		if j.ExecutionID == lost && j.NodeID == "w2" {
			lostJob = j.ID
		}
	}
	// Another pod claimed this one after our lease ran out.
	h.exec(t, `UPDATE run_queue SET attempt = attempt + 1 WHERE id = $1`, lostJob)

	require.NoError(t, h.ex.ResumeBatch(ctx, jobs))

	for _, id := range execs[:3] {
		require.Equal(t, 2, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND resumed_by = 'a'`, id))
		v := h.view(t, id)
		require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, "skipme").Status)
		require.Equal(t, vocab.NodeRunning, nodeOf(t, v, "join").Status)
		require.Equal(t, vocab.ExecRunning, v.Status)
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND kind = 'run' AND node_id = 'join'`, id))
	}
	// The lost claim: w1 resumed (and the join is ready, both waits being complete), w2
	// left to the pod that owns it now.
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND resumed_at IS NOT NULL`, lost))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE id = $1`, lostJob))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND kind = 'run'`, lost))
	// Finished meanwhile: its continuations are dropped, nothing resumes.
	require.Zero(t, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND resumed_at IS NOT NULL`, finishedMeanwhile))
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1`, finishedMeanwhile))

	// The same batch again: every claim is gone, nothing changes.
	before := h.count(t, `SELECT count(*) FROM run_queue`)
	require.NoError(t, h.ex.ResumeBatch(ctx, jobs))
	require.Equal(t, before, h.count(t, `SELECT count(*) FROM run_queue`))

	// Run the rest: every execution but the failed one completes, each join exactly once.
	h.exec(t, `UPDATE run_queue SET visible_at = now()`)
	h.run(t)
	for _, id := range execs[:4] {
		h.waitStatus(t, id, "completed")
	}
	require.Equal(t, 4, h.fake.count("/join"))
	require.Zero(t, h.fake.count("/skip"))
}

// TestResumeUnitsNotThin: a few continuations due together, claimed with many free
// slots, go in one batch (one transaction), not one batch per continuation.
func TestResumeUnitsNotThin(t *testing.T) {
	t.Parallel()
	h := setup(t)
	ctx := context.Background()
	name := h.put(t, h.workflow("thin", []obj{
		node("w", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
	}, nil))
	stop := h.run(t)
	execs := make([]uuid.UUID, 5)
	for i := range execs {
		execs[i] = h.start(t, name, nil)
	}
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`) == len(execs)
	})
	stop() // from here on the test plays the pod
	for _, id := range execs {
		w := h.view(t, id).Waits[0]
		require.Equal(t, aggregator.Completed, h.applyQueued(t, id, w.CorrelationID, obj{}))
	}
	units, err := h.ex.ClaimUnits(ctx, 16)
	require.NoError(t, err)
	require.Len(t, units, 1, "five continuations, sixteen free slots: one batch")
	require.Len(t, units[0], len(execs))
	require.NoError(t, h.ex.ResumeBatch(ctx, units[0]))
	require.Equal(t, len(execs), h.count(t, `SELECT count(*) FROM executions WHERE status = 'completed'`))
	require.Equal(t, 0, h.count(t, `SELECT count(*) FROM run_queue`))
}
