package executor_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestContinueInDecidingTransaction: an event that completes a wait through Apply (a
// batch) continues the execution in its own transaction. With no worker running, the
// commit alone has marked the wait resumed and queued the next node; no continuation
// was ever queued.
func TestContinueInDecidingTransaction(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id, ws := h.waitThenAfter(t) // no worker from here on

	require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{}))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM execution_wait_states
		WHERE execution_id = $1 AND status = 'completed' AND resumed_by = 'a' AND resumed_at = updated_at`, id))
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue WHERE kind = 'resume'`))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND kind = 'run' AND node_id = 'after'`, id))
	require.Equal(t, vocab.NodeRunning, nodeOf(t, h.view(t, id), "after").Status)

	h.run(t)
	h.waitStatus(t, id, "completed")
	require.Equal(t, 1, h.fake.count("/after"))
	h.requireQueuesEmpty(t, id)
}

// TestSentEventContinuesInDecidingTransaction: an event sent by type that completes a
// wait continues the execution in Send's own transaction, as a batch does. With no
// worker running, the commit alone has marked the wait resumed and queued the next node;
// no continuation was ever queued.
func TestSentEventContinuesInDecidingTransaction(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.sentWaitThenAfter(t) // no worker from here on

	res := h.send(t, id, "go", obj{}, "")
	require.Equal(t, aggregator.SendDelivered, res.Outcome)
	require.False(t, res.Queued(), "nothing for the run queue to announce")
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM execution_wait_states
		WHERE execution_id = $1 AND status = 'completed' AND resumed_by = 'a' AND resumed_at = updated_at`, id))
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue WHERE kind = 'resume'`))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND kind = 'run' AND node_id = 'after'`, id))
	require.Equal(t, vocab.NodeRunning, nodeOf(t, h.view(t, id), "after").Status)

	h.run(t)
	h.waitStatus(t, id, "completed")
	require.Equal(t, 1, h.fake.count("/after"))
	h.requireQueuesEmpty(t, id)
}

// TestContinueFailureQueues: a continuation that fails inside the deciding transaction
// is queued instead; the event stays applied, the caller sees no error, and the queued
// continuation resumes the wait exactly once. A group of callbacks or sent events runs
// its continuation without a savepoint: the failure rolls back the whole transaction,
// and the group is decided again under one, where the same failure goes back to the
// savepoint. A Kafka batch (ApplyBatch) runs it under a savepoint from the start.
func TestContinueFailureQueues(t *testing.T) {
	t.Parallel()
	eachDecidingPath(t, []string{"apply", "send", "batch"}, func(t *testing.T, h *harness, id uuid.UUID, decide func() bool) {
		h.ex.SetContinueFault(func() error { return errors.New("injected") })
		require.True(t, decide(), "the event completes the wait")
		h.requireContinuationQueued(t, id)

		h.ex.SetContinueFault(nil)
		h.requireResumedOnce(t, id)
	})
}

// TestContinueFailureOnceContinuesOnSecondTry: a group whose continuation fails once,
// without a savepoint, is decided again from the start, and this time continues in its
// transaction: the event applied once (version 2, not 3), the wait resumed by the
// deciding transaction, no continuation queued, the next node running.
func TestContinueFailureOnceContinuesOnSecondTry(t *testing.T) {
	t.Parallel()
	eachDecidingPath(t, []string{"apply", "send"}, func(t *testing.T, h *harness, id uuid.UUID, decide func() bool) {
		var calls atomic.Int32
		h.ex.SetContinueFault(func() error {
			if calls.Add(1) == 1 {
				return errors.New("injected once")
			}
			return nil
		})
		require.True(t, decide(), "the event completes the wait")
		require.EqualValues(t, 2, calls.Load(), "the continuation ran twice: failed, then continued")
		h.ex.SetContinueFault(nil)
		h.requireContinuedOnSecondTry(t, id, 2)
	})
}

