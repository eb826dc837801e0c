package server_test

// The OpenAPI document against the service it describes: the same routes, and real
// responses of a scripted scenario that validate against the schemas it declares.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/server/api"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// docURL is where the document is registered with the schema compiler; its schemas'
// local references ("#/components/schemas/…") resolve inside it.
const docURL = "https://rendezvous.test/openapi.json"

// methods are the operation keys of an OpenAPI path item.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// openAPI is the parsed document and a schema compiler holding it.
type openAPI struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

func loadOpenAPI(t *testing.T, raw []byte) *openAPI {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	require.NoError(t, c.AddResource(docURL, inst))
	return &openAPI{doc: doc, compiler: c, schemas: map[string]*jsonschema.Schema{}}
}

// schema compiles the schema at a JSON pointer into the document.
func (o *openAPI) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if s, ok := o.schemas[ptr]; ok {
		return s
	}
	s, err := o.compiler.Compile(docURL + "#" + ptr)
	require.NoError(t, err, "compile %s", ptr)
	o.schemas[ptr] = s
	return s
}

// at returns the value at a JSON pointer ("/a/b~1c/0").
func (o *openAPI) at(t *testing.T, ptr string) any {
	t.Helper()
	var v any = o.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			v, ok = c[tok]
			require.True(t, ok, "%s: no %q", ptr, tok)
		case []any:
			i, err := strconv.Atoi(tok)
			require.True(t, err == nil && i >= 0 && i < len(c), "%s: no item %q", ptr, tok)
			v = c[i]
		default:
			require.Failf(t, "pointer into a scalar", "%s at %q", ptr, tok)
		}
	}
	return v
}

func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

