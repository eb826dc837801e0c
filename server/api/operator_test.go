package api_test

// HTTP-level tests of the operator's reads (wait states, workflows, executions) and of
// validating a definition, against a full service on a schema of its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// page is a list answer; NextCursor is nil when the member is absent.
type page[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

func decodePage[T any](t *testing.T, r testkit.Response) page[T] {
	t.Helper()
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var p page[T]
	require.NoError(t, json.Unmarshal(r.Raw, &p), string(r.Raw))
	require.NotNil(t, p.Items, "items is never null: %s", r.Raw)
	if p.NextCursor != nil {
		require.NotEmpty(t, *p.NextCursor)
	}
	return p
}

// walk lists path (with its query) page by page, limit items at a time, and returns
// every item and the size of each page. between runs after each page but the last.
func walk[T any](t *testing.T, e *env, path string, limit int, between func()) ([]T, []int) {
	t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var all []T
	var sizes []int
	cursor := ""
	for range 1000 {
		u := fmt.Sprintf("%s%slimit=%d", path, sep, limit)
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		p := decodePage[T](t, e.do(t, http.MethodGet, u, nil))
		require.LessOrEqual(t, len(p.Items), limit)
		all = append(all, p.Items...)
		sizes = append(sizes, len(p.Items))
		if p.NextCursor == nil {
			return all, sizes
		}
		require.Len(t, p.Items, limit, "only the last page is short")
		cursor = *p.NextCursor
		if between != nil {
			between()
		}
	}
	require.FailNow(t, "the list never ended")
	return nil, nil
}

// listAll returns every item of path in one page.
func listAll[T any](t *testing.T, e *env, path string) []T {
	t.Helper()
	items, sizes := walk[T](t, e, path, readmodel.LimitMax, nil)
	require.Len(t, sizes, 1)
	return items
}

func waitStates(t *testing.T, e *env, query string) []readmodel.WaitStateView {
	t.Helper()
	return listAll[readmodel.WaitStateView](t, e, "/api/v1/wait-states"+query)
}

// awaitWaits polls the wait-state list with query until it holds n items.
func awaitWaits(t *testing.T, e *env, query string, n int) []readmodel.WaitStateView {
	t.Helper()
	var ws []readmodel.WaitStateView
	require.Eventually(t, func() bool {
		ws = waitStates(t, e, query)
		return len(ws) == n
	}, 15*time.Second, 20*time.Millisecond, "never %d wait states for %q", n, query)
	return ws
}

func ids[T any](items []T, id func(T) uuid.UUID) []uuid.UUID {
	out := make([]uuid.UUID, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	return out
}

func waitID(w readmodel.WaitStateView) uuid.UUID { return w.ID }

// requireAscending asserts the wait-state order: (created_at, id) strictly increasing.
func requireAscending(t *testing.T, ws []readmodel.WaitStateView) {
	t.Helper()
	for i := 1; i < len(ws); i++ {
		a, b := ws[i-1], ws[i]
		ok := a.CreatedAt.Before(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && strings.Compare(a.ID.String(), b.ID.String()) < 0)
		require.True(t, ok, "item %d (%s %s) does not follow item %d (%s %s)", i, b.CreatedAt, b.ID, i-1, a.CreatedAt, a.ID)
	}
}

func (e *env) start(t *testing.T, name string) string {
	t.Helper()
	r := e.startExecution(t, name, nil)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	return r.JSON["id"].(string)
}

func (e *env) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, e.svc.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// Pages of wait states: every wait that existed when the walk began is listed exactly
// once, in (created_at, id) order, while executions keep starting between pages; the
// last page carries no next_cursor.
func TestListWaitStatesPages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.Equal(t, http.StatusCreated, e.put(t, "orders", waitDef("orders", "orders")).Status)
	for range 7 {
		e.start(t, "orders")
	}
	before := awaitWaits(t, e, "", 7)
	requireAscending(t, before)

	t.Run("limit 3", func(t *testing.T) {
		ws, sizes := walk[readmodel.WaitStateView](t, e, "/api/v1/wait-states", 3, nil)
		require.Equal(t, []int{3, 3, 1}, sizes)
		require.Equal(t, ids(before, waitID), ids(ws, waitID))
	})
	t.Run("limit equal to the count", func(t *testing.T) {
		// A full last page still ends the list: the next one is not promised.
		_, sizes := walk[readmodel.WaitStateView](t, e, "/api/v1/wait-states", 7, nil)
		require.Equal(t, []int{7}, sizes)
	})

	t.Run("while executions start", func(t *testing.T) {
		// Executions start from another goroutine for as long as the walk goes on, one
		// every 25 ms: slower than the walk reads (2 waits per 20 ms), so it reaches the
		// end. Unpaced, a fast machine starts them faster than the walk can list them.
		stop := make(chan struct{})
		startedc := make(chan []string, 1)
		go func() {
			var ids []string
			defer func() { startedc <- ids }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(e.base+"/api/v1/workflows/orders/executions", "application/json", nil)
				if err != nil {
					return
				}
				var body struct{ ID string }
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					return
				}
				ids = append(ids, body.ID)
				select {
				case <-stop:
					return
				case <-time.After(25 * time.Millisecond):
				}
			}
		}()
		ws, _ := walk[readmodel.WaitStateView](t, e, "/api/v1/wait-states", 2, func() { time.Sleep(20 * time.Millisecond) })
		close(stop)
		started := <-startedc

		requireAscending(t, ws)
		seen := map[uuid.UUID]int{}
		for _, w := range ws {
			seen[w.ID]++
		}
		for id, n := range seen {
			require.Equal(t, 1, n, "wait %s listed %d times", id, n)
		}
		for _, w := range before {
			require.Equal(t, 1, seen[w.ID], "wait %s of before the walk", w.ID)
		}
		require.NotEmpty(t, started, "no execution started during the walk")
		// Every execution started registers its wait, and a walk without writers lists
		// them all.
		all := awaitWaits(t, e, "", 7+len(started))
		walked, _ := walk[readmodel.WaitStateView](t, e, "/api/v1/wait-states", 4, nil)
		require.Equal(t, ids(all, waitID), ids(walked, waitID))
	})
}

