package api_test

// HTTP-level tests of the recovery actions, against a full service on a schema of its
// own.

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/vocab"
)

func redrivePath(id string) string { return "/api/v1/executions/" + id + "/redrive" }

// TestRedriveEndpoint: an operator fails a wait (cancel with then: fail), which fails the
// execution; a redrive reopens the wait and the callback for it completes the execution,
// whose node after the wait runs once. Redriving again is a 409 problem naming the
// status; bad and unknown ids are 400 and 404 problems.
func TestRedriveEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	r := e.put(t, "recover", map[string]any{"name": "recover", "nodes": []any{
		map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"apiCall": map[string]any{"url": svc.srv.URL + "/process"},
		}},
		map[string]any{"id": "done", "type": "http", "data": map[string]any{"url": svc.srv.URL + "/done", "method": "POST"}},
	}, "edges": []any{map[string]any{"source": "wait", "target": "done"}}})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	id := e.startWaiting(t, "recover", 1)
	_, corr, _ := e.get(t, id).wait(t, "wait")
	require.Eventually(t, func() bool { return svc.count("/process") == 1 }, 15*time.Second, 20*time.Millisecond)

	r = e.do(t, http.MethodPost, redrivePath(id), nil)
	requireProblem(t, r, http.StatusConflict, "execution-not-failed", "only a failed execution can be redriven", redrivePath(id))
	require.Equal(t, "waiting", r.JSON["execution_status"])

	r = e.do(t, http.MethodPost, cancelWaitPath(id, "wait"), mustJSON(t, map[string]any{"then": "fail", "reason": "service down"}))
	require.Equal(t, vocab.ExecFailed, decodeView(t, r).Status)

	r = e.do(t, http.MethodPost, redrivePath(id), nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, map[string]any{"execution_id": id, "status": "waiting", "redrive_count": float64(1),
		"nodes": []any{map[string]any{"id": "wait", "action": "reopened"}}}, r.JSON)
	v := e.get(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status)
	st, corrAfter, _ := v.wait(t, "wait")
	require.Equal(t, vocab.WaitWaiting, st)
	require.Equal(t, corr, corrAfter)
	raw := e.do(t, http.MethodGet, "/api/v1/executions/"+id, nil)
	require.Equal(t, float64(1), raw.JSON["redrive_count"])
	require.NotEmpty(t, raw.JSON["redriven_at"])

	require.Equal(t, http.StatusAccepted, e.callback(t, id, corr).Status)
	e.awaitStatus(t, id, status("completed"))
	require.Eventually(t, func() bool { return svc.count("/done") == 1 }, 15*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, svc.count("/process"), "a cancelled wait's call is not sent again")

	r = e.do(t, http.MethodPost, redrivePath(id), nil)
	requireProblem(t, r, http.StatusConflict, "execution-not-failed", "execution is completed", redrivePath(id))
	require.Equal(t, "completed", r.JSON["execution_status"])
	r = e.do(t, http.MethodPost, redrivePath("e-1"), nil)
	requireProblem(t, r, http.StatusBadRequest, "malformed-id", "not a UUID", redrivePath("e-1"))
	unknown := uuid.NewString()
	r = e.do(t, http.MethodPost, redrivePath(unknown), nil)
	requireProblem(t, r, http.StatusNotFound, "execution-not-found", unknown, redrivePath(unknown))
}

// TestRedriveEndpointConcurrent: ten operators press redrive on one failed execution at
// once; one gets 200, nine get 409.
func TestRedriveEndpointConcurrent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	cancelDefs(t, e, svc.srv.URL)
	id := e.startWaiting(t, "pair", 2)
	r := e.do(t, http.MethodPost, cancelWaitPath(id, "w1"), mustJSON(t, map[string]any{"then": "fail"}))
	require.Equal(t, vocab.ExecFailed, decodeView(t, r).Status)

	const operators = 10
	codes := make([]int, operators)
	var wg sync.WaitGroup
	for i := range operators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = e.do(t, http.MethodPost, redrivePath(id), nil).Status
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusConflict: operators - 1}, count)
	v := e.get(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status)
	// Both waits are open again: w1 failed, w2 was cancelled with the execution.
	for _, n := range []string{"w1", "w2"} {
		st, _, _ := v.wait(t, n)
		require.Equal(t, vocab.WaitWaiting, st, n)
	}
	raw := e.do(t, http.MethodGet, "/api/v1/executions/"+id, nil)
	require.Equal(t, float64(1), raw.JSON["redrive_count"])
}