// operations lists the document's operations as "METHOD /path".
func (o *openAPI) operations() []string {
	var out []string
	for path, item := range o.doc["paths"].(map[string]any) {
		for m := range item.(map[string]any) {
			if slices.Contains(methods, m) {
				out = append(out, strings.ToUpper(m)+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

var echoParam = regexp.MustCompile(`:([A-Za-z0-9_]+)`)

// openAPIPath writes an Echo route in OpenAPI's template syntax: :param is {param}, and
// a trailing * (the rest of the path) is {path}.
func openAPIPath(route string) string {
	route = echoParam.ReplaceAllString(route, "{$1}")
	if strings.HasSuffix(route, "*") {
		route = strings.TrimSuffix(route, "*") + "{path}"
	}
	return route
}

func startDocumented(t *testing.T) (*server.Service, string) {
	t.Helper()
	s := runService(t, server.Config{DatabaseURL: dbtest.NewSchema(t).URL, InstanceID: "openapi", AutoMigrate: true})
	return s, "http://" + s.Addr()
}

// fetchDocument reads the served document and checks it is the embedded one.
func fetchDocument(t *testing.T, base string) *openAPI {
	t.Helper()
	resp, err := http.Get(base + api.OpenAPIPath)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, api.OpenAPI, raw)
	return loadOpenAPI(t, raw)
}

// TestOpenAPIRoutes: every route the service registers has an operation in the
// document, and every operation a route.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	s, base := startDocumented(t)
	doc := fetchDocument(t, base)
	var routes []string
	for _, r := range s.Routes() {
		method, path, _ := strings.Cut(r, " ")
		routes = append(routes, method+" "+openAPIPath(path))
	}
	sort.Strings(routes)
	routes = slices.Compact(routes)
	require.Equal(t, routes, doc.operations(), "routes served (expected) versus operations documented (actual)")
}

// TestOpenAPIDocument: the document is well formed as far as this service relies on it:
// 3.1 with the 2020-12 dialect, every local reference resolves, every component schema
// compiles, every operation has a unique id and responses with descriptions, and every
// path parameter is declared.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t, api.OpenAPI)
	require.Equal(t, "3.1.0", doc.doc["openapi"])
	require.Equal(t, "https://json-schema.org/draft/2020-12/schema", doc.doc["jsonSchemaDialect"])

	var refs []string
	var collect func(v any)
	collect = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, c := range v {
				collect(c)
			}
		case []any:
			for _, c := range v {
				collect(c)
			}
		}
	}
	collect(doc.doc)
	require.NotEmpty(t, refs)
	for _, r := range refs {
		require.True(t, strings.HasPrefix(r, "#/"), "only local references: %s", r)
		doc.at(t, strings.TrimPrefix(r, "#"))
	}
	for name := range doc.doc["components"].(map[string]any)["schemas"].(map[string]any) {
		doc.schema(t, "/components/schemas/"+escape(name))
	}

	// The schemas are strict enough to catch a drifting answer: a valid wait state passes,
	// and each mutation of it fails.
	wait := func(mutate func(map[string]any)) any {
		w := map[string]any{
			"id": uuid.NewString(), "execution_id": uuid.NewString(), "workflow": "orders", "workflow_version": 1,
			"node_id": "wait", "correlation_id": uuid.NewString(), "wait_type": "events", "aggregation_strategy": "all",
			"status": "waiting", "version": 1, "enabled_events": []any{"api_response"}, "required_events": []any{},
			"received_events": []any{}, "missing_events": []any{"api_response"}, "timed_out_events": []any{},
			"expires_at": "2030-01-02T03:04:05Z", "next_deadline_at": "2030-01-02T03:04:05Z",
			"created_at": "2030-01-02T03:04:05.123456Z", "updated_at": "2030-01-02T03:04:05Z",
		}
		if mutate != nil {
			mutate(w)
		}
		raw, err := json.Marshal(w)
		require.NoError(t, err)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		require.NoError(t, err)
		return inst
	}
	waitState := doc.schema(t, "/components/schemas/WaitState")
	require.NoError(t, waitState.Validate(wait(nil)))
	for name, mutate := range map[string]func(map[string]any){
		"member missing":      func(w map[string]any) { delete(w, "missing_events") },
		"member undocumented": func(w map[string]any) { w["payload"] = map[string]any{} },
		"not a date-time":     func(w map[string]any) { w["created_at"] = "yesterday" },
		"not a UUID":          func(w map[string]any) { w["id"] = "w-1" },
		"unknown status":      func(w map[string]any) { w["status"] = "sleeping" },
		"execution member":    func(w map[string]any) { w["input"] = map[string]any{} },
	} {
		require.Error(t, waitState.Validate(wait(mutate)), name)
	}
	// An execution's wait has no execution members.
	require.Error(t, doc.schema(t, "/components/schemas/ExecutionWaitState").Validate(wait(nil)))
	require.NoError(t, doc.schema(t, "/components/schemas/ExecutionWaitState").Validate(wait(func(w map[string]any) {
		delete(w, "execution_id")
		delete(w, "workflow")
		delete(w, "workflow_version")
	})))

	// The schema names are the ones served.
	var names []string
	for _, n := range doc.at(t, "/paths/~1schemas~1{name}/parameters/0/schema/enum").([]any) {
		names = append(names, n.(string))
	}
	require.Equal(t, workflow.SchemaNames(), names)

	ids := map[string]string{}
	placeholder := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range doc.doc["paths"].(map[string]any) {
		item := item.(map[string]any)
		for _, m := range methods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			where := strings.ToUpper(m) + " " + path
			id, _ := op["operationId"].(string)
			require.NotEmpty(t, id, where)
			require.NotContains(t, ids, id, "operationId %s of %s is also %s's", id, where, ids[id])
			ids[id] = where

			responses, _ := op["responses"].(map[string]any)
			require.NotEmpty(t, responses, where)
			for code, r := range responses {
				r := r.(map[string]any)
				if ref, ok := r["$ref"].(string); ok {
					r = doc.at(t, strings.TrimPrefix(ref, "#")).(map[string]any)
				}
				require.NotEmpty(t, r["description"], "%s %s", where, code)
				content, _ := r["content"].(map[string]any)
				for mt := range content {
					doc.schema(t, responseSchemaPointer(t, doc, path, m, code, mt))
				}
			}

			declared := map[string]bool{}
			for _, params := range []any{item["parameters"], op["parameters"]} {
				list, _ := params.([]any)
				for _, p := range list {
					p := p.(map[string]any)
					if ref, ok := p["$ref"].(string); ok {
						p = doc.at(t, strings.TrimPrefix(ref, "#")).(map[string]any)
					}
					if p["in"] == "path" {
						require.Equal(t, true, p["required"], "%s: path parameter %s", where, p["name"])
						declared[p["name"].(string)] = true
					}
				}
			}
			for _, m := range placeholder.FindAllStringSubmatch(path, -1) {
				require.True(t, declared[m[1]], "%s: {%s} is not declared", where, m[1])
			}
			require.Len(t, declared, len(placeholder.FindAllString(path, -1)), "%s: a path parameter not in the path", where)
		}
	}
}

