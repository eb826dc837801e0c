package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/client"
	"github.com/rendezvous-run/rendezvous/examples"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
)

// correlatedCall is what the external service of order-approval.json receives.
type correlatedCall struct {
	ExecutionID   string `json:"execution_id"`
	CorrelationID string `json:"correlation_id"`
}

type fixture struct {
	api      *client.Client
	server   string // base URL of the service, for callbacks
	external *testkit.FakeService
	taken    int    // correlated calls nextCall has handed out
	approval []byte // examples/order-approval.json pointed at the fake external service
}

// setup starts a service on a schema of its own and a fake external service, and
// returns a client of the service.
func setup(t *testing.T) *fixture {
	t.Helper()
	schema := dbtest.NewSchema(t)
	f := &fixture{external: testkit.NewFakeService(t)}
	f.external.On("/notifications", testkit.Always(testkit.Reply{Status: http.StatusOK}))
	f.approval = exampleFor(t, "order-approval.json", f.external.URL)

	cfg := replica.Config(t, schema.URL, "client-test")
	cfg.DBMaxConns = 8
	s := replica.Start(t, cfg)
	f.server = "http://" + s.Addr()
	var err error
	f.api, err = client.New(f.server, &http.Client{Timeout: 30 * time.Second})
	require.NoError(t, err)
	return f
}

// exampleFor is an example definition whose external service is serviceURL.
func exampleFor(t *testing.T, file, serviceURL string) []byte {
	t.Helper()
	raw, err := examples.Definitions.ReadFile(file)
	require.NoError(t, err)
	var def map[string]any
	require.NoError(t, json.Unmarshal(raw, &def))
	def["vars"] = map[string]any{"serviceUrl": serviceURL, "token": "test-token"}
	out, err := json.Marshal(def)
	require.NoError(t, err)
	return out
}

// nextCall waits for a correlated call to reach the external service.
func (f *fixture) nextCall(t *testing.T) correlatedCall {
	t.Helper()
	f.taken++
	r := f.external.AwaitNth(t, 30*time.Second, "/approvals", f.taken)
	return correlatedCall{ExecutionID: r.Field("execution_id"), CorrelationID: r.Field("correlation_id")}
}

func (f *fixture) callback(t *testing.T, c correlatedCall, decision string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"execution_id": c.ExecutionID, "correlation_id": c.CorrelationID, "decision": decision})
	resp, err := http.Post(f.server+"/api/internal/callbacks/acme", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
}

func requireProblem(t *testing.T, err error, status int, slug string) *client.Error {
	t.Helper()
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, status, e.Status, e.Error())
	require.Equal(t, slug, e.Slug(), e.Error())
	return e
}

func TestWorkflows(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	stored, err := f.api.PutWorkflow(ctx, "order-approval", f.approval)
	require.NoError(t, err)
	require.Equal(t, int32(1), stored.Version)
	require.True(t, stored.Created)
	require.False(t, stored.Unchanged)
	require.Contains(t, string(stored.Raw), `"version":1`)

	stored, err = f.api.PutWorkflow(ctx, "order-approval", f.approval)
	require.NoError(t, err)
	require.Equal(t, int32(1), stored.Version)
	require.False(t, stored.Created)
	require.True(t, stored.Unchanged)

	v2 := bytes.Replace(f.approval, []byte(`"timeout":300`), []byte(`"timeout":600`), 1)
	require.NotEqual(t, f.approval, v2)
	stored, err = f.api.PutWorkflow(ctx, "order-approval", v2)
	require.NoError(t, err)
	require.Equal(t, int32(2), stored.Version)
	require.False(t, stored.Created)
	require.False(t, stored.Unchanged)

	page, err := f.api.Workflows(ctx, client.PageRequest{})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, "order-approval", page.Items[0].Name)
	require.Equal(t, int32(2), page.Items[0].LatestVersion)
	require.Equal(t, int32(2), page.Items[0].Versions)
	require.Empty(t, page.NextCursor)

	w, err := f.api.Workflow(ctx, "order-approval", 0)
	require.NoError(t, err)
	require.Equal(t, int32(2), w.Version)
	require.Equal(t, int32(2), w.LatestVersion)
	require.Equal(t, []int32{2, 1}, []int32{w.Versions[0].Version, w.Versions[1].Version})
	require.JSONEq(t, string(v2), string(w.Definition))

	w, err = f.api.Workflow(ctx, "order-approval", 1)
	require.NoError(t, err)
	require.Equal(t, int32(1), w.Version)
	require.JSONEq(t, string(f.approval), string(w.Definition))

	_, err = f.api.Workflow(ctx, "no-such-workflow", 0)
	requireProblem(t, err, http.StatusNotFound, "workflow-not-found")

	// Every problem comes back with its path, from storing and from validating alike.
	bad := []byte(`{"name": "bad", "nodes": [{"id": "w", "type": "wait_events", "data": {"timeout": -1}}], "edges": [{"source": "w", "target": "nowhere"}]}`)
	_, err = f.api.PutWorkflow(ctx, "bad", bad)
	e := requireProblem(t, err, http.StatusUnprocessableEntity, "invalid-definition")
	require.GreaterOrEqual(t, len(e.Errors), 2, e.Errors)
	paths := map[string]bool{}
	for _, fe := range e.Errors {
		require.NotEmpty(t, fe.Message)
		paths[fe.Path] = true
	}
	require.True(t, paths["edges[0].target"], e.Errors)
	require.Equal(t, fmt.Sprintf("422 invalid-definition (%d errors)", len(e.Errors)), e.Headline())
	require.Contains(t, e.Error(), `422 invalid-definition: `)
	require.Contains(t, e.Error(), `edges[0].target: unknown node "nowhere"`)

	_, err = f.api.ValidateWorkflow(ctx, bad)
	ve := requireProblem(t, err, http.StatusUnprocessableEntity, "invalid-definition")
	require.Equal(t, e.Errors, ve.Errors)

	valid, err := f.api.ValidateWorkflow(ctx, f.approval)
	require.NoError(t, err)
	require.True(t, valid.Valid)
	require.Equal(t, 3, valid.Nodes)
}