// pairDef is a workflow with two waits side by side, for Kafka records (so no call goes
// out and both stay open).
func pairDef(name string) map[string]any {
	return map[string]any{"name": name, "nodes": []any{
		map[string]any{"id": "w1", "type": "wait_events", "data": map[string]any{"kafkaEvent": map[string]any{"topic": "t1"}}},
		map[string]any{"id": "w2", "type": "wait_events", "data": map[string]any{"kafkaEvent": map[string]any{"topic": "t2"}}},
	}}
}

func TestListWaitStatesFilters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.Equal(t, http.StatusCreated, e.put(t, "alpha", waitDef("alpha", "alpha")).Status)
	require.Equal(t, http.StatusCreated, e.put(t, "beta", pairDef("beta")).Status)
	a1, a2, b := e.start(t, "alpha"), e.start(t, "alpha"), e.start(t, "beta")
	all := awaitWaits(t, e, "?status=waiting", 4)

	// Cancel a2: its wait is cancelled, the others stay waiting.
	r := e.do(t, http.MethodPost, cancelPath(a2), nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))

	byExec := map[string][]uuid.UUID{}
	for _, w := range all {
		byExec[w.ExecutionID.String()] = append(byExec[w.ExecutionID.String()], w.ID)
		switch w.ExecutionID.String() {
		case a1, a2:
			require.Equal(t, "alpha", w.Workflow)
			require.Equal(t, "wait", w.NodeID)
		case b:
			require.Equal(t, "beta", w.Workflow)
		}
		require.Equal(t, int32(1), w.WorkflowVersion)
	}
	require.Len(t, byExec, 3)

	tests := []struct {
		query string
		want  []string // execution/node of each wait, in list order
	}{
		{"", []string{a1 + "/wait", a2 + "/wait", b + "/w1", b + "/w2"}},
		{"?status=waiting", []string{a1 + "/wait", b + "/w1", b + "/w2"}},
		{"?status=cancelled", []string{a2 + "/wait"}},
		{"?status=completed", nil},
		{"?workflow=alpha", []string{a1 + "/wait", a2 + "/wait"}},
		{"?workflow=alpha&status=waiting", []string{a1 + "/wait"}},
		{"?workflow=beta&node=w2", []string{b + "/w2"}},
		{"?node=w1&status=waiting", []string{b + "/w1"}},
		{"?node=wait&workflow=beta", nil},
		{"?execution=" + b, []string{b + "/w1", b + "/w2"}},
		{"?execution=" + b + "&node=w1&workflow=beta&status=waiting", []string{b + "/w1"}},
		{"?execution=" + a1 + "&workflow=beta", nil},
		{"?execution=" + uuid.NewString(), nil},
		{"?workflow=nope", nil},
		// An empty value is no filter, as a form submitting every field sends it.
		{"?status=&workflow=&node=&execution=&cursor=", []string{a1 + "/wait", a2 + "/wait", b + "/w1", b + "/w2"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			ws := waitStates(t, e, tt.query)
			var got []string
			for _, w := range ws {
				got = append(got, w.ExecutionID.String()+"/"+w.NodeID)
			}
			require.ElementsMatch(t, tt.want, got)
			requireAscending(t, ws)
		})
	}
}