func restartPath(id string) string { return "/api/v1/executions/" + id + "/restart" }

// TestRestartEndpoint: a waiting execution is restarted with a new input: 201 with the
// new execution; the old one is cancelled and linked to it, the new one to the old one.
// A second restart is a 409 naming the new one; bad bodies are 400 problems.
func TestRestartEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	cancelDefs(t, e, svc.srv.URL)
	old := e.startWaiting(t, "single", 1)

	for _, bad := range []struct{ body, slug, detail string }{
		{`{"version": "newest"}`, "invalid-request", `"version" must be "same" or "latest"`},
		{`{"inputs": {}}`, "malformed-json", "unknown field"},
		{`[`, "malformed-json", "body must be"},
	} {
		r := e.do(t, http.MethodPost, restartPath(old), []byte(bad.body))
		requireProblem(t, r, http.StatusBadRequest, bad.slug, bad.detail, restartPath(old))
	}
	require.Equal(t, vocab.ExecWaiting, e.get(t, old).Status, "a refused restart changes nothing")

	r := e.do(t, http.MethodPost, restartPath(old), mustJSON(t, map[string]any{"input": map[string]any{"n": 2}, "reason": "retry"}))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	newID := r.JSON["id"].(string)
	require.Equal(t, old, r.JSON["restarted_from"])
	require.Equal(t, true, r.JSON["cancelled"])
	require.Equal(t, "single", r.JSON["workflow"])

	ov := e.do(t, http.MethodGet, "/api/v1/executions/"+old, nil)
	require.Equal(t, "cancelled", ov.JSON["status"])
	require.Equal(t, "retry", ov.JSON["error"])
	require.Equal(t, newID, ov.JSON["restarted_as"])
	e.startWaitingID(t, newID, 1)
	nv := e.do(t, http.MethodGet, "/api/v1/executions/"+newID, nil)
	require.Equal(t, old, nv.JSON["restarted_from"])
	require.Equal(t, map[string]any{"n": float64(2)}, nv.JSON["input"])

	r = e.do(t, http.MethodPost, restartPath(old), nil)
	requireProblem(t, r, http.StatusConflict, "execution-already-restarted", newID, restartPath(old))
	require.Equal(t, newID, r.JSON["restarted_as"])
	unknown := uuid.NewString()
	requireProblem(t, e.do(t, http.MethodPost, restartPath(unknown), nil), http.StatusNotFound, "execution-not-found", unknown, restartPath(unknown))
}

// startWaitingID waits until n waits of an existing execution are registered.
func (e *env) startWaitingID(t *testing.T, id string, n int) {
	t.Helper()
	e.awaitStatus(t, id, func(v view) bool {
		waiting := 0
		for _, w := range v.Waits {
			if w.Status == vocab.WaitWaiting {
				waiting++
			}
		}
		return waiting == n
	})
}