// responsePointer is the pointer of the response the document declares for a status,
// following a reference to components/responses.
func responsePointer(t *testing.T, doc *openAPI, path, method, code string) string {
	t.Helper()
	ptr := "/paths/" + escape(path) + "/" + method + "/responses/" + code
	if r, ok := doc.at(t, ptr).(map[string]any)["$ref"].(string); ok {
		ptr = strings.TrimPrefix(r, "#")
	}
	return ptr
}

// responseSchemaPointer is the pointer of the schema declared for a response's body.
func responseSchemaPointer(t *testing.T, doc *openAPI, path, method, code, mediaType string) string {
	t.Helper()
	return responsePointer(t, doc, path, method, code) + "/content/" + escape(mediaType) + "/schema"
}

// exchange is one request of the scenario and its answer.
type exchange struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func exchangeOf(r testkit.Response) exchange {
	return exchange{status: r.Status, header: r.Header, body: r.Raw, json: r.JSON}
}

// call sends a request to the service and checks the answer against the document: the
// status is declared for the path template and method (not merely covered by default),
// the media type is one the response declares, and a JSON body validates against the
// schema declared for it.
func (o *openAPI) call(t *testing.T, base, method, template, path string, body []byte, hdr map[string]string) exchange {
	t.Helper()
	header := http.Header{}
	for k, v := range hdr {
		header.Set(k, v)
	}
	// Redirects are answers the document declares, not steps to follow.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var send any // nil, not a nil []byte, for a request without a body
	if body != nil {
		send = body
	}
	ex := exchangeOf(testkit.DoWith(t, client, method, base+path, send, header))

	where := fmt.Sprintf("%s %s (%s) answered %d: %s", method, template, path, ex.status, ex.body)
	m := strings.ToLower(method)
	code := fmt.Sprint(ex.status)
	responses := o.at(t, "/paths/"+escape(template)+"/"+m+"/responses").(map[string]any)
	require.Contains(t, responses, code, "status not documented: %s", where)
	declared := o.at(t, responsePointer(t, o, template, m, code)).(map[string]any)
	content, _ := declared["content"].(map[string]any)
	if len(content) == 0 {
		require.Empty(t, ex.body, "a response without content has no body: %s", where)
		return ex
	}
	mt, _, err := mime.ParseMediaType(ex.header.Get("Content-Type"))
	require.NoError(t, err, where)
	require.Contains(t, content, mt, "media type not documented: %s", where)
	if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return ex
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(ex.body))
	require.NoError(t, err, where)
	require.NoError(t, o.schema(t, responseSchemaPointer(t, o, template, m, code, mt)).Validate(inst), where)
	return ex
}