// missingEventsDefs wait for a callback and a Kafka record: "both" for both until the
// node's timeout; "optional" for the Kafka record only one second, and as it is not
// required (required_only), its timing out is recorded while the wait goes on.
func missingEventsDefs(svc string) []map[string]any {
	return []map[string]any{
		{"name": "both", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"apiCall": map[string]any{"url": svc + "/process"}, "kafkaEvent": map[string]any{"topic": "orders"},
		}}}},
		{"name": "optional", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"aggregationStrategy": "required_only",
			"apiCall":             map[string]any{"url": svc + "/process"},
			"kafkaEvent":          map[string]any{"topic": "orders", "required": false, "timeout": 1},
		}}}},
	}
}

// getWait reads one wait state and checks that the list and the execution's view show
// it the same way.
func (e *env) getWait(t *testing.T, id uuid.UUID) readmodel.WaitStateView {
	t.Helper()
	r := e.do(t, http.MethodGet, "/api/v1/wait-states/"+id.String(), nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var w readmodel.WaitStateView
	require.NoError(t, json.Unmarshal(r.Raw, &w))
	require.Contains(t, r.JSON, "missing_events", "present even when empty")

	// Read again by the list and by the execution: while the wait did not change in
	// between, both show exactly the same.
	listed := waitStates(t, e, "?execution="+w.ExecutionID.String())
	require.Len(t, listed, 1)
	if sameMoment(listed[0].WaitView, w.WaitView) {
		require.Equal(t, w, listed[0])
	}
	view := e.do(t, http.MethodGet, "/api/v1/executions/"+w.ExecutionID.String(), nil)
	var ev readmodel.ExecutionView
	require.NoError(t, json.Unmarshal(view.Raw, &ev))
	require.Len(t, ev.Waits, 1)
	if sameMoment(ev.Waits[0], w.WaitView) {
		require.Equal(t, w.WaitView, ev.Waits[0])
	}
	return w
}

// sameMoment tells whether two reads of a wait saw it unchanged: each change bumps the
// version, except the continuation's resumed_at.
func sameMoment(a, b readmodel.WaitView) bool {
	return a.Version == b.Version && (a.ResumedAt == nil) == (b.ResumedAt == nil)
}

func TestWaitStateMissingEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	svc := newCounter(t)
	for _, d := range missingEventsDefs(svc.srv.URL) {
		r := e.put(t, d["name"].(string), d)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	}

	t.Run("before and after a callback", func(t *testing.T) {
		t.Parallel()
		id := e.start(t, "both")
		w := e.getWait(t, awaitWaits(t, e, "?execution="+id, 1)[0].ID)
		require.Equal(t, vocab.WaitWaiting, w.Status)
		require.Equal(t, []string{"api_response", "kafka_event"}, w.EnabledEvents)
		require.Equal(t, []string{"api_response", "kafka_event"}, w.MissingEvents)
		require.Empty(t, w.ReceivedEvents)
		require.Equal(t, int64(1), w.Version)

		r := e.callback(t, id, w.CorrelationID.String())
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		after := e.getWait(t, w.ID)
		require.Equal(t, vocab.WaitWaiting, after.Status, "the Kafka record is still due")
		require.Equal(t, []string{"kafka_event"}, after.MissingEvents)
		require.Len(t, after.ReceivedEvents, 1)
		require.Equal(t, "api_response", after.ReceivedEvents[0].Name)
		require.Equal(t, workflow.SourceCallback, after.ReceivedEvents[0].Source.Kind)
		require.Equal(t, "acme", after.ReceivedEvents[0].Source.Service)
		require.Equal(t, int64(2), after.Version)
		require.False(t, after.UpdatedAt.Before(w.UpdatedAt))
		require.Equal(t, w.CreatedAt, after.CreatedAt)
	})

	t.Run("an event that timed out is not missing", func(t *testing.T) {
		t.Parallel()
		id := e.start(t, "optional")
		ws := awaitWaits(t, e, "?execution="+id, 1)
		var w readmodel.WaitStateView
		require.Eventually(t, func() bool {
			w = e.getWait(t, ws[0].ID)
			return len(w.TimedOutEvents) > 0
		}, 15*time.Second, 50*time.Millisecond, "the Kafka record never timed out")
		require.Equal(t, vocab.WaitWaiting, w.Status)
		require.Equal(t, []string{"kafka_event"}, w.TimedOutEvents)
		require.Equal(t, []string{"api_response"}, w.MissingEvents)

		r := e.callback(t, id, w.CorrelationID.String())
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		done := e.getWait(t, w.ID)
		require.Equal(t, vocab.WaitCompleted, done.Status)
		require.Empty(t, done.MissingEvents)
	})
}