func TestExecutionsAndWaits(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	_, err := f.api.PutWorkflow(ctx, "order-approval", f.approval)
	require.NoError(t, err)

	var started []uuid.UUID
	for i := range 3 {
		s, err := f.api.StartExecution(ctx, "order-approval", json.RawMessage(fmt.Sprintf(`{"order": "A-%d", "amount": %d}`, i, 100+i)))
		require.NoError(t, err)
		require.Equal(t, "order-approval", s.Workflow)
		started = append(started, s.ID)
		// One at a time, so that creation order is the start order.
		f.nextCall(t)
	}
	_, err = f.api.StartExecution(ctx, "no-such-workflow", nil)
	requireProblem(t, err, http.StatusNotFound, "workflow-not-found")

	// The wait is committed before its call leaves, so all three are listed now.
	all, more, err := client.Collect(ctx, 0, func(ctx context.Context, p client.PageRequest) (*client.Page[client.WaitState], error) {
		return f.api.WaitStates(ctx, client.WaitFilter{Status: client.StatusWaiting}, p)
	})
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, all, 3)
	for i, w := range all {
		require.Equal(t, started[i], w.ExecutionID, "longest-waiting first")
		require.Equal(t, "order-approval", w.Workflow)
		require.Equal(t, int32(1), w.WorkflowVersion)
		require.Equal(t, "request_approval", w.NodeID)
		require.Equal(t, "all", w.Strategy)
		require.Equal(t, []string{"api_response"}, w.Missing())
		require.Empty(t, w.Arrived())
		require.True(t, w.Open())
		require.WithinDuration(t, time.Now().Add(300*time.Second), w.NextDeadlineAt, time.Minute)
		require.True(t, json.Valid(w.Raw))
	}

	// Following the cursor one item at a time reads the same waits in the same order.
	var pages int
	one, more, err := client.Collect(ctx, 0, func(ctx context.Context, p client.PageRequest) (*client.Page[client.WaitState], error) {
		pages++
		p.Limit = 1
		return f.api.WaitStates(ctx, client.WaitFilter{}, p)
	})
	require.NoError(t, err)
	require.False(t, more)
	require.GreaterOrEqual(t, pages, 3)
	require.Equal(t, ids(all), ids(one))

	two, more, err := client.Collect(ctx, 2, func(ctx context.Context, p client.PageRequest) (*client.Page[client.WaitState], error) {
		return f.api.WaitStates(ctx, client.WaitFilter{}, p)
	})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, ids(all)[:2], ids(two))
	three, more, err := client.Collect(ctx, 3, func(ctx context.Context, p client.PageRequest) (*client.Page[client.WaitState], error) {
		return f.api.WaitStates(ctx, client.WaitFilter{}, p)
	})
	require.NoError(t, err)
	require.False(t, more, "exactly three: nothing follows")
	require.Len(t, three, 3)

	for filter, want := range map[client.WaitFilter]int{
		{Execution: started[1]}:                           1,
		{Node: "request_approval"}:                        3,
		{Node: "notify_approved"}:                         0,
		{Workflow: "order-approval", Status: "completed"}: 0,
		{Workflow: "other"}:                               0,
	} {
		page, err := f.api.WaitStates(ctx, filter, client.PageRequest{})
		require.NoError(t, err, "%+v", filter)
		require.Len(t, page.Items, want, "%+v", filter)
	}
	_, err = f.api.WaitStates(ctx, client.WaitFilter{Status: "sleeping"}, client.PageRequest{})
	requireProblem(t, err, http.StatusBadRequest, "invalid-query")

	// An event arrives: the wait completes with it.
	first := all[0]
	f.callback(t, correlatedCall{ExecutionID: first.ExecutionID.String(), CorrelationID: first.CorrelationID.String()}, "approved")
	require.Eventually(t, func() bool {
		w, err := f.api.WaitState(ctx, first.ID)
		return err == nil && w.Status == "completed"
	}, 30*time.Second, 50*time.Millisecond)
	w, err := f.api.WaitState(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"api_response"}, w.Arrived())
	require.Empty(t, w.Missing())
	require.False(t, w.Open())
	require.Contains(t, string(w.ReceivedEvents[0].Source), `"callback"`)
	require.Greater(t, w.Version, first.Version)

	_, err = f.api.WaitState(ctx, uuid.New())
	requireProblem(t, err, http.StatusNotFound, "wait-not-found")

	// One wait cancelled, the workflow goes on; cancelling it again is a conflict.
	e, err := f.api.CancelWait(ctx, started[1], "request_approval", client.ThenContinue, "approved by phone")
	require.NoError(t, err)
	require.Equal(t, started[1], e.ID)
	require.Len(t, e.Waits, 1)
	require.Equal(t, "cancelled", e.Waits[0].Status)
	require.Equal(t, []string{"api_response"}, e.Waits[0].Missing(), "what never came")
	_, err = f.api.CancelWait(ctx, started[1], "request_approval", client.ThenFail, "")
	var conflict *client.Error
	require.ErrorAs(t, err, &conflict)
	require.Equal(t, http.StatusConflict, conflict.Status)
	// Which one depends on whether the continuation has finished the execution yet.
	require.Contains(t, []string{"wait-finished", "execution-finished"}, conflict.Slug())
	_, err = f.api.CancelWait(ctx, started[2], "no_such_node", "", "")
	requireProblem(t, err, http.StatusNotFound, "wait-not-found")

	// A whole execution cancelled, twice: the second changes nothing.
	for range 2 {
		e, err = f.api.CancelExecution(ctx, started[2], "withdrawn")
		require.NoError(t, err)
		require.Equal(t, "cancelled", e.Status)
		require.Equal(t, "cancelled", e.Waits[0].Status)
	}
	_, err = f.api.CancelExecution(ctx, uuid.New(), "")
	requireProblem(t, err, http.StatusNotFound, "execution-not-found")

	e, err = f.api.Execution(ctx, started[2])
	require.NoError(t, err)
	require.Equal(t, "cancelled", e.Status)
	require.JSONEq(t, `{"order": "A-2", "amount": 102}`, string(e.Input))
	require.NotEmpty(t, e.Nodes)
	require.Contains(t, string(e.Raw), `"wait_states"`)
	_, err = f.api.Execution(ctx, uuid.New())
	requireProblem(t, err, http.StatusNotFound, "execution-not-found")

	list, err := f.api.Executions(ctx, client.ExecutionFilter{}, client.PageRequest{})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{started[2], started[1], started[0]}, execIDs(list.Items), "newest first")
	list, err = f.api.Executions(ctx, client.ExecutionFilter{Status: "cancelled", Workflow: "order-approval"}, client.PageRequest{})
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{started[2]}, execIDs(list.Items))
}

