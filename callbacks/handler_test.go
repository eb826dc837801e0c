package callbacks_test

// HTTP-level tests of the callback endpoint against real services: a PostgreSQL schema of
// its own per test, a running service.Service, and an httptest server playing the
// external service the wait_events node calls. Every answer is checked down to its RFC
// 7807 body. FuzzParse, which needs the unexported parse, is in handler_internal_test.go:
// an internal test file cannot import server (it imports callbacks).

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/callbacks"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Workflows every env stores: one wait_events node each, differing in the events they
// wait for.
const (
	wfAPI   = "api"   // apiCall only: one callback completes the wait
	wfBoth  = "both"  // apiCall and kafkaEvent, strategy all: a callback only records
	wfKafka = "kafka" // kafkaEvent only: a callback is not expected
	// wfNamed waits for one named callback event, approval: a callback naming it
	// completes the wait, one naming nothing (api_response) is not expected.
	wfNamed = "named"
	// wfNamedPair waits for two named callback events, approval and review (strategy all).
	wfNamedPair = "named-pair"
	wfFiltered  = "filtered" // one callback event "approval" whose filter wants decision yes
)

// waitTimeout bounds how long a test waits for the executor (correlated call, resume).
const waitTimeout = 15 * time.Second

// env is one running service on its own schema, with the fake external service and the
// three workflows stored.
type env struct {
	svc  *replica.Replica
	base string
	fake *testkit.FakeService
}

func setup(t *testing.T, cfg callbacks.Config) *env {
	t.Helper()
	schema := dbtest.NewSchema(t)
	fake := testkit.NewFakeService(t)
	rc := replica.Config(t, schema.URL, "t")
	rc.DBMaxConns, rc.Callbacks = 6, cfg
	s := replica.Start(t, rc)
	e := &env{svc: s, base: "http://" + s.Addr(), fake: fake}
	wait := func(data map[string]any) map[string]any {
		data["aggregationStrategy"] = "all"
		return map[string]any{"id": "wait", "type": "wait_events", "data": data}
	}
	apiCall := map[string]any{"url": fake.URL + "/process", "body": map[string]any{"order": "@{_trigger.order}"}}
	kafka := map[string]any{"topic": "orders"}
	for name, node := range map[string]map[string]any{
		wfAPI:   wait(map[string]any{"apiCall": apiCall}),
		wfBoth:  wait(map[string]any{"apiCall": apiCall, "kafkaEvent": kafka}),
		wfKafka: wait(map[string]any{"kafkaEvent": kafka}),
		wfNamed: wait(map[string]any{"events": []any{map[string]any{"name": "approval", "source": "callback"}}}),
		wfFiltered: wait(map[string]any{"events": []any{
			map[string]any{"name": "approval", "source": "callback", "filter": map[string]any{"decision": "yes"}},
		}}),
		wfNamedPair: wait(map[string]any{"events": []any{
			map[string]any{"name": "approval", "source": "callback"}, map[string]any{"name": "review", "source": "callback"},
		}}),
	} {
		r := testkit.Do(t, http.MethodPut, e.base+"/api/v1/workflows/"+name, mustJSON(t, map[string]any{"name": name, "nodes": []any{node}}), nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	}
	return e
}

// start starts an execution of workflow wf and returns its id.
func (e *env) start(t *testing.T, wf string) string {
	t.Helper()
	r := testkit.Do(t, http.MethodPost, e.base+"/api/v1/workflows/"+wf+"/executions", []byte(`{"input": {"order": 42}}`), nil)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	id, _ := r.JSON["id"].(string)
	require.NotEmpty(t, id)
	return id
}

// newWait starts an execution of wf (which must have an apiCall) and waits for its
// correlated call; it returns the execution and correlation ids the call carried.
func (e *env) newWait(t *testing.T, wf string) (execID, corrID string) {
	t.Helper()
	execID = e.start(t, wf)
	c := e.fake.Await(t, waitTimeout, "/process", func(r testkit.Request) bool { return r.Field("execution_id") == execID },
		"correlated call for execution "+execID)
	corrID = c.Field("correlation_id")
	require.Equal(t, execID, c.Header.Get(callbacks.HeaderExecutionID))
	require.Equal(t, corrID, c.Header.Get(callbacks.HeaderCorrelationID))
	require.NoError(t, uuid.Validate(corrID))
	return execID, corrID
}

// execution returns GET /api/v1/executions/:id.
func (e *env) execution(t *testing.T, execID string) map[string]any {
	t.Helper()
	r := testkit.Do(t, http.MethodGet, e.base+"/api/v1/executions/"+execID, nil, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	return r.JSON
}

// waitCorrelationID waits until the execution has registered its wait and returns the
// wait's correlation id: the way to learn it when no correlated call is made.
func (e *env) waitCorrelationID(t *testing.T, execID string) string {
	t.Helper()
	var corr string
	require.Eventually(t, func() bool {
		waits, _ := e.execution(t, execID)["wait_states"].([]any)
		if len(waits) == 0 {
			return false
		}
		corr, _ = waits[0].(map[string]any)["correlation_id"].(string)
		return corr != ""
	}, waitTimeout, 10*time.Millisecond, "execution %s registered no wait", execID)
	return corr
}

// callback POSTs body to the callback endpoint as service acme.
func (e *env) callback(t *testing.T, body []byte, hdr http.Header) testkit.Response {
	t.Helper()
	return testkit.Do(t, http.MethodPost, e.base+"/api/internal/callbacks/acme", body, hdr)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

// idBody is a callback body carrying the ids in the body fields, plus extra members.
func idBody(t *testing.T, execID, corrID string, extra map[string]any) []byte {
	t.Helper()
	m := map[string]any{callbacks.FieldExecutionID: execID, callbacks.FieldCorrelationID: corrID}
	for k, v := range extra {
		m[k] = v
	}
	return mustJSON(t, m)
}

func idHeaders(execID, corrID string) http.Header {
	h := http.Header{}
	if execID != "" {
		h.Set(callbacks.HeaderExecutionID, execID)
	}
	if corrID != "" {
		h.Set(callbacks.HeaderCorrelationID, corrID)
	}
	return h
}

func randomID() string { return uuid.NewString() }

// requireProblem asserts an RFC 7807 answer: status line, content type, and the members
// type (TypeBaseURI+slug), title, status, detail (containing detailPart) and instance.
func requireProblem(t *testing.T, r testkit.Response, status int, slug, detailPart string) {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Raw))
	require.Equal(t, problem.ContentType, r.Header.Get("Content-Type"))
	require.NotNil(t, r.JSON, "problem body is not a JSON object: %s", r.Raw)
	require.Equal(t, problem.TypeBaseURI+slug, r.JSON["type"], string(r.Raw))
	require.Equal(t, http.StatusText(status), r.JSON["title"])
	require.Equal(t, float64(status), r.JSON["status"])
	detail, _ := r.JSON["detail"].(string)
	require.NotEmpty(t, detail)
	require.Contains(t, detail, detailPart)
	require.Equal(t, "/api/internal/callbacks/acme", r.JSON["instance"])
}

// requireAccepted asserts a 200/202 answer and returns its body.
func requireAccepted(t *testing.T, r testkit.Response, status int, outcome, waitStatus string) callbacks.Accepted {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Raw))
	require.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var a callbacks.Accepted
	require.NoError(t, json.Unmarshal(r.Raw, &a))
	require.Equal(t, outcome, a.Status)
	require.Equal(t, waitStatus, string(a.WaitStatus))
	require.NotEqual(t, uuid.Nil, a.WaitStateID)
	return a
}