func TestGetWaitState(t *testing.T) {
	t.Parallel()
	e := setup(t)
	unknown := uuid.NewString()
	tests := []struct {
		name, path string
		status     int
		slug       string
		detail     string
	}{
		{"unknown", unknown, http.StatusNotFound, "wait-not-found", "no wait state " + unknown},
		{"not a UUID", "wait-17", http.StatusBadRequest, "malformed-id", "wait state id is not a UUID"},
		{"a query parameter", unknown + "?status=waiting", http.StatusBadRequest, "invalid-query", "status: unknown parameter; this endpoint takes none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodGet, "/api/v1/wait-states/"+tt.path, nil)
			requireProblem(t, r, tt.status, tt.slug, tt.detail, "/api/v1/wait-states/"+strings.Split(tt.path, "?")[0])
		})
	}
}

type workflowSummary = readmodel.WorkflowSummary

func TestListAndGetWorkflows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	created := map[string][]stored{}
	for _, name := range []string{"delta", "alpha", "echo", "charlie", "bravo"} {
		created[name] = append(created[name], decodeStored(t, e.put(t, name, waitDef(name, "t")), http.StatusCreated))
	}
	created["charlie"] = append(created["charlie"], decodeStored(t, e.put(t, "charlie", waitDef("charlie", "t2")), http.StatusOK))
	created["charlie"] = append(created["charlie"], decodeStored(t, e.put(t, "charlie", waitDef("charlie", "t3")), http.StatusOK))

	t.Run("list", func(t *testing.T) {
		t.Parallel()
		items, sizes := walk[workflowSummary](t, e, "/api/v1/workflows", 2, nil)
		require.Equal(t, []int{2, 2, 1}, sizes)
		var names []string
		for _, it := range items {
			names = append(names, it.Name)
			versions := created[it.Name]
			first, latest := versions[0], versions[len(versions)-1]
			require.Equal(t, latest.Version, it.LatestVersion, it.Name)
			require.Equal(t, int32(len(versions)), it.Versions, it.Name)
			require.True(t, first.CreatedAt.Equal(it.CreatedAt), "%s: created_at is the first version's", it.Name)
			require.True(t, latest.CreatedAt.Equal(it.UpdatedAt), "%s: updated_at is the latest version's", it.Name)
		}
		require.Equal(t, []string{"alpha", "bravo", "charlie", "delta", "echo"}, names)
	})

	t.Run("get", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			query   string
			version int32
			topic   string
		}{{"", 3, "t3"}, {"?version=3", 3, "t3"}, {"?version=1", 1, "t"}, {"?version=2", 2, "t2"}} {
			r := e.do(t, http.MethodGet, "/api/v1/workflows/charlie"+tt.query, nil)
			require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
			var v readmodel.WorkflowView
			require.NoError(t, json.Unmarshal(r.Raw, &v))
			require.Equal(t, "charlie", v.Name)
			require.Equal(t, int32(3), v.LatestVersion)
			require.Equal(t, tt.version, v.Version, tt.query)
			require.JSONEq(t, string(mustJSON(t, waitDef("charlie", tt.topic))), string(v.Definition), tt.query)
			var versions []int32
			for i, vv := range v.Versions {
				versions = append(versions, vv.Version)
				require.True(t, created["charlie"][2-i].CreatedAt.Equal(vv.CreatedAt))
			}
			require.Equal(t, []int32{3, 2, 1}, versions, "newest first")
		}
	})

	t.Run("not found and bad parameters", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			path   string
			status int
			slug   string
			detail string
		}{
			{"/api/v1/workflows/zulu", http.StatusNotFound, "workflow-not-found", "no workflow named zulu"},
			{"/api/v1/workflows/zulu?version=1", http.StatusNotFound, "workflow-not-found", "no version 1 of workflow zulu"},
			{"/api/v1/workflows/charlie?version=4", http.StatusNotFound, "workflow-not-found", "no version 4 of workflow charlie"},
			{"/api/v1/workflows/charlie?version=0", http.StatusBadRequest, "invalid-query", "version: must be a positive integer"},
			{"/api/v1/workflows/charlie?version=-1", http.StatusBadRequest, "invalid-query", "version: must be a positive integer"},
			{"/api/v1/workflows/charlie?version=two", http.StatusBadRequest, "invalid-query", "version: must be a positive integer"},
			{"/api/v1/workflows/charlie?version=99999999999", http.StatusBadRequest, "invalid-query", "version: must be a positive integer"},
			{"/api/v1/workflows/charlie?version=1&version=2", http.StatusBadRequest, "invalid-query", "version: given more than once"},
			{"/api/v1/workflows/charlie?latest=true", http.StatusBadRequest, "invalid-query", "latest: unknown parameter; this endpoint takes version"},
		}
		for _, tt := range tests {
			r := e.do(t, http.MethodGet, tt.path, nil)
			requireProblem(t, r, tt.status, tt.slug, tt.detail, strings.Split(tt.path, "?")[0])
		}
	})
}

