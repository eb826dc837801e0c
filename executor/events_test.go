package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Events by type, buffering and payload match, end to end through the
// executor: definitions are stored and run, events are sent through the aggregator's
// one entry point for them, and what happened is read back from the database.

// sendEvent sends an event of type typ to an execution and returns what it did.
func (p *pod) send(t *testing.T, execID uuid.UUID, typ string, payload any, id string) aggregator.SendResult {
	t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	res, err := p.agg.Send(context.Background(), aggregator.Sent{ExecutionID: execID, Type: typ, Payload: raw, ID: id,
		Source: aggregator.Source{Kind: "send"}})
	require.NoError(t, err)
	return res
}

// sendWait is a wait_events node waiting for send events.
func sendWait(id string, events ...obj) obj {
	list := make([]any, len(events))
	for i, e := range events {
		list[i] = e
	}
	return node(id, "wait_events", obj{"events": list, "timeout": "1m"})
}

func sendEv(name, typ string, extra ...any) obj {
	e := obj{"name": name, "source": "send", "type": typ}
	for i := 0; i+1 < len(extra); i += 2 {
		e[extra[i].(string)] = extra[i+1]
	}
	return e
}

// gated is a workflow whose first node waits for an event of type "go", then two
// wait_events nodes in sequence each wait for an event of type "item": events of type
// item sent before "go" are buffered.
func (h *harness) gated(t *testing.T, name string, w1 obj, extra obj) string {
	def := h.workflow(name, []obj{
		sendWait("gate", sendEv("go", "go")),
		sendWait("w1", w1),
		sendWait("w2", sendEv("item", "item")),
	}, []obj{edge("gate", "w1", ""), edge("w1", "w2", "")})
	for k, v := range extra {
		def[k] = v
	}
	return h.put(t, def)
}

func (p *pod) deadLetters(t *testing.T, execID uuid.UUID) map[string][]string {
	t.Helper()
	rows, err := p.pool.Query(context.Background(),
		`SELECT reason, payload->>'n' FROM event_dead_letters WHERE execution_id = $1 ORDER BY id`, execID)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var reason, n string
		require.NoError(t, rows.Scan(&reason, &n))
		out[reason] = append(out[reason], n)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestBufferedEventsTakenInOrder: events sent before any node waits for their type are
// buffered; each wait that then reaches the type takes the oldest (fifo) and completes
// without suspending; what is left when the execution finishes goes to the dead letters.
func TestBufferedEventsTakenInOrder(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.gated(t, "fifo", sendEv("item", "item"), nil)
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id) == 1
	})

	for n := 1; n <= 3; n++ {
		res := h.send(t, id, "item", obj{"n": fmt.Sprint(n)}, "")
		require.Equal(t, aggregator.SendBuffered, res.Outcome)
	}
	require.Equal(t, 3, h.count(t, `SELECT count(*) FROM event_buffer WHERE execution_id = $1`, id))
	require.Equal(t, aggregator.SendDelivered, h.send(t, id, "go", obj{}, "").Outcome)

	v := h.waitStatus(t, id, "completed")
	require.Equal(t, obj{"n": "1"}, output(t, nodeOf(t, v, "w1"))["item"])
	require.Equal(t, obj{"n": "2"}, output(t, nodeOf(t, v, "w2"))["item"])
	// Neither took its event late: both waits completed at registration, never timed out.
	require.Equal(t, vocab.WaitCompleted, waitOf(t, v, "w1").Status)
	require.Equal(t, vocab.WaitCompleted, waitOf(t, v, "w2").Status)
	require.Equal(t, 0, h.count(t, `SELECT count(*) FROM event_buffer WHERE execution_id = $1`, id))
	require.Equal(t, map[string][]string{"execution_finished": {"3"}}, h.deadLetters(t, id))
}

