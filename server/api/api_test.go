package api_test

// HTTP-level tests of the management API against a real service on a PostgreSQL schema
// of its own. Every error answer is checked down to its RFC 7807 body.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server"
)

// env is one running service on its own schema.
type env struct {
	svc  *server.Service
	base string
}

func setup(t *testing.T) *env {
	t.Helper()
	schema := dbtest.NewSchema(t)
	cfg := replica.Config(t, schema.URL, "t")
	cfg.DBMaxConns = 6
	s := replica.Start(t, cfg).Service
	return &env{svc: s, base: "http://" + s.Addr()}
}

func (e *env) do(t *testing.T, method, path string, body []byte) testkit.Response {
	t.Helper()
	return testkit.Do(t, method, e.base+path, body, nil)
}

func (e *env) put(t *testing.T, name string, def any) testkit.Response {
	t.Helper()
	raw, ok := def.([]byte)
	if !ok {
		raw = mustJSON(t, def)
	}
	return e.do(t, http.MethodPut, "/api/v1/workflows/"+name, raw)
}

func (e *env) startExecution(t *testing.T, name string, body []byte) testkit.Response {
	t.Helper()
	return e.do(t, http.MethodPost, "/api/v1/workflows/"+name+"/executions", body)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	return raw
}

// requireProblem asserts an RFC 7807 answer: status line, content type, and the members
// type (TypeBaseURI+slug, or about:blank for an empty slug), title, status and
// instance; detail must contain detailPart, or be absent when detailPart is empty.
func requireProblem(t *testing.T, r testkit.Response, status int, slug, detailPart, instance string) {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Raw))
	require.Equal(t, problem.ContentType, r.Header.Get("Content-Type"))
	require.NotNil(t, r.JSON, "problem body is not a JSON object: %s", r.Raw)
	wantType := "about:blank"
	if slug != "" {
		wantType = problem.TypeBaseURI + slug
	}
	require.Equal(t, wantType, r.JSON["type"], string(r.Raw))
	require.Equal(t, http.StatusText(status), r.JSON["title"])
	require.Equal(t, float64(status), r.JSON["status"])
	require.Equal(t, instance, r.JSON["instance"])
	if detailPart == "" {
		require.NotContains(t, r.JSON, "detail", "a detail repeating the title is left out")
		return
	}
	detail, _ := r.JSON["detail"].(string)
	require.Contains(t, detail, detailPart)
}

type fieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// requireInvalid asserts a 422 invalid-definition problem and returns its errors member.
func requireInvalid(t *testing.T, r testkit.Response, name string) []fieldError {
	t.Helper()
	requireProblem(t, r, http.StatusUnprocessableEntity, "invalid-definition", "invalid definition: ", "/api/v1/workflows/"+name)
	var body struct {
		Errors []fieldError `json:"errors"`
	}
	require.NoError(t, json.Unmarshal(r.Raw, &body))
	require.NotEmpty(t, body.Errors, string(r.Raw))
	for _, fe := range body.Errors {
		require.NotEmpty(t, fe.Message, "%+v", fe)
	}
	return body.Errors
}

// waitDef is a valid definition: a Kafka-only wait (so no call goes out and the wait
// stays open), then an http node that runs only after it.
func waitDef(name, topic string) map[string]any {
	return map[string]any{
		"name": name,
		"vars": map[string]any{"env": "test"},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"kafkaEvent": map[string]any{"topic": topic}, "timeout": 300,
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{
				"url": "http://127.0.0.1:1/never", "method": "POST",
			}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	}
}

type stored struct {
	Name      string    `json:"name"`
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	Unchanged bool      `json:"unchanged"`
}

func decodeStored(t *testing.T, r testkit.Response, status int) stored {
	t.Helper()
	require.Equal(t, status, r.Status, string(r.Raw))
	require.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var s stored
	require.NoError(t, json.Unmarshal(r.Raw, &s))
	require.False(t, s.CreatedAt.IsZero())
	return s
}

func TestPutWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("versions", func(t *testing.T) {
		t.Parallel()
		def := waitDef("orders", "orders.v1")

		first := decodeStored(t, e.put(t, "orders", def), http.StatusCreated)
		require.Equal(t, stored{Name: "orders", Version: 1, CreatedAt: first.CreatedAt}, first)

		// The same definition again, re-indented: nothing stored, version 1 kept.
		indented, err := json.MarshalIndent(def, "", "    ")
		require.NoError(t, err)
		again := decodeStored(t, e.put(t, "orders", indented), http.StatusOK)
		require.Equal(t, stored{Name: "orders", Version: 1, CreatedAt: first.CreatedAt, Unchanged: true}, again)

		changed := decodeStored(t, e.put(t, "orders", waitDef("orders", "orders.v2")), http.StatusOK)
		require.Equal(t, int32(2), changed.Version)
		require.False(t, changed.Unchanged)
		require.Equal(t, "orders", changed.Name)

		// The old definition is a change again, not version 1 revived.
		back := decodeStored(t, e.put(t, "orders", def), http.StatusOK)
		require.Equal(t, int32(3), back.Version)
		require.False(t, back.Unchanged)

		r := e.startExecution(t, "orders", nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
		require.Equal(t, float64(3), r.JSON["workflow_version"], "executions start the latest version")
	})

	t.Run("several errors at once", func(t *testing.T) {
		t.Parallel()
		def := map[string]any{
			"name":  "broken",
			"color": "blue",
			"nodes": []any{
				map[string]any{"id": "a", "type": "teleport"},
				map[string]any{"id": "b", "type": "wait_events", "data": map[string]any{
					"apiCall": map[string]any{"url": "http://svc/process"}, "aggregationStrategy": "custom",
				}},
				map[string]any{"id": "b", "type": "http", "data": map[string]any{"url": "http://svc/x"}},
				map[string]any{"id": "c", "type": "wait_events", "data": map[string]any{
					"apiCall":             map[string]any{"url": "http://svc/process"},
					"kafkaEvent":          map[string]any{"enabled": false, "topic": "t"},
					"aggregationStrategy": "custom",
					"requiredEvents":      []any{"kafka_event"},
				}},
				map[string]any{"id": "d", "type": "http", "data": map[string]any{"url": "http://svc/d"}},
				map[string]any{"id": "e", "type": "http", "data": map[string]any{"url": "http://svc/e"}},
			},
			"edges": []any{
				map[string]any{"source": "a", "target": "ghost"},
				map[string]any{"source": "d", "target": "e"},
				map[string]any{"source": "e", "target": "d"},
			},
		}
		errs := requireInvalid(t, e.put(t, "broken", def), "broken")

		want := map[string]string{ // path -> part of its message
			"color":                           "unknown field",
			"nodes[0].type":                   `unknown node type "teleport"`,
			"nodes[1].data.requiredEvents":    `required for aggregationStrategy "custom"`,
			"nodes[2].id":                     `duplicate node id "b" (also nodes[1])`,
			"nodes[3].data.requiredEvents[0]": `names disabled event "kafka_event"`,
			"edges[0].target":                 `unknown node "ghost"`,
			"edges":                           "cycle d -> e -> d",
		}
		got := map[string]string{}
		for _, fe := range errs {
			got[fe.Path] += fe.Message + "\n"
		}
		for path, msg := range want {
			require.Contains(t, got, path, "errors: %+v", errs)
			require.Contains(t, got[path], msg, "errors at %s", path)
		}
		require.Len(t, errs, len(want), "errors: %+v", errs)

		// Nothing was stored.
		r := e.startExecution(t, "broken", nil)
		requireProblem(t, r, http.StatusNotFound, "workflow-not-found", "no workflow named broken", "/api/v1/workflows/broken/executions")
	})

	tests := []struct {
		name    string
		urlName string
		body    []byte
		path    string // of the single error
		message string
	}{
		{"name differs from the URL", "url-name", mustJSON(t, waitDef("body-name", "t")), "name", `"body-name" does not match the name in the URL "url-name"`},
		{"malformed JSON", "malformed", []byte(`{"name": "malformed", "nodes": [`), "", "malformed JSON"},
		{"trailing data", "trailing", append(mustJSON(t, waitDef("trailing", "t")), []byte(` {}`)...), "", "unexpected data after the top-level value"},
		{"empty body", "empty", nil, "", "empty document"},
		{"not an object", "array", []byte(`[]`), "", "must be a JSON object"},
		{"no nodes", "no-nodes", []byte(`{"name": "no-nodes", "nodes": []}`), "nodes", "at least one node"},
		{"kafka topic missing", "no-topic", []byte(`{"name": "no-topic", "nodes": [{"id": "w", "type": "wait_events", "data": {"kafkaEvent": {}}}]}`),
			"nodes[0].data.kafkaEvent.topic", "required when enabled"},
	}
	t.Run("a name differing from the URL is listed with the other errors", func(t *testing.T) {
		t.Parallel()
		body := []byte(`{"name": "body-name", "nodes": [{"id": "w", "type": "wait_events", "data": {"kafkaEvent": {}}}]}`)
		errs := requireInvalid(t, e.put(t, "url-name-2", body), "url-name-2")
		require.Len(t, errs, 2, "errors: %+v", errs)
		require.Equal(t, "name", errs[0].Path)
		require.Contains(t, errs[0].Message, `"body-name" does not match the name in the URL "url-name-2"`)
		require.Equal(t, "nodes[0].data.kafkaEvent.topic", errs[1].Path)
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			errs := requireInvalid(t, e.put(t, tt.urlName, tt.body), tt.urlName)
			require.Len(t, errs, 1, "errors: %+v", errs)
			require.Equal(t, tt.path, errs[0].Path)
			require.Contains(t, errs[0].Message, tt.message)

			r := e.startExecution(t, tt.urlName, nil)
			requireProblem(t, r, http.StatusNotFound, "workflow-not-found", "no workflow named "+tt.urlName,
				"/api/v1/workflows/"+tt.urlName+"/executions")
		})
	}
}