// TestValidateIsNotAName: POST /api/v1/workflows/validate takes the static segment, yet
// a workflow named "validate" is stored and read through /api/v1/workflows/:name.
func TestValidateIsNotAName(t *testing.T) {
	t.Parallel()
	e := setup(t)
	decodeStored(t, e.put(t, "validate", waitDef("validate", "t")), http.StatusCreated)
	r := e.do(t, http.MethodGet, "/api/v1/workflows/validate", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "validate", r.JSON["name"])
	r = e.do(t, http.MethodPost, "/api/v1/workflows/validate", mustJSON(t, waitDef("other", "t")))
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, 1, e.count(t, "workflows"))
}

func TestValidateWorkflow(t *testing.T) {
	t.Parallel()
	e := setup(t)

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, http.MethodPost, "/api/v1/workflows/validate", mustJSON(t, waitDef("orders", "t")))
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		require.Contains(t, r.Header.Get("Content-Type"), "application/json")
		require.JSONEq(t, `{"valid": true, "nodes": 2, "warnings": []}`, string(r.Raw))
	})

	// Each invalid body gets exactly the errors PUT reports for it, under its own name.
	bodies := map[string][]byte{
		"several errors": mustJSON(t, map[string]any{
			"name": "broken", "color": "blue",
			"nodes": []any{
				map[string]any{"id": "a", "type": "teleport"},
				map[string]any{"id": "a", "type": "http", "data": map[string]any{"url": "http://svc/x"}},
			},
			"edges": []any{map[string]any{"source": "a", "target": "ghost"}},
		}),
		"malformed JSON": []byte(`{"name": "broken", "nodes": [`),
		"empty body":     nil,
		"not an object":  []byte(`[]`),
		"no name":        []byte(`{"nodes": [{"id": "w", "type": "wait_events"}]}`),
		"bad name":       []byte(`{"name": "no spaces", "nodes": [{"id": "w", "type": "wait_events"}]}`),
		"kafka topic":    []byte(`{"name": "broken", "nodes": [{"id": "w", "type": "wait_events", "data": {"kafkaEvent": {}}}]}`),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, http.MethodPost, "/api/v1/workflows/validate", body)
			requireProblem(t, r, http.StatusUnprocessableEntity, "invalid-definition", "invalid definition: ", "/api/v1/workflows/validate")
			put := e.do(t, http.MethodPut, "/api/v1/workflows/broken", body)
			require.Equal(t, http.StatusUnprocessableEntity, put.Status, string(put.Raw))
			require.NotEmpty(t, r.JSON["errors"])
			require.Equal(t, put.JSON["errors"], r.JSON["errors"])
			require.Equal(t, put.JSON["detail"], r.JSON["detail"])
		})
	}

	t.Run("too large", func(t *testing.T) {
		t.Parallel()
		body := []byte(`{"name": "big", "vars": {"x": "` + strings.Repeat("a", 4<<20) + `"}, "nodes": []}`)
		r := e.do(t, http.MethodPost, "/api/v1/workflows/validate", body)
		requireProblem(t, r, http.StatusRequestEntityTooLarge, "body-too-large", "body too large", "/api/v1/workflows/validate")
	})

	t.Run("a query parameter", func(t *testing.T) {
		t.Parallel()
		r := e.do(t, http.MethodPost, "/api/v1/workflows/validate?store=true", mustJSON(t, waitDef("orders", "t")))
		requireProblem(t, r, http.StatusBadRequest, "invalid-query", "store: unknown parameter", "/api/v1/workflows/validate")
	})
}

