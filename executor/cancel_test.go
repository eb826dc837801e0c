package executor_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// slowRetries keeps a retried outbox row or node attempt queued for at least 30 s
// (backoff with full jitter of a 1 min delay), so that the test can see it dropped.
func slowRetries(c *executor.Config) {
	c.OutboxBackoffMin, c.OutboxBackoffMax = time.Minute, time.Minute
}

// TestCancelExecution cancels an execution that has everything going at once: a wait
// whose correlated call is queued for a retry, a parallel node queued for a retry, and
// a node behind the wait. Everything stops and stays stopped; a late event is late;
// cancelling again changes nothing.
func TestCancelExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t, slowRetries)
	h.fake.on("/process", func(int, recorded) reply { return reply{status: 503} })
	h.fake.on("/side", func(int, recorded) reply { return reply{status: 200, delay: 10 * time.Second} })
	name := h.put(t, h.workflow("cancel", []obj{
		node("wait", "wait_events", obj{
			"apiCall":    obj{"url": "@{_vars.svc}/process"},
			"kafkaEvent": obj{"topic": "orders"},
		}),
		node("after", "http", obj{"url": "@{_vars.svc}/after"}),
		node("side", "http", obj{"url": "@{_vars.svc}/side", "timeout": 0.2}),
	}, []obj{edge("wait", "after", "")}))
	h.run(t)
	id := h.start(t, name, nil)

	// The call failed once (503) and waits for its retry; side's first attempt reached
	// the service and, timed out or about to, holds its row for a lease or a backoff.
	// A claim alone also pushes visible_at out, before its request is sent: hence the
	// request counts, without which a request sent after the cancel could be one of
	// these.
	eventually(t, func() bool {
		return h.fake.count("/process") == 1 && h.fake.count("/side") == 1 &&
			h.count(t, `SELECT count(*) FROM outbox WHERE execution_id = $1 AND attempt = 1
			AND visible_at > now() + interval '10 seconds'`, id) == 1 &&
			h.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1 AND node_id = 'side'
			AND visible_at > now() + interval '10 seconds'`, id) == 1
	}, "the call and the side node never got queued for a retry")
	before := h.view(t, id)
	ws := waitOf(t, before, "wait")
	require.Equal(t, vocab.WaitWaiting, ws.Status)
	require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))
	sent := h.fake.count("/process") + h.fake.count("/side")

	exec, err := h.ex.CancelExecution(ctx, id, "operator request")
	require.NoError(t, err)
	require.Equal(t, vocab.ExecCancelled, exec.Status)
	require.Equal(t, "operator request", errText(exec.Error))
	require.NotNil(t, exec.FinishedAt)

	v := h.view(t, id)
	require.Equal(t, vocab.ExecCancelled, v.Status)
	require.Equal(t, "operator request", errText(v.Error))
	for _, n := range []string{"wait", "after", "side"} {
		require.Equal(t, vocab.NodeCancelled, nodeOf(t, v, n).Status, n)
		require.Equal(t, "execution cancelled: operator request", errText(nodeOf(t, v, n).Error), n)
		require.NotNil(t, nodeOf(t, v, n).FinishedAt, n)
	}
	w := waitOf(t, v, "wait")
	require.Equal(t, vocab.WaitCancelled, w.Status)
	require.Equal(t, "execution cancelled: operator request", errText(w.Error))
	require.Equal(t, ws.Version+2, w.Version, "one bump for the event, one for the cancel")
	require.Len(t, w.ReceivedEvents, 1, "what arrived before stays recorded")
	require.Nil(t, w.ResumedAt)
	h.requireQueuesEmpty(t, id)

	// Events for the cancelled wait are late, whether new or not.
	require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "approved"}))
	require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-2"}))

	// Cancelling again is a no-op: same reason, nothing written.
	again, err := h.ex.CancelExecution(ctx, id, "second thoughts")
	require.NoError(t, err)
	require.Equal(t, vocab.ExecCancelled, again.Status)
	require.Equal(t, "operator request", errText(again.Error))
	require.Equal(t, exec.UpdatedAt, again.UpdatedAt)
	require.Equal(t, *exec.FinishedAt, *again.FinishedAt)

	stays(t, 300*time.Millisecond, func() bool {
		return h.fake.count("/after") == 0 && h.fake.count("/process")+h.fake.count("/side") == sent
	}, "something ran after the cancel")
	v2 := h.view(t, id)
	require.Equal(t, v.UpdatedAt, v2.UpdatedAt)
	require.Equal(t, w.Version, waitOf(t, v2, "wait").Version)
	h.requireQueuesEmpty(t, id)

	_, err = h.ex.CancelExecution(ctx, uuid.New(), "")
	require.ErrorIs(t, err, executor.ErrExecutionNotFound)
}

// TestCancelFinishedExecution: completed and failed executions cannot be cancelled and
// stay as they are.
func TestCancelFinishedExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.workflow("quick", []obj{node("n", "wait_events", obj{})}, nil))
	broken := h.put(t, h.workflow("broken", []obj{node("n", "http", obj{"url": "@{_vars.svc}/@{_trigger.missing}"})}, nil))
	h.run(t)
	for status, wf := range map[vocab.ExecutionStatus]string{vocab.ExecCompleted: name, vocab.ExecFailed: broken} {
		id := h.start(t, wf, obj{})
		v := h.waitStatus(t, id, status)
		_, err := h.ex.CancelExecution(ctx, id, "too late")
		var fin *executor.ExecutionFinishedError
		require.ErrorAs(t, err, &fin, status)
		require.Equal(t, status, fin.Status)
		after := h.view(t, id)
		require.Equal(t, status, after.Status)
		require.Equal(t, v.Error, after.Error)
		require.Equal(t, v.UpdatedAt, after.UpdatedAt)
		require.Equal(t, string(status), string(nodeOf(t, after, "n").Status))
	}
}

// TestCancelWait cancels one wait of a running execution.
func TestCancelWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// then fail: the node and the execution fail with the reason; nothing runs after.
	t.Run("then fail", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, h.workflow("cwfail", []obj{
			node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
			node("after", "http", obj{"url": "@{_vars.svc}/after"}),
		}, []obj{edge("wait", "after", "")}))
		h.run(t)
		id := h.start(t, name, nil)
		ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")

		require.NoError(t, h.ex.CancelWait(ctx, id, "wait", executor.ThenFail, "no longer needed"))
		v := h.view(t, id)
		require.Equal(t, vocab.ExecFailed, v.Status)
		require.Equal(t, "node wait: no longer needed", errText(v.Error))
		require.NotNil(t, v.FinishedAt)
		require.Equal(t, vocab.NodeFailed, nodeOf(t, v, "wait").Status)
		require.Equal(t, "no longer needed", errText(nodeOf(t, v, "wait").Error))
		w := waitOf(t, v, "wait")
		require.Equal(t, vocab.WaitCancelled, w.Status)
		require.Equal(t, "no longer needed", errText(w.Error))
		require.Nil(t, w.ResumedAt)
		h.requireQueuesEmpty(t, id)

		require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))
		stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 0 })
		require.NotEqual(t, vocab.NodeCompleted, nodeOf(t, h.view(t, id), "after").Status)

		// The execution is finished now: neither can be cancelled again.
		var fin *executor.ExecutionFinishedError
		require.ErrorAs(t, h.ex.CancelWait(ctx, id, "wait", executor.ThenFail, ""), &fin)
		require.Equal(t, vocab.ExecFailed, fin.Status)
		_, err := h.ex.CancelExecution(ctx, id, "")
		require.ErrorAs(t, err, &fin)
		require.Equal(t, vocab.ExecFailed, fin.Status)
	})

	// then continue: the node completes with what arrived so far and cancelled: true, the
	// unsent call is dropped, and the workflow goes on along the edge for cancelled waits.
	t.Run("then continue", func(t *testing.T) {
		t.Parallel()
		h := setup(t, slowRetries)
		h.fake.on("/process", func(int, recorded) reply { return reply{status: 503} })
		name := h.put(t, h.workflow("cwcontinue", []obj{
			node("wait", "wait_events", obj{
				"apiCall":    obj{"url": "@{_vars.svc}/process"},
				"kafkaEvent": obj{"topic": "orders"},
			}),
			node("after", "http", obj{"url": "@{_vars.svc}/after", "method": "POST", "body": obj{
				"cancelled": "@{nodes.wait.output.cancelled}", "sku": "@{nodes.wait.output.kafkaEvent.sku}",
			}}),
			node("normal", "http", obj{"url": "@{_vars.svc}/normal"}),
		}, []obj{
			edge("wait", "after", "output.cancelled == true && output.timeout == false"),
			edge("wait", "normal", "output.cancelled != true"),
		}))
		h.run(t)
		id := h.start(t, name, nil)
		ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
		require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))
		// Sent once (503), and queued for a retry with the error. visible_at alone is not
		// enough: the claim also pushes it ahead, before the call is even sent.
		eventually(t, func() bool {
			return h.fake.count("/process") == 1 && h.count(t, `SELECT count(*) FROM outbox WHERE execution_id = $1 AND attempt = 1
				AND last_error IS NOT NULL AND visible_at > now() + interval '10 seconds'`, id) == 1
		}, "the call was never queued for a retry")

		require.NoError(t, h.ex.CancelWait(ctx, id, "wait", executor.ThenContinue, ""))
		require.Zero(t, h.count(t, `SELECT count(*) FROM outbox WHERE execution_id = $1`, id), "the unsent call is dropped with the wait")
		v := h.waitStatus(t, id, "completed")
		n := nodeOf(t, v, "wait")
		require.Equal(t, vocab.NodeCompleted, n.Status)
		out := output(t, n)
		require.Equal(t, true, out["cancelled"])
		require.Equal(t, false, out["timeout"])
		require.Equal(t, obj{"sku": "k-1"}, out["kafkaEvent"])
		require.Contains(t, out, "apiResponse")
		require.Nil(t, out["apiResponse"])
		require.Equal(t, []any{"kafka_event"}, out["arrival_order"])
		require.Equal(t, []any{"api_response"}, out["missing_required_events"], "cut short before the required reply came")
		require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "after").Status)
		require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, "normal").Status)
		stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 && h.fake.count("/normal") == 0 })
		require.Equal(t, obj{"cancelled": true, "sku": "k-1"}, h.fake.requests("/after")[0].Body)
		require.Equal(t, 1, h.fake.count("/process"), "the dropped call was not retried")

		w := waitOf(t, v, "wait")
		require.Equal(t, vocab.WaitCancelled, w.Status)
		require.Equal(t, "wait cancelled", errText(w.Error), "the default reason")
		require.Nil(t, v.Error)
		h.requireQueuesEmpty(t, id)
		require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "approved"}))
	})

	// Errors leave the execution as it was.
	t.Run("errors", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, h.workflow("cwerrors", []obj{
			node("w1", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
			node("w2", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
			node("join", "http", obj{"url": "@{_vars.svc}/join"}),
		}, []obj{edge("w1", "join", ""), edge("w2", "join", "")}))
		h.run(t)
		id := h.start(t, name, nil)
		eventually(t, func() bool {
			return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND status = 'waiting'`, id) == 2
		})
		v := h.view(t, id)
		require.Equal(t, aggregator.Completed, h.apply(t, id, waitOf(t, v, "w1").CorrelationID, aggregator.EventKafka, obj{}))

		var wfin *aggregator.WaitFinishedError
		require.ErrorAs(t, h.ex.CancelWait(ctx, id, "w1", executor.ThenFail, ""), &wfin)
		require.Equal(t, vocab.WaitCompleted, wfin.Status)
		require.ErrorIs(t, h.ex.CancelWait(ctx, id, "join", executor.ThenFail, ""), executor.ErrWaitNotFound, "a node without a wait")
		require.ErrorIs(t, h.ex.CancelWait(ctx, id, "ghost", executor.ThenFail, ""), executor.ErrWaitNotFound)
		require.ErrorIs(t, h.ex.CancelWait(ctx, uuid.New(), "w1", executor.ThenFail, ""), executor.ErrExecutionNotFound)
		err := h.ex.CancelWait(ctx, id, "w2", "maybe", "")
		require.ErrorContains(t, err, "then")
		require.NotErrorIs(t, err, executor.ErrWaitNotFound)

		// w1's continuation ran; w2 is untouched and still takes its event.
		eventually(t, func() bool { return h.waitRow(t, id, "w1").Resumed })
		v = h.view(t, id)
		require.Equal(t, vocab.ExecWaiting, v.Status)
		require.Equal(t, vocab.WaitCompleted, waitOf(t, v, "w1").Status)
		require.Equal(t, vocab.WaitWaiting, waitOf(t, v, "w2").Status)
		require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "w2").Status)
		require.Equal(t, aggregator.Completed, h.apply(t, id, waitOf(t, v, "w2").CorrelationID, aggregator.EventKafka, obj{}))
		h.waitStatus(t, id, "completed")
		require.Equal(t, 1, h.fake.count("/join"))
	})
}

