package executor_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestWaitAllThenContinue is the whole path: a wait for an API reply and a Kafka record
// (strategy all), both applied through the aggregator, then an http node that gets the
// aggregated output through templates and runs exactly once.
func TestWaitAllThenContinue(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("full", []obj{
		node("wait", "wait_events", obj{
			"apiCall":             obj{"url": "@{_vars.svc}/process", "body": obj{"order": "@{_trigger.order}"}},
			"kafkaEvent":          obj{"topic": "orders"},
			"aggregationStrategy": "all",
		}),
		node("notify", "http", obj{
			"url":     "@{_vars.svc}/done",
			"method":  "POST",
			"headers": obj{"X-Result": "r=@{nodes.wait.output.apiResponse.result}"},
			"body": obj{
				"execution_id": "@{_execution.id}",
				"result":       "@{nodes.wait.output.apiResponse.result}",
				"kafka":        "@{nodes.wait.output.kafkaEvent}",
				"order":        "@{nodes.wait.output.arrival_order}",
				"input":        "@{_trigger.order}",
			},
		}),
	}, []obj{edge("wait", "notify", "output.timeout == false")}))
	h.run(t)
	id := h.start(t, name, obj{"order": 42})

	v := h.waitStatus(t, id, "waiting")
	ws := waitOf(t, v, "wait")
	require.Equal(t, []string{aggregator.EventAPIResponse, aggregator.EventKafka}, ws.EnabledEvents)
	require.Equal(t, []string{aggregator.EventAPIResponse, aggregator.EventKafka}, ws.RequiredEvents)
	eventually(t, func() bool { return h.fake.count("/process") == 1 })

	// One event is not enough for "all".
	require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"amount": 12.5, "sku": "k-1"}))
	stays(t, 200*time.Millisecond, func() bool { return h.view(t, id).Status == "waiting" && h.fake.count("/done") == 0 })

	require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "approved"}))
	v = h.waitStatus(t, id, "completed")
	require.NotNil(t, v.FinishedAt)
	require.Nil(t, v.Error)

	// The continuation ran once, with the aggregated output.
	eventually(t, func() bool { return h.fake.count("/done") == 1 })
	done := h.fake.requests("/done")[0]
	require.Equal(t, http.MethodPost, done.Method)
	require.Equal(t, "r=approved", done.Header.Get("X-Result"))
	require.Equal(t, id.String()+":notify", done.Header.Get("Idempotency-Key"))
	require.Equal(t, obj{
		"execution_id": id.String(),
		"result":       "approved",
		"kafka":        obj{"amount": 12.5, "sku": "k-1"},
		"order":        []any{"kafka_event", "api_response"},
		"input":        float64(42),
	}, done.Body)

	waitOut := output(t, nodeOf(t, v, "wait"))
	require.Equal(t, obj{"result": "approved"}, waitOut["apiResponse"])
	require.Equal(t, false, waitOut["timeout"])
	require.Equal(t, ws.CorrelationID.String(), waitOut["correlation_id"])
	notifyOut := output(t, nodeOf(t, v, "notify"))
	require.Equal(t, float64(http.StatusAccepted), notifyOut["status"])
	require.Equal(t, int32(1), nodeOf(t, v, "notify").Attempts)

	ws = waitOf(t, v, "wait")
	require.Equal(t, vocab.WaitCompleted, ws.Status)
	require.EqualValues(t, 3, ws.Version, "registered, then one bump per event")
	require.Len(t, ws.ReceivedEvents, 2)
	require.NotNil(t, ws.ResumedAt)
	require.Equal(t, "a", errText(ws.ResumedBy))
	resumedAt := *ws.ResumedAt

	// Redelivered events change nothing, nor does a redelivered continuation.
	require.Equal(t, aggregator.Duplicate, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"amount": 12.5, "sku": "k-1"}))
	require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "rejected"}))
	require.EqualValues(t, 1, h.exec(t, `INSERT INTO run_queue (execution_id, node_id, kind) VALUES ($1, 'wait', 'resume')`, id))
	eventually(t, func() bool { return h.count(t, `SELECT count(*) FROM run_queue`) == 0 })
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/done") == 1 }, "continuation ran twice")
	v = h.view(t, id)
	require.Equal(t, vocab.ExecCompleted, v.Status)
	ws = waitOf(t, v, "wait")
	require.Equal(t, resumedAt, *ws.ResumedAt, "resumed_at is set once")
	require.EqualValues(t, 3, ws.Version)
	require.Equal(t, 1, h.fake.count("/process"))
}