// TestCallbackOutcomes drives real waits through every answer the aggregator can give.
func TestCallbackOutcomes(t *testing.T) {
	t.Parallel()
	e := setup(t, callbacks.Config{})

	t.Run("recorded, already_recorded, duplicate while waiting", func(t *testing.T) {
		t.Parallel()
		execID, corrID := e.newWait(t, wfBoth)
		first := idBody(t, execID, corrID, map[string]any{"result": "ok"})

		rec := requireAccepted(t, e.callback(t, first, nil), http.StatusAccepted, "recorded", "waiting")

		r := e.callback(t, idBody(t, execID, corrID, map[string]any{"result": "different"}), nil)
		requireProblem(t, r, http.StatusConflict, "already-recorded", "already holds a different api_response")

		dup := requireAccepted(t, e.callback(t, first, nil), http.StatusOK, "duplicate", "waiting")
		require.Equal(t, rec.WaitStateID, dup.WaitStateID)
		require.Equal(t, rec.Version, dup.Version, "a duplicate changes nothing")

		// The wait still waits for its kafka_event, holding the first body only.
		waits := e.execution(t, execID)["wait_states"].([]any)
		require.Len(t, waits, 1)
		w := waits[0].(map[string]any)
		require.Equal(t, "waiting", w["status"])
		require.Len(t, w["received_events"], 1)
	})

	t.Run("completed, duplicate, late after completion", func(t *testing.T) {
		t.Parallel()
		execID, corrID := e.newWait(t, wfAPI)
		first := idBody(t, execID, corrID, map[string]any{"result": "ok"})

		done := requireAccepted(t, e.callback(t, first, nil), http.StatusAccepted, "completed", "completed")

		dup := requireAccepted(t, e.callback(t, first, nil), http.StatusOK, "duplicate", "completed")
		require.Equal(t, done.WaitStateID, dup.WaitStateID)
		require.Equal(t, done.Version, dup.Version)

		r := e.callback(t, idBody(t, execID, corrID, map[string]any{"result": "changed my mind"}), nil)
		requireProblem(t, r, http.StatusConflict, "late-event", "already completed")
		require.Equal(t, "completed", r.JSON["wait_status"])

		// The execution resumes with the first body as the wait's output.
		require.Eventually(t, func() bool {
			return e.execution(t, execID)["status"] == "completed"
		}, waitTimeout, 20*time.Millisecond)
		nodes := e.execution(t, execID)["nodes"].([]any)
		require.Len(t, nodes, 1)
		out := nodes[0].(map[string]any)["output"].(map[string]any)
		require.Equal(t, "ok", out["apiResponse"].(map[string]any)["result"])
	})

	t.Run("not expected by a kafka-only wait", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfKafka)
		corrID := e.waitCorrelationID(t, execID)
		r := e.callback(t, idBody(t, execID, corrID, nil), nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "not-expected", "does not expect a callback")
	})

	t.Run("ids from headers take precedence over body fields", func(t *testing.T) {
		t.Parallel()
		execID, corrID := e.newWait(t, wfAPI)
		// Body fields name a wait that does not exist: the headers win.
		r := e.callback(t, idBody(t, randomID(), randomID(), nil), idHeaders(execID, corrID))
		requireAccepted(t, r, http.StatusAccepted, "completed", "completed")
	})

	t.Run("body fields are ignored when headers are present", func(t *testing.T) {
		t.Parallel()
		execID, corrID := e.newWait(t, wfAPI)
		// Right ids in the body, wrong ones in the headers: the headers still win.
		r := e.callback(t, idBody(t, execID, corrID, nil), idHeaders(randomID(), randomID()))
		requireProblem(t, r, http.StatusNotFound, "wait-not-found", "no wait matches")
		// Nothing was consumed: the right ids still complete the wait.
		requireAccepted(t, e.callback(t, idBody(t, execID, corrID, nil), nil), http.StatusAccepted, "completed", "completed")
	})

	t.Run("each id falls back to its body field on its own", func(t *testing.T) {
		t.Parallel()
		execID, corrID := e.newWait(t, wfAPI)
		r := e.callback(t, mustJSON(t, map[string]any{callbacks.FieldCorrelationID: corrID}), idHeaders(execID, ""))
		requireAccepted(t, r, http.StatusAccepted, "completed", "completed")
	})

	t.Run("id mismatch answers 404 both ways and consumes nothing", func(t *testing.T) {
		t.Parallel()
		execA, corrA := e.newWait(t, wfAPI)
		execB, _ := e.newWait(t, wfAPI)

		for name, body := range map[string][]byte{
			"correlation id of A with execution id of B":  idBody(t, execB, corrA, nil),
			"execution id of A with a random correlation": idBody(t, execA, randomID(), nil),
		} {
			r := e.callback(t, body, nil)
			requireProblem(t, r, http.StatusNotFound, "wait-not-found", "no wait matches")
			require.NotContains(t, string(r.Raw), "mismatch", "%s: the answer must not tell a mismatch from an unknown id", name)
		}
		requireAccepted(t, e.callback(t, idBody(t, execA, corrA, nil), nil), http.StatusAccepted, "completed", "completed")
	})
}

