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
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Redrive end to end: executions that failed — a wait timed out, a required call failed
// for good — are redriven and complete exactly once.

// redriveDef: a wait for the reply to a correlated call and a Kafka record (strategy
// all, onTimeout fail), then an http node that reports which execution went on.
func (h *harness) redriveDef(name string, timeoutSeconds int) obj {
	return h.workflow(name, []obj{
		node("wait", "wait_events", obj{
			"apiCall":    obj{"url": "@{_vars.svc}/process", "body": obj{"order": "@{_trigger.order}"}},
			"kafkaEvent": obj{"topic": "orders"},
			"timeout":    timeoutSeconds,
		}),
		node("after", "http", obj{"url": "@{_vars.svc}/after", "method": "POST", "body": obj{
			"execution_id": "@{_execution.id}", "reply": "@{nodes.wait.output.apiResponse.ok}",
		}}),
	}, []obj{edge("wait", "after", "")})
}

// TestRedriveTimedOutWait: the wait timed out with the Kafka record recorded and the
// reply missing, and the execution failed. The redrive reopens the wait — the record
// kept, fresh deadlines, nothing timed out, the call not sent again (it was answered) —
// and the reply, sent for the original wait, completes it: the execution goes on and
// completes, once. A second redrive, of a completed execution, is refused.
func TestRedriveTimedOutWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.redriveDef("redrive-timeout", 2))
	h.run(t)
	id := h.start(t, name, obj{"order": 1})
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))
	failed := h.waitStatus(t, id, "failed")
	before := h.waitRow(t, id, "wait")
	require.Equal(t, string(vocab.WaitTimeout), before.Status)
	require.Equal(t, []string{"api_response"}, before.TimedOut)
	require.Equal(t, vocab.NodeCancelled, nodeOf(t, failed, "after").Status)
	eventually(t, func() bool { return h.fake.count("/process") == 1 })

	redriven, err := h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, executor.Redriven{ExecutionID: id, Status: "waiting", RedriveCount: 1,
		Nodes: []executor.RedrivenNode{{ID: "wait", Action: executor.RedriveReopened}}}, redriven)

	v := h.view(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status)
	require.Nil(t, v.Error)
	require.Nil(t, v.FinishedAt)
	require.EqualValues(t, 1, v.RedriveCount)
	require.NotNil(t, v.RedrivenAt)
	require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "wait").Status)
	require.Equal(t, vocab.NodePending, nodeOf(t, v, "after").Status)
	w := waitOf(t, v, "wait")
	require.Equal(t, vocab.WaitWaiting, w.Status)
	require.Equal(t, ws.CorrelationID, w.CorrelationID, "the same wait, under the same correlation id")
	require.Len(t, w.ReceivedEvents, 1)
	require.Equal(t, aggregator.EventKafka, w.ReceivedEvents[0].Name, "what arrived is kept")
	require.Equal(t, []string{"api_response"}, w.MissingEvents, "only the reply is still missing")
	require.Empty(t, w.TimedOutEvents)
	require.Nil(t, w.ResumedAt)
	after := h.waitRow(t, id, "wait")
	require.Equal(t, before.Version+1, after.Version, "the reopen is one change")
	require.True(t, after.ExpiresAt.After(time.Now()), "fresh overall deadline")
	require.True(t, after.NextDeadlineAt.After(before.ExpiresAt))

	// The late reply applies to the reopened wait.
	require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"ok": "yes"}))
	v = h.waitStatus(t, id, "completed")
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "after").Status)
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 }, "the continuation ran twice")
	require.Equal(t, "yes", h.fake.requests("/after")[0].Body["reply"])
	require.Equal(t, 1, h.fake.count("/process"), "a call that was answered is not sent again")
	require.Equal(t, before.Version+2, h.waitRow(t, id, "wait").Version)
	h.requireQueuesEmpty(t, id)

	_, err = h.ex.Redrive(ctx, id)
	var notFailed *executor.ExecutionNotFailedError
	require.ErrorAs(t, err, &notFailed)
	require.Equal(t, vocab.ExecCompleted, notFailed.Status)
	_, err = h.ex.Redrive(ctx, uuid.New())
	require.ErrorIs(t, err, executor.ErrExecutionNotFound)
}