func TestStartExecution(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.put(t, "orders", waitDef("orders", "orders"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))

	t.Run("created", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name  string
			body  []byte
			input string // as stored
		}{
			{"with input", []byte(`{"input": {"order": 17, "tags": ["a"]}}`), `{"order": 17, "tags": ["a"]}`},
			{"empty body", nil, `{}`},
			{"no input member", []byte(`{}`), `{}`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := e.startExecution(t, "orders", tt.body)
				require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
				id, _ := r.JSON["id"].(string)
				require.NoError(t, uuid.Validate(id))
				require.Equal(t, "orders", r.JSON["workflow"])
				require.Equal(t, float64(1), r.JSON["workflow_version"])
				require.NotEmpty(t, r.JSON["status"])

				view := e.do(t, http.MethodGet, "/api/v1/executions/"+id, nil)
				require.Equal(t, http.StatusOK, view.Status, string(view.Raw))
				input, err := json.Marshal(view.JSON["input"])
				require.NoError(t, err)
				require.JSONEq(t, tt.input, string(input))
			})
		}
	})

	t.Run("unknown workflow", func(t *testing.T) {
		t.Parallel()
		r := e.startExecution(t, "nope", []byte(`{"input": {}}`))
		requireProblem(t, r, http.StatusNotFound, "workflow-not-found", "no workflow named nope", "/api/v1/workflows/nope/executions")
	})

	t.Run("malformed body", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{`{"input": `, `not json`, `["input"]`, `"input"`} {
			r := e.startExecution(t, "orders", []byte(body))
			requireProblem(t, r, http.StatusBadRequest, "malformed-json", `body must be {"input": <JSON>}`, "/api/v1/workflows/orders/executions")
		}
	})
}

