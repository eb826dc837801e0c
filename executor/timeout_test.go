package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Deadlines end to end: a running pod (executor and deadline sweeper) and waits with
// short timeouts. Every test reads the outcome back from the database.

// waitRow is what the view does not show of a wait state.
type waitRow struct {
	Status         string
	TimedOut       []string
	NextDeadlineAt time.Time
	ExpiresAt      time.Time
	Version        int64
	Resumed        bool
}

func (p *pod) waitRow(t *testing.T, execID uuid.UUID, nodeID string) waitRow {
	t.Helper()
	var w waitRow
	var timedOut []byte
	require.NoError(t, p.pool.QueryRow(context.Background(), `
		SELECT status, timed_out_events, next_deadline_at, expires_at, version, resumed_at IS NOT NULL
		FROM execution_wait_states WHERE execution_id = $1 AND node_id = $2`, execID, nodeID).
		Scan(&w.Status, &timedOut, &w.NextDeadlineAt, &w.ExpiresAt, &w.Version, &w.Resumed))
	require.NoError(t, json.Unmarshal(timedOut, &w.TimedOut))
	return w
}

// requireQueuesEmpty: nothing is left queued or unsent for the execution.
func (p *pod) requireQueuesEmpty(t *testing.T, id uuid.UUID) {
	t.Helper()
	require.Zero(t, p.count(t, `SELECT count(*) FROM run_queue WHERE execution_id = $1`, id), "run_queue rows left")
	require.Zero(t, p.count(t, `SELECT count(*) FROM outbox WHERE execution_id = $1`, id), "outbox rows left")
}

// TestTimeoutFailNamesMissingEvents: onTimeout fail (the default) with a 1 s overall
// timeout and strategy all. One of the two events arrived; the deadline fails the node
// naming only the one that did not, the executor fails the execution, nothing downstream
// runs, and the wait takes no event afterwards.
func TestTimeoutFailNamesMissingEvents(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("tofail", []obj{
		node("wait", "wait_events", obj{
			"apiCall":    obj{"url": "@{_vars.svc}/process"},
			"kafkaEvent": obj{"topic": "orders"},
			"timeout":    1,
		}),
		node("after", "http", obj{"url": "@{_vars.svc}/after"}),
	}, []obj{edge("wait", "after", "")}))
	h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	require.InDelta(t, time.Second, ws.ExpiresAt.Sub(ws.CreatedAt), float64(250*time.Millisecond), "overall deadline is 1 s after registration")
	require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))

	v := h.waitStatus(t, id, "failed")
	const reason = "timed out waiting for api_response"
	n := nodeOf(t, v, "wait")
	require.Equal(t, vocab.NodeFailed, n.Status)
	require.Equal(t, reason, errText(n.Error), "names the missing event, and only it")
	require.Equal(t, "node wait: "+reason, errText(v.Error))
	require.NotNil(t, v.FinishedAt)
	require.NotNil(t, n.FinishedAt)
	require.False(t, n.FinishedAt.Before(ws.ExpiresAt), "the deadline fired early: node finished %s, deadline %s", n.FinishedAt, ws.ExpiresAt)

	// The failed node still reports what arrived and what timed out.
	out := output(t, n)
	require.Equal(t, true, out["timeout"])
	require.Equal(t, []any{"api_response"}, out["timed_out_events"])
	require.Equal(t, obj{"sku": "k-1"}, out["kafkaEvent"])
	require.Contains(t, out, "apiResponse")
	require.Nil(t, out["apiResponse"])

	w := waitOf(t, v, "wait")
	require.Equal(t, vocab.WaitTimeout, w.Status)
	require.Equal(t, reason, errText(w.Error))
	require.Equal(t, []string{"api_response"}, w.TimedOutEvents, "the view shows what timed out")
	row := h.waitRow(t, id, "wait")
	require.Equal(t, []string{"api_response"}, row.TimedOut)
	require.True(t, row.Resumed, "the executor consumed the timeout's continuation")

	// The node behind the failed wait never runs, and does not stay pending either.
	after := nodeOf(t, v, "after")
	require.Equal(t, vocab.NodeCancelled, after.Status)
	require.Equal(t, "execution failed: node wait: "+reason, errText(after.Error))
	require.Nil(t, after.StartedAt)
	require.NotNil(t, after.FinishedAt)
	h.requireQueuesEmpty(t, id)

	// The reply turns up too late, and changes nothing.
	require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "approved"}))
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 0 }, "a node after the failed wait ran")
	v = h.view(t, id)
	require.Equal(t, vocab.ExecFailed, v.Status)
	require.Equal(t, vocab.WaitTimeout, waitOf(t, v, "wait").Status)
	require.Equal(t, w.Version, waitOf(t, v, "wait").Version)
}