// TestWarnings: a field the node's strategy leaves unused is stored, and the validation,
// the store and a refusal for another reason each list it as a warning at its path,
// apart from the errors.
func TestWarnings(t *testing.T) {
	t.Parallel()
	e := setup(t)
	def := waitDef("spelled-out", "t")
	data := def["nodes"].([]any)[0].(map[string]any)["data"].(map[string]any)
	data["aggregationStrategy"] = "all"
	data["requiredEvents"] = []string{"kafka_event"}
	want := []any{map[string]any{"path": "nodes[0].data.requiredEvents",
		"message": `ignored: only used with aggregationStrategy "custom"; this node's strategy "all" decides what it waits for`}}

	r := e.do(t, http.MethodPost, "/api/v1/workflows/validate", mustJSON(t, def))
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, want, r.JSON["warnings"])

	put := e.do(t, http.MethodPut, "/api/v1/workflows/spelled-out", mustJSON(t, def))
	require.Equal(t, http.StatusCreated, put.Status, string(put.Raw))
	require.Equal(t, want, put.JSON["warnings"])
	again := e.do(t, http.MethodPut, "/api/v1/workflows/spelled-out", mustJSON(t, def))
	require.Equal(t, http.StatusOK, again.Status, string(again.Raw))
	require.Equal(t, true, again.JSON["unchanged"])
	require.Equal(t, want, again.JSON["warnings"])

	data["timeout"] = "0s"
	bad := e.do(t, http.MethodPost, "/api/v1/workflows/validate", mustJSON(t, def))
	requireProblem(t, bad, http.StatusUnprocessableEntity, "invalid-definition", "invalid definition: ", "/api/v1/workflows/validate")
	require.Len(t, bad.JSON["errors"], 1)
	require.Equal(t, want, bad.JSON["warnings"])
}

// TestValidateStoresNothing: validations, valid or not, leave no row behind.
func TestValidateStoresNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, body := range [][]byte{mustJSON(t, waitDef("orders", "t")), []byte(`{"name": "x", "nodes": []}`)} {
		r := e.do(t, http.MethodPost, "/api/v1/workflows/validate", body)
		require.Contains(t, []int{http.StatusOK, http.StatusUnprocessableEntity}, r.Status, string(r.Raw))
	}
	require.Zero(t, e.count(t, "workflows"))
	require.Empty(t, listAll[workflowSummary](t, e, "/api/v1/workflows"))
	r := e.startExecution(t, "orders", nil)
	requireProblem(t, r, http.StatusNotFound, "workflow-not-found", "no workflow named orders", "/api/v1/workflows/orders/executions")
}