// TestCallbackNamedEvents: a callback names the wait's event it is with ?event= or
// X-Rendezvous-Event; naming none is api_response, which a wait of named events only does
// not expect. The answers name the event.
func TestCallbackNamedEvents(t *testing.T) {
	t.Parallel()
	e := setup(t, callbacks.Config{})
	named := func(t *testing.T, query string, body []byte, hdr http.Header) testkit.Response {
		t.Helper()
		return testkit.Do(t, http.MethodPost, e.base+"/api/internal/callbacks/acme"+query, body, hdr)
	}

	t.Run("completes via ?event=, not without it", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfNamed)
		corrID := e.waitCorrelationID(t, execID)
		body := idBody(t, execID, corrID, map[string]any{"decision": "yes"})

		r := e.callback(t, body, nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "not-expected", "does not expect a callback for event api_response")
		require.Equal(t, "api_response", r.JSON["event"])
		r = named(t, "?event=shipment", body, nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "not-expected", "does not expect a callback for event shipment")
		require.Equal(t, "shipment", r.JSON["event"])

		requireAccepted(t, named(t, "?event=approval", body, nil), http.StatusAccepted, "completed", "completed")
		requireAccepted(t, named(t, "?event=approval", body, nil), http.StatusOK, "duplicate", "completed")
		r = named(t, "?event=approval", idBody(t, execID, corrID, map[string]any{"decision": "no"}), nil)
		requireProblem(t, r, http.StatusConflict, "late-event", "already completed")
		require.Equal(t, "approval", r.JSON["event"])

		require.Eventually(t, func() bool {
			return e.execution(t, execID)["status"] == "completed"
		}, waitTimeout, 20*time.Millisecond)
		nodes := e.execution(t, execID)["nodes"].([]any)
		require.Len(t, nodes, 1)
		events := nodes[0].(map[string]any)["output"].(map[string]any)["events"].([]any)
		require.Len(t, events, 1)
		ev := events[0].(map[string]any)
		require.Equal(t, "approval", ev["name"])
		require.Equal(t, map[string]any{"kind": "callback", "service": "acme"}, ev["source"])
	})

	t.Run("a body failing the event's filter is refused, not unknown", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfFiltered)
		corrID := e.waitCorrelationID(t, execID)
		r := named(t, "?event=approval", idBody(t, execID, corrID, map[string]any{"decision": "no"}), nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "filter-mismatch", "does not pass the filter of event approval")
		require.Equal(t, "approval", r.JSON["event"])
		requireAccepted(t, named(t, "?event=approval", idBody(t, execID, corrID, map[string]any{"decision": "yes"}), nil),
			http.StatusAccepted, "completed", "completed")
	})

	t.Run("numbers beyond a float64 are taken as they are", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfNamed)
		corrID := e.waitCorrelationID(t, execID)
		body := idBody(t, execID, corrID, map[string]any{"amount": json.Number("1e400"), "ref": json.Number("9007199254740993")})
		requireAccepted(t, named(t, "?event=approval", body, nil), http.StatusAccepted, "completed", "completed")
		var same bool
		require.NoError(t, e.svc.Pool().QueryRow(t.Context(), `SELECT output::jsonb -> 'approval' -> 'ref' = '9007199254740993'::jsonb
			AND output::jsonb -> 'approval' -> 'amount' = '1e400'::jsonb FROM node_executions WHERE execution_id = $1`, execID).Scan(&same))
		require.True(t, same, "the node output holds the numbers as sent")
	})

	t.Run("the header names it too", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfNamed)
		corrID := e.waitCorrelationID(t, execID)
		hdr := http.Header{callbacks.HeaderEvent: {"approval"}}
		requireAccepted(t, named(t, "", idBody(t, execID, corrID, nil), hdr), http.StatusAccepted, "completed", "completed")
	})

	t.Run("already recorded names the event", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfNamedPair)
		corrID := e.waitCorrelationID(t, execID)
		requireAccepted(t, named(t, "?event=approval", idBody(t, execID, corrID, map[string]any{"v": 1}), nil),
			http.StatusAccepted, "recorded", "waiting")
		r := named(t, "?event=approval", idBody(t, execID, corrID, map[string]any{"v": 2}), nil)
		requireProblem(t, r, http.StatusConflict, "already-recorded", "already holds a different approval")
		require.Equal(t, "approval", r.JSON["event"])
		requireAccepted(t, named(t, "?event=review", idBody(t, execID, corrID, nil), nil), http.StatusAccepted, "completed", "completed")
	})

	t.Run("malformed names are refused before the wait is touched", func(t *testing.T) {
		t.Parallel()
		execID := e.start(t, wfNamed)
		corrID := e.waitCorrelationID(t, execID)
		body := idBody(t, execID, corrID, nil)
		for _, tt := range []struct {
			query  string
			hdr    http.Header
			detail string
		}{
			{"?event=appro%20val", nil, "1 to 64 letters"},
			{"?event=" + strings.Repeat("a", 65), nil, "1 to 64 letters"},
			{"?event=approval&event=approval", nil, "more than once"},
			{"?event=approval", http.Header{callbacks.HeaderEvent: {"review"}}, "name different events"},
		} {
			requireProblem(t, named(t, tt.query, body, tt.hdr), http.StatusBadRequest, "malformed-event", tt.detail)
		}
		// The same name both ways agrees; an empty one is no name.
		requireAccepted(t, named(t, "?event=approval", body, http.Header{callbacks.HeaderEvent: {"approval"}}),
			http.StatusAccepted, "completed", "completed")
		r := named(t, "?event=", body, nil)
		requireProblem(t, r, http.StatusUnprocessableEntity, "not-expected", "event api_response")
	})
}

