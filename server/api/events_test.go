package api_test

// HTTP-level tests of events sent to an execution by type and of the operator's lists of
// events that reached no wait, against a full service on a schema of its own.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// approval is the send event every definition here waits for.
func approval(name string) map[string]any {
	return map[string]any{"name": name, "source": "send", "type": "approved"}
}

// eventDefs stores the definitions these tests use:
//   - "approve": one wait for an approved event, its decision mapped to the output;
//   - "fanout": two nodes, in parallel, each waiting for an approved event;
//   - "twice": one wait for two approved events (first, second);
//   - "gated": a wait for a go event, then the approve wait;
//   - "quick": a wait without events, which completes at once.
func eventDefs(t *testing.T, e *env) {
	t.Helper()
	defs := []map[string]any{
		{"name": "approve", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"events": []any{approval("approval")}, "outputMapping": map[string]any{"decision": "approval.decision"},
		}}}},
		{"name": "fanout", "nodes": []any{
			map[string]any{"id": "w1", "type": "wait_events", "data": map[string]any{"events": []any{approval("approval")}}},
			map[string]any{"id": "w2", "type": "wait_events", "data": map[string]any{"events": []any{approval("approval")}}},
		}},
		{"name": "twice", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
			"events": []any{approval("first"), approval("second")},
		}}}},
		{"name": "gated", "nodes": []any{
			map[string]any{"id": "gate", "type": "wait_events", "data": map[string]any{
				"events": []any{map[string]any{"name": "go", "source": "send", "type": "go"}},
			}},
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"events": []any{approval("approval")}, "outputMapping": map[string]any{"decision": "approval.decision"},
			}},
		}, "edges": []any{map[string]any{"source": "gate", "target": "wait"}}},
		{"name": "quick", "nodes": []any{map[string]any{"id": "n", "type": "wait_events", "data": map[string]any{}}}},
	}
	for _, d := range defs {
		r := e.put(t, d["name"].(string), d)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
	}
}

func eventsPath(id string) string { return "/api/v1/executions/" + id + "/events" }