func TestListExecutions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.Equal(t, http.StatusCreated, e.put(t, "slow", waitDef("slow", "t")).Status)
	quick := map[string]any{"name": "quick", "nodes": []any{map[string]any{"id": "n", "type": "wait_events", "data": map[string]any{}}}}
	require.Equal(t, http.StatusCreated, e.put(t, "quick", quick).Status)

	var slow, done []string
	for i := range 3 {
		slow = append(slow, e.start(t, "slow"))
		if i < 2 {
			done = append(done, e.start(t, "quick"))
		}
	}
	for _, id := range done {
		e.awaitStatus(t, id, status("completed"))
	}
	for _, id := range slow {
		e.awaitStatus(t, id, status("waiting"))
	}

	type summary = readmodel.ExecutionSummary
	items, sizes := walk[summary](t, e, "/api/v1/executions", 2, nil)
	require.Equal(t, []int{2, 2, 1}, sizes)
	for i := 1; i < len(items); i++ {
		a, b := items[i-1], items[i]
		ok := a.CreatedAt.After(b.CreatedAt) || (a.CreatedAt.Equal(b.CreatedAt) && strings.Compare(a.ID.String(), b.ID.String()) > 0)
		require.True(t, ok, "newest first: item %d (%s) does not follow item %d (%s)", i, b.CreatedAt, i-1, a.CreatedAt)
	}
	byID := map[string]summary{}
	for _, it := range items {
		byID[it.ID.String()] = it
	}
	require.Len(t, byID, 5)
	for _, id := range done {
		it := byID[id]
		require.Equal(t, "quick", it.Workflow)
		require.Equal(t, vocab.ExecCompleted, it.Status)
		require.NotNil(t, it.FinishedAt)
	}
	for _, id := range slow {
		it := byID[id]
		require.Equal(t, "slow", it.Workflow)
		require.Equal(t, int32(1), it.WorkflowVersion)
		require.Equal(t, vocab.ExecWaiting, it.Status)
		require.Nil(t, it.FinishedAt)
	}
	// The raw items carry no input, nodes or waits: a list stays small.
	raw := e.do(t, http.MethodGet, "/api/v1/executions?limit=1", nil)
	item := raw.JSON["items"].([]any)[0].(map[string]any)
	for _, k := range []string{"input", "nodes", "wait_states"} {
		require.NotContains(t, item, k)
	}

	// A correlation id finds the one execution whose wait has it.
	w := waitStates(t, e, "?execution="+slow[1])
	require.Len(t, w, 1)
	first := byID[slow[0]].CreatedAt
	last := byID[slow[0]].CreatedAt
	for _, it := range items {
		first, last = minTime(first, it.CreatedAt), maxTime(last, it.CreatedAt)
	}
	at := func(t time.Time) string { return url.QueryEscape(t.Format(time.RFC3339Nano)) }
	all := append(append([]string{}, slow...), done...)

	tests := []struct {
		query string
		want  []string
	}{
		{"?correlation_id=" + w[0].CorrelationID.String(), slow[1:2]},
		{"?correlation_id=" + w[0].CorrelationID.String() + "&status=completed", nil},
		{"?correlation_id=" + uuid.NewString(), nil},
		{"?created_from=" + at(first), all},
		{"?created_from=" + at(first) + "&created_to=" + at(last), without(all, newest(items))},
		{"?created_from=" + at(last), []string{newest(items)}},
		{"?created_from=" + at(last.Add(time.Microsecond)), nil},
		{"?created_to=" + at(first), nil},
		{"?status=completed", done},
		{"?status=waiting", slow},
		{"?workflow=quick", done},
		{"?workflow=slow&status=waiting", slow},
		{"?workflow=slow&status=completed", nil},
		{"?status=failed", nil},
		{"?workflow=nope", nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			t.Parallel()
			got := listAll[summary](t, e, "/api/v1/executions"+tt.query)
			var gotIDs []string
			for _, it := range got {
				gotIDs = append(gotIDs, it.ID.String())
			}
			require.ElementsMatch(t, tt.want, gotIDs)
		})
	}
}