// TestOpenAPIResponses runs a scenario touching every kind of answer and validates each
// real response against the document.
func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	_, base := startDocumented(t)
	doc := fetchDocument(t, base)
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	t.Cleanup(ext.Close)
	call := func(method, template, path string, body any, want int) exchange {
		t.Helper()
		var raw []byte
		switch b := body.(type) {
		case nil:
		case []byte:
			raw = b
		default:
			var err error
			raw, err = json.Marshal(b)
			require.NoError(t, err)
		}
		ex := doc.call(t, base, method, template, path, raw, nil)
		require.Equal(t, want, ex.status, "%s %s: %s", method, path, ex.body)
		return ex
	}

	call("GET", "/healthz", "/healthz", nil, http.StatusOK)
	call("GET", "/readyz", "/readyz", nil, http.StatusOK)
	call("GET", "/openapi.json", "/openapi.json", nil, http.StatusOK)
	call("GET", "/metrics", "/metrics", nil, http.StatusOK)

	def := map[string]any{"name": "orders", "nodes": []any{
		map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"apiCall": map[string]any{"url": ext.URL + "/process"}, "kafkaEvent": map[string]any{"topic": "orders"},
		}},
		map[string]any{"id": "after", "type": "wait_events", "data": map[string]any{}},
	}, "edges": []any{map[string]any{"source": "wait", "target": "after"}}}
	quick := map[string]any{"name": "quick", "nodes": []any{map[string]any{"id": "n", "type": "wait_events", "data": map[string]any{}}}}
	approve := map[string]any{"name": "approve", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
		"events": []any{
			map[string]any{"name": "first", "source": "send", "type": "approved"},
			map[string]any{"name": "second", "source": "send", "type": "approved"},
		},
	}}}}
	wf := "/api/v1/workflows/{name}"
	call("PUT", wf, "/api/v1/workflows/orders", def, http.StatusCreated)
	call("PUT", wf, "/api/v1/workflows/orders", def, http.StatusOK)
	call("PUT", wf, "/api/v1/workflows/quick", quick, http.StatusCreated)
	call("PUT", wf, "/api/v1/workflows/approve", approve, http.StatusCreated)
	call("PUT", wf, "/api/v1/workflows/broken", map[string]any{"name": "broken", "nodes": []any{}}, http.StatusUnprocessableEntity)
	call("POST", "/api/v1/workflows/validate", "/api/v1/workflows/validate", def, http.StatusOK)
	call("POST", "/api/v1/workflows/validate", "/api/v1/workflows/validate", []byte(`{"name": "x", "nodes": [{"id": "a", "type": "teleport"}]}`), http.StatusUnprocessableEntity)
	call("GET", "/api/v1/workflows", "/api/v1/workflows?limit=1", nil, http.StatusOK)
	call("GET", wf, "/api/v1/workflows/orders?version=1", nil, http.StatusOK)

	started := call("POST", "/api/v1/workflows/{name}/executions", "/api/v1/workflows/orders/executions", map[string]any{"input": map[string]any{"n": 1}}, http.StatusCreated)
	execID := started.json["id"].(string)
	other := call("POST", "/api/v1/workflows/{name}/executions", "/api/v1/workflows/orders/executions", nil, http.StatusCreated).json["id"].(string)
	done := call("POST", "/api/v1/workflows/{name}/executions", "/api/v1/workflows/quick/executions", nil, http.StatusCreated).json["id"].(string)
	call("POST", "/api/v1/workflows/{name}/executions", "/api/v1/workflows/nope/executions", nil, http.StatusNotFound)

	var waits exchange
	require.Eventually(t, func() bool {
		waits = call("GET", "/api/v1/wait-states", "/api/v1/wait-states?status=waiting&execution="+execID, nil, http.StatusOK)
		return len(waits.json["items"].([]any)) == 1
	}, 15*time.Second, 20*time.Millisecond)
	wait := waits.json["items"].([]any)[0].(map[string]any)
	waitID, corr := wait["id"].(string), wait["correlation_id"].(string)
	call("GET", "/api/v1/wait-states/{id}", "/api/v1/wait-states/"+waitID, nil, http.StatusOK)
	call("GET", "/api/v1/executions/{id}", "/api/v1/executions/"+execID, nil, http.StatusOK)

	cb := "/api/internal/callbacks/{service}"
	call("POST", cb, "/api/internal/callbacks/acme", map[string]any{"execution_id": execID, "correlation_id": corr, "ok": true}, http.StatusAccepted)
	call("POST", cb, "/api/internal/callbacks/acme", map[string]any{"execution_id": execID, "correlation_id": corr, "ok": true}, http.StatusOK)
	call("POST", cb, "/api/internal/callbacks/acme", map[string]any{"execution_id": execID, "correlation_id": uuid.NewString()}, http.StatusNotFound)
	call("POST", cb, "/api/internal/callbacks/acme", []byte(`{"execution_id": "x"}`), http.StatusBadRequest)
	call("POST", cb, "/api/internal/callbacks/acme?event=approval", map[string]any{"execution_id": execID, "correlation_id": corr}, http.StatusUnprocessableEntity)
	call("POST", cb, "/api/internal/callbacks/acme?event=a.b", map[string]any{"execution_id": execID, "correlation_id": corr}, http.StatusBadRequest)

	// The wait, holding the callback but not the Kafka record, in the list; then its
	// cancel, a finished execution's and a waiting one's.
	call("GET", "/api/v1/wait-states", "/api/v1/wait-states?limit=1", nil, http.StatusOK)
	call("POST", "/api/v1/executions/{id}/waits/{node}/cancel", "/api/v1/executions/"+execID+"/waits/nope/cancel", nil, http.StatusNotFound)
	call("POST", "/api/v1/executions/{id}/waits/{node}/cancel", "/api/v1/executions/"+execID+"/waits/wait/cancel", map[string]any{"then": "continue"}, http.StatusOK)
	require.Eventually(t, func() bool {
		return call("GET", "/api/v1/executions/{id}", "/api/v1/executions/"+done, nil, http.StatusOK).json["status"] == "completed"
	}, 15*time.Second, 20*time.Millisecond)
	call("POST", "/api/v1/executions/{id}/cancel", "/api/v1/executions/"+done+"/cancel", map[string]any{"reason": "late"}, http.StatusConflict)
	call("POST", "/api/v1/executions/{id}/cancel", "/api/v1/executions/"+other+"/cancel", nil, http.StatusOK)

	// A redrive: refused for an execution that did not fail, then of one whose wait an
	// operator failed.
	redrive := "/api/v1/executions/{id}/redrive"
	call("POST", redrive, "/api/v1/executions/"+other+"/redrive", nil, http.StatusConflict)
	call("POST", redrive, "/api/v1/executions/"+uuid.NewString()+"/redrive", nil, http.StatusNotFound)
	call("POST", redrive, "/api/v1/executions/e-1/redrive", nil, http.StatusBadRequest)
	failing := call("POST", "/api/v1/workflows/{name}/executions", "/api/v1/workflows/orders/executions", nil, http.StatusCreated).json["id"].(string)
	require.Eventually(t, func() bool {
		w := call("GET", "/api/v1/wait-states", "/api/v1/wait-states?status=waiting&execution="+failing, nil, http.StatusOK)
		return len(w.json["items"].([]any)) == 1
	}, 15*time.Second, 20*time.Millisecond)
	call("POST", "/api/v1/executions/{id}/waits/{node}/cancel", "/api/v1/executions/"+failing+"/waits/wait/cancel", map[string]any{"then": "fail"}, http.StatusOK)
	call("POST", redrive, "/api/v1/executions/"+failing+"/redrive", nil, http.StatusOK)
	call("GET", "/api/v1/executions/{id}", "/api/v1/executions/"+failing, nil, http.StatusOK)
	bulk := "/api/v1/executions/redrive"
	call("POST", bulk, bulk, map[string]any{"workflow": "orders", "dry_run": true}, http.StatusOK)
	call("POST", bulk, bulk, map[string]any{"workflow": "orders", "limit": 5, "batch": 2}, http.StatusOK)
	call("POST", bulk, bulk, map[string]any{"limit": 100000}, http.StatusBadRequest)
	call("POST", bulk, bulk, map[string]any{"flow": "orders"}, http.StatusBadRequest)
	restart := "/api/v1/executions/{id}/restart"
	call("POST", restart, "/api/v1/executions/"+failing+"/restart", map[string]any{"version": "latest", "input": map[string]any{"n": 2}}, http.StatusCreated)
	call("POST", restart, "/api/v1/executions/"+failing+"/restart", nil, http.StatusConflict)
	call("POST", restart, "/api/v1/executions/"+failing+"/restart", map[string]any{"version": "newest"}, http.StatusBadRequest)
	call("POST", restart, "/api/v1/executions/"+uuid.NewString()+"/restart", nil, http.StatusNotFound)
	call("GET", "/api/v1/executions/{id}", "/api/v1/executions/"+failing, nil, http.StatusOK)
	list := call("GET", "/api/v1/executions", "/api/v1/executions?limit=1", nil, http.StatusOK)
	require.NotEmpty(t, list.json["next_cursor"])
	call("GET", "/api/v1/executions", "/api/v1/executions?limit=1&cursor="+url.QueryEscape(list.json["next_cursor"].(string)), nil, http.StatusOK)

	// Events sent by type: buffered (no node waits for "other"), delivered (recorded as
	// the wait's first event, then completing it with the second), duplicate; refused for
	// a finished execution, an unknown one, a bad body. The execution then completes,
	// taking its buffered event to the dead letters.
	approved := call("POST", "/api/v1/workflows/{name}/executions", "/api/v1/workflows/approve/executions", nil, http.StatusCreated).json["id"].(string)
	require.Eventually(t, func() bool {
		w := call("GET", "/api/v1/wait-states", "/api/v1/wait-states?status=waiting&execution="+approved, nil, http.StatusOK)
		return len(w.json["items"].([]any)) == 1
	}, 15*time.Second, 20*time.Millisecond)
	send := "/api/v1/executions/{id}/events"
	toApproved := "/api/v1/executions/" + approved + "/events"
	buffered := call("POST", send, toApproved, map[string]any{"type": "other", "payload": map[string]any{"n": 1}}, http.StatusAccepted)
	require.Equal(t, "buffered", buffered.json["outcome"])
	delivered := call("POST", send, toApproved, map[string]any{"type": "approved", "id": "e-1", "payload": "yes"}, http.StatusAccepted)
	require.Equal(t, "delivered", delivered.json["outcome"])
	call("POST", send, toApproved, map[string]any{"type": "approved", "id": "e-1", "payload": "yes"}, http.StatusOK)
	call("POST", send, toApproved, map[string]any{"type": "approved", "name": "x"}, http.StatusBadRequest)
	call("POST", send, toApproved, map[string]any{"type": "approved", "id": "e-2"}, http.StatusAccepted)
	call("POST", send, "/api/v1/executions/"+done+"/events", map[string]any{"type": "approved"}, http.StatusConflict)
	call("POST", send, "/api/v1/executions/"+uuid.NewString()+"/events", map[string]any{"type": "approved"}, http.StatusNotFound)
	call("POST", send, "/api/v1/executions/e-1/events", map[string]any{"type": "approved"}, http.StatusBadRequest)
	require.Eventually(t, func() bool {
		return call("GET", "/api/v1/executions/{id}", "/api/v1/executions/"+approved, nil, http.StatusOK).json["status"] == "completed"
	}, 15*time.Second, 20*time.Millisecond)
	unmatched := call("GET", "/api/v1/events/unmatched", "/api/v1/events/unmatched?limit=2", nil, http.StatusOK)
	require.Len(t, unmatched.json["items"], 2)
	require.NotEmpty(t, unmatched.json["next_cursor"])
	call("GET", "/api/v1/events/unmatched", "/api/v1/events/unmatched?limit=500&cursor="+url.QueryEscape(unmatched.json["next_cursor"].(string)), nil, http.StatusOK)
	call("GET", "/api/v1/events/unmatched", "/api/v1/events/unmatched?reason=lost", nil, http.StatusBadRequest)
	dead := call("GET", "/api/v1/events/dead-letters", "/api/v1/events/dead-letters?execution="+approved, nil, http.StatusOK)
	require.Len(t, dead.json["items"], 1)
	call("GET", "/api/v1/events/dead-letters", "/api/v1/events/dead-letters?execution=e-1", nil, http.StatusBadRequest)

	// Replay and dismissal: the dead letter went with a completed execution, so its replay
	// is not applied; it is dismissed, then resolved. An unmatched event likewise.
	dl := fmt.Sprint(dead.json["items"].([]any)[0].(map[string]any)["id"])
	replayDL, dismissDL := "/api/v1/events/dead-letters/{id}/replay", "/api/v1/events/dead-letters/{id}/dismiss"
	call("POST", replayDL, "/api/v1/events/dead-letters/"+dl+"/replay", nil, http.StatusConflict)
	call("POST", replayDL, "/api/v1/events/dead-letters/x/replay", nil, http.StatusBadRequest)
	call("POST", replayDL, "/api/v1/events/dead-letters/999999/replay", nil, http.StatusNotFound)
	call("POST", dismissDL, "/api/v1/events/dead-letters/"+dl+"/dismiss", map[string]any{}, http.StatusBadRequest)
	call("POST", dismissDL, "/api/v1/events/dead-letters/"+dl+"/dismiss", map[string]any{"reason": "test"}, http.StatusOK)
	call("POST", dismissDL, "/api/v1/events/dead-letters/"+dl+"/dismiss", map[string]any{"reason": "test"}, http.StatusConflict)
	call("GET", "/api/v1/events/dead-letters", "/api/v1/events/dead-letters?execution="+approved, nil, http.StatusOK)
	dismissMany := "/api/v1/events/dead-letters/dismiss"
	call("POST", dismissMany, dismissMany, map[string]any{"workflow": "approve", "dry_run": true}, http.StatusOK)
	call("POST", dismissMany, dismissMany, map[string]any{"event_type": "other", "reason": "test", "limit": 10}, http.StatusOK)
	call("POST", dismissMany, dismissMany, map[string]any{"event_type": "other"}, http.StatusBadRequest)
	um := fmt.Sprint(unmatched.json["items"].([]any)[0].(map[string]any)["id"])
	replayUM, dismissUM := "/api/v1/events/unmatched/{id}/replay", "/api/v1/events/unmatched/{id}/dismiss"
	call("POST", replayUM, "/api/v1/events/unmatched/999999/replay", map[string]any{"execution_id": approved}, http.StatusNotFound)
	call("POST", dismissUM, "/api/v1/events/unmatched/"+um+"/dismiss", map[string]any{"reason": "test"}, http.StatusOK)
	call("POST", replayUM, "/api/v1/events/unmatched/"+um+"/replay", nil, http.StatusConflict)
	call("GET", "/api/v1/events/unmatched", "/api/v1/events/unmatched?limit=1", nil, http.StatusOK)

	// Not found and refused.
	call("GET", "/api/v1/wait-states/{id}", "/api/v1/wait-states/"+uuid.NewString(), nil, http.StatusNotFound)
	call("GET", "/api/v1/wait-states/{id}", "/api/v1/wait-states/w-1", nil, http.StatusBadRequest)
	call("GET", wf, "/api/v1/workflows/nope", nil, http.StatusNotFound)
	call("GET", "/api/v1/executions/{id}", "/api/v1/executions/"+uuid.NewString(), nil, http.StatusNotFound)
	call("GET", "/api/v1/executions/{id}", "/api/v1/executions/e-1", nil, http.StatusBadRequest)
	call("GET", "/api/v1/wait-states", "/api/v1/wait-states?limit=0", nil, http.StatusBadRequest)
	call("GET", "/api/v1/executions", "/api/v1/executions?status=asleep", nil, http.StatusBadRequest)
	call("GET", "/api/v1/workflows", "/api/v1/workflows?cursor=x", nil, http.StatusBadRequest)

	// The web view and the definitions' schemas, which other packages serve.
	call("GET", "/ui", "/ui", nil, http.StatusPermanentRedirect)
	call("GET", "/ui/{path}", "/ui/", nil, http.StatusOK)
	call("GET", "/ui/{path}", "/ui/nope.js", nil, http.StatusNotFound)
	for _, name := range workflow.SchemaNames() {
		call("GET", "/schemas/{name}", "/schemas/"+name, nil, http.StatusOK)
	}
	call("GET", "/schemas/{name}", "/schemas/nope.json", nil, http.StatusNotFound)
}