// TestTimeoutContinue: strategy all with a required api_response and an optional
// (required: false) kafka_event, onTimeout continue. The required event arrives, the
// optional one never does: at the deadline the node completes with timeout: true and
// the optional event listed as timed out, and the edge conditions on output.timeout pick
// the timeout branch. Without the required event, continue fails like fail, naming it.
func TestTimeoutContinue(t *testing.T) {
	t.Parallel()
	def := func(h *harness) obj {
		post := func(path string) obj {
			return obj{"url": "@{_vars.svc}" + path, "method": "POST", "body": obj{
				"result": "@{nodes.wait.output.apiResponse.result}", "timed_out": "@{nodes.wait.output.timed_out_events}",
			}}
		}
		return h.workflow("tocontinue", []obj{
			node("wait", "wait_events", obj{
				"apiCall":             obj{"url": "@{_vars.svc}/process"},
				"kafkaEvent":          obj{"topic": "orders", "required": false},
				"aggregationStrategy": "all",
				"timeout":             "1s",
				"onTimeout":           "continue",
			}),
			node("late", "http", post("/late")),
			node("ontime", "http", post("/ontime")),
		}, []obj{
			edge("wait", "late", "output.timeout == true"),
			edge("wait", "ontime", "output.timeout == false"),
		})
	}

	t.Run("required event arrived", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, def(h))
		h.run(t)
		id := h.start(t, name, nil)
		ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
		// all needs both: the required event alone does not complete the wait.
		require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "approved"}))

		v := h.waitStatus(t, id, "completed")
		n := nodeOf(t, v, "wait")
		require.Equal(t, vocab.NodeCompleted, n.Status)
		require.Nil(t, n.Error)
		require.False(t, n.FinishedAt.Before(ws.ExpiresAt), "the deadline fired early")
		out := output(t, n)
		require.Equal(t, true, out["timeout"])
		require.Equal(t, []any{"kafka_event"}, out["timed_out_events"])
		require.Equal(t, obj{"result": "approved"}, out["apiResponse"])
		require.Contains(t, out, "kafkaEvent")
		require.Nil(t, out["kafkaEvent"], "missing data is null")
		events := out["events"].([]any)
		require.Len(t, events, 1)
		require.Equal(t, "api_response", events[0].(obj)["name"])

		// The branch on output.timeout: late ran once with the partial data, ontime skipped.
		require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "late").Status)
		require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, "ontime").Status)
		stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/late") == 1 && h.fake.count("/ontime") == 0 })
		require.Equal(t, obj{"result": "approved", "timed_out": []any{"kafka_event"}}, h.fake.requests("/late")[0].Body)

		w := waitOf(t, v, "wait")
		require.Equal(t, vocab.WaitTimeout, w.Status)
		require.Nil(t, w.Error, "a wait that continued is not an error")
		require.True(t, h.waitRow(t, id, "wait").Resumed)
		h.requireQueuesEmpty(t, id)
		// The optional event arriving now is late.
		require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "x"}))
	})

	t.Run("required event missing", func(t *testing.T) {
		t.Parallel()
		h := setup(t)
		name := h.put(t, def(h))
		h.run(t)
		id := h.start(t, name, nil)
		ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
		require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))

		v := h.waitStatus(t, id, "failed")
		const reason = "timed out waiting for api_response (onTimeout continue needs api_response, which did not arrive)"
		require.Equal(t, vocab.NodeFailed, nodeOf(t, v, "wait").Status)
		require.Equal(t, reason, errText(nodeOf(t, v, "wait").Error))
		require.Equal(t, "node wait: "+reason, errText(v.Error))
		require.Equal(t, vocab.WaitTimeout, waitOf(t, v, "wait").Status)
		for _, n := range []string{"late", "ontime"} {
			require.NotContains(t, []vocab.NodeStatus{vocab.NodeCompleted, vocab.NodeRunning}, nodeOf(t, v, n).Status, n)
		}
		stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/late")+h.fake.count("/ontime") == 0 })
		h.requireQueuesEmpty(t, id)
	})
}

