package consumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestEarlyRecordKeptForLookback: through the consumer, a record whose payload match
// has a lookback and that arrives before any execution waits for its value is kept with
// its position; an execution reaching the wait later takes it and completes at once. A
// record of a match without lookback is not kept.
func TestEarlyRecordKeptForLookback(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("paid", events(obj{
		"name": "paid", "source": "kafka", "topic": "payments", "lookback": "10m",
		"match": obj{"left": "order.id", "op": "eq", "right": "input.order_id"},
	})))
	e.put(t, s, e.definition("shipped", events(obj{
		"name": "shipped", "source": "kafka", "topic": "shipments",
		"match": obj{"left": "order.id", "op": "eq", "right": "input.order_id"},
	})))

	e.produce(t, record("payments", 0, obj{"order": obj{"id": "A-1"}, "amount": 12.5}))
	e.produce(t, record("shipments", 0, obj{"order": obj{"id": "A-1"}}))
	require.Eventually(t, func() bool {
		return e.committedSum(t, "payments") == 1 && e.committedSum(t, "shipments") == 1
	}, waitTimeout, 20*time.Millisecond)
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM match_lookback
		WHERE status = 'kept' AND source->>'topic' = 'payments' AND (source->>'partition')::int = 0 AND (source->>'offset')::int = 0`))
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM match_lookback`), "the record of a match without lookback is not kept")
	require.Equal(t, int64(1), s.Consumer.Counts()["kept"])
	require.Equal(t, int64(1), s.Consumer.Counts()["no_match"])

	id := e.startExecution(t, s, "paid", obj{"order_id": "A-1"})
	v := e.waitStatus(t, s, id, "completed")
	require.Equal(t, 12.5, waitOutput(t, v)["paid"].(map[string]any)["amount"])
	require.Equal(t, 1, e.count(t, `SELECT count(*) FROM match_lookback WHERE status = 'taken'`))
}