// TestBufferLastWriteWins: a wait with buffer last_write_wins takes the newest buffered
// event of its type; the older ones are dead-lettered as superseded, and the next wait
// of the type finds nothing and waits for a new event.
func TestBufferLastWriteWins(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.gated(t, "lww", sendEv("item", "item", "buffer", "last_write_wins"), nil)
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id) == 1
	})
	for n := 1; n <= 3; n++ {
		require.Equal(t, aggregator.SendBuffered, h.send(t, id, "item", obj{"n": fmt.Sprint(n)}, "").Outcome)
	}
	h.send(t, id, "go", obj{}, "")
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND node_id = 'w2' AND status = 'waiting'`, id) == 1
	})
	v := h.view(t, id)
	require.Equal(t, obj{"n": "3"}, output(t, nodeOf(t, v, "w1"))["item"])
	require.Equal(t, map[string][]string{"superseded": {"1", "2"}}, h.deadLetters(t, id))

	require.Equal(t, aggregator.SendDelivered, h.send(t, id, "item", obj{"n": "4"}, "").Outcome)
	v = h.waitStatus(t, id, "completed")
	require.Equal(t, obj{"n": "4"}, output(t, nodeOf(t, v, "w2"))["item"])
}

// TestBufferedEventExpires: a buffered event older than the definition's eventBufferTtl
// is moved to the dead letters with reason expired, and a wait reached afterwards does
// not take it. The executor's clock is a stub: the event ages when the test moves it on.
func TestBufferedEventExpires(t *testing.T) {
	t.Parallel()
	stub := clock.NewStub(time.Now())
	h := setup(t, func(c *executor.Config) { c.Clock = stub })
	h.run(t)
	name := h.gated(t, "ttl", sendEv("item", "item"), obj{"eventBufferTtl": "200ms"})
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id) == 1
	})
	res := h.send(t, id, "item", obj{"n": "1"}, "")
	require.Equal(t, aggregator.SendBuffered, res.Outcome)
	require.WithinDuration(t, stub.Now().Add(200*time.Millisecond), res.ExpiresAt, 5*time.Second)

	n, err := h.agg.Janitor(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "expired before its eventBufferTtl")
	stub.Advance(200 * time.Millisecond)
	n, err = h.agg.Janitor(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n, "expired once its eventBufferTtl passed")
	require.Equal(t, map[string][]string{"expired": {"1"}}, h.deadLetters(t, id))
	h.send(t, id, "go", obj{}, "")
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND node_id = 'w1' AND status = 'waiting'`, id) == 1
	})
}

