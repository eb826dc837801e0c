package executor_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
)

// TestTwoPodsManyExecutions: two pods (a and b) on one schema, each with its own pool,
// work 100 executions whose waits are satisfied by concurrent, partly duplicated
// events applied through both pods' aggregators. Every execution completes, every
// correlated call and every continuation happens exactly once, and the queues drain.
func TestTwoPodsManyExecutions(t *testing.T) {
	t.Parallel()
	const n = 100
	h, pods := twoPods(t, 4)
	fake := h.fake
	name := h.put(t, h.workflow("many", []obj{
		node("wait", "wait_events", obj{
			"apiCall":    obj{"url": "@{_vars.svc}/process", "body": obj{"order": "@{_trigger.order}"}},
			"kafkaEvent": obj{"topic": "orders"},
		}),
		node("done", "http", obj{"url": "@{_vars.svc}/done", "method": "POST", "body": obj{
			"execution_id": "@{_execution.id}", "order": "@{_trigger.order}",
			"reply": "@{nodes.wait.output.apiResponse.order}",
		}}),
	}, []obj{edge("wait", "done", "")}))
	for _, p := range pods {
		p.run(t)
	}

	ids := make([]uuid.UUID, n)
	for i := range n {
		ids[i] = pods[i%2].start(t, name, obj{"order": i})
	}
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'waiting'`) == n
	}, "every execution waits")

	type ev struct {
		exec, corr uuid.UUID
		name       string
		payload    json.RawMessage
	}
	var events []ev
	rows, err := h.pool.Query(context.Background(), `SELECT w.execution_id, w.correlation_id, e.input->'order'
		FROM execution_wait_states w JOIN executions e ON e.id = w.execution_id`)
	require.NoError(t, err)
	for rows.Next() {
		var e ev
		var order json.RawMessage
		require.NoError(t, rows.Scan(&e.exec, &e.corr, &order))
		payload := json.RawMessage(`{"order":` + string(order) + `}`)
		for _, name := range []string{aggregator.EventAPIResponse, aggregator.EventKafka} {
			e.name, e.payload = name, payload
			events = append(events, e)
			if rand.IntN(4) == 0 {
				events = append(events, e) // redelivered
			}
		}
	}
	require.NoError(t, rows.Err())
	rand.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })

	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[aggregator.Outcome]int{}
	sem := make(chan struct{}, 8)
	for i, e := range events {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			source := aggregator.Source{Kind: aggregator.SourceCallback}
			if e.name == aggregator.EventKafka {
				source = aggregator.Source{Kind: aggregator.SourceKafka, Topic: "orders"}
			}
			res, err := pods[i%2].agg.Apply(context.Background(), aggregator.Event{
				ExecutionID: e.exec, CorrelationID: e.corr, Name: e.name, Payload: e.payload, Source: source,
			})
			if !assertNoError(t, err) {
				return
			}
			mu.Lock()
			outcomes[res.Outcome]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Equal(t, n, outcomes[aggregator.Completed], "each wait completes once: %v", outcomes)
	require.Equal(t, n, outcomes[aggregator.Recorded], "%v", outcomes)
	require.Equal(t, len(events)-2*n, outcomes[aggregator.Duplicate], "%v", outcomes)

	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM executions WHERE status = 'completed'`) == n
	}, "every execution completes")
	stays(t, 200*time.Millisecond, func() bool { return fake.count("/done") == n }, "a continuation ran twice")

	calls, done := fake.countBy("/process", "execution_id"), fake.countBy("/done", "execution_id")
	for _, id := range ids {
		require.Equal(t, 1, calls[id.String()], "correlated calls of %s", id)
		require.Equal(t, 1, done[id.String()], "continuations of %s", id)
	}
	for _, r := range fake.requests("/done") {
		require.Equal(t, r.Body["order"], r.Body["reply"], "continuation got its own reply")
	}
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
	require.Zero(t, h.count(t, `SELECT count(*) FROM outbox`))
	require.Zero(t, h.count(t, `SELECT count(*) FROM node_executions WHERE status <> 'completed' OR attempts > 1`))
	require.Equal(t, n, h.count(t, `SELECT count(*) FROM execution_wait_states
		WHERE status = 'completed' AND version = 3 AND resumed_at IS NOT NULL AND resumed_by IN ('a', 'b')`))
	t.Logf("resumed by a: %d, by b: %d",
		h.count(t, `SELECT count(*) FROM execution_wait_states WHERE resumed_by = 'a'`),
		h.count(t, `SELECT count(*) FROM execution_wait_states WHERE resumed_by = 'b'`))
}

// assertNoError reports err from a goroutine without FailNow.
func assertNoError(t *testing.T, err error) bool {
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