// TestCallbackRejections covers the answers given before or instead of touching a wait.
func TestCallbackRejections(t *testing.T) {
	t.Parallel()
	e := setup(t, callbacks.Config{})
	exec, corr := randomID(), randomID()

	tests := []struct {
		name   string
		body   []byte
		hdr    http.Header
		status int
		slug   string
		detail string
	}{
		{"both ids missing", []byte(`{"result": 1}`), nil, 400, "missing-id", "missing execution_id and correlation_id"},
		{"empty body", nil, nil, 400, "missing-id", "missing execution_id and correlation_id"},
		{"whitespace body", []byte(" \n\t "), nil, 400, "missing-id", "missing execution_id and correlation_id"},
		{"execution id missing", idBody(t, "", corr, nil), nil, 400, "missing-id", "missing execution_id:"},
		{"correlation id missing", idBody(t, exec, "", nil), nil, 400, "missing-id", "missing correlation_id:"},
		{"correlation id missing, execution id in header", []byte(`{}`), idHeaders(exec, ""), 400, "missing-id", "missing correlation_id:"},
		{"ids not strings", []byte(`{"execution_id": 1, "correlation_id": true}`), nil, 400, "missing-id", "missing execution_id and correlation_id"},
		{"body not an object", []byte(`["` + exec + `", "` + corr + `"]`), nil, 400, "missing-id", "missing execution_id and correlation_id"},
		{"malformed JSON", []byte(`{"execution_id": "` + exec + `",`), nil, 400, "malformed-json", "not valid JSON"},
		{"malformed JSON with ids in headers", []byte(`not json`), idHeaders(exec, corr), 400, "malformed-json", "not valid JSON"},
		{"execution id not a UUID", idBody(t, "order-17", corr, nil), nil, 400, "malformed-id", "execution_id is not a UUID"},
		{"correlation id not a UUID", idBody(t, exec, "42", nil), nil, 400, "malformed-id", "correlation_id is not a UUID"},
		{"header id not a UUID", idBody(t, exec, corr, nil), idHeaders("", "nope"), 400, "malformed-id", "correlation_id is not a UUID"},
		{"unknown ids", idBody(t, exec, corr, nil), nil, 404, "wait-not-found", "no wait matches"},
		{"unknown ids in headers, no body", nil, idHeaders(exec, corr), 404, "wait-not-found", "no wait matches"},
		{"payload holding NUL", idBody(t, exec, corr, map[string]any{"note": "a\x00b"}), nil, 400, "unstorable-payload", `\u0000`},
		// What Go reads and jsonb refuses: a 5xx here would have the sender retry forever.
		{"payload not UTF-8", rawIDBody(exec, corr, `"caf`+"\xc3"+`"`), nil, 400, "unstorable-payload", "not valid UTF-8"},
		{"payload with half a surrogate pair", rawIDBody(exec, corr, `"\ud83d"`), nil, 400, "unstorable-payload", `\ud83d`},
		{"payload with a number beyond numeric", rawIDBody(exec, corr, `1e-20000`), nil, 400, "unstorable-payload", "numeric range"},
		{"event name not a name", idBody(t, exec, corr, nil), http.Header{callbacks.HeaderEvent: {"a.b"}}, 400, "malformed-event", "1 to 64 letters"},
		{"event named twice", idBody(t, exec, corr, nil), http.Header{callbacks.HeaderEvent: {"a", "b"}}, 400, "malformed-event", "more than once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireProblem(t, e.callback(t, tt.body, tt.hdr), tt.status, tt.slug, tt.detail)
		})
	}
	for _, service := range []string{"a%00b", "a%0Ab", "%FF", strings.Repeat("s", callbacks.MaxServiceLen+1)} {
		t.Run("service label "+service[:min(len(service), 8)], func(t *testing.T) {
			t.Parallel()
			r := testkit.Do(t, http.MethodPost, e.base+"/api/internal/callbacks/"+service, idBody(t, exec, corr, nil), nil)
			require.Equal(t, http.StatusBadRequest, r.Status, string(r.Raw))
			require.Equal(t, problem.ContentType, r.Header.Get("Content-Type"))
			require.Equal(t, problem.TypeBaseURI+"invalid-service", r.JSON["type"], string(r.Raw))
			require.Contains(t, r.JSON["detail"], "without control characters")
			require.Equal(t, "/api/internal/callbacks/"+service, r.JSON["instance"], "the path as sent, escaped")
		})
	}
}