// TestEvents sends events to an execution and reads what reached no wait.
func TestEvents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	def := []byte(`{"name": "approve", "nodes": [{"id": "wait", "type": "wait_events", "data": {
		"events": [{"name": "first", "source": "send", "type": "approved"}, {"name": "second", "source": "send", "type": "approved"}]}}]}`)
	_, err := f.api.PutWorkflow(ctx, "approve", def)
	require.NoError(t, err)
	started, err := f.api.StartExecution(ctx, "approve", nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		page, err := f.api.WaitStates(ctx, client.WaitFilter{Execution: started.ID, Status: client.StatusWaiting}, client.PageRequest{})
		require.NoError(t, err)
		return len(page.Items) == 1
	}, 15*time.Second, 20*time.Millisecond)

	early, err := f.api.SendEvent(ctx, started.ID, "later", nil, "")
	require.NoError(t, err)
	require.Equal(t, client.SendBuffered, early.Outcome)
	require.Positive(t, early.BufferID)
	require.NotNil(t, early.ExpiresAt)
	require.Empty(t, early.Deliveries)

	sent, err := f.api.SendEvent(ctx, started.ID, "approved", json.RawMessage(`{"ok": true}`), "evt-1")
	require.NoError(t, err)
	require.Equal(t, client.SendDelivered, sent.Outcome)
	require.Len(t, sent.Deliveries, 1)
	d := sent.Deliveries[0]
	require.Equal(t, "wait", d.NodeID)
	require.Equal(t, "first", d.Event)
	require.Equal(t, "recorded", d.Outcome)
	require.Equal(t, client.StatusWaiting, d.WaitStatus)
	require.NotEqual(t, uuid.Nil, d.WaitStateID)
	require.Contains(t, string(sent.Raw), `"outcome":"delivered"`)

	dup, err := f.api.SendEvent(ctx, started.ID, "approved", json.RawMessage(`{"ok": true}`), "evt-1")
	require.NoError(t, err)
	require.Equal(t, client.SendDuplicate, dup.Outcome)
	require.Empty(t, dup.Deliveries)

	last, err := f.api.SendEvent(ctx, started.ID, "approved", nil, "evt-2")
	require.NoError(t, err)
	require.Equal(t, "second", last.Deliveries[0].Event)
	require.Equal(t, "completed", last.Deliveries[0].Outcome)

	unknown := uuid.New()
	_, err = f.api.SendEvent(ctx, unknown, "approved", nil, "")
	requireProblem(t, err, http.StatusNotFound, "execution-not-found")
	_, err = f.api.SendEvent(ctx, started.ID, "", nil, "")
	requireProblem(t, err, http.StatusBadRequest, "invalid-request")

	none, err := f.api.UnmatchedEvents(ctx, "no_execution", client.PageRequest{})
	require.NoError(t, err)
	require.Len(t, none.Items, 1)
	u := none.Items[0]
	require.Equal(t, "no_execution", u.Reason)
	require.Equal(t, "approved", u.EventType)
	require.Equal(t, &unknown, u.ExecutionID)
	require.JSONEq(t, `{"kind": "send"}`, string(u.Source))
	require.Equal(t, "null", u.PayloadExcerpt)

	// Newest first, a page at a time: the no_execution row, the duplicate, the buffered one.
	all, more, err := client.Collect(ctx, 0, func(ctx context.Context, p client.PageRequest) (*client.Page[client.UnmatchedEvent], error) {
		p.Limit = 1
		return f.api.UnmatchedEvents(ctx, "", p)
	})
	require.NoError(t, err)
	require.False(t, more)
	var reasons []string
	for _, u := range all {
		reasons = append(reasons, u.Reason)
	}
	require.Equal(t, []string{"no_execution", "duplicate", "buffered"}, reasons)

	_, err = f.api.UnmatchedEvents(ctx, "lost", client.PageRequest{})
	requireProblem(t, err, http.StatusBadRequest, "invalid-query")
}