// sent is the body of a 200 or 202 answer to a sent event.
type sent struct {
	Outcome    string `json:"outcome"`
	Deliveries []struct {
		NodeID      string    `json:"node_id"`
		WaitStateID uuid.UUID `json:"wait_state_id"`
		Event       string    `json:"event"`
		Outcome     string    `json:"outcome"`
		WaitStatus  string    `json:"wait_status"`
		Version     int64     `json:"version"`
	} `json:"deliveries"`
	BufferID  int64      `json:"buffer_id"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// send posts an event to an execution and decodes a success answer of status want.
func (e *env) send(t *testing.T, id string, body any, want int) sent {
	t.Helper()
	r := e.do(t, http.MethodPost, eventsPath(id), mustJSON(t, body))
	require.Equal(t, want, r.Status, string(r.Raw))
	require.Contains(t, r.Header.Get("Content-Type"), "application/json")
	var s sent
	require.NoError(t, json.Unmarshal(r.Raw, &s))
	return s
}

// unmatched is one item of GET /api/v1/events/unmatched.
type unmatched struct {
	ID             int64             `json:"id"`
	Reason         string            `json:"reason"`
	Source         aggregator.Source `json:"source"`
	EventType      string            `json:"event_type"`
	ExecutionID    *uuid.UUID        `json:"execution_id"`
	Detail         string            `json:"detail"`
	PayloadExcerpt string            `json:"payload_excerpt"`
	CreatedAt      time.Time         `json:"created_at"`
}

func getPage[T any](t *testing.T, e *env, path string) page[T] {
	t.Helper()
	return decodePage[T](t, e.do(t, http.MethodGet, path, nil))
}

// unmatchedOf lists the unmatched events of one execution with a reason, newest first,
// through the list's own execution filter.
func (e *env) unmatchedOf(t *testing.T, execID, reason string) []unmatched {
	t.Helper()
	out := getPage[unmatched](t, e, "/api/v1/events/unmatched?limit=500&reason="+reason+"&execution="+execID).Items
	for _, u := range out {
		require.NotNil(t, u.ExecutionID, "the execution filter let through an event naming none")
		require.Equal(t, execID, u.ExecutionID.String(), "the execution filter let through another execution's event")
	}
	return out
}

// TestUnmatchedByExecution: the execution filter keeps the events that named that
// execution, of every reason, and nothing else.
func TestUnmatchedByExecution(t *testing.T) {
	t.Parallel()
	e := setup(t)
	eventDefs(t, e)
	a, b := e.startWaiting(t, "gated", 1), e.startWaiting(t, "gated", 1)
	for _, id := range []string{a, b, a} {
		s := e.send(t, id, map[string]any{"type": "approved", "payload": id}, http.StatusAccepted)
		require.Equal(t, "buffered", s.Outcome)
	}
	all := getPage[unmatched](t, e, "/api/v1/events/unmatched").Items
	require.Len(t, all, 3)

	ofA := getPage[unmatched](t, e, "/api/v1/events/unmatched?execution="+a).Items
	require.Len(t, ofA, 2)
	require.Greater(t, ofA[0].ID, ofA[1].ID, "newest first")
	ofB := getPage[unmatched](t, e, "/api/v1/events/unmatched?execution="+b+"&reason="+string(aggregator.UnmatchedBuffered)).Items
	require.Len(t, ofB, 1)
	require.Equal(t, b, ofB[0].ExecutionID.String())
	require.JSONEq(t, `"`+b+`"`, ofB[0].PayloadExcerpt)

	// Paged by the same cursor as the whole list.
	items, sizes := walk[unmatched](t, e, "/api/v1/events/unmatched?execution="+a, 1, nil)
	require.Equal(t, []int{1, 1}, sizes)
	require.Equal(t, ofA[0].ID, items[0].ID)
	require.Empty(t, getPage[unmatched](t, e, "/api/v1/events/unmatched?execution="+uuid.NewString()).Items)
}

// receivedNames are the names of the events a finished wait node's output lists.
func receivedNames(t *testing.T, output map[string]any) []string {
	t.Helper()
	var names []string
	for _, ev := range output["events"].([]any) {
		m := ev.(map[string]any)
		require.Equal(t, map[string]any{"kind": "send"}, m["source"])
		names = append(names, m["name"].(string))
	}
	return names
}

func TestSendEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	eventDefs(t, e)

	// A waiting node takes the event: the wait completes, and so does the execution,
	// with the payload in the node's output.
	t.Run("completes a waiting node", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "approve", 1)
		_, corr, _ := e.get(t, id).wait(t, "wait")
		s := e.send(t, id, map[string]any{"type": "approved", "payload": map[string]any{"decision": "yes"}}, http.StatusAccepted)
		require.Equal(t, "delivered", s.Outcome)
		require.Len(t, s.Deliveries, 1)
		d := s.Deliveries[0]
		require.Equal(t, "wait", d.NodeID)
		require.Equal(t, "approval", d.Event)
		require.Equal(t, "completed", d.Outcome)
		require.Equal(t, string(vocab.WaitCompleted), d.WaitStatus)
		require.NotEqual(t, uuid.Nil, d.WaitStateID)
		require.Positive(t, d.Version)
		require.Zero(t, s.BufferID)
		require.Nil(t, s.ExpiresAt)

		v := e.awaitStatus(t, id, status("completed"))
		st, out, _ := v.node(t, "wait")
		require.Equal(t, vocab.NodeCompleted, st)
		require.Equal(t, "yes", out["decision"])
		require.Equal(t, corr, out["correlation_id"])
		require.Equal(t, []string{"approval"}, receivedNames(t, out))
		require.Empty(t, e.unmatchedOf(t, id, string(aggregator.UnmatchedBuffered)), "a delivered event is not unmatched")
	})

	// Sent before any node waits for its type, the event is buffered; the node takes it
	// when it reaches its wait, which then never suspends.
	t.Run("buffered, then taken", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "gated", 1)
		before := time.Now()
		s := e.send(t, id, map[string]any{"type": "approved", "payload": map[string]any{"decision": "early"}}, http.StatusAccepted)
		require.Equal(t, "buffered", s.Outcome)
		require.Positive(t, s.BufferID)
		require.NotNil(t, s.ExpiresAt)
		require.WithinDuration(t, before.Add(24*time.Hour), *s.ExpiresAt, time.Minute, "the default eventBufferTtl")
		require.Empty(t, s.Deliveries)
		u := e.unmatchedOf(t, id, string(aggregator.UnmatchedBuffered))
		require.Len(t, u, 1)
		require.Equal(t, "approved", u[0].EventType)
		require.Equal(t, aggregator.Source{Kind: "send"}, u[0].Source)
		require.JSONEq(t, `{"decision": "early"}`, u[0].PayloadExcerpt)

		s = e.send(t, id, map[string]any{"type": "go"}, http.StatusAccepted)
		require.Equal(t, "delivered", s.Outcome)
		require.Len(t, s.Deliveries, 1)
		require.Equal(t, "gate", s.Deliveries[0].NodeID)
		require.Equal(t, "completed", s.Deliveries[0].Outcome)

		v := e.awaitStatus(t, id, status("completed"))
		_, out, _ := v.node(t, "wait")
		require.Equal(t, "early", out["decision"])
		require.Equal(t, []string{"approval"}, receivedNames(t, out))
		_, gate, _ := v.node(t, "gate")
		require.Equal(t, []string{"go"}, receivedNames(t, gate))
		require.Empty(t, getPage[json.RawMessage](t, e, "/api/v1/events/dead-letters?execution="+id).Items, "the buffered event was taken")
	})

	// Two nodes waiting in parallel for the same type both receive one send.
	t.Run("every waiting node of the type", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "fanout", 2)
		s := e.send(t, id, map[string]any{"type": "approved", "payload": "ok"}, http.StatusAccepted)
		require.Equal(t, "delivered", s.Outcome)
		require.Len(t, s.Deliveries, 2)
		var nodes []string
		for _, d := range s.Deliveries {
			require.Equal(t, "completed", d.Outcome)
			require.Equal(t, "approval", d.Event)
			nodes = append(nodes, d.NodeID)
		}
		slices.Sort(nodes)
		require.Equal(t, []string{"w1", "w2"}, nodes)

		v := e.awaitStatus(t, id, status("completed"))
		for _, n := range []string{"w1", "w2"} {
			st, out, _ := v.node(t, n)
			require.Equal(t, vocab.NodeCompleted, st, n)
			require.Equal(t, []string{"approval"}, receivedNames(t, out), n)
		}
	})

	// The same id twice is applied once: the wait's second event of the type does not
	// take the repeat, and only a new id completes it.
	t.Run("duplicate id", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "twice", 1)
		s := e.send(t, id, map[string]any{"type": "approved", "id": "evt-1", "payload": 1}, http.StatusAccepted)
		require.Equal(t, "delivered", s.Outcome)
		require.Equal(t, "first", s.Deliveries[0].Event)
		require.Equal(t, "recorded", s.Deliveries[0].Outcome)
		require.Equal(t, string(vocab.WaitWaiting), s.Deliveries[0].WaitStatus)

		r := e.do(t, http.MethodPost, eventsPath(id), []byte(`{"type": "approved", "id": "evt-1", "payload": 1}`))
		require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
		require.JSONEq(t, `{"outcome": "duplicate"}`, string(r.Raw))
		require.Len(t, e.unmatchedOf(t, id, string(aggregator.UnmatchedDuplicate)), 1)
		v := e.get(t, id)
		ws, _, _ := v.wait(t, "wait")
		require.Equal(t, vocab.WaitWaiting, ws, "the repeat did not complete the wait")

		s = e.send(t, id, map[string]any{"type": "approved", "id": "evt-2", "payload": 2}, http.StatusAccepted)
		require.Equal(t, "second", s.Deliveries[0].Event)
		require.Equal(t, "completed", s.Deliveries[0].Outcome)
		v = e.awaitStatus(t, id, status("completed"))
		_, out, _ := v.node(t, "wait")
		require.Equal(t, []string{"first", "second"}, receivedNames(t, out))
	})

	// A finished execution refuses events (409), an unknown one is not found (404); both
	// leave an unmatched event saying why.
	t.Run("finished and unknown executions", func(t *testing.T) {
		t.Parallel()
		r := e.startExecution(t, "quick", nil)
		require.Equal(t, http.StatusCreated, r.Status, string(r.Raw))
		done := r.JSON["id"].(string)
		e.awaitStatus(t, done, status("completed"))
		r = e.do(t, http.MethodPost, eventsPath(done), []byte(`{"type": "approved", "payload": {"late": true}}`))
		requireProblem(t, r, http.StatusConflict, "execution-finished", "execution is already completed", eventsPath(done))
		require.Equal(t, "completed", r.JSON["execution_status"])
		u := e.unmatchedOf(t, done, string(aggregator.UnmatchedExecutionFinished))
		require.Len(t, u, 1)
		require.Equal(t, "approved", u[0].EventType)
		require.Contains(t, u[0].Detail, "completed")
		require.JSONEq(t, `{"late": true}`, u[0].PayloadExcerpt)

		unknown := uuid.NewString()
		r = e.do(t, http.MethodPost, eventsPath(unknown), []byte(`{"type": "approved"}`))
		requireProblem(t, r, http.StatusNotFound, "execution-not-found", "no execution "+unknown, eventsPath(unknown))
		u = e.unmatchedOf(t, unknown, string(aggregator.UnmatchedNoExecution))
		require.Len(t, u, 1)
		require.Equal(t, "null", u[0].PayloadExcerpt)
	})

	t.Run("rejected", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "approve", 1)
		long := strings.Repeat("é", 201)
		tests := []struct {
			name   string
			id     string
			body   string
			status int
			slug   string
			field  string // the field the problem names, if any
			detail string
		}{
			{"malformed execution id", "exec-17", `{"type": "approved"}`, 400, "malformed-id", "", "execution id is not a UUID"},
			{"empty body", id, ``, 400, "malformed-json", "", "the body is empty"},
			{"malformed JSON", id, `{"type": `, 400, "malformed-json", "", `body must be {"type": "...", "payload": <JSON>, "id": "..."}`},
			{"not an object", id, `["approved"]`, 400, "malformed-json", "", "not a JSON object"},
			{"trailing data", id, `{"type": "approved"} {}`, 400, "malformed-json", "", "unexpected data after the JSON object"},
			{"unknown field", id, `{"type": "approved", "name": "approval"}`, 400, "malformed-json", "name", "name: unknown field"},
			{"type missing", id, `{"payload": {}}`, 400, "invalid-request", "type", "type: required"},
			{"type null", id, `{"type": null}`, 400, "invalid-request", "type", "type: required"},
			{"type not a string", id, `{"type": 5}`, 400, "malformed-json", "type", "type: must be a string, not number"},
			{"type empty", id, `{"type": ""}`, 400, "invalid-request", "type", "type: must be 1 to 200 characters"},
			{"type too long", id, `{"type": "` + long + `"}`, 400, "invalid-request", "type", "type: must be 1 to 200 characters"},
			{"type holding NUL", id, `{"type": "a\u0000"}`, 400, "invalid-request", "type", "type: must not contain NUL"},
			{"id empty", id, `{"type": "approved", "id": ""}`, 400, "invalid-request", "id", "id: must be 1 to 200 characters"},
			{"id not a string", id, `{"type": "approved", "id": 7}`, 400, "malformed-json", "id", "id: must be a string"},
			{"id too long", id, `{"type": "approved", "id": "` + long + `"}`, 400, "invalid-request", "id", "id: must be 1 to 200 characters"},
			{"payload holding NUL", id, `{"type": "approved", "payload": {"note": "a\u0000b"}}`, 400, "unstorable-payload", "payload", `payload: cannot be stored: \u0000`},
			{"payload with half a surrogate pair", id, `{"type": "approved", "payload": {"note": "\ud83d"}}`, 400, "unstorable-payload", "payload", `payload: cannot be stored: the escape \ud83d`},
			{"payload with a number beyond numeric", id, `{"type": "approved", "payload": 1e131072}`, 400, "unstorable-payload", "payload", `numeric range`},
			{"too large", id, `{"type": "approved", "payload": "` + strings.Repeat("x", 1<<20) + `"}`, 413, "body-too-large", "", "body too large"},
		}
		for _, tt := range tests {
			r := e.do(t, http.MethodPost, eventsPath(tt.id), []byte(tt.body))
			requireProblem(t, r, tt.status, tt.slug, tt.detail, eventsPath(tt.id))
			if tt.field != "" {
				require.Equal(t, tt.field, r.JSON["field"], tt.name)
			} else {
				require.NotContains(t, r.JSON, "field", tt.name)
			}
		}
		r := e.do(t, http.MethodPost, eventsPath(id)+"?type=approved", []byte(`{"type": "approved"}`))
		requireProblem(t, r, http.StatusBadRequest, "invalid-query", "type: unknown parameter", eventsPath(id))

		// None of it reached the wait; a 200-character type is still a type.
		v := e.get(t, id)
		ws, _, _ := v.wait(t, "wait")
		require.Equal(t, vocab.WaitWaiting, ws)
		s := e.send(t, id, map[string]any{"type": strings.Repeat("é", 200), "id": strings.Repeat("é", 200)}, http.StatusAccepted)
		require.Equal(t, "buffered", s.Outcome)
	})
}

// TestSendEventDatabaseUnavailable: a send that cannot reach the database is 503 with
// Retry-After, as a callback is.
func TestSendEventDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	eventDefs(t, e)
	id := e.startWaiting(t, "approve", 1)
	e.svc.Pool().Close()

	r := e.do(t, http.MethodPost, eventsPath(id), []byte(`{"type": "approved"}`))
	requireProblem(t, r, http.StatusServiceUnavailable, "unavailable", "retry later", eventsPath(id))
	require.Equal(t, "1", r.Header.Get("Retry-After"))
	// Requests refused before the database is touched keep their own answers.
	r = e.do(t, http.MethodPost, eventsPath(id), []byte(`{}`))
	requireProblem(t, r, http.StatusBadRequest, "invalid-request", "type: required", eventsPath(id))
}

// deadLetter is one item of GET /api/v1/events/dead-letters.
type deadLetter struct {
	ID          int64             `json:"id"`
	ExecutionID uuid.UUID         `json:"execution_id"`
	EventType   string            `json:"event_type"`
	EventID     string            `json:"event_id"`
	Payload     json.RawMessage   `json:"payload"`
	Source      aggregator.Source `json:"source"`
	Reason      string            `json:"reason"`
	BufferedAt  time.Time         `json:"buffered_at"`
	CreatedAt   time.Time         `json:"created_at"`
}

func TestEventLists(t *testing.T) {
	t.Parallel()
	e := setup(t)
	eventDefs(t, e)

	// Unmatched events page newest first, by reason; the cursor continues exactly after
	// the page and only in its own list.
	t.Run("unmatched", func(t *testing.T) {
		t.Parallel()
		var ids []string
		for range 5 {
			id := uuid.NewString()
			ids = append(ids, id)
			r := e.do(t, http.MethodPost, eventsPath(id), []byte(`{"type": "t"}`))
			require.Equal(t, http.StatusNotFound, r.Status, string(r.Raw))
		}
		// Other tests add rows of other reasons; only these five have this one.
		items, sizes := walk[unmatched](t, e, "/api/v1/events/unmatched?reason=no_execution", 2, nil)
		require.Equal(t, []int{2, 2, 1}, sizes)
		var got []string
		for i, u := range items {
			require.Equal(t, string(aggregator.UnmatchedNoExecution), u.Reason)
			require.Equal(t, aggregator.Source{Kind: "send"}, u.Source)
			require.Equal(t, "t", u.EventType)
			if i > 0 {
				require.Less(t, u.ID, items[i-1].ID, "newest first")
			}
			got = append(got, u.ExecutionID.String())
		}
		slices.Reverse(ids)
		require.Equal(t, ids, got)

		all := getPage[unmatched](t, e, "/api/v1/events/unmatched")
		require.GreaterOrEqual(t, len(all.Items), 5)
		require.Nil(t, all.NextCursor, "the default page (50) holds them all")

		first := getPage[unmatched](t, e, "/api/v1/events/unmatched?limit=1")
		require.NotNil(t, first.NextCursor)
		dl := "/api/v1/events/dead-letters?cursor=" + url.QueryEscape(*first.NextCursor)
		requireProblem(t, e.do(t, http.MethodGet, dl, nil), http.StatusBadRequest, "invalid-query",
			"cursor: a cursor of unmatched events, not of dead letters", "/api/v1/events/dead-letters")
	})

	// A buffered event whose execution ends goes to the dead letters, listed with its
	// payload; the list filters by execution.
	t.Run("dead letters", func(t *testing.T) {
		t.Parallel()
		id := e.startWaiting(t, "gated", 1)
		s := e.send(t, id, map[string]any{"type": "approved", "id": "evt-9", "payload": map[string]any{"n": 9}}, http.StatusAccepted)
		require.Equal(t, "buffered", s.Outcome)
		decodeView(t, e.do(t, http.MethodPost, cancelPath(id), nil))

		p := getPage[deadLetter](t, e, "/api/v1/events/dead-letters?execution="+id)
		require.Len(t, p.Items, 1)
		d := p.Items[0]
		require.Equal(t, id, d.ExecutionID.String())
		require.Equal(t, "approved", d.EventType)
		require.Equal(t, "evt-9", d.EventID)
		require.JSONEq(t, `{"n": 9}`, string(d.Payload))
		require.Equal(t, aggregator.Source{Kind: "send"}, d.Source)
		require.Equal(t, "execution_finished", d.Reason)
		require.False(t, d.BufferedAt.After(d.CreatedAt))
		require.Nil(t, p.NextCursor)
		require.Empty(t, getPage[deadLetter](t, e, "/api/v1/events/dead-letters?execution="+uuid.NewString()).Items)
	})

	t.Run("refused queries", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			path, param, detail string
		}{
			{"/api/v1/events/unmatched?reason=lost", "reason", `"lost" is not one of no_execution, execution_finished`},
			{"/api/v1/events/unmatched?limit=0", "limit", "must be an integer from 1 to 500"},
			{"/api/v1/events/unmatched?limit=501", "limit", "must be an integer from 1 to 500"},
			{"/api/v1/events/unmatched?cursor=x", "cursor", "not a cursor of this list"},
			{"/api/v1/events/unmatched?cursor=dQAAAAAAAAAA", "cursor", "not a cursor of this list"}, // id 0
			{"/api/v1/events/unmatched?node=wait", "node", "unknown parameter; this endpoint takes reason, execution, limit, cursor"},
			{"/api/v1/events/unmatched?execution=e-1", "execution", "not a UUID"},
			{"/api/v1/events/unmatched?limit=1&limit=2", "limit", "given more than once"},
			{"/api/v1/events/dead-letters?execution=e-1", "execution", "not a UUID"},
			{"/api/v1/events/dead-letters?reason=expired", "reason", "unknown parameter"},
		}
		for _, tt := range tests {
			r := e.do(t, http.MethodGet, tt.path, nil)
			path, _, _ := strings.Cut(tt.path, "?")
			requireProblem(t, r, http.StatusBadRequest, "invalid-query", tt.param+": "+tt.detail, path)
			require.Equal(t, tt.param, r.JSON["param"])
		}
	})
}

// TestExecutionTimeline: an execution's view tells what happened to it, in order: it
// started, its node began waiting, the sent event arrived (from the send endpoint), the
// wait ended completed and was resumed, the node finished and the execution completed.
func TestExecutionTimeline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	eventDefs(t, e)
	id := e.startWaiting(t, "approve", 1)
	e.send(t, id, map[string]any{"type": "approved", "payload": map[string]any{"decision": "yes"}}, http.StatusAccepted)
	e.awaitStatus(t, id, status("completed"))

	var v readmodel.ExecutionView
	r := e.do(t, http.MethodGet, "/api/v1/executions/"+id, nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.NoError(t, json.Unmarshal(r.Raw, &v))
	kinds := map[readmodel.TimelineKind]readmodel.TimelineEntry{}
	var order []readmodel.TimelineKind
	for i, en := range v.Timeline {
		if i > 0 && en.Kind != readmodel.TimelineExecutionFinished {
			require.False(t, en.At.Before(v.Timeline[i-1].At), "oldest first")
		}
		kinds[en.Kind] = en
		order = append(order, en.Kind)
	}
	require.ElementsMatch(t, []readmodel.TimelineKind{
		readmodel.TimelineExecutionStarted, readmodel.TimelineNodeStarted, readmodel.TimelineWaitStarted,
		readmodel.TimelineEventReceived, readmodel.TimelineWaitEnded, readmodel.TimelineWaitResumed,
		readmodel.TimelineNodeFinished, readmodel.TimelineExecutionFinished,
	}, order)
	require.Equal(t, readmodel.TimelineExecutionStarted, order[0])
	require.Equal(t, readmodel.TimelineExecutionFinished, order[len(order)-1])
	require.Equal(t, "approval", kinds[readmodel.TimelineEventReceived].Event)
	require.Equal(t, &aggregator.Source{Kind: "send"}, kinds[readmodel.TimelineEventReceived].Source)
	require.Equal(t, "wait", kinds[readmodel.TimelineWaitEnded].NodeID)
	require.Equal(t, "completed", kinds[readmodel.TimelineExecutionFinished].Status)
	require.Equal(t, *v.FinishedAt, kinds[readmodel.TimelineExecutionFinished].At)
}
