package api_test

// HTTP-level tests of cancelling an execution and one of its waits, against a full
// service (API and callbacks) on a schema of its own.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// counter is an external service that accepts everything and counts requests per path.
type counter struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   map[string]int
}

func newCounter(t *testing.T) *counter {
	c := &counter{n: map[string]int{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.n[r.URL.Path]++
		c.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *counter) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

// cancelDefs stores the definitions these tests use:
//   - "single": a wait for a callback and a Kafka record, then an http node;
//   - "pair": a wait for a callback and a wait for a Kafka record, then a join;
//   - "quick": a wait without events, which completes at once.
func cancelDefs(t *testing.T, e *env, svc string) {
	t.Helper()
	defs := []map[string]any{
		{"name": "single", "nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall": map[string]any{"url": svc + "/process"}, "kafkaEvent": map[string]any{"topic": "orders"},
			}},
			map[string]any{"id": "done", "type": "http", "data": map[string]any{"url": svc + "/done", "method": "POST"}},
		}, "edges": []any{map[string]any{"source": "wait", "target": "done", "condition": "output.cancelled == true"}}},
		{"name": "pair", "nodes": []any{
			map[string]any{"id": "w1", "type": "wait_events", "data": map[string]any{"apiCall": map[string]any{"url": svc + "/process"}}},
			map[string]any{"id": "w2", "type": "wait_events", "data": map[string]any{"kafkaEvent": map[string]any{"topic": "orders"}}},
			map[string]any{"id": "join", "type": "wait_events", "data": map[string]any{}},
		}, "edges": []any{
			map[string]any{"source": "w1", "target": "join"},
			map[string]any{"source": "w2", "target": "join"},
		}},
		{"name": "quick", "nodes": []any{map[string]any{"id": "n", "type": "wait_events", "data": map[string]any{}}}},
	}
	for _, d := range defs {
		r := e.put(t, d["name"].(string), d)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	}
}

// view is the part of an execution view these tests read.
type view struct {
	ID     string                `json:"id"`
	Status vocab.ExecutionStatus `json:"status"`
	Error  *string               `json:"error"`
	Nodes  []struct {
		ID     string           `json:"id"`
		Status vocab.NodeStatus `json:"status"`
		Output map[string]any   `json:"output"`
		Error  *string          `json:"error"`
	} `json:"nodes"`
	Waits []struct {
		NodeID        string           `json:"node_id"`
		CorrelationID string           `json:"correlation_id"`
		Status        vocab.WaitStatus `json:"status"`
		Error         *string          `json:"error"`
	} `json:"wait_states"`
	UpdatedAt time.Time `json:"updated_at"`
}

func decodeView(t *testing.T, r testkit.Response) view {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var v view
	require.NoError(t, json.Unmarshal(r.Raw, &v))
	return v
}

func (v view) node(t *testing.T, id string) (status vocab.NodeStatus, output map[string]any, err string) {
	t.Helper()
	for _, n := range v.Nodes {
		if n.ID == id {
			if n.Error != nil {
				err = *n.Error
			}
			return n.Status, n.Output, err
		}
	}
	require.Failf(t, "no such node", "%s", id)
	return
}