func ids(ws []client.WaitState) []uuid.UUID {
	var out []uuid.UUID
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

func execIDs(es []client.ExecutionSummary) []uuid.UUID {
	var out []uuid.UUID
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// TestAnswersThatAreNotTheAPI: what the client makes of failures that are not problems
// of the service itself.
func TestAnswersThatAreNotTheAPI(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	answer := func(status int, contentType, body string) *client.Client {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		c, err := client.New(srv.URL, nil)
		require.NoError(t, err)
		return c
	}

	_, err := answer(http.StatusBadGateway, "text/html", "<html>bad gateway</html>").Workflows(ctx, client.PageRequest{})
	e := requireProblem(t, err, http.StatusBadGateway, "")
	require.Equal(t, "502 Bad Gateway: GET /api/v1/workflows", e.Error())

	_, err = answer(http.StatusInternalServerError, "application/problem+json",
		`{"type":"about:blank","title":"Internal Server Error","status":500}`).Execution(ctx, uuid.New())
	e = requireProblem(t, err, http.StatusInternalServerError, "")
	require.True(t, strings.HasPrefix(e.Error(), "500 Internal Server Error: GET /api/v1/executions/"), e.Error())

	_, err = answer(http.StatusOK, "text/html", "<html>a file server</html>").Workflows(ctx, client.PageRequest{})
	var rerr *client.ResponseError
	require.ErrorAs(t, err, &rerr)
	require.Equal(t, http.StatusOK, rerr.Status)

	// A server handing back the cursor it was asked with would be followed forever.
	stuck := answer(http.StatusOK, "application/json", `{"items": [{"name": "a"}], "next_cursor": "same"}`)
	_, _, err = client.Collect(ctx, 0, stuck.Workflows)
	require.ErrorAs(t, err, &rerr)
	require.ErrorContains(t, err, "next_cursor repeats")

	// Nothing listening: no HTTP answer at all.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	c, err := client.New(closed.URL, nil)
	require.NoError(t, err)
	_, err = c.WaitStates(ctx, client.WaitFilter{}, client.PageRequest{})
	var terr *client.TransportError
	require.ErrorAs(t, err, &terr)
	require.Contains(t, err.Error(), "connection refused")
	var aerr *client.Error
	require.False(t, errors.As(err, &aerr))
}

func TestServerURL(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"localhost:8080", "ftp://host", "http://", "http://host?x=1", "://x"} {
		_, err := client.New(bad, nil)
		require.Error(t, err, bad)
	}
	// A path prefix (a reverse proxy) is kept, and names are escaped into the path.
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items": []}`)
	}))
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL+"/rendezvous/", nil)
	require.NoError(t, err)
	require.Equal(t, srv.URL+"/rendezvous", c.Server())
	exec := uuid.MustParse("0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f")
	_, err = c.WaitStates(t.Context(), client.WaitFilter{Status: "waiting", Node: "a b", Execution: exec}, client.PageRequest{Limit: 10, Cursor: "c/1"})
	require.NoError(t, err)
	_, err = c.Workflow(t.Context(), "a b", 2)
	require.NoError(t, err)
	require.Equal(t, []string{
		"GET /rendezvous/api/v1/wait-states?cursor=c%2F1&execution=0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f&limit=10&node=a+b&status=waiting",
		"GET /rendezvous/api/v1/workflows/a%20b?version=2",
	}, got)
}