// TestTwoWaitersOfOneType: one event of a type reaches every node of the execution
// waiting for that type.
func TestTwoWaitersOfOneType(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.workflow("two", []obj{
		sendWait("left", sendEv("approval", "approved")),
		sendWait("right", sendEv("ok", "approved")),
	}, nil))
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND status = 'waiting'`, id) == 2
	})
	res := h.send(t, id, "approved", obj{"by": "ana"}, "")
	require.Equal(t, aggregator.SendDelivered, res.Outcome)
	require.Len(t, res.Deliveries, 2)
	v := h.waitStatus(t, id, "completed")
	require.Equal(t, obj{"by": "ana"}, output(t, nodeOf(t, v, "left"))["approval"])
	require.Equal(t, obj{"by": "ana"}, output(t, nodeOf(t, v, "right"))["ok"])
}

// TestHumanInTheLoopRace races two event types, as Promise.race would: the first wins,
// and with neither the wait times out with timeout: true in its output.
func TestHumanInTheLoopRace(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	race := node("decision", "wait_events", obj{
		"events":              []any{sendEv("approved", "approval.granted"), sendEv("rejected", "approval.denied")},
		"aggregationStrategy": "any",
		"timeout":             "1s",
		"onTimeout":           "continue_with_partial",
	})
	name := h.put(t, h.workflow("race", []obj{race}, nil))

	rejected := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, rejected) == 1
	})
	h.send(t, rejected, "approval.denied", obj{"reason": "budget"}, "")
	out := output(t, nodeOf(t, h.waitStatus(t, rejected, "completed"), "decision"))
	require.Equal(t, obj{"reason": "budget"}, out["rejected"])
	require.Nil(t, out["approved"])
	require.Equal(t, false, out["timeout"])
	// The other type, arriving later, finds the wait over.
	require.Equal(t, aggregator.SendExecutionFinished, h.send(t, rejected, "approval.granted", obj{}, "").Outcome)

	silent := h.start(t, name, nil)
	out = output(t, nodeOf(t, h.waitStatus(t, silent, "completed"), "decision"))
	require.Equal(t, true, out["timeout"])
	require.ElementsMatch(t, []any{"approved", "rejected"}, out["timed_out_events"])
}

// TestDuplicateEventIDs: an event id sent twice to one execution is applied once,
// whether the first one was delivered or buffered.
func TestDuplicateEventIDs(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.workflow("dups", []obj{sendWait("both", sendEv("a", "a"), sendEv("b", "b"))}, nil))
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id) == 1
	})
	require.Equal(t, aggregator.SendDelivered, h.send(t, id, "a", obj{"n": 1}, "evt-1").Outcome)
	require.Equal(t, aggregator.SendDuplicate, h.send(t, id, "a", obj{"n": 1}, "evt-1").Outcome)
	// The same id on another type is the same event: still a duplicate.
	require.Equal(t, aggregator.SendDuplicate, h.send(t, id, "b", obj{"n": 2}, "evt-1").Outcome)
	require.Equal(t, 1, h.count(t, `SELECT json_array_length(received_events) FROM execution_wait_states WHERE execution_id = $1`, id))
	h.send(t, id, "b", obj{"n": 2}, "evt-2")
	h.waitStatus(t, id, "completed")
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM unmatched_events WHERE execution_id = $1 AND reason = 'duplicate' AND event_type = 'a'`, id))

	// Buffered, then sent again: one buffered event.
	gated := h.gated(t, "dups-buffered", sendEv("item", "item"), nil)
	id2 := h.start(t, gated, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id2) == 1
	})
	require.Equal(t, aggregator.SendBuffered, h.send(t, id2, "item", obj{"n": "1"}, "x").Outcome)
	require.Equal(t, aggregator.SendDuplicate, h.send(t, id2, "item", obj{"n": "1"}, "x").Outcome)
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM event_buffer WHERE execution_id = $1`, id2))
}

// TestSendToFinishedOrUnknownExecution: nothing can take such an event; it is refused
// and recorded as unmatched with why.
func TestSendToFinishedOrUnknownExecution(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.workflow("one", []obj{sendWait("w", sendEv("a", "a"))}, nil))
	id := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, id) == 1
	})
	h.send(t, id, "a", obj{}, "")
	h.waitStatus(t, id, "completed")

	res := h.send(t, id, "a", obj{}, "")
	require.Equal(t, aggregator.SendExecutionFinished, res.Outcome)
	// A retried event that finished the execution is a duplicate, not a conflict.
	other := h.start(t, name, nil)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1`, other) == 1
	})
	require.Equal(t, aggregator.SendDelivered, h.send(t, other, "a", obj{}, "once").Outcome)
	h.waitStatus(t, other, "completed")
	require.Equal(t, aggregator.SendDuplicate, h.send(t, other, "a", obj{}, "once").Outcome)
	require.Equal(t, aggregator.SendExecutionFinished, h.send(t, other, "a", obj{}, "another").Outcome)
	require.Equal(t, vocab.ExecCompleted, res.ExecutionStatus)
	require.Equal(t, aggregator.SendNoExecution, h.send(t, uuid.New(), "a", obj{}, "").Outcome)
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM unmatched_events WHERE execution_id = $1 AND reason = 'execution_finished'`, id))
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM unmatched_events WHERE reason = 'no_execution'`))
	page, err := readmodel.New(h.pool).Unmatched(context.Background(), readmodel.UnmatchedFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	list := page.Items
	require.Len(t, list, 4)
	require.Equal(t, string(aggregator.UnmatchedNoExecution), list[0].Reason, "newest first")
}

// matchWorkflow waits for a payments record whose order.id equals the execution input's
// order_id.
func (h *harness) matchWorkflow(t *testing.T, name string) string {
	return h.put(t, h.workflow(name, []obj{node("paid", "wait_events", obj{
		"events": []any{obj{"name": "payment", "source": "kafka", "topic": "payments",
			"match": obj{"left": "order.id", "op": "eq", "right": "input.order_id"}}},
		"timeout": "10m",
	})}, nil))
}

var paymentSpecs = []aggregator.MatchSpec{{Left: "order.id"}}

// matchRecord applies a payments record correlated by payload.
func (p *pod) matchRecord(t *testing.T, payload string) aggregator.Result {
	t.Helper()
	var decoded any
	require.NoError(t, json.Unmarshal([]byte(payload), &decoded))
	partition, offset := int32(0), int64(1)
	res, err := p.agg.Apply(context.Background(), aggregator.Event{
		MatchKeys: aggregator.MatchKeys("payments", decoded, paymentSpecs), Payload: json.RawMessage(payload),
		Source: aggregator.Source{Kind: "kafka", Topic: "payments", Partition: &partition, Offset: &offset},
	})
	require.NoError(t, err)
	return res
}