// rawIDBody is a callback body with both ids and a member note holding noteJSON as is.
func rawIDBody(execID, corrID, noteJSON string) []byte {
	return []byte(`{"execution_id": "` + execID + `", "correlation_id": "` + corrID + `", "note": ` + noteJSON + `}`)
}

// TestCallbackRefusedValueFailsOnlyItsSender: concurrent callbacks are decided in shared
// transactions. A value PostgreSQL refuses that no check here foresaw (a trigger stands
// for it) fails the transaction it is in; only its sender gets the error (a 500: nothing
// tells it from a fault of ours, so the sender is not told to give up), and the callbacks
// batched with it are recorded.
func TestCallbackRefusedValueFailsOnlyItsSender(t *testing.T) {
	t.Parallel()
	e := setup(t, callbacks.Config{})
	dbtest.FailUpdates(t, e.svc.Pool(), "refuse_marked", "execution_wait_states",
		`NEW.api_response_data->>'refuse' = 'yes'`, "22023", "value refused for the test")

	const good, bad = 24, 8
	type target struct{ exec, corr string }
	waits := make([]target, good+bad)
	for i := range waits {
		waits[i].exec, waits[i].corr = e.newWait(t, wfAPI)
	}
	answers := make([]testkit.Response, len(waits))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, w := range waits {
		wg.Go(func() {
			<-start
			refuse := "no"
			if i >= good {
				refuse = "yes"
			}
			answers[i] = e.callback(t, idBody(t, w.exec, w.corr, map[string]any{"refuse": refuse}), nil)
		})
	}
	close(start)
	wg.Wait()
	for i, r := range answers {
		if i < good {
			requireAccepted(t, r, http.StatusAccepted, "completed", "completed")
		} else {
			require.Equal(t, http.StatusInternalServerError, r.Status, string(r.Raw))
			require.Equal(t, problem.ContentType, r.Header.Get("Content-Type"))
		}
	}
	var completed, waiting int
	require.NoError(t, e.svc.Pool().QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'completed'),
		count(*) FILTER (WHERE status = 'waiting') FROM execution_wait_states`).Scan(&completed, &waiting))
	require.Equal(t, good, completed)
	require.Equal(t, bad, waiting)
}

// TestCallbackBodyLimit checks MaxBodyBytes with and without a Content-Length.
func TestCallbackBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 1024
	e := setup(t, callbacks.Config{MaxBodyBytes: limit})

	// bodyOf returns a JSON callback body of exactly n bytes.
	bodyOf := func(t *testing.T, execID, corrID string, n int) []byte {
		base := idBody(t, execID, corrID, map[string]any{"pad": ""})
		require.Less(t, len(base), n)
		b := idBody(t, execID, corrID, map[string]any{"pad": strings.Repeat("x", n-len(base))})
		require.Len(t, b, n)
		return b
	}

	tests := []struct {
		name    string
		size    int
		chunked bool // no Content-Length: the limit is enforced while reading
		status  int
	}{
		{"over the limit", limit + 1, false, http.StatusRequestEntityTooLarge},
		{"far over the limit", 64 * limit, false, http.StatusRequestEntityTooLarge},
		{"over the limit, chunked", limit + 1, true, http.StatusRequestEntityTooLarge},
		{"at the limit", limit, false, http.StatusAccepted},
		{"at the limit, chunked", limit, true, http.StatusAccepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			execID, corrID := e.newWait(t, wfAPI)
			body := bodyOf(t, execID, corrID, tt.size)
			var rd io.Reader = bytes.NewReader(body)
			if tt.chunked {
				rd = iotest.HalfReader(rd) // not a type http.NewRequest measures
			}
			r := testkit.Do(t, http.MethodPost, e.base+"/api/internal/callbacks/acme", rd, nil)
			if tt.status == http.StatusAccepted {
				requireAccepted(t, r, http.StatusAccepted, "completed", "completed")
				return
			}
			requireProblem(t, r, tt.status, "body-too-large", fmt.Sprintf("body exceeds %d bytes", limit))
			// The oversized callback changed nothing: a small one still completes the wait.
			requireAccepted(t, e.callback(t, idBody(t, execID, corrID, nil), nil), http.StatusAccepted, "completed", "completed")
		})
	}
}

// TestCallbackDatabaseUnavailable closes the service's pool, which is what a callback
// meets while the process shuts down: it must ask the sender to retry.
func TestCallbackDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	e := setup(t, callbacks.Config{})
	execID, corrID := e.newWait(t, wfAPI)
	e.svc.Pool().Close()

	r := e.callback(t, idBody(t, execID, corrID, nil), nil)
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "retry later")
	require.Equal(t, "1", r.Header.Get("Retry-After"))

	// Requests rejected before the database is touched keep their own answers.
	requireProblem(t, e.callback(t, []byte(`{`), nil), http.StatusBadRequest, "malformed-json", "not valid JSON")
}

// Secrets of the signed service (two, as during a rotation) and one it does not know.
var (
	secretA     = "whsec_" + base64.StdEncoding.EncodeToString([]byte("rendezvous-test-secret-a-0123456"))
	secretB     = "whsec_" + base64.StdEncoding.EncodeToString([]byte("rendezvous-test-secret-b-6543210"))
	secretOther = "whsec_" + base64.StdEncoding.EncodeToString([]byte("rendezvous-test-secret-unknown!!"))
)

// signed returns the Standard Webhooks headers for body, signed with secret.
func signed(t *testing.T, secret, msgID string, ts time.Time, body []byte) http.Header {
	t.Helper()
	sig, err := callbacks.Sign(secret, msgID, ts, body)
	require.NoError(t, err)
	h := http.Header{}
	h.Set(callbacks.HeaderWebhookID, msgID)
	h.Set(callbacks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(callbacks.HeaderWebhookSignature, sig)
	return h
}

func msgID() string { return "msg_" + strings.ReplaceAll(uuid.NewString(), "-", "") }

// TestSignedCallbacks runs a service that requires Standard Webhooks signatures.
func TestSignedCallbacks(t *testing.T) {
	t.Parallel()
	e := setup(t, callbacks.Config{Secrets: []string{secretA, secretB}})

	t.Run("rejections", func(t *testing.T) {
		t.Parallel()
		body := idBody(t, randomID(), randomID(), map[string]any{"result": "ok"})
		now := time.Now()
		without := func(h http.Header, key string) http.Header { h.Del(key); return h }

		tests := []struct {
			name   string
			body   []byte
			hdr    http.Header
			detail string
		}{
			{"no signature headers", body, nil, "webhook signature headers missing: webhook-id, webhook-timestamp, webhook-signature"},
			{"no webhook-id", body, without(signed(t, secretA, msgID(), now, body), callbacks.HeaderWebhookID), "missing: webhook-id"},
			{"no webhook-timestamp", body, without(signed(t, secretA, msgID(), now, body), callbacks.HeaderWebhookTimestamp), "missing: webhook-timestamp"},
			{"no webhook-signature", body, without(signed(t, secretA, msgID(), now, body), callbacks.HeaderWebhookSignature), "missing: webhook-signature"},
			{"unsigned malformed JSON", []byte(`{`), nil, "webhook signature headers missing"},
			{"wrong secret", body, signed(t, secretOther, msgID(), now, body), "webhook signature invalid"},
			{"tampered body", bytes.Replace(body, []byte(`"ok"`), []byte(`"ko"`), 1), signed(t, secretA, msgID(), now, body), "webhook signature invalid"},
			{"timestamp too old", body, signed(t, secretA, msgID(), now.Add(-6*time.Minute), body), "too old"},
			{"timestamp in the future", body, signed(t, secretA, msgID(), now.Add(6*time.Minute), body), "in the future"},
			{"timestamp not unix seconds", body, func() http.Header {
				h := signed(t, secretA, msgID(), now, body)
				h.Set(callbacks.HeaderWebhookTimestamp, now.Format(time.RFC3339))
				return h
			}(), "not unix seconds"},
			{"signature of another webhook-id", body, func() http.Header {
				h := signed(t, secretA, msgID(), now, body)
				h.Set(callbacks.HeaderWebhookID, msgID())
				return h
			}(), "webhook signature invalid"},
			{"only unsupported signature versions", body, func() http.Header {
				h := signed(t, secretA, msgID(), now, body)
				h.Set(callbacks.HeaderWebhookSignature, "v1a,"+strings.TrimPrefix(h.Get(callbacks.HeaderWebhookSignature), "v1,"))
				return h
			}(), "webhook signature invalid"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				requireProblem(t, e.callback(t, tt.body, tt.hdr), http.StatusUnauthorized, "invalid-signature", tt.detail)
			})
		}
	})

	t.Run("accepted signatures", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			sign func(t *testing.T, body []byte) http.Header
		}{
			{"first secret", func(t *testing.T, body []byte) http.Header { return signed(t, secretA, msgID(), time.Now(), body) }},
			{"second secret (rotation)", func(t *testing.T, body []byte) http.Header {
				return signed(t, secretB, msgID(), time.Now(), body)
			}},
			{"timestamp within tolerance", func(t *testing.T, body []byte) http.Header {
				return signed(t, secretA, msgID(), time.Now().Add(-4*time.Minute), body)
			}},
			{"one valid among several signatures", func(t *testing.T, body []byte) http.Header {
				id, ts := msgID(), time.Now()
				h := signed(t, secretA, id, ts, body)
				bad, err := callbacks.Sign(secretOther, id, ts, body)
				require.NoError(t, err)
				h.Set(callbacks.HeaderWebhookSignature, "v1a,AAAA "+bad+" "+h.Get(callbacks.HeaderWebhookSignature))
				return h
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				execID, corrID := e.newWait(t, wfAPI)
				body := idBody(t, execID, corrID, map[string]any{"result": "ok"})
				requireAccepted(t, e.callback(t, body, tt.sign(t, body)), http.StatusAccepted, "completed", "completed")
			})
		}
	})

	t.Run("valid signature reaches the id checks", func(t *testing.T) {
		t.Parallel()
		body := idBody(t, randomID(), randomID(), nil)
		r := e.callback(t, body, signed(t, secretA, msgID(), time.Now(), body))
		requireProblem(t, r, http.StatusNotFound, "wait-not-found", "no wait matches")

		body = []byte(`{"execution_id": 1}`)
		r = e.callback(t, body, signed(t, secretB, msgID(), time.Now(), body))
		requireProblem(t, r, http.StatusBadRequest, "missing-id", "missing execution_id and correlation_id")
	})

	t.Run("header ids must agree with the signed body's", func(t *testing.T) {
		t.Parallel()
		// A captured signed callback replayed with another wait's ids in the headers.
		execA, corrA := e.newWait(t, wfAPI)
		execB, corrB := e.newWait(t, wfAPI)
		body := idBody(t, execA, corrA, map[string]any{"result": "ok"})
		hdr := signed(t, secretA, msgID(), time.Now(), body)
		for k, v := range idHeaders(execB, corrB) {
			hdr[k] = v
		}
		requireProblem(t, e.callback(t, body, hdr), http.StatusBadRequest, "unsigned-ids", "differs from the signed body's execution_id")
		hdr = signed(t, secretA, msgID(), time.Now(), body)
		hdr.Set(callbacks.HeaderCorrelationID, corrB)
		requireProblem(t, e.callback(t, body, hdr), http.StatusBadRequest, "unsigned-ids", "differs from the signed body's correlation_id")

		// Agreeing headers, or ids in the headers only, are accepted.
		hdr = signed(t, secretA, msgID(), time.Now(), body)
		for k, v := range idHeaders(execA, corrA) {
			hdr[k] = v
		}
		requireAccepted(t, e.callback(t, body, hdr), http.StatusAccepted, "completed", "completed")
		only := []byte(`{"result": "ok"}`)
		hdr = signed(t, secretA, msgID(), time.Now(), only)
		for k, v := range idHeaders(execB, corrB) {
			hdr[k] = v
		}
		requireAccepted(t, e.callback(t, only, hdr), http.StatusAccepted, "completed", "completed")
	})

	t.Run("a delivery is bound to its wait and event", func(t *testing.T) {
		t.Parallel()
		// The signature covers neither the id headers nor the event's name: a captured
		// delivery replayed with another wait's ids in them, or under another event name,
		// is refused; the delivery's own retries are not.
		execA, corrA := e.newWait(t, wfAPI)
		execB, corrB := e.newWait(t, wfAPI)
		body := []byte(`{"result": "ok"}`)
		hdr := signed(t, secretA, msgID(), time.Now(), body)
		to := func(execID, corrID, event string) http.Header {
			h := hdr.Clone()
			for k, v := range idHeaders(execID, corrID) {
				h[k] = v
			}
			if event != "" {
				h.Set(callbacks.HeaderEvent, event)
			}
			return h
		}
		requireAccepted(t, e.callback(t, body, to(execA, corrA, "")), http.StatusAccepted, "completed", "completed")
		requireProblem(t, e.callback(t, body, to(execB, corrB, "")), http.StatusConflict, "webhook-id-reused", "delivered to another wait")
		requireProblem(t, e.callback(t, body, to(execA, corrB, "")), http.StatusConflict, "webhook-id-reused", "delivered to another wait")
		requireAccepted(t, e.callback(t, body, to(execA, corrA, "")), http.StatusOK, "duplicate", "completed")
		// B was untouched: its own delivery completes it.
		requireAccepted(t, e.callback(t, body, func() http.Header {
			h := signed(t, secretA, msgID(), time.Now(), body)
			for k, v := range idHeaders(execB, corrB) {
				h[k] = v
			}
			return h
		}()), http.StatusAccepted, "completed", "completed")

		// Ids in the signed body: the event's name is still unsigned.
		execC := e.start(t, wfNamedPair)
		corrC := e.waitCorrelationID(t, execC)
		signedBody := idBody(t, execC, corrC, map[string]any{"ok": true})
		hdr = signed(t, secretA, msgID(), time.Now(), signedBody)
		hdr.Set(callbacks.HeaderEvent, "approval")
		requireAccepted(t, e.callback(t, signedBody, hdr), http.StatusAccepted, "recorded", "waiting")
		hdr.Set(callbacks.HeaderEvent, "review")
		requireProblem(t, e.callback(t, signedBody, hdr), http.StatusConflict, "webhook-id-reused", "as another event")
		hdr.Set(callbacks.HeaderEvent, "approval")
		requireAccepted(t, e.callback(t, signedBody, hdr), http.StatusOK, "duplicate", "waiting")
	})

	t.Run("webhook-id is the idempotency key", func(t *testing.T) {
		t.Parallel()
		execID, corrID := e.newWait(t, wfAPI)
		id := msgID()
		first := idBody(t, execID, corrID, map[string]any{"result": "ok", "attempt": 1})
		requireAccepted(t, e.callback(t, first, signed(t, secretA, id, time.Now(), first)), http.StatusAccepted, "completed", "completed")

		// A redelivery re-serialises its body: same webhook-id, different bytes, still a
		// duplicate, whichever secret signed it.
		retry := idBody(t, execID, corrID, map[string]any{"result": "ok", "attempt": 2})
		requireAccepted(t, e.callback(t, retry, signed(t, secretB, id, time.Now(), retry)), http.StatusOK, "duplicate", "completed")

		// The same bytes under a new webhook-id are a different event, and late.
		r := e.callback(t, first, signed(t, secretA, msgID(), time.Now(), first))
		requireProblem(t, r, http.StatusConflict, "late-event", "already completed")
	})
}