// TestCollect checks the paging arithmetic against a listing of known length.
func TestCollect(t *testing.T) {
	t.Parallel()
	listing := func(n int, requests *[]client.PageRequest) func(context.Context, client.PageRequest) (*client.Page[int], error) {
		return func(_ context.Context, p client.PageRequest) (*client.Page[int], error) {
			*requests = append(*requests, p)
			start := 0
			if p.Cursor != "" {
				fmt.Sscan(p.Cursor, &start)
			}
			size := min(p.Limit, 3) // a server whose pages hold at most 3
			end := min(start+size, n)
			page := &client.Page[int]{}
			for i := start; i < end; i++ {
				page.Items = append(page.Items, i)
			}
			if end < n {
				page.NextCursor = fmt.Sprint(end)
			}
			return page, nil
		}
	}
	for _, tc := range []struct {
		n, max   int
		want     int
		wantMore bool
	}{
		{n: 0, max: 0, want: 0},
		{n: 7, max: 0, want: 7},
		{n: 7, max: 7, want: 7},
		{n: 7, max: 6, want: 6, wantMore: true},
		{n: 7, max: 2, want: 2, wantMore: true},
		{n: 2, max: 5, want: 2},
		{n: 6, max: 6, want: 6}, // full at a page boundary with a cursor
	} {
		var reqs []client.PageRequest
		items, more, err := client.Collect(t.Context(), tc.max, listing(tc.n, &reqs))
		require.NoError(t, err)
		require.Len(t, items, tc.want, "%+v", tc)
		for i, v := range items {
			require.Equal(t, i, v)
		}
		require.Equal(t, tc.wantMore, more, "%+v", tc)
		for _, r := range reqs {
			require.LessOrEqual(t, r.Limit, client.MaxPageSize)
			if tc.max > 0 {
				require.LessOrEqual(t, r.Limit, tc.max+1, "never asks for more than it needs plus one")
			}
		}
	}

	boom := errors.New("boom")
	_, _, err := client.Collect(t.Context(), 0, func(context.Context, client.PageRequest) (*client.Page[int], error) { return nil, boom })
	require.ErrorIs(t, err, boom)
}