// TestMatchByBusinessKey: a record is matched to waits by the value of a payload field,
// found through the index, among 100 000 other waiting states; every wait expecting the
// value receives it, the others stay waiting.
func TestMatchByBusinessKey(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.matchWorkflow(t, "match")
	a := h.start(t, name, obj{"order_id": "ord-42"})
	b := h.start(t, name, obj{"order_id": "ord-42"})
	other := h.start(t, name, obj{"order_id": 42}) // a number: "42" the string is another value
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`) == 3
	})
	// 100 000 other waiting states, each waiting for its own order.
	h.exec(t, `INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy,
			required_events, enabled_events, expected_events, on_timeout, output_mapping, status, expires_at, next_deadline_at, match_keys)
		SELECT gen_random_uuid(), w.execution_id, 'clone-' || g, gen_random_uuid(), w.aggregation_strategy,
			w.required_events, w.enabled_events, w.expected_events, w.on_timeout, w.output_mapping, 'waiting',
			w.expires_at, w.expires_at, ARRAY[replace(w.match_keys[1], '42', 'n' || g), w.match_keys[2]]
		FROM execution_wait_states AS w, generate_series(1, 100000) AS g
		WHERE w.execution_id = $1`, other)
	h.exec(t, `ANALYZE execution_wait_states`)

	// The lookup of a batch of records' keys is an index scan, not a scan over the
	// waiting states: the statement as sqlc generated it, prepared, in the generic plan
	// that pools use (db.Connect sets plan_cache_mode), for a batch of 64.
	keys := []string{"'v\x1fpayments\x1f\x1forder.id\x1f\"ord-42\"'"}
	for i := range 63 {
		keys = append(keys, fmt.Sprintf("'v\x1fpayments\x1f\x1forder.id\x1f\"n%d\"'", i))
	}
	conn, err := h.pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	var mode, plan string
	require.NoError(t, conn.QueryRow(context.Background(), "SHOW plan_cache_mode").Scan(&mode))
	require.Equal(t, "force_generic_plan", mode)
	lookup := dbtest.Bind(dbtest.Queries(t, "wait_states.sql")["WaitStateListByMatchKeys"], map[string]string{"keys": "$1"})
	_, err = conn.Exec(context.Background(), "PREPARE match_lookup (text[]) AS "+lookup)
	require.NoError(t, err)
	defer conn.Exec(context.Background(), "DEALLOCATE match_lookup") //nolint:errcheck
	require.NoError(t, conn.QueryRow(context.Background(),
		"EXPLAIN (FORMAT JSON) EXECUTE match_lookup (ARRAY["+strings.Join(keys, ",")+"])").Scan(&plan))
	require.Contains(t, plan, "execution_wait_states_match_keys_idx")
	require.NotContains(t, plan, "Seq Scan")

	res := h.matchRecord(t, `{"order": {"id": "ord-42"}, "amount": 10}`)
	require.Equal(t, aggregator.Completed, res.Outcome)
	require.Len(t, res.Deliveries, 2)
	h.waitStatus(t, a, "completed")
	h.waitStatus(t, b, "completed")
	require.Equal(t, vocab.WaitWaiting, waitOf(t, h.view(t, other), "paid").Status)
	require.Equal(t, 100003-2, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`))

	// A value nobody waits for is recorded as unmatched, with why.
	require.Equal(t, aggregator.NoMatch, h.matchRecord(t, `{"order": {"id": "ord-404"}}`).Outcome)
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM unmatched_events WHERE reason = 'match_value_differs'`))
	// The same record again reaches the completed waits as a duplicate of what they hold.
	require.Equal(t, aggregator.NoMatch, h.matchRecord(t, `{"order": {"id": "ord-42"}, "amount": 10}`).Outcome,
		"completed waits have left the index")
	require.Equal(t, aggregator.Completed, h.matchRecord(t, `{"order": {"id": 42.0}}`).Outcome, "numbers match by value")
}

// TestMaxWaitersPerType: registrations beyond --max-waiters-per-type open waiters of one
// match type fail their node with a clear error, also when many race from two pods.
func TestMaxWaitersPerType(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	limited := func(instance string) *pod {
		cfg := config(t, instance)
		ex, err := executor.New(pool, aggregator.Config{MaxWaitersPerType: 5}, cfg)
		require.NoError(t, err)
		return &pod{pool: pool, agg: ex.Aggregator(), ex: ex}
	}
	p1, p2 := limited("a"), limited("b")
	h := &harness{pod: p1, fake: newFakeService(t)}
	name := h.matchWorkflow(t, "limited")
	var ids []uuid.UUID
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			id := p1.start(t, name, obj{"order_id": fmt.Sprint("o-", i)})
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		})
	}
	wg.Wait()
	p1.run(t)
	p2.run(t)
	eventually(t, func() bool {
		return p1.count(t, `SELECT count(*) FROM executions WHERE status IN ('waiting', 'failed')`) == 12
	})
	require.Equal(t, 5, p1.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`))
	require.Equal(t, 7, p1.count(t, `SELECT count(*) FROM executions WHERE status = 'failed'
		AND error LIKE '%too many waiters: topic "payments" already has 5 open waits matched by payload (--max-waiters-per-type)%'`))

	// A slot frees when a wait ends: the next registration is admitted.
	var waiting uuid.UUID
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT execution_id FROM execution_wait_states WHERE status = 'waiting' LIMIT 1`).Scan(&waiting))
	_, err := p1.ex.CancelExecution(context.Background(), waiting, "test")
	require.NoError(t, err)
	more := p1.start(t, name, obj{"order_id": "late"})
	p1.waitStatus(t, more, "waiting")
}

// TestMaxWaitersPerTypeCountsRootsOfOneStart: a workflow whose two root waits match
// the same type registers both in its starting transaction; the second is counted
// against the first, so under a limit of one the start fails with the admission error
// instead of leaving two waiters of the type.
func TestMaxWaitersPerTypeCountsRootsOfOneStart(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ex, err := executor.New(pool, aggregator.Config{MaxWaitersPerType: 1}, config(t, "a"))
	require.NoError(t, err)
	p := &pod{pool: pool, agg: ex.Aggregator(), ex: ex}
	h := &harness{pod: p, fake: newFakeService(t)}
	wait := func(id string) obj {
		return node(id, "wait_events", obj{
			"events": []any{obj{"name": "payment", "source": "kafka", "topic": "payments",
				"match": obj{"left": "order.id", "op": "eq", "right": "input.order_id"}}},
			"timeout": "10m",
		})
	}
	name := h.put(t, h.workflow("two-roots", []obj{wait("first"), wait("second")}, nil))
	id := p.start(t, name, obj{"order_id": "o-1"})
	p.run(t)
	p.waitStatus(t, id, vocab.ExecFailed)
	require.Equal(t, 0, p.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`),
		"no more waiters of the type than the limit")
	require.Equal(t, 1, p.count(t, `SELECT count(*) FROM executions WHERE status = 'failed'
		AND error LIKE '%too many waiters: topic "payments" already has 1 open waits matched by payload%'`))
}