// TestSentEventWaitChangedBeforeItsWrite: a group of sent events makes its continuations
// before writing its waits, and sends the write, a check that every wait was written and
// the continuations' writes with its COMMIT. Here the wait changes (its version moves)
// after it was read and before that write: the fence misses, the check fails the whole
// transaction, and the group is decided again from the wait as it is now, this time
// under a savepoint, continuing the execution once. Without the check, the continuation
// would commit while the wait stayed open. The race lost is counted with the others
// (rendezvous.lock.conflicts) and logged at debug, as they are, not as a failure.
func TestSentEventWaitChangedBeforeItsWrite(t *testing.T) {
	t.Parallel()
	o, telemetry := withTelemetry(t)
	h := setup(t, telemetry)
	id := h.sentWaitThenAfter(t) // no worker from here on
	var starts atomic.Int32
	h.ex.SetContinueStart(func() {
		if starts.Add(1) == 1 {
			// Another transaction's change, committed while the group holds the wait as read.
			require.EqualValues(t, 1, h.exec(t, `UPDATE execution_wait_states SET version = version + 1 WHERE execution_id = $1`, id))
		}
	})

	res := h.send(t, id, "go", obj{}, "")
	require.Equal(t, aggregator.SendDelivered, res.Outcome)
	require.EqualValues(t, 2, starts.Load(), "made ahead of the write, then again under a savepoint")
	require.EqualValues(t, 1, counter(o.collect(t), "rendezvous.lock.conflicts"))
	lines := o.logs.find(t, "a wait changed between its read and its write; deciding the group again under a savepoint")
	require.Len(t, lines, 1)
	require.Equal(t, "DEBUG", lines[0]["level"])
	require.Contains(t, lines[0]["err"], "waits changed before their write: 0 of 1 written")
	require.Empty(t, o.logs.find(t, "a continuation failed without a savepoint; deciding the group again under one"))
	h.ex.SetContinueStart(nil)
	h.requireContinuedOnSecondTry(t, id, 3) // the other change, then the event
}

// requireContinuedOnSecondTry checks execution id — a wait node "wait" followed by an
// http node "after" — after a deciding transaction that failed once and was decided
// again: the event applied once (the wait at version), the wait resumed by the second
// try, no continuation queued, the next node running; then runs the pod and checks that
// "after" is called once and the execution completes.
func (h *harness) requireContinuedOnSecondTry(t *testing.T, id uuid.UUID, version int64) {
	t.Helper()
	w := h.waitRow(t, id, "wait")
	require.Equal(t, string(vocab.WaitCompleted), w.Status)
	require.EqualValues(t, version, w.Version, "the event is applied once")
	require.True(t, w.Resumed, "the second try continued the execution")
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue WHERE kind = 'resume'`))
	require.Equal(t, vocab.NodeRunning, nodeOf(t, h.view(t, id), "after").Status)

	h.run(t)
	h.waitStatus(t, id, "completed")
	require.Equal(t, 1, h.fake.count("/after"))
	h.requireQueuesEmpty(t, id)
}

// eachDecidingPath runs fn as a parallel subtest for each of paths (see decideThenAfter),
// each on a harness of its own, with an execution waiting and decide, which sends the
// event that completes its wait.
func eachDecidingPath(t *testing.T, paths []string, fn func(t *testing.T, h *harness, id uuid.UUID, decide func() bool)) {
	for _, path := range paths {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			id, decide := h.decideThenAfter(t, path)
			fn(t, h, id, decide)
		})
	}
}

// decideThenAfter starts an execution of a wait followed by an http node "after", stops
// the pod once it waits, and returns it with a function deciding the event that
// completes the wait, along path: Apply (a group of callbacks), Send (a group of sent
// events) or ApplyBatch (a Kafka batch, in a transaction of its own). The function
// reports whether the event completed the wait.
func (h *harness) decideThenAfter(t *testing.T, path string) (uuid.UUID, func() bool) {
	t.Helper()
	switch path {
	case "apply", "batch":
		id, ws := h.waitThenAfter(t)
		if path == "apply" {
			return id, func() bool {
				return h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{}) == aggregator.Completed
			}
		}
		return id, func() bool { return h.applyBatch(t, id, ws.CorrelationID, obj{}) == aggregator.Completed }
	default:
		id := h.sentWaitThenAfter(t)
		return id, func() bool {
			res := h.send(t, id, "go", obj{}, "")
			return res.Outcome == aggregator.SendDelivered && len(res.Deliveries) == 1 && res.Deliveries[0].Outcome == aggregator.Completed
		}
	}
}

// requireContinuationQueued checks execution id — a wait node "wait" followed by an http
// node "after" — after its continuation failed in the deciding transaction: the event
// applied once (version 2), the continuation's mark undone and the continuation queued,
// nothing of it left.
func (h *harness) requireContinuationQueued(t *testing.T, id uuid.UUID) {
	t.Helper()
	w := h.waitRow(t, id, "wait")
	require.Equal(t, string(vocab.WaitCompleted), w.Status)
	require.EqualValues(t, 2, w.Version, "the event is applied once")
	require.False(t, w.Resumed, "the failed continuation's mark is undone")
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND kind = 'resume'`, id))
	require.Equal(t, vocab.NodePending, nodeOf(t, h.view(t, id), "after").Status, "nothing of the continuation is left")
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue WHERE kind = 'run'`))
}

// requireResumedOnce runs the pod and checks that the queued continuation resumed the
// wait exactly once: "after" called once, the execution completed, the queues empty.
func (h *harness) requireResumedOnce(t *testing.T, id uuid.UUID) {
	t.Helper()
	h.run(t)
	h.waitStatus(t, id, "completed")
	require.Equal(t, 1, h.fake.count("/after"))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND resumed_by = 'a'`, id))
	h.requireQueuesEmpty(t, id)
}