// TestReplayEndpoints: a callback for a wait an operator failed is kept as unmatched
// (late); after a redrive its replay completes the wait (200 completed), a second replay
// is a 409 naming the resolution, and a callback kept only as an excerpt is a 422.
func TestReplayEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	cancelDefs(t, e, svc.srv.URL)
	id := e.startWaiting(t, "pair", 2)
	_, corr, _ := e.get(t, id).wait(t, "w1")
	r := e.do(t, http.MethodPost, cancelWaitPath(id, "w1"), mustJSON(t, map[string]any{"then": "fail"}))
	require.Equal(t, vocab.ExecFailed, decodeView(t, r).Status)
	require.Equal(t, http.StatusConflict, e.callback(t, id, corr).Status, "late")
	unmatched := e.do(t, http.MethodGet, "/api/v1/events/unmatched?reason=late", nil)
	require.Len(t, unmatched.JSON["items"], 1, string(unmatched.Raw))
	late := fmt.Sprint(unmatched.JSON["items"].([]any)[0].(map[string]any)["id"])
	path := "/api/v1/events/unmatched/" + late + "/replay"

	r = e.do(t, http.MethodPost, path, nil)
	requireProblem(t, r, http.StatusConflict, "replay-not-applied", "late", path)
	require.Equal(t, "late", r.JSON["outcome"])
	require.Equal(t, http.StatusOK, e.do(t, http.MethodPost, redrivePath(id), nil).Status)

	r = e.do(t, http.MethodPost, path, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "completed", r.JSON["outcome"])
	require.Equal(t, id, r.JSON["execution_id"])
	st, _, _ := e.get(t, id).wait(t, "w1")
	require.Equal(t, vocab.WaitCompleted, st)
	r = e.do(t, http.MethodPost, path, nil)
	requireProblem(t, r, http.StatusConflict, "event-resolved", "already replayed", path)
	require.Equal(t, "replayed", r.JSON["resolution"])

	big := e.do(t, http.MethodPost, "/api/internal/callbacks/acme", mustJSON(t, map[string]any{
		"execution_id": id, "correlation_id": uuid.NewString(), "filler": strings.Repeat("x", 600)}))
	require.Equal(t, http.StatusNotFound, big.Status, string(big.Raw))
	unmatched = e.do(t, http.MethodGet, "/api/v1/events/unmatched?limit=1", nil)
	cut := fmt.Sprint(unmatched.JSON["items"].([]any)[0].(map[string]any)["id"])
	path = "/api/v1/events/unmatched/" + cut + "/replay"
	requireProblem(t, e.do(t, http.MethodPost, path, nil), http.StatusUnprocessableEntity, "event-not-replayable", "excerpt", path)
	path = "/api/v1/events/unmatched/" + cut + "/dismiss"
	requireProblem(t, e.do(t, http.MethodPost, path, []byte(`{"reason": " "}`)), http.StatusBadRequest, "invalid-request", "reason", path)
	r = e.do(t, http.MethodPost, path, []byte(`{"reason": "resent by the shop"}`))
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "dismissed", r.JSON["resolution"])
	require.Equal(t, cut, fmt.Sprint(r.JSON["id"]))
}

// TestRedriveManyEndpoint: three failed executions; the dry run counts them, a request
// with limit 2 redrives two and says there are more, the next one the last.
func TestRedriveManyEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	cancelDefs(t, e, svc.srv.URL)
	for range 3 {
		id := e.startWaiting(t, "single", 1)
		r := e.do(t, http.MethodPost, cancelWaitPath(id, "wait"), mustJSON(t, map[string]any{"then": "fail", "reason": "provider 503"}))
		require.Equal(t, vocab.ExecFailed, decodeView(t, r).Status)
	}
	const path = "/api/v1/executions/redrive"
	r := e.do(t, http.MethodPost, path, []byte(`{"workflow": "single", "error_contains": "PROVIDER", "dry_run": true}`))
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, map[string]any{"matched": float64(3), "redriven": float64(0), "batches": float64(0), "dry_run": true, "more": false}, r.JSON)
	r = e.do(t, http.MethodPost, path, []byte(`{"workflow": "single", "limit": 2, "batch": 1}`))
	require.Equal(t, map[string]any{"matched": float64(3), "redriven": float64(2), "batches": float64(2), "dry_run": false, "more": true}, r.JSON)
	r = e.do(t, http.MethodPost, path, []byte(`{"workflow": "single", "limit": 2}`))
	require.Equal(t, map[string]any{"matched": float64(1), "redriven": float64(1), "batches": float64(1), "dry_run": false, "more": false}, r.JSON)
	requireProblem(t, e.do(t, http.MethodPost, path, []byte(`{"batch": 501}`)), http.StatusBadRequest, "invalid-request", "batch", path)
	list := e.do(t, http.MethodGet, "/api/v1/executions?status=waiting", nil)
	require.Len(t, list.JSON["items"], 3)
}