// TestRedriveFailedCall: the required call failed for good (the service was down), which
// failed the wait, the node and the execution. Once the service is back, a redrive sends
// the call again — the same request, under the same correlation id — and its reply
// completes the execution.
func TestRedriveFailedCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t, func(c *executor.Config) { c.OutboxMaxAttempts = 2 })
	var down sync.Mutex
	up := false
	h.fake.on("/process", func(int, recorded) reply {
		down.Lock()
		defer down.Unlock()
		if !up {
			return reply{status: 503, body: "down"}
		}
		return reply{status: 202, body: "{}"}
	})
	name := h.put(t, h.redriveDef("redrive-call", 60))
	h.run(t)
	id := h.start(t, name, obj{"order": 7})
	v := h.waitStatus(t, id, "failed")
	require.Equal(t, vocab.WaitFailed, waitOf(t, v, "wait").Status)
	require.Contains(t, errText(v.Error), "status 503")
	require.Equal(t, 2, h.fake.count("/process"))

	down.Lock()
	up = true
	down.Unlock()
	redriven, err := h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []executor.RedrivenNode{{ID: "wait", Action: executor.RedriveCallResent}}, redriven.Nodes)
	eventually(t, func() bool { return h.fake.count("/process") == 3 && h.count(t, `SELECT count(*) FROM outbox`) == 0 })
	reqs := h.fake.requests("/process")
	require.Equal(t, reqs[0].Body, reqs[2].Body, "the same request")
	require.Equal(t, reqs[0].Header.Get("Idempotency-Key"), reqs[2].Header.Get("Idempotency-Key"))
	require.Equal(t, vocab.ExecWaiting, h.view(t, id).Status)

	corr := waitOf(t, v, "wait").CorrelationID
	require.Equal(t, aggregator.Recorded, h.apply(t, id, corr, aggregator.EventAPIResponse, obj{"ok": "back"}))
	require.Equal(t, aggregator.Completed, h.apply(t, id, corr, aggregator.EventKafka, obj{"sku": "k-7"}))
	h.waitStatus(t, id, "completed")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 && h.fake.count("/process") == 3 })
	h.requireQueuesEmpty(t, id)
}

// TestRedriveFailedNodeRunsAgain: an http node that failed (the service answered 500 on
// every attempt) runs again from scratch, with fresh attempts; the wait before it, which
// completed, keeps its output and is not reopened.
func TestRedriveFailedNodeRunsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	var mu sync.Mutex
	fail := true
	h.fake.on("/after", func(int, recorded) reply {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return reply{status: 500, body: "boom"}
		}
		return reply{status: 200, body: `{"done":true}`}
	})
	name := h.put(t, h.redriveDef("redrive-node", 60))
	h.run(t)
	id := h.start(t, name, obj{"order": 3})
	corr := waitOf(t, h.waitStatus(t, id, "waiting"), "wait").CorrelationID
	require.Equal(t, aggregator.Recorded, h.apply(t, id, corr, aggregator.EventAPIResponse, obj{"ok": "first"}))
	require.Equal(t, aggregator.Completed, h.apply(t, id, corr, aggregator.EventKafka, obj{"sku": "k-3"}))
	v := h.waitStatus(t, id, "failed")
	require.Equal(t, vocab.NodeFailed, nodeOf(t, v, "after").Status)
	waitOutput := nodeOf(t, v, "wait").Output
	calls := h.fake.count("/after")
	version := h.waitRow(t, id, "wait").Version

	mu.Lock()
	fail = false
	mu.Unlock()
	redriven, err := h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []executor.RedrivenNode{{ID: "after", Action: executor.RedriveRun}}, redriven.Nodes)
	require.Equal(t, vocab.ExecRunning, redriven.Status)
	v = h.waitStatus(t, id, "completed")
	require.JSONEq(t, string(waitOutput), string(nodeOf(t, v, "wait").Output), "a completed node keeps its output")
	require.Equal(t, version, h.waitRow(t, id, "wait").Version, "a completed wait is not touched")
	require.Equal(t, calls+1, h.fake.count("/after"))
	require.EqualValues(t, 1, nodeOf(t, v, "after").Attempts-int32(calls), "one new attempt")
	h.requireQueuesEmpty(t, id)
}

// failedByTimeout starts n executions of redriveDef, records each one's Kafka record,
// moves the pod's clock (stub) on by the definition's timeout, and waits for all of
// them to fail by their deadline; it returns each execution's correlation id and the
// wait's version after the failure. The clock stays there, so the reopened waits'
// fresh deadlines do not pass while the test looks at them, however slow it runs.
func failedByTimeout(t *testing.T, h *harness, stub *clock.Stub, timeout time.Duration, name string, n int) (map[uuid.UUID]uuid.UUID, map[uuid.UUID]int64) {
	t.Helper()
	ctx := context.Background()
	// Started side by side: each start registers its wait, and every wait must still be
	// open when the last one registers.
	ids := make([]uuid.UUID, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() { ids[i] = h.start(t, name, obj{"order": i}) })
	}
	wg.Wait()
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`) == n
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
	for e, c := range corr {
		require.Equal(t, aggregator.Recorded, h.apply(t, e, c, aggregator.EventKafka, obj{"sku": e.String()}))
	}
	stub.Advance(timeout)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM executions WHERE status = 'failed'`) == n &&
			h.count(t, `SELECT count(*) FROM run_queue`) == 0
	}, "every execution fails by its deadline")
	versions := map[uuid.UUID]int64{}
	for e := range corr {
		versions[e] = h.waitRow(t, e, "wait").Version
	}
	return corr, versions
}