// waitThenAfter starts an execution of a Kafka wait followed by an http node "after",
// and returns it with its wait once it waits, with the pod stopped.
func (h *harness) waitThenAfter(t *testing.T) (uuid.UUID, readmodel.WaitView) {
	t.Helper()
	name := h.put(t, h.workflow("then-after", []obj{
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("after", "http", obj{"url": "@{_vars.svc}/after"}),
	}, []obj{edge("wait", "after", "")}))
	stop := h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	stop()
	return id, ws
}

// sentWaitThenAfter starts an execution of a wait for an event of type "go" sent to it,
// followed by an http node "after", and returns it once it waits, with the pod stopped.
func (h *harness) sentWaitThenAfter(t *testing.T) uuid.UUID {
	t.Helper()
	name := h.put(t, h.workflow("sent-then-after", []obj{
		sendWait("wait", sendEv("go", "go")),
		node("after", "http", obj{"url": "@{_vars.svc}/after"}),
	}, []obj{edge("wait", "after", "")}))
	stop := h.run(t)
	id := h.start(t, name, nil)
	h.waitStatus(t, id, "waiting")
	stop()
	return id
}

// TestContinueWriteFailureWithCommitQueues: a group of callbacks or sent events sends its
// continuation's writes with its COMMIT. When one of them fails there, the whole
// transaction rolls back; the group is decided again with the writes sent before the
// COMMIT, where the same failure goes back to the savepoint and queues the continuation.
// The event is applied once (version 2, not 3), the caller sees no error, nothing of the
// failed continuation is left, and the queued one resumes the wait exactly once.
func TestContinueWriteFailureWithCommitQueues(t *testing.T) {
	t.Parallel()
	eachDecidingPath(t, []string{"apply", "send"}, func(t *testing.T, h *harness, id uuid.UUID, decide func() bool) {
		h.ex.SetContinueWriteFault(true)
		require.True(t, decide(), "the event is delivered and its continuation queued")
		h.requireContinuationQueued(t, id)

		h.ex.SetContinueWriteFault(false)
		h.requireResumedOnce(t, id)
	})
}