// TestTimeoutContinueRequiredOnly: under required_only, onTimeout continue goes on with
// the required events that arrived — here none — and the output names the missing
// ones; the node carries no warning (that is continue_with_partial's).
func TestTimeoutContinueRequiredOnly(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("reqonly", []obj{
		node("wait", "wait_events", obj{
			"apiCall":             obj{"url": "@{_vars.svc}/process"},
			"kafkaEvent":          obj{"topic": "orders", "required": false},
			"aggregationStrategy": "required_only",
			"timeout":             "1s",
			"onTimeout":           "continue",
		}),
		node("after", "http", obj{"url": "@{_vars.svc}/after", "method": "POST", "body": obj{
			"missing": "@{nodes.wait.output.missing_required_events}",
		}}),
	}, []obj{edge("wait", "after", "output.timeout == true")}))
	h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	require.Equal(t, aggregator.Recorded, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}))

	v := h.waitStatus(t, id, "completed")
	n := nodeOf(t, v, "wait")
	require.Equal(t, vocab.NodeCompleted, n.Status)
	require.Nil(t, n.Error)
	require.Nil(t, n.Warning)
	out := output(t, n)
	require.Equal(t, true, out["timeout"])
	require.Equal(t, []any{"api_response"}, out["missing_required_events"])
	require.Equal(t, []any{"kafka_event"}, out["arrival_order"])
	require.Equal(t, vocab.WaitTimeout, waitOf(t, v, "wait").Status)
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/after") == 1 })
	require.Equal(t, obj{"missing": []any{"api_response"}}, h.fake.requests("/after")[0].Body)
	h.requireQueuesEmpty(t, id)
}

// TestTimeoutContinueWithPartialNothingArrived: continue_with_partial continues even
// when nothing at all arrived; every outputMapping entry is null, and a condition can
// test for that.
func TestTimeoutContinueWithPartialNothingArrived(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("partial", []obj{
		node("wait", "wait_events", obj{
			"apiCall":       obj{"url": "@{_vars.svc}/process"},
			"kafkaEvent":    obj{"topic": "orders"},
			"timeout":       0.5,
			"onTimeout":     "continue_with_partial",
			"outputMapping": obj{"result": "api_response.result", "sku": "kafka_event.item.sku", "raw": "kafka_event"},
		}),
		node("fallback", "http", obj{"url": "@{_vars.svc}/fallback", "method": "POST",
			"body": obj{"timeout": "@{nodes.wait.output.timeout}", "n": "@{nodes.wait.output.events}"}}),
		node("normal", "http", obj{"url": "@{_vars.svc}/normal"}),
	}, []obj{
		edge("wait", "fallback", "output.timeout == true && output.result == nil && output.sku == nil"),
		edge("wait", "normal", "output.result != nil"),
	}))
	h.run(t)
	id := h.start(t, name, nil)
	waiting := h.waitStatus(t, id, "waiting")
	ws := waitOf(t, waiting, "wait")
	// The waiting node's output names its wait and the events it waits for.
	wo := output(t, nodeOf(t, waiting, "wait"))
	require.Equal(t, ws.ID.String(), wo["waitStateId"])
	require.Equal(t, ws.ID.String(), wo["wait_state_id"])
	require.Equal(t, ws.CorrelationID.String(), wo["correlationId"])
	require.Equal(t, ws.CorrelationID.String(), wo["correlation_id"])
	require.Equal(t, id.String(), wo["executionId"])
	require.Equal(t, id.String(), wo["execution_id"])
	require.Equal(t, []any{"api_response", "kafka_event"}, wo["enabledEvents"])
	require.Equal(t, "waiting", wo["status"])

	v := h.waitStatus(t, id, "completed")
	n := nodeOf(t, v, "wait")
	require.Equal(t, vocab.NodeCompleted, n.Status)
	require.NotNil(t, n.Warning, "continuing with partial data leaves a warning on the node")
	require.Equal(t, "timed out; continued with partial data, without api_response, kafka_event", *n.Warning)
	require.Nil(t, n.Error)
	require.False(t, n.FinishedAt.Before(ws.ExpiresAt), "the deadline fired early")
	require.Equal(t, obj{
		"result":           nil,
		"sku":              nil,
		"raw":              nil,
		"events":           []any{},
		"arrival_order":    []any{},
		"timed_out_events": []any{"api_response", "kafka_event"},
		// Both are required: true by default, so continue would have needed them.
		"missing_required_events": []any{"api_response", "kafka_event"},
		"timeout":                 true,
		"strategy":                "all",
		"correlation_id":          ws.CorrelationID.String(),
	}, output(t, n))
	require.Nil(t, nodeOf(t, v, "fallback").Warning)
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "fallback").Status)
	require.Equal(t, vocab.NodeSkipped, nodeOf(t, v, "normal").Status)
	stays(t, 200*time.Millisecond, func() bool { return h.fake.count("/fallback") == 1 && h.fake.count("/normal") == 0 })
	require.Equal(t, obj{"timeout": true, "n": []any{}}, h.fake.requests("/fallback")[0].Body)

	w := waitOf(t, v, "wait")
	require.Equal(t, vocab.WaitTimeout, w.Status)
	require.Nil(t, w.Error)
	require.Empty(t, w.ReceivedEvents)
	require.Equal(t, []string{"api_response", "kafka_event"}, h.waitRow(t, id, "wait").TimedOut)
	h.requireQueuesEmpty(t, id)
}