// TestRedriveConcurrentOperators: eight operators redrive each of 20 failed executions
// at once. Exactly one redrive of each wins; the others are told the execution is no
// longer failed. Counted in the database: one redrive per execution, one reopen of its
// wait (one version), and, once the replies arrive, one continuation.
func TestRedriveConcurrentOperators(t *testing.T) {
	t.Parallel()
	const n, operators = 20, 8
	ctx := context.Background()
	stub := clock.NewStub(time.Now())
	h := setup(t, func(c *executor.Config) { c.Clock = stub })
	name := h.put(t, h.redriveDef("redrive-operators", 3))
	h.run(t)
	corr, versions := failedByTimeout(t, h, stub, 3*time.Second, name, n)

	wins := map[uuid.UUID]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for id := range corr {
		for range operators {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, err := h.ex.Redrive(ctx, id)
				var notFailed *executor.ExecutionNotFailedError
				switch {
				case err == nil:
					mu.Lock()
					wins[id]++
					mu.Unlock()
				case errors.As(err, &notFailed):
					if notFailed.Status != "waiting" {
						t.Errorf("a losing redrive found %s waiting, not %s", id, notFailed.Status)
					}
				default:
					assertNoError(t, err)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for id, c := range corr {
		require.Equal(t, 1, wins[id], "redrives of %s that won", id)
		require.Equal(t, 1, h.count(t, `SELECT redrive_count FROM executions WHERE id = $1`, id))
		require.Equal(t, versions[id]+1, h.waitRow(t, id, "wait").Version, "one reopen of %s", id)
		// The reply completes the reopened wait; the redrive must not have left a
		// deadline that ends it first, nor a second wait.
		require.Equal(t, aggregator.Completed, h.apply(t, id, c, aggregator.EventAPIResponse, obj{"ok": "yes"}))
	}
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM executions WHERE status = 'completed'`) == n
	}, "every execution completes")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == n })
	after := h.fake.countBy("/after", "execution_id")
	for id := range corr {
		require.Equal(t, 1, after[id.String()], "continuations of %s", id)
	}
	require.Equal(t, n, h.count(t, `SELECT count(*) FROM execution_wait_states`), "one wait per execution")
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
	require.Equal(t, n, h.fake.count("/process"), "no call sent again")
}

// TestRedriveRacesLateEvent: the missing reply of each of 30 timed-out executions
// arrives while an operator redrives it. The reply either comes before the redrive
// commits — then it finds the wait timed out and is late, recording nothing, and its
// producer's retry applies to the reopened wait — or after, and applies at once. Either
// way each wait records the reply once, counts exactly two changes since it failed (the
// reopen and the reply), and each execution continues once.
func TestRedriveRacesLateEvent(t *testing.T) {
	t.Parallel()
	const n = 30
	ctx := context.Background()
	stub := clock.NewStub(time.Now())
	h := setup(t, func(c *executor.Config) { c.Clock = stub })
	name := h.put(t, h.redriveDef("redrive-race", 3))
	h.run(t)
	corr, versions := failedByTimeout(t, h, stub, 3*time.Second, name, n)

	type result struct {
		redriveErr error
		first      aggregator.Outcome
		retry      aggregator.Outcome
		applyErr   error
	}
	var mu sync.Mutex
	results := map[uuid.UUID]*result{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	i := 0
	for id, c := range corr {
		r := &result{}
		results[id] = r
		// Spread the redrives over a few milliseconds so both orders get their share.
		delay := time.Duration(0)
		if i%2 == 1 {
			delay = rand.N(5 * time.Millisecond)
		}
		i++
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(delay)
			_, err := h.ex.Redrive(ctx, id)
			mu.Lock()
			r.redriveErr = err
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			<-start
			ev := aggregator.Event{ExecutionID: id, CorrelationID: c, Name: aggregator.EventAPIResponse,
				Payload: []byte(`{"ok":"yes"}`), Source: aggregator.Source{Kind: aggregator.SourceCallback}}
			res, err := h.agg.Apply(ctx, ev)
			mu.Lock()
			r.first, r.applyErr = res.Outcome, err
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()

	var late, applied int
	for id, r := range results {
		require.NoError(t, r.redriveErr)
		require.NoError(t, r.applyErr)
		switch r.first {
		case aggregator.Completed:
			applied++
		case aggregator.Late:
			// The producer retries, as a callback sender or a redelivery would.
			late++
			r.retry = h.apply(t, id, corr[id], aggregator.EventAPIResponse, obj{"ok": "yes"})
			require.Equal(t, aggregator.Completed, r.retry, "the retry of %s", id)
		default:
			require.Failf(t, "unexpected outcome", "%s: %s", id, r.first)
		}
	}
	t.Logf("reply before the redrive (late, then retried): %d, after: %d", late, applied)

	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM executions WHERE status = 'completed'`) == n
	}, "every execution completes")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == n })
	after := h.fake.countBy("/after", "execution_id")
	for id := range corr {
		require.Equal(t, 1, after[id.String()], "continuations of %s", id)
		row := h.waitRow(t, id, "wait")
		require.Equal(t, string(vocab.WaitCompleted), row.Status)
		require.Equal(t, versions[id]+2, row.Version, "reopen and reply of %s, nothing else", id)
		require.Equal(t, 1, h.count(t, `SELECT count(*) FROM execution_wait_states w, json_array_elements(w.received_events) r
			WHERE w.execution_id = $1 AND r->>'name' = 'api_response'`, id), "the reply of %s recorded once", id)
		require.Equal(t, 1, h.count(t, `SELECT redrive_count FROM executions WHERE id = $1`, id))
	}
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
}