func TestGetExecution(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.put(t, "orders", waitDef("orders", "orders"))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))

	t.Run("found, with nodes and wait states", func(t *testing.T) {
		t.Parallel()
		r := e.startExecution(t, "orders", []byte(`{"input": {"order": 5}}`))
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
		id := r.JSON["id"].(string)

		// The view's three reads (execution, nodes, waits) are not one snapshot, so wait
		// for both the wait state and the node's waiting outcome to show.
		var view testkit.Response
		require.Eventually(t, func() bool {
			view = e.do(t, http.MethodGet, "/api/v1/executions/"+id, nil)
			waits, _ := view.JSON["wait_states"].([]any)
			nodes, _ := view.JSON["nodes"].([]any)
			waiting := false
			for _, n := range nodes {
				m, _ := n.(map[string]any)
				waiting = waiting || (m["id"] == "wait" && m["status"] == "waiting_for_events")
			}
			return view.Status == http.StatusOK && len(waits) == 1 && waiting
		}, 15*time.Second, 20*time.Millisecond, "the wait was never registered")

		require.Contains(t, view.Header.Get("Content-Type"), "application/json")
		v := view.JSON
		require.Equal(t, id, v["id"])
		require.Equal(t, "orders", v["workflow"])
		require.Equal(t, float64(1), v["workflow_version"])
		require.Equal(t, map[string]any{"order": float64(5)}, v["input"])
		require.NotEmpty(t, v["status"])

		nodes := map[string]map[string]any{}
		for _, n := range v["nodes"].([]any) {
			m := n.(map[string]any)
			nodes[m["id"].(string)] = m
		}
		require.Len(t, nodes, 2)
		require.Equal(t, "waiting_for_events", nodes["wait"]["status"])
		require.Equal(t, "pending", nodes["notify"]["status"], "notify runs only after the wait")

		w := v["wait_states"].([]any)[0].(map[string]any)
		require.Equal(t, "wait", w["node_id"])
		require.Equal(t, "waiting", w["status"])
		require.Equal(t, "all", w["aggregation_strategy"])
		require.Equal(t, []any{"kafka_event"}, w["enabled_events"])
		require.Empty(t, w["received_events"])
		require.NoError(t, uuid.Validate(w["correlation_id"].(string)))
		// The wait node's output names the same correlation id.
		require.Equal(t, w["correlation_id"], nodes["wait"]["output"].(map[string]any)["correlation_id"])
	})

	tests := []struct {
		name   string
		id     string
		status int
		slug   string
		detail string
	}{
		{"unknown", "0b9f6c1e-1d2a-4c3b-8e4f-5a6b7c8d9e0f", http.StatusNotFound, "execution-not-found", "no execution 0b9f6c1e-1d2a-4c3b-8e4f-5a6b7c8d9e0f"},
		{"nil UUID", uuid.Nil.String(), http.StatusNotFound, "execution-not-found", "no execution"},
		{"not a UUID", "exec-17", http.StatusBadRequest, "malformed-id", "execution id is not a UUID"},
		{"UUID with trailing junk", "0b9f6c1e-1d2a-4c3b-8e4f-5a6b7c8d9e0fff", http.StatusBadRequest, "malformed-id", "execution id is not a UUID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodGet, "/api/v1/executions/"+tt.id, nil)
			requireProblem(t, r, tt.status, tt.slug, tt.detail, "/api/v1/executions/"+tt.id)
		})
	}
}

// TestRouting checks that Echo's own errors go through the problem ErrorHandler.
func TestRouting(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := uuid.NewString()

	tests := []struct {
		name   string
		method string
		path   string
		status int
		allow  string // a method the Allow header must list, for 405
	}{
		{"unknown route", http.MethodGet, "/api/v1/nope", http.StatusNotFound, ""},
		{"unknown route under a known prefix", http.MethodGet, "/api/v1/executions/" + id + "/nodes", http.StatusNotFound, ""},
		{"unknown route, POST", http.MethodPost, "/nope", http.StatusNotFound, ""},
		{"DELETE a workflow", http.MethodDelete, "/api/v1/workflows/orders", http.StatusMethodNotAllowed, http.MethodPut},
		{"GET the validation", http.MethodGet, "/api/v1/workflows/validate/x", http.StatusNotFound, ""},
		{"DELETE the wait-state list", http.MethodDelete, "/api/v1/wait-states", http.StatusMethodNotAllowed, http.MethodGet},
		{"DELETE an execution", http.MethodDelete, "/api/v1/executions/" + id, http.StatusMethodNotAllowed, http.MethodGet},
		{"GET executions of a workflow", http.MethodGet, "/api/v1/workflows/orders/executions", http.StatusMethodNotAllowed, http.MethodPost},
		{"GET the callback endpoint", http.MethodGet, "/api/internal/callbacks/acme", http.StatusMethodNotAllowed, http.MethodPost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, tt.method, tt.path, nil)
			requireProblem(t, r, tt.status, "", "", tt.path)
			if tt.allow != "" {
				require.Contains(t, strings.Split(strings.ReplaceAll(r.Header.Get("Allow"), " ", ""), ","), tt.allow)
			}
		})
	}
}
