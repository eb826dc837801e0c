package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// orderThenPayment is the race payload matches with lookback exist for: an http node
// creates an order, and the wait for its payment comes next — but the payment record,
// produced by the service the moment it creates the order, may beat the wait.
func (h *harness) orderThenPayment(name, lookback string) obj {
	payment := obj{"name": "payment", "source": "kafka", "topic": "payments",
		"match": obj{"left": "order.id", "op": "eq", "right": "input.order"}}
	if lookback != "" {
		payment["lookback"] = lookback
	}
	return h.workflow(name, []obj{
		node("create_order", "http", obj{"url": "@{_vars.svc}/orders", "method": "POST", "body": obj{"order": "@{_trigger.order}"}}),
		node("await_payment", "wait_events", obj{"events": []any{payment}, "timeout": "5m"}),
	}, []obj{edge("create_order", "await_payment", "")})
}

// paymentRecord is the record the payments service produces for order, as the consumer
// hands it to the aggregator when the topic's match asks lookback.
func paymentRecord(order string, offset int64, lookback time.Duration) aggregator.Event {
	payload := fmt.Sprintf(`{"order":{"id":%q},"amount":12.5}`, order)
	var decoded any
	_ = json.Unmarshal([]byte(payload), &decoded)
	specs := []aggregator.MatchSpec{{Left: "order.id", Lookback: lookback}}
	partition := int32(offset % 3)
	return aggregator.Event{
		MatchKeys: aggregator.MatchKeys("payments", decoded, specs),
		Keep:      aggregator.KeepFor("payments", decoded, specs),
		Payload:   json.RawMessage(payload),
		Source:    aggregator.Source{Kind: aggregator.SourceKafka, Topic: "payments", Partition: &partition, Offset: &offset},
	}
}

// TestLookbackPaymentBeatsWait: 1 000 executions on two pods each create an order over
// HTTP; the service produces the order's payment record 0 to 100 ms after it is asked
// (about 50 ms on average), through either pod, while the executions go on to register
// their wait — so records land before the wait (kept, then taken at registration),
// while it registers, and after it (live). Counted in the database: every execution
// completed with its own order's payment, every record was applied exactly once, none
// is left kept or was lost as unmatched.
func TestLookbackPaymentBeatsWait(t *testing.T) {
	t.Parallel()
	const n = 1000
	h, pods := twoPods(t, 2)
	fake := h.fake
	name := h.put(t, h.orderThenPayment("orders", "10m"))

	var produced sync.WaitGroup
	var mu sync.Mutex
	var produceErrs []error
	outcomes := map[aggregator.Outcome]int{}
	fake.on("/orders", func(k int, r recorded) reply {
		order, _ := r.Body["order"].(string)
		produced.Go(func() {
			time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
			res, err := pods[k%2].agg.Apply(context.Background(), paymentRecord(order, int64(k), 10*time.Minute))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				produceErrs = append(produceErrs, err)
			}
			outcomes[res.Outcome]++
		})
		return reply{status: 201, body: `{"created": true}`}
	})
	for _, p := range pods {
		p.run(t)
	}
	// Started at a steady pace, so the wait follows its order by milliseconds (as it
	// does in production), not behind a queue of a thousand: records then land on
	// both sides of it.
	for i := range n {
		pods[i%2].start(t, name, obj{"order": fmt.Sprintf("o-%d", i)})
		time.Sleep(5 * time.Millisecond)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for h.count(t, `SELECT count(*) FROM executions WHERE status = 'completed'`) < n {
		require.True(t, time.Now().Before(deadline), "executions completed: %d of %d",
			h.count(t, `SELECT count(*) FROM executions WHERE status = 'completed'`), n)
		require.Zero(t, h.count(t, `SELECT count(*) FROM executions WHERE status IN ('failed', 'cancelled')`))
		time.Sleep(100 * time.Millisecond)
	}
	produced.Wait()
	require.Empty(t, produceErrs)

	require.Equal(t, n, fake.count("/orders"), "one order created per execution")
	// Every wait completed with the payment of its own execution's order, recorded once.
	require.Equal(t, n, h.count(t, `SELECT count(*) FROM execution_wait_states w JOIN executions e ON e.id = w.execution_id
		WHERE w.status = 'completed' AND json_array_length(w.received_events) = 1
		  AND w.event_data->'payment'->'order'->>'id' = e.input->>'order'`))
	// Every record taken at registration was taken by the wait of its own order.
	taken := h.count(t, `SELECT count(*) FROM match_lookback WHERE status = 'taken'`)
	require.Equal(t, taken, h.count(t, `SELECT count(*) FROM match_lookback m
		JOIN execution_wait_states w ON w.id = m.taken_by JOIN executions e ON e.id = w.execution_id
		WHERE m.status = 'taken' AND m.payload->'order'->>'id' = e.input->>'order'`), "a record taken by a foreign execution")
	require.Zero(t, h.count(t, `SELECT count(*) FROM match_lookback WHERE status <> 'taken'`), "a record kept and never taken")
	require.Zero(t, h.count(t, `SELECT count(*) FROM unmatched_events WHERE reason <> 'buffered'`), "a record lost")
	require.Equal(t, taken, h.count(t, `SELECT count(*) FROM unmatched_events WHERE reason = 'buffered'`))
	// Each record once: delivered live to its wait, or kept and taken.
	require.Equal(t, n, outcomes[aggregator.Completed]+outcomes[aggregator.Kept], "%v", outcomes)
	require.Equal(t, taken, outcomes[aggregator.Kept], "%v", outcomes)
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))
	t.Logf("%d payment records: %d arrived before their wait and were taken at its registration, %d reached it live",
		n, taken, n-taken)
}