// TestRedriveFencesStaleClaim: a replica claimed a node of the execution and stalled
// (killed, or paused past its lease) while the execution failed. The redrive queues the
// node again; when the stalled replica comes back and finishes, its commit misses the
// fence (its queue row went with the failure) and records nothing. Another replica runs
// the node once more, and the execution completes once.
func TestRedriveFencesStaleClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.workflow("redrive-stale", []obj{
		node("slow", "http", obj{"url": "@{_vars.svc}/slow", "method": "POST"}),
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}, "timeout": 600}),
		node("after", "http", obj{"url": "@{_vars.svc}/after", "method": "POST"}),
	}, []obj{edge("slow", "after", ""), edge("wait", "after", "")}))
	id := h.start(t, name, nil) // the root wait registers in the start's transaction
	jobs, err := h.ex.ClaimRun(ctx, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "slow", jobs[0].NodeID)
	const slow = 0
	require.NoError(t, h.ex.CancelWait(ctx, id, "wait", executor.ThenFail, "operator"))
	require.Equal(t, vocab.ExecFailed, h.view(t, id).Status)

	redriven, err := h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	require.ElementsMatch(t, []executor.RedrivenNode{{ID: "slow", Action: executor.RedriveRun}, {ID: "wait", Action: executor.RedriveReopened}}, redriven.Nodes)

	// The stalled replica finishes the node it claimed before the failure.
	require.ErrorIs(t, h.ex.RunJob(ctx, jobs[slow]), executor.ErrLeaseLost)
	require.Equal(t, 1, h.fake.count("/slow"), "its call was made")
	require.Equal(t, vocab.NodeRunning, nodeOf(t, h.view(t, id), "slow").Status, "but nothing of it recorded")

	newPod(t, h.pool, config(t, "b")).run(t)
	corr := waitOf(t, h.view(t, id), "wait").CorrelationID
	require.Equal(t, aggregator.Completed, h.apply(t, id, corr, aggregator.EventKafka, obj{"ok": true}))
	v := h.waitStatus(t, id, "completed")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 }, "the execution went on twice")
	require.Equal(t, 2, h.fake.count("/slow"))
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "slow").Status)
	require.EqualValues(t, 1, v.RedriveCount)
	h.requireQueuesEmpty(t, id)
}

// TestRedriveCancelledTimerRunsAgain: a timer cancelled to fail leaves its node failed in
// the wait's row, the node's own row still reading as it did while scheduled. A timer
// is not reopened: the redrive hands the node back to the graph (pending), deletes the
// finished timer, and the node runs from scratch, scheduling a new one.
func TestRedriveCancelledTimerRunsAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.timerFlow("redrive-timer", obj{"for": "1h"}))
	h.run(t)
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND status = 'scheduled'`, id) == 1
	}, "the timer is scheduled")
	waitID := func() (wait string) {
		require.NoError(t, h.pool.QueryRow(ctx, `SELECT id::text FROM execution_wait_states WHERE execution_id = $1`, id).Scan(&wait))
		return wait
	}
	first := waitID()
	require.NoError(t, h.ex.CancelWait(ctx, id, "pause", executor.ThenFail, "operator"))
	v := h.waitStatus(t, id, "failed")
	require.Equal(t, vocab.NodeFailed, nodeOf(t, v, "pause").Status)

	redriven, err := h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, []executor.RedrivenNode{{ID: "pause", Action: executor.RedriveRun}}, redriven.Nodes)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND status = 'scheduled'`, id) == 1
	}, "the node scheduled a new timer")
	require.NotEqual(t, first, waitID())
	v = h.view(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status)
	require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "pause").Status)
	require.EqualValues(t, 2, nodeOf(t, v, "pause").Attempts)
}