// TestCancelExecutionRacesEvent: for each of many waiting executions, one goroutine
// cancels it while another applies the event that completes its wait, released
// together. Either may come first, and the aggregator and the executor lock different
// rows, so the test checks only what must hold in every interleaving.
func TestCancelExecutionRacesEvent(t *testing.T) {
	t.Parallel()
	const n = 50
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.workflow("race", []obj{
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		// Completes at once when it runs, with no outside effect: "after completed" is
		// exactly "the workflow went on past the wait".
		node("after", "wait_events", obj{}),
	}, []obj{edge("wait", "after", "")}))
	h.run(t)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = h.start(t, name, nil)
	}
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM executions WHERE status = 'waiting'`) == n
	}, "every execution waits")
	corr := map[uuid.UUID]uuid.UUID{}
	rows, err := h.pool.Query(ctx, `SELECT execution_id, correlation_id FROM execution_wait_states`)
	require.NoError(t, err)
	for rows.Next() {
		var e, c uuid.UUID
		require.NoError(t, rows.Scan(&e, &c))
		corr[e] = c
	}
	require.NoError(t, rows.Err())
	require.Len(t, corr, n)

	type result struct {
		cancelErr error
		outcome   aggregator.Outcome
		applyErr  error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range ids {
		// Released together, a cancel nearly always beats the event (Apply queues for a
		// group commit). A third of the cancels leave at once, a third within 5 ms, a
		// third within 400 ms, so every interleaving gets its share: cancel first, event
		// first and the cancel before the continuation ran, and the execution completed
		// before the cancel.
		delay := [3]time.Duration{0, 5 * time.Millisecond, 400 * time.Millisecond}[i%3]
		if delay > 0 {
			delay = rand.N(delay)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(delay)
			_, results[i].cancelErr = h.ex.CancelExecution(ctx, id, "race")
		}()
		go func() {
			defer wg.Done()
			<-start
			res, err := h.agg.Apply(ctx, aggregator.Event{
				ExecutionID: id, CorrelationID: corr[id], Name: aggregator.EventKafka,
				Payload: []byte(`{"ok":true}`), Source: aggregator.Source{Kind: "kafka", Topic: "orders"},
			})
			results[i].outcome, results[i].applyErr = res.Outcome, err
		}()
	}
	close(start)
	wg.Wait()

	// Whatever the order, every execution ends, and nothing is left queued for it.
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM executions WHERE status IN ('completed', 'cancelled')`) == n &&
			h.count(t, `SELECT count(*) FROM run_queue`) == 0
	}, "executions left unfinished")
	stays(t, 200*time.Millisecond, func() bool { return h.count(t, `SELECT count(*) FROM run_queue`) == 0 })

	var lateCancelled, completedCancelled, completedCompleted int
	for i, id := range ids {
		r := results[i]
		var execStatus, waitStatus, waitNode, afterNode string
		var received int
		var resumed bool
		require.NoError(t, h.pool.QueryRow(ctx, `
			SELECT e.status, w.status, json_array_length(w.received_events), w.resumed_at IS NOT NULL, nw.status, na.status
			FROM executions e
			JOIN execution_wait_states w ON w.execution_id = e.id
			JOIN node_executions nw ON nw.execution_id = e.id AND nw.node_id = 'wait'
			JOIN node_executions na ON na.execution_id = e.id AND na.node_id = 'after'
			WHERE e.id = $1`, id).Scan(&execStatus, &waitStatus, &received, &resumed, &waitNode, &afterNode))
		state := func() string {
			return "cancel: " + errString(r.cancelErr) + ", event: " + string(r.outcome) + ", execution " + execStatus +
				", wait " + waitStatus + ", wait node " + waitNode + ", after " + afterNode
		}

		// Neither call fails: the cancel either cancels or finds the execution completed;
		// the event either completes the wait or finds it cancelled.
		require.NoError(t, r.applyErr, state())
		require.Contains(t, []aggregator.Outcome{aggregator.Completed, aggregator.Late}, r.outcome, state())
		var fin *executor.ExecutionFinishedError
		require.True(t, r.cancelErr == nil || errors.As(r.cancelErr, &fin), state())

		switch {
		case r.cancelErr == nil:
			// The cancel won the execution: it is cancelled, and the workflow never went
			// past the wait ("never both"). The event may still have completed the wait
			// (and even been resumed) before the cancel took the execution's lock.
			require.Equal(t, "cancelled", execStatus, state())
			require.Equal(t, "cancelled", afterNode, state())
			if r.outcome == aggregator.Late {
				// Cancel first: the event found the wait cancelled, recorded nothing,
				// and no continuation ever ran.
				require.Equal(t, string(vocab.WaitCancelled), waitStatus, state())
				require.Equal(t, "cancelled", waitNode, state())
				require.Zero(t, received, state())
				require.False(t, resumed, state())
				lateCancelled++
			} else {
				// Event first: the wait completed with it, and stays completed.
				require.Equal(t, string(vocab.WaitCompleted), waitStatus, state())
				require.Equal(t, "completed", waitNode, state())
				require.Equal(t, 1, received, state())
				completedCancelled++
			}
		default:
			// The cancel came after the execution had completed: the event won
			// everything, and the execution went all the way ("never neither").
			require.Equal(t, vocab.ExecCompleted, fin.Status, state())
			require.Equal(t, aggregator.Completed, r.outcome, state())
			require.Equal(t, "completed", execStatus, state())
			require.Equal(t, string(vocab.WaitCompleted), waitStatus, state())
			require.True(t, resumed, state())
			require.Equal(t, "completed", afterNode, state())
			completedCompleted++
		}
		// A Late event always means the cancel got there first.
		if r.outcome == aggregator.Late {
			require.NoError(t, r.cancelErr, state())
		}
	}
	t.Logf("cancel first: %d, event first then cancelled: %d, completed before the cancel: %d",
		lateCancelled, completedCancelled, completedCompleted)
	require.Zero(t, h.count(t, `SELECT count(*) FROM outbox`))
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestCancelExecutionWhileResuming: a cancel and the resume of the same execution's
// continuation meet. The resume's claim is taken first (its run-queue row deleted),
// then the cancel locks the execution and must drop the execution's queued work, while
// the resume waits for the execution's lock. Neither may fail: the cancel must cancel,
// and the resume must find the execution cancelled.
//
// The test holds the run-queue row for a moment (FOR UPDATE in a transaction of its
// own) so that both arrive in this order deterministically.
func TestCancelExecutionWhileResuming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.workflow("cancelresume", []obj{
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("after", "wait_events", obj{}),
	}, []obj{edge("wait", "after", "")}))
	stop := h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	stop() // from here on the test plays the pod
	require.Equal(t, aggregator.Completed, h.applyQueued(t, id, ws.CorrelationID, obj{}))
	jobs, err := h.ex.ClaimRun(ctx, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, vocab.KindResume, jobs[0].Kind)

	tx, err := h.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var holder int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	_, err = tx.Exec(ctx, `SELECT 1 FROM run_queue WHERE id = $1 FOR UPDATE`, jobs[0].ID)
	require.NoError(t, err)
	blockedBy := func(pids ...int) int {
		return h.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1::int[]`, pids)
	}

	resumeErr := make(chan error, 1)
	go func() { resumeErr <- h.ex.ResumeBatch(ctx, jobs) }()
	var resumer int
	eventually(t, func() bool {
		return h.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&resumer) == nil
	}, "the resume never reached the run-queue row")
	cancelErr := make(chan error, 1)
	go func() { _, err := h.ex.CancelExecution(ctx, id, "while resuming"); cancelErr <- err }()
	eventually(t, func() bool { return blockedBy(holder, resumer) == 2 }, "the cancel never blocked")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, <-cancelErr, "the cancel failed")
	require.NoError(t, <-resumeErr, "the resume failed")
	v := h.view(t, id)
	require.Equal(t, vocab.ExecCancelled, v.Status)
	require.NotEqual(t, vocab.NodeCompleted, nodeOf(t, v, "after").Status)
	h.requireQueuesEmpty(t, id)
}

// TestCancelExecutionWhileEventCompletes: a cancel meets the event that completes the
// execution's wait. The event's transaction has locked the execution, written the wait
// completed and goes on to continue the execution in the same transaction; the cancel
// waits for the execution's lock. Neither may fail: the event completed the wait first,
// so the cancel must find it completed and cancel the execution anyway, the next node
// the continuation reached included.
//
// The test holds the next node's row for a moment (FOR UPDATE in a transaction of its
// own: the continuation moves that node after the wait is written) so that both arrive
// in this order deterministically.
func TestCancelExecutionWhileEventCompletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.workflow("cancelevent", []obj{
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("after", "wait_events", obj{}),
	}, []obj{edge("wait", "after", "")}))
	stop := h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	stop() // from here on the test plays the pod

	tx, err := h.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var holder int
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	_, err = tx.Exec(ctx, `SELECT 1 FROM node_execution_rows WHERE execution_id = $1 AND node_id = 'after' FOR UPDATE`, id)
	require.NoError(t, err)

	type applied struct {
		res aggregator.Result
		err error
	}
	applyDone := make(chan applied, 1)
	go func() {
		res, err := h.agg.Apply(ctx, aggregator.Event{
			ExecutionID: id, CorrelationID: ws.CorrelationID, Name: aggregator.EventKafka,
			Payload: []byte(`{}`), Source: aggregator.Source{Kind: "kafka", Topic: "orders"},
		})
		applyDone <- applied{res, err}
	}()
	var applier int
	eventually(t, func() bool {
		return h.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&applier) == nil
	}, "the event never reached the next node's row")
	cancelErr := make(chan error, 1)
	go func() { _, err := h.ex.CancelExecution(ctx, id, "while completing"); cancelErr <- err }()
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM pg_stat_activity WHERE pg_blocking_pids(pid) && $1::int[]`, []int{holder, applier}) == 2
	}, "the cancel never blocked")
	require.NoError(t, tx.Rollback(ctx))

	a := <-applyDone
	require.NoError(t, a.err, "the event failed")
	require.Equal(t, aggregator.Completed, a.res.Outcome)
	require.NoError(t, <-cancelErr, "the cancel failed")
	v := h.view(t, id)
	require.Equal(t, vocab.ExecCancelled, v.Status)
	require.Equal(t, vocab.WaitCompleted, waitOf(t, v, "wait").Status)
	require.Equal(t, vocab.NodeCancelled, nodeOf(t, v, "after").Status)
	h.requireQueuesEmpty(t, id)
}