// TestOptionalEventOwnTimeout: under required_only, an optional event with a short
// timeout of its own times out while the wait keeps waiting for the required one (whose
// deadline is the node's long overall timeout). The timed-out event no longer counts
// when it turns up; the required event then completes the wait, and the output lists
// the optional event as timed out without the wait itself having timed out.
func TestOptionalEventOwnTimeout(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("ownto", []obj{
		node("wait", "wait_events", obj{
			"apiCall":             obj{"url": "@{_vars.svc}/process"},
			"kafkaEvent":          obj{"topic": "orders", "required": false, "timeout": "300ms"},
			"aggregationStrategy": "required_only",
			"timeout":             "30s",
		}),
		node("next", "http", obj{"url": "@{_vars.svc}/next"}),
	}, []obj{edge("wait", "next", `output.timeout == false && "kafka_event" in output.timed_out_events`)}))
	h.run(t)
	id := h.start(t, name, nil)
	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	before := h.waitRow(t, id, "wait")
	require.Empty(t, before.TimedOut)
	require.True(t, before.NextDeadlineAt.Before(before.ExpiresAt), "the event's own deadline comes first")
	require.InDelta(t, 300*time.Millisecond, before.NextDeadlineAt.Sub(ws.CreatedAt), float64(250*time.Millisecond))

	// The sweeper records the optional event's timeout and moves on to the overall deadline.
	var row waitRow
	eventually(t, func() bool {
		row = h.waitRow(t, id, "wait")
		return len(row.TimedOut) > 0
	}, "the optional event never timed out")
	require.Equal(t, []string{"kafka_event"}, row.TimedOut)
	require.Equal(t, string(vocab.WaitWaiting), row.Status, "an optional event's timeout does not end the wait")
	require.Equal(t, row.ExpiresAt, row.NextDeadlineAt, "next deadline is the overall one")
	require.Equal(t, before.Version+1, row.Version)
	v := h.view(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status)
	require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "wait").Status)

	require.Equal(t, aggregator.Late, h.apply(t, id, ws.CorrelationID, aggregator.EventKafka, obj{"sku": "k-1"}),
		"an event past its own deadline no longer counts")
	stays(t, 200*time.Millisecond, func() bool { return h.view(t, id).Status == "waiting" })

	require.Equal(t, aggregator.Completed, h.apply(t, id, ws.CorrelationID, aggregator.EventAPIResponse, obj{"result": "approved"}))
	v = h.waitStatus(t, id, "completed")
	out := output(t, nodeOf(t, v, "wait"))
	require.Equal(t, false, out["timeout"])
	require.Equal(t, []any{"kafka_event"}, out["timed_out_events"])
	require.Equal(t, obj{"result": "approved"}, out["apiResponse"])
	require.Nil(t, out["kafkaEvent"], "the late event's data was not taken")
	require.Equal(t, []any{"api_response"}, out["arrival_order"])
	require.Equal(t, vocab.NodeCompleted, nodeOf(t, v, "next").Status)
	require.Equal(t, 1, h.fake.count("/next"))
	require.Equal(t, vocab.WaitCompleted, waitOf(t, v, "wait").Status)
	h.requireQueuesEmpty(t, id)
}