// Every list refuses what it cannot mean with a 400 invalid-query naming the parameter.
func TestListBadParameters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, n := range []string{"a", "b"} {
		require.Equal(t, http.StatusCreated, e.put(t, n, waitDef(n, "t")).Status)
	}
	e.start(t, "a")
	e.start(t, "a")
	awaitWaits(t, e, "", 2)
	cursorOf := func(path string) string {
		p := decodePage[map[string]any](t, e.do(t, http.MethodGet, path+"?limit=1", nil))
		require.NotNil(t, p.NextCursor)
		return url.QueryEscape(*p.NextCursor)
	}
	waitCursor, execCursor, wfCursor := cursorOf("/api/v1/wait-states"), cursorOf("/api/v1/executions"), cursorOf("/api/v1/workflows")

	paths := []string{"/api/v1/wait-states", "/api/v1/executions", "/api/v1/workflows"}
	common := []struct {
		query, param, detail string
	}{
		{"limit=0", "limit", "limit: must be an integer from 1 to 500"},
		{"limit=501", "limit", "limit: must be an integer from 1 to 500"},
		{"limit=-3", "limit", "limit: must be an integer from 1 to 500"},
		{"limit=ten", "limit", "limit: must be an integer from 1 to 500"},
		{"limit=2.5", "limit", "limit: must be an integer from 1 to 500"},
		{"limit=1&limit=2", "limit", "limit: given more than once"},
		{"cursor=%21%21", "cursor", "cursor: not a cursor of this list"},
		{"cursor=dw", "cursor", "cursor: not a cursor of this list"},
		{"sort=desc", "sort", "sort: unknown parameter; this endpoint takes "},
		{"Limit=5", "Limit", "Limit: unknown parameter"},
	}
	for _, list := range paths {
		for _, tt := range common {
			r := e.do(t, http.MethodGet, list+"?"+tt.query, nil)
			requireProblem(t, r, http.StatusBadRequest, "invalid-query", tt.detail, list)
			require.Equal(t, tt.param, r.JSON["param"], "%s?%s", list, tt.query)
		}
	}

	specific := []struct {
		path, param, detail string
	}{
		{"/api/v1/wait-states?status=pending", "status", `status: "pending" is not one of waiting, scheduled, completed, timeout, failed, cancelled, resumed, error`},
		{"/api/v1/wait-states?status=WAITING", "status", `status: "WAITING" is not one of`},
		{"/api/v1/executions?status=timeout", "status", `status: "timeout" is not one of running, waiting, completed, failed, cancelled`},
		{"/api/v1/wait-states?execution=exec-1", "execution", "execution: not a UUID"},
		{"/api/v1/wait-states?workflow=a%00b", "workflow", "workflow: must be UTF-8 text without NUL characters"},
		{"/api/v1/wait-states?node=%ff", "node", "node: must be UTF-8 text without NUL characters"},
		{"/api/v1/executions?workflow=%00", "workflow", "workflow: must be UTF-8 text"},
		// One list's cursor is not another's.
		{"/api/v1/wait-states?cursor=" + execCursor, "cursor", "cursor: a cursor of executions, not of wait states"},
		{"/api/v1/executions?cursor=" + waitCursor, "cursor", "cursor: a cursor of wait states, not of executions"},
		{"/api/v1/wait-states?cursor=" + wfCursor, "cursor", "cursor: a cursor of workflows, not of wait states"},
		{"/api/v1/workflows?cursor=" + waitCursor, "cursor", "cursor: a cursor of wait states, not of workflows"},
		{"/api/v1/executions?node=wait", "node", "node: unknown parameter; this endpoint takes status, workflow, correlation_id, created_from, created_to, limit, cursor"},
		{"/api/v1/executions?correlation_id=c-1", "correlation_id", "correlation_id: not a UUID"},
		{"/api/v1/executions?created_from=yesterday", "created_from", "created_from: must be an RFC 3339 time"},
		{"/api/v1/executions?created_to=2026-01-02", "created_to", "created_to: must be an RFC 3339 time"},
		{"/api/v1/executions?created_from=2026-01-02T00:00:00Z&created_to=2026-01-01T00:00:00Z", "created_to", "created_to: must be after created_from"},
		{"/api/v1/workflows?status=waiting", "status", "status: unknown parameter; this endpoint takes limit, cursor"},
		// Of several mistakes, one is reported: unknown and repeated parameters first, then
		// the page, then the filters.
		{"/api/v1/wait-states?status=x&limit=0&cursor=x", "limit", "limit: must be an integer from 1 to 500"},
		{"/api/v1/wait-states?status=x&sort=up&order=down", "order", "order: unknown parameter"},
	}
	for _, tt := range specific {
		r := e.do(t, http.MethodGet, tt.path, nil)
		requireProblem(t, r, http.StatusBadRequest, "invalid-query", tt.detail, strings.Split(tt.path, "?")[0])
		require.Equal(t, tt.param, r.JSON["param"], tt.path)
	}

	// The cursors themselves work where they belong.
	for path, c := range map[string]string{"/api/v1/wait-states": waitCursor, "/api/v1/executions": execCursor, "/api/v1/workflows": wfCursor} {
		p := decodePage[map[string]any](t, e.do(t, http.MethodGet, path+"?limit=1&cursor="+c, nil))
		require.Len(t, p.Items, 1, path)
		require.Nil(t, p.NextCursor, path)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// newest is the id of the first item of a list newest first.
func newest(items []readmodel.ExecutionSummary) string { return items[0].ID.String() }

func without(ids []string, id string) []string {
	var out []string
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}