func (v view) wait(t *testing.T, nodeID string) (status vocab.WaitStatus, correlationID, err string) {
	t.Helper()
	for _, w := range v.Waits {
		if w.NodeID == nodeID {
			if w.Error != nil {
				err = *w.Error
			}
			return w.Status, w.CorrelationID, err
		}
	}
	require.Failf(t, "no wait", "for node %s", nodeID)
	return
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (e *env) get(t *testing.T, id string) view {
	t.Helper()
	return decodeView(t, e.do(t, http.MethodGet, "/api/v1/executions/"+id, nil))
}

// startWaiting starts an execution of name and returns its id once every one of its
// waits (n) is registered.
func (e *env) startWaiting(t *testing.T, name string, n int) string {
	t.Helper()
	r := e.startExecution(t, name, nil)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	id := r.JSON["id"].(string)
	e.awaitStatus(t, id, func(v view) bool {
		waiting := 0
		for _, w := range v.Waits {
			if w.Status == vocab.WaitWaiting {
				waiting++
			}
		}
		return waiting == n
	})
	return id
}

func (e *env) awaitStatus(t *testing.T, id string, cond func(view) bool) view {
	t.Helper()
	var v view
	require.Eventually(t, func() bool {
		v = e.get(t, id)
		return cond(v)
	}, 15*time.Second, 20*time.Millisecond, "execution %s never got there", id)
	return v
}

func status(s vocab.ExecutionStatus) func(view) bool {
	return func(v view) bool { return v.Status == s }
}

// callback answers a wait as its external service would.
func (e *env) callback(t *testing.T, execID, corrID string) testkit.Response {
	t.Helper()
	return e.do(t, http.MethodPost, "/api/internal/callbacks/acme", mustJSON(t, map[string]any{
		"execution_id": execID, "correlation_id": corrID, "result": "approved",
	}))
}

func cancelPath(id string) string { return "/api/v1/executions/" + id + "/cancel" }

func cancelWaitPath(id, node string) string {
	return "/api/v1/executions/" + id + "/waits/" + node + "/cancel"
}

func TestCancelExecutionEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	cancelDefs(t, e, svc.srv.URL)

	// A waiting execution is cancelled with everything in it; its callback is then late.
	// Cancelling again answers 200 and changes nothing.
	t.Run("cancels", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "single", 1)
		_, corr, _ := e.get(t, id).wait(t, "wait")

		v := decodeView(t, e.do(t, http.MethodPost, cancelPath(id), []byte(`{"reason": "operator request"}`)))
		require.Equal(t, id, v.ID)
		require.Equal(t, vocab.ExecCancelled, v.Status)
		require.Equal(t, "operator request", str(v.Error))
		for _, n := range []string{"wait", "done"} {
			st, _, msg := v.node(t, n)
			require.Equal(t, vocab.NodeCancelled, st, n)
			require.Equal(t, "execution cancelled: operator request", msg, n)
		}
		ws, _, msg := v.wait(t, "wait")
		require.Equal(t, vocab.WaitCancelled, ws)
		require.Equal(t, "execution cancelled: operator request", msg)
		require.Equal(t, v, e.get(t, id), "the answer is the execution as stored")

		r := e.callback(t, id, corr)
		requireProblem(t, r, http.StatusConflict, "late-event", "the wait is already cancelled", "/api/internal/callbacks/acme")
		require.Equal(t, string(vocab.WaitCancelled), r.JSON["wait_status"])

		again := decodeView(t, e.do(t, http.MethodPost, cancelPath(id), []byte(`{"reason": "second thoughts"}`)))
		require.Equal(t, v, again, "cancelling a cancelled execution changes nothing")
		require.Zero(t, svc.count("/done"))
	})

	t.Run("without a body", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "single", 1)
		v := decodeView(t, e.do(t, http.MethodPost, cancelPath(id), nil))
		require.Equal(t, vocab.ExecCancelled, v.Status)
		require.Equal(t, "cancelled", str(v.Error), "the default reason")
	})

	t.Run("finished", func(t *testing.T) {
		t.Parallel()
		r := e.startExecution(t, "quick", nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
		id := r.JSON["id"].(string)
		before := e.awaitStatus(t, id, status("completed"))
		r = e.do(t, http.MethodPost, cancelPath(id), []byte(`{"reason": "too late"}`))
		requireProblem(t, r, http.StatusConflict, "execution-finished", "execution is already completed", cancelPath(id))
		require.Equal(t, "completed", r.JSON["execution_status"])
		require.Equal(t, before, e.get(t, id))
	})

	t.Run("rejected", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "single", 1)
		unknown := uuid.NewString()
		tests := []struct {
			name   string
			id     string
			body   string
			status int
			slug   string
			detail string
		}{
			{"unknown execution", unknown, `{}`, http.StatusNotFound, "execution-not-found", "no execution " + unknown},
			{"malformed id", "exec-17", `{}`, http.StatusBadRequest, "malformed-id", "execution id is not a UUID"},
			{"malformed JSON", id, `{"reason": `, http.StatusBadRequest, "malformed-json", `body must be {"reason": "...", "then": "fail|continue"}`},
			{"not an object", id, `["stop"]`, http.StatusBadRequest, "malformed-json", `body must be {"reason"`},
			{"reason not a string", id, `{"reason": 5}`, http.StatusBadRequest, "malformed-json", `body must be {"reason"`},
			{"unknown field", id, `{"reason": "x", "force": true}`, http.StatusBadRequest, "malformed-json", `unknown field "force"`},
			{"then is for waits", id, `{"then": "fail"}`, http.StatusBadRequest, "invalid-request", `"then" applies to cancelling one wait`},
		}
		for _, tt := range tests {
			r := e.do(t, http.MethodPost, cancelPath(tt.id), []byte(tt.body))
			requireProblem(t, r, tt.status, tt.slug, tt.detail, cancelPath(tt.id))
		}
		// None of it touched the execution.
		v := e.get(t, id)
		require.Equal(t, vocab.ExecWaiting, v.Status)
		ws, _, _ := v.wait(t, "wait")
		require.Equal(t, vocab.WaitWaiting, ws)
	})
}

func TestCancelWaitEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	cancelDefs(t, e, svc.srv.URL)

	// then continue: the node completes (cancelled: true), the edge for cancelled waits
	// runs the next node, the execution completes, and the callback is late.
	t.Run("then continue", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "single", 1)
		_, corr, _ := e.get(t, id).wait(t, "wait")
		v := decodeView(t, e.do(t, http.MethodPost, cancelWaitPath(id, "wait"), []byte(`{"then": "continue", "reason": "enough"}`)))
		st, out, _ := v.node(t, "wait")
		require.Equal(t, vocab.NodeCompleted, st)
		require.Equal(t, true, out["cancelled"])
		require.Equal(t, false, out["timeout"])
		ws, _, msg := v.wait(t, "wait")
		require.Equal(t, vocab.WaitCancelled, ws)
		require.Equal(t, "enough", msg)

		v = e.awaitStatus(t, id, status("completed"))
		st, _, _ = v.node(t, "done")
		require.Equal(t, vocab.NodeCompleted, st)
		require.Equal(t, 1, svc.count("/done"))

		r := e.callback(t, id, corr)
		requireProblem(t, r, http.StatusConflict, "late-event", "the wait is already cancelled", "/api/internal/callbacks/acme")
	})

	// then fail is the default: the execution fails with the reason; the execution being
	// finished, a second cancel is a conflict.
	t.Run("then fail by default", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "single", 1)
		_, corr, _ := e.get(t, id).wait(t, "wait")
		v := decodeView(t, e.do(t, http.MethodPost, cancelWaitPath(id, "wait"), nil))
		require.Equal(t, vocab.ExecFailed, v.Status)
		require.Equal(t, "node wait: wait cancelled", str(v.Error))
		st, _, msg := v.node(t, "wait")
		require.Equal(t, vocab.NodeFailed, st)
		require.Equal(t, "wait cancelled", msg)
		ws, _, _ := v.wait(t, "wait")
		require.Equal(t, vocab.WaitCancelled, ws)

		r := e.do(t, http.MethodPost, cancelWaitPath(id, "wait"), []byte(`{"then": "fail"}`))
		requireProblem(t, r, http.StatusConflict, "execution-finished", "execution is already failed", cancelWaitPath(id, "wait"))
		r = e.callback(t, id, corr)
		requireProblem(t, r, http.StatusConflict, "late-event", "the wait is already cancelled", "/api/internal/callbacks/acme")
		require.Equal(t, v, e.get(t, id))
	})

	// A wait that finished while the execution still runs is a conflict; a node without
	// a wait is not found; none of it changes the execution.
	t.Run("wait finished, wait not found", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "pair", 2)
		_, corr, _ := e.get(t, id).wait(t, "w1")
		r := e.callback(t, id, corr)
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.Equal(t, string(aggregator.Completed), r.JSON["status"])

		r = e.do(t, http.MethodPost, cancelWaitPath(id, "w1"), []byte(`{"then": "continue"}`))
		requireProblem(t, r, http.StatusConflict, "wait-finished", "wait is already completed", cancelWaitPath(id, "w1"))
		require.Equal(t, "completed", r.JSON["wait_status"])
		for _, n := range []string{"join", "ghost"} {
			r = e.do(t, http.MethodPost, cancelWaitPath(id, n), nil)
			requireProblem(t, r, http.StatusNotFound, "wait-not-found", "execution "+id+" has no wait for this node", cancelWaitPath(id, n))
		}
		v := e.awaitStatus(t, id, func(v view) bool {
			st, _, _ := v.node(t, "w1")
			return st == "completed" && v.Status == "waiting"
		})
		ws, _, _ := v.wait(t, "w2")
		require.Equal(t, vocab.WaitWaiting, ws)
		ws, _, _ = v.wait(t, "w1")
		require.Equal(t, vocab.WaitCompleted, ws)

		// The other wait can still be cancelled, and the workflow goes on.
		decodeView(t, e.do(t, http.MethodPost, cancelWaitPath(id, "w2"), []byte(`{"then": "continue"}`)))
		v = e.awaitStatus(t, id, status("completed"))
		st, _, _ := v.node(t, "join")
		require.Equal(t, vocab.NodeCompleted, st)
	})

	t.Run("rejected", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "single", 1)
		unknown := uuid.NewString()
		tests := []struct {
			name   string
			id     string
			body   string
			status int
			slug   string
			detail string
		}{
			{"unknown execution", unknown, `{}`, http.StatusNotFound, "execution-not-found", "no execution " + unknown},
			{"malformed id", "exec-17", `{}`, http.StatusBadRequest, "malformed-id", "execution id is not a UUID"},
			{"malformed JSON", id, `{"then": "continue"`, http.StatusBadRequest, "malformed-json", `body must be {"reason": "...", "then": "fail|continue"}`},
			{"unknown field", id, `{"then": "continue", "force": true}`, http.StatusBadRequest, "malformed-json", `unknown field "force"`},
			{"then not a string", id, `{"then": true}`, http.StatusBadRequest, "malformed-json", `body must be {"reason"`},
			{"bad then", id, `{"then": "later"}`, http.StatusBadRequest, "invalid-request", `"then" must be "fail" or "continue"`},
			{"then in another case", id, `{"then": "Continue"}`, http.StatusBadRequest, "invalid-request", `"then" must be "fail" or "continue"`},
		}
		for _, tt := range tests {
			r := e.do(t, http.MethodPost, cancelWaitPath(tt.id, "wait"), []byte(tt.body))
			requireProblem(t, r, tt.status, tt.slug, tt.detail, cancelWaitPath(tt.id, "wait"))
		}
		v := e.get(t, id)
		require.Equal(t, vocab.ExecWaiting, v.Status)
		ws, _, _ := v.wait(t, "wait")
		require.Equal(t, vocab.WaitWaiting, ws)
	})
}