// TestEarlierWaitsSeenByLaterContinuation: a continuation run in the transaction of the
// events that end a wait reads the execution's nodes as stored, where a wait node that an
// earlier wait ended still reads waiting: the earlier outcome must count all the same.
// Parallel waits feed a join, which runs once, when the second ends, with both outputs;
// waits in sequence complete the execution when the second ends.
func TestEarlierWaitsSeenByLaterContinuation(t *testing.T) {
	t.Parallel()
	h := setup(t)
	parallel := h.putJoin(t, obj{"one": "@{nodes.w1.output.kafkaEvent.n}", "two": "@{nodes.w2.output.kafkaEvent.n}"})
	sequence := h.put(t, h.workflow("sequence", []obj{
		node("s1", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("s2", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
	}, []obj{edge("s1", "s2", "")}))
	h.run(t)

	id := h.start(t, parallel, nil)
	v := h.waitStatus(t, id, "waiting")
	w1, w2 := waitOf(t, v, "w1"), waitOf(t, v, "w2")
	require.Equal(t, aggregator.Completed, h.apply(t, id, w1.CorrelationID, aggregator.EventKafka, obj{"n": 1}))
	stays(t, 200*time.Millisecond, func() bool {
		v := h.view(t, id)
		return v.Status == vocab.ExecWaiting && nodeOf(t, v, "join").Status == vocab.NodePending
	}, "the join waits for w2")
	require.Equal(t, aggregator.Completed, h.apply(t, id, w2.CorrelationID, aggregator.EventKafka, obj{"n": 2}))
	h.waitStatus(t, id, "completed")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/join") == 1 }, "join must run exactly once")
	require.Equal(t, obj{"one": float64(1), "two": float64(2)}, h.fake.requests("/join")[0].Body)

	id = h.start(t, sequence, nil)
	s1 := waitOf(t, h.waitStatus(t, id, "waiting"), "s1")
	require.Equal(t, aggregator.Completed, h.apply(t, id, s1.CorrelationID, aggregator.EventKafka, obj{"n": 1}))
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND node_id = 's2' AND status = 'waiting'`, id) == 1
	})
	s2 := waitOf(t, h.view(t, id), "s2")
	require.Equal(t, aggregator.Completed, h.apply(t, id, s2.CorrelationID, aggregator.EventKafka, obj{"n": 2}))
	v = h.waitStatus(t, id, "completed")
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "s1").Status)
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "s2").Status)
}

// TestParallelWaitsEndedAtOnce: both waits of a join ended at the same moment, by events
// decided in concurrent transactions that each continue the execution (or in one, when
// they share a group commit). The execution's row orders the continuations: the one that
// commits second finds the other wait's outcome, though its node is still stored as
// waiting, so each join runs once and every execution completes.
func TestParallelWaitsEndedAtOnce(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.putJoin(t, obj{"execution_id": "@{_execution.id}"})
	h.run(t)

	const executions = 24
	var events []aggregator.Event
	ids := make([]uuid.UUID, executions)
	for i := range ids {
		ids[i] = h.start(t, name, nil)
		v := h.waitStatus(t, ids[i], "waiting")
		for _, nodeID := range []string{"w1", "w2"} {
			events = append(events, aggregator.Event{ExecutionID: ids[i], CorrelationID: waitOf(t, v, nodeID).CorrelationID,
				Name: aggregator.EventKafka, Payload: []byte(`{}`), Source: aggregator.Source{Kind: "kafka", Topic: "orders"}})
		}
	}
	start := make(chan struct{})
	errs := make(chan error, len(events))
	var wg sync.WaitGroup
	for _, ev := range events {
		wg.Go(func() {
			<-start
			res, err := h.agg.Apply(context.Background(), ev)
			if err == nil && res.Outcome != aggregator.Completed {
				err = fmt.Errorf("wait %s: %s", ev.CorrelationID, res.Outcome)
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, id := range ids {
		h.waitStatus(t, id, "completed")
	}
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/join") == executions }, "one join per execution")
	for id, n := range h.fake.countBy("/join", "execution_id") {
		require.Equal(t, 1, n, id)
	}
}

// putJoin stores a workflow of two parallel waits for Kafka records, w1 and w2, both
// before a join that posts body to the fake service's /join.
func (h *harness) putJoin(t *testing.T, body obj) string {
	t.Helper()
	return h.put(t, h.workflow("parallel", []obj{
		node("w1", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("w2", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("join", "http", obj{"url": "@{_vars.svc}/join", "method": "POST", "body": body}),
	}, []obj{edge("w1", "join", ""), edge("w2", "join", "")}))
}

// TestBranching: conditions on the wait's output pick one of two branches; the other is
// skipped, the skip propagates down its branch, and the join after both runs once.
func TestBranching(t *testing.T) {
	t.Parallel()
	for _, approved := range []bool{true, false} {
		t.Run(map[bool]string{true: "approved", false: "rejected"}[approved], func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			post := func(path string) obj {
				return obj{"url": "@{_vars.svc}" + path, "method": "POST", "body": obj{"execution_id": "@{_execution.id}"}}
			}
			name := h.put(t, h.workflow("branch", []obj{
				node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
				node("yes", "http", post("/yes")),
				node("no", "http", post("/no")),
				node("no_after", "http", post("/no_after")),
				node("join", "http", obj{"url": "@{_vars.svc}/join", "method": "POST",
					"body": obj{"yes": "@{_trigger.x}", "decision": "@{nodes.wait.output.kafkaEvent.approved}"}}),
			}, []obj{
				edge("wait", "yes", "output.kafkaEvent.approved == true"),
				edge("wait", "no", "output.kafkaEvent.approved == false"),
				edge("no", "no_after", ""),
				edge("yes", "join", ""),
				edge("no_after", "join", ""),
			}))
			h.run(t)
			id := h.start(t, name, obj{"x": 1})
			ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
			require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"approved": approved}))

			v := h.waitStatus(t, id, "completed")
			taken, skipped := []string{"yes"}, []string{"no", "no_after"}
			if !approved {
				taken, skipped = skipped, taken
			}
			for _, n := range taken {
				require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, n).Status, n)
				require.Equal(t, 1, h.fake.count("/"+n), n)
			}
			for _, n := range skipped {
				require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, n).Status, n)
				require.Nil(t, nodeOf(t, v, n).StartedAt, n)
				require.Zero(t, h.fake.count("/"+n), n)
			}
			require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "join").Status)
			stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/join") == 1 }, "join must run exactly once")
			require.Equal(t, obj{"yes": float64(1), "decision": approved}, h.fake.requests("/join")[0].Body)
			require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
		})
	}
}

// TestAllBranchesSkipped: when no condition holds, everything downstream is skipped
// and the execution still completes.
func TestAllBranchesSkipped(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("none", []obj{
		node("first", "http", obj{"url": "@{_vars.svc}/first"}),
		node("second", "http", obj{"url": "@{_vars.svc}/second"}),
		node("third", "http", obj{"url": "@{_vars.svc}/third"}),
	}, []obj{
		edge("first", "second", "output.status == 200"), // the fake answers 202
		edge("second", "third", ""),
	}))
	h.run(t)
	v := h.waitStatus(t, h.start(t, name, nil), "completed")
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "first").Status)
	require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, "second").Status)
	require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, "third").Status)
	require.Equal(t, 1, h.fake.count("/first"))
	require.Zero(t, h.fake.count("/second")+h.fake.count("/third"))
}

// TestConditionRuntimeErrorFailsExecution: a condition that cannot be evaluated fails
// the edge's target node and the execution; nothing downstream runs.
func TestConditionRuntimeErrorFailsExecution(t *testing.T) {
	t.Parallel()
	h := setup(t)
	const cond = "output.kafkaEvent.amount > 5"
	name := h.put(t, h.workflow("conderr", []obj{
		node("wait", "wait_events", obj{"kafkaEvent": obj{"topic": "orders"}}),
		node("next", "http", obj{"url": "@{_vars.svc}/next"}),
	}, []obj{edge("wait", "next", cond)}))
	h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"amount": "lots"}))

	v := h.waitStatus(t, id, "failed")
	next := nodeOf(t, v, "next")
	require.Equal(t, vocab.NodeFailed, next.Status)
	require.Contains(t, errText(next.Error), "edge wait -> next")
	require.Contains(t, errText(next.Error), cond)
	require.Contains(t, errText(v.Error), "node next:")
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "wait").Status)
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/next") == 0 })
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
}

// TestSentEventConditionErrorFailsExecution: the same through a sent event, whose
// continuation is made before its wait is written. Failing the execution cancels its
// open waits at once, the one about to be written among them, so the write's fence
// misses and the group is decided again under a savepoint: the wait completes, then the
// condition fails the edge's target and the execution.
func TestSentEventConditionErrorFailsExecution(t *testing.T) {
	t.Parallel()
	h := setup(t)
	const cond = "output.timeout > 5"
	name := h.put(t, h.workflow("sentconderr", []obj{
		sendWait("wait", sendEv("go", "go")),
		node("next", "http", obj{"url": "@{_vars.svc}/next"}),
	}, []obj{edge("wait", "next", cond)}))
	h.run(t)
	id := h.start(t, name, nil)
	h.waitStatus(t, id, "waiting")
	require.Equal(t, aggregator.SendDelivered, h.send(t, id, "go", obj{}, "").Outcome)

	v := h.waitStatus(t, id, "failed")
	next := nodeOf(t, v, "next")
	require.Equal(t, vocab.NodeFailed, next.Status)
	require.Contains(t, errText(next.Error), "edge wait -> next")
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "wait").Status)
	require.Equal(t, string(vocab.WaitCompleted), h.waitRow(t, id, "wait").Status, "completed, then nothing left to cancel")
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/next") == 0 })
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
}

// TestMissingTemplateValueFailsNode: a template naming something that does not exist
// fails its node when it runs, naming where and what; the execution fails and nothing
// is sent.
func TestMissingTemplateValueFailsNode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		node  obj
		input obj
		want  []string
	}{
		{
			name: "wait_events api call body",
			node: node("n", "wait_events", obj{"apiCall": obj{
				"url": "@{_vars.svc}/process", "body": obj{"email": "@{_trigger.customer.email}"},
			}}),
			input: obj{"customer": obj{"name": "x"}},
			want:  []string{"apiCall.body: email", "@{_trigger.customer.email}", `_trigger.customer has no field "email"`},
		},
		{
			name:  "http url",
			node:  node("n", "http", obj{"url": "@{_vars.svc}/items/@{_trigger.missing}"}),
			input: obj{"present": 1},
			want:  []string{"data.url", "@{_trigger.missing}", `_trigger has no field "missing"`},
		},
		{
			name:  "http header from an unknown var",
			node:  node("n", "http", obj{"url": "@{_vars.svc}/x", "headers": obj{"X-Token": "@{_vars.token}"}}),
			input: obj{},
			want:  []string{"data.headers.X-Token", `_vars has no field "token"`, "RENDEZVOUS_VAR_TOKEN"},
		},
		{
			name:  "http body from a node that did not run",
			node:  node("n", "http", obj{"url": "@{_vars.svc}/x", "method": "POST", "body": obj{"v": "@{nodes.ghost.output.v}"}}),
			input: obj{},
			want:  []string{"data.body: v", `node "ghost" has no output`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			name := h.put(t, h.workflow("missing", []obj{tc.node}, nil))
			h.run(t)
			id := h.start(t, name, tc.input)
			v := h.waitStatus(t, id, "failed")
			n := nodeOf(t, v, "n")
			require.Equal(t, vocab.NodeFailed, n.Status)
			for _, w := range tc.want {
				require.Contains(t, errText(n.Error), w)
				require.Contains(t, errText(v.Error), w)
			}
			require.Contains(t, errText(v.Error), "node n:")
			require.Empty(t, v.Waits)
			require.Zero(t, h.count(t, `SELECT count(*) FROM outbox`))
			require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
			require.Empty(t, h.fake.Paths(), "no request reached the external service")
		})
	}
}

// TestWaitWithoutEventsCompletesAtOnce: a wait_events node with neither event enabled
// has nothing to wait for.
func TestWaitWithoutEventsCompletesAtOnce(t *testing.T) {
	t.Parallel()
	tests := map[string]obj{
		"both disabled": {
			"apiCall":    obj{"enabled": false, "url": "@{_vars.svc}/process"},
			"kafkaEvent": obj{"enabled": false, "topic": "orders"},
		},
		"both absent": {},
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := setup(t)
			wf := h.put(t, h.workflow("noevents", []obj{
				node("wait", "wait_events", data),
				node("after", "http", obj{"url": "@{_vars.svc}/after", "method": "POST",
					"body": obj{"n": "@{nodes.wait.output.events}"}}),
			}, []obj{edge("wait", "after", "output.timeout == false")}))
			h.run(t)
			v := h.waitStatus(t, h.start(t, wf, nil), "completed")
			require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "wait").Status)
			require.Equal(t, obj{"events": []any{}, "arrival_order": []any{}, "timeout": false}, output(t, nodeOf(t, v, "wait")))
			require.Empty(t, v.Waits)
			require.Zero(t, h.fake.count("/process"))
			require.Equal(t, 1, h.fake.count("/after"))
			require.Equal(t, obj{"n": []any{}}, h.fake.requests("/after")[0].Body)
		})
	}
}