// TestSendRacesRegistration: an event sent while its execution is reaching the wait for
// its type is either buffered before the registration (which then takes it) or delivered
// to the registered wait — never stranded in the buffer beside a waiting node. Two pods
// run the executions while goroutines release the gates and send the events at once.
func TestSendRacesRegistration(t *testing.T) {
	t.Parallel()
	h := setup(t)
	other := newPod(t, h.pool, config(t, "b"))
	name := h.put(t, h.workflow("race-reg", []obj{
		sendWait("gate", sendEv("go", "go")),
		sendWait("w", sendEv("item", "item")),
	}, []obj{edge("gate", "w", "")}))
	const n = 40
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = h.start(t, name, nil)
	}
	h.run(t)
	other.run(t)
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE node_id = 'gate' AND status = 'waiting'`) == n
	})
	var wg sync.WaitGroup
	for i, id := range ids {
		senders := []*pod{h.pod, other}
		wg.Go(func() { senders[i%2].send(t, id, "go", obj{}, "") })
		wg.Go(func() { senders[(i+1)%2].send(t, id, "item", obj{"n": fmt.Sprint(i)}, "") })
	}
	wg.Wait()
	for _, id := range ids {
		h.waitStatus(t, id, "completed")
	}
	require.Equal(t, 0, h.count(t, `SELECT count(*) FROM event_buffer`))
	require.Equal(t, 0, h.count(t, `SELECT count(*) FROM event_dead_letters`))
	require.Equal(t, n, h.count(t, `SELECT count(*) FROM execution_wait_states WHERE node_id = 'w' AND status = 'completed'
		AND json_array_length(received_events) = 1`))
}