// TestLookbackWithoutLookbackIsLost: the same race without lookback — what the feature
// fixes: a record that beats its wait matches nothing and the wait never completes.
func TestLookbackWithoutLookbackIsLost(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.orderThenPayment("orders", ""))
	h.fake.on("/orders", func(int, recorded) reply {
		// The record is applied before the order is even answered: it beats the wait.
		res, err := h.agg.Apply(context.Background(), paymentRecord("o-1", 1, 0))
		if err == nil && res.Outcome != aggregator.NoMatch {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		if err != nil {
			return reply{status: 500, body: err.Error()}
		}
		return reply{status: 201, body: `{}`}
	})
	h.run(t)
	id := h.start(t, name, obj{"order": "o-1"})
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND status = 'waiting'`, id) == 1
	})
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM unmatched_events WHERE reason = 'match_value_differs'`))
	require.Zero(t, h.count(t, `SELECT count(*) FROM match_lookback`))
	require.Equal(t, vocab.ExecWaiting, h.view(t, id).Status)
}

// TestLookbackAboveServerMaximum: a definition whose lookback exceeds --max-lookback is
// refused where it is stored and validated, at the lookback's path.
func TestLookbackAboveServerMaximum(t *testing.T) {
	t.Parallel()
	h := setup(t)
	def := h.orderThenPayment("orders", "2h")
	raw, err := json.Marshal(def)
	require.NoError(t, err)
	want := []workflow.FieldError{{Path: "nodes[1].data.events[0].lookback",
		Message: "2h0m0s exceeds this service's maximum lookback of 1h0m0s (--max-lookback)"}}
	_, err = h.ex.PutWorkflow(context.Background(), "orders", raw)
	var verr *workflow.ValidationError
	require.True(t, errors.As(err, &verr), "%v", err)
	require.Equal(t, want, verr.Errors)
	_, err = h.ex.ValidateWorkflow(raw)
	require.True(t, errors.As(err, &verr), "%v", err)
	require.Equal(t, want, verr.Errors)
	h.put(t, h.orderThenPayment("orders", "1h"))
}
