package consumer_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/consumer"
)

// triggered is a definition whose one node holds the execution (a timer far off), started
// by records of topic.
func triggered(name string, triggers ...obj) obj {
	return obj{
		"name":     name,
		"nodes":    []obj{{"id": "hold", "type": "wait", "data": obj{"for": "1h"}}},
		"triggers": triggers,
	}
}

// TestTriggers: records start executions exactly once, across two replicas, rebalances
// (one joins, the other leaves mid-stream) and records produced twice. Workflow "by-order" dedupes by the order id in
// the value, so a record produced again with the same order starts nothing; workflow
// "by-position" dedupes by position, so each record produced starts one execution, and a
// redelivery after the rebalance none. Records of another type start nothing and are
// counted as today. Counted in the database.
func TestTriggers(t *testing.T) {
	t.Parallel()
	limit(t)
	const n, again, partitions = 200, 50, 4
	e := setup(t, kfake.DefaultNumPartitions(partitions))
	a := e.start(t, "pod-a")
	e.put(t, a, triggered("by-order", obj{
		"topic": "orders", "type": "order.created",
		"input":     obj{"orderId": "value.order.id", "customer": "value.customer", "key": "key", "source": "headers.source"},
		"dedupeKey": "value.order.id",
	}))
	e.put(t, a, triggered("by-position", obj{"topic": "orders", "filter": obj{"type": "order.created"}}))

	order := func(i int) *kgo.Record {
		r := record("orders", int32(i%partitions), obj{"type": "order.created", "order": obj{"id": 9007199254740993 + i}, "customer": fmt.Sprintf("c-%d", i)},
			kgo.RecordHeader{Key: "source", Value: []byte("shop")})
		r.Key = []byte(fmt.Sprintf("k-%d", i))
		return r
	}
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, order(i))
		if i%4 == 3 {
			recs = append(recs, record("orders", int32(i%partitions), obj{"type": "order.cancelled", "order": obj{"id": i}}))
		}
	}
	for i := range again { // the same orders produced a second time, late
		recs = append(recs, order(i*3))
	}

	b := e.produceRebalancing(t, recs, rebalancing{chunk: 10, pause: 100 * time.Millisecond, join: 2, leave: 12}, a)
	require.Eventually(t, func() bool { return e.committedSum(t, "orders") == int64(len(recs)) }, waitTimeout, 50*time.Millisecond,
		"every record handled and committed")

	require.Equal(t, n, e.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'by-order'`), "one execution per order")
	require.Equal(t, n+again, e.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'by-position'`), "one execution per record produced")
	require.Equal(t, 2*n+again, e.count(t, `SELECT count(*) FROM execution_triggers`))
	require.Equal(t, n, e.count(t, `SELECT count(DISTINCT input->'orderId') FROM executions WHERE workflow_name = 'by-order'`))

	counts := sumCounts(a, b)
	t.Logf("counts: pod-a %v, pod-b %v", a.Consumer.Counts(), b.Consumer.Counts())
	require.Equal(t, int64(2*n+again), counts[string(consumer.OutcomeStarted)], "%v", counts)
	require.GreaterOrEqual(t, counts[string(consumer.OutcomeTriggerDuplicate)], int64(again), "%v", counts)
	require.Equal(t, int64(n/4), counts[string(consumer.ReasonMissingID)], "other types start nothing, and are counted: %v", counts)
	require.Positive(t, b.Consumer.Counts()[string(consumer.OutcomeStarted)], "the second replica took part")

	// The input says which record started the execution, with the mapped parts.
	var raw []byte
	require.NoError(t, e.direct.QueryRow(t.Context(),
		`SELECT input FROM executions WHERE workflow_name = 'by-order' AND input->>'customer' = 'c-7'`).Scan(&raw))
	var in map[string]any
	require.NoError(t, json.Unmarshal(raw, &in))
	require.Equal(t, json.Number("9007199254741000"), jsonNumber(t, raw, "orderId"), "ids stay exact")
	require.Equal(t, "k-7", in["key"])
	require.Equal(t, "shop", in["source"])
	rec := in["_record"].(map[string]any)
	require.Equal(t, "orders", rec["topic"])
	require.Equal(t, float64(7%partitions), rec["partition"])
	require.Equal(t, "k:9007199254741e3", rec["dedupe_key"], "a number dedupes by its exact value, whatever its spelling")
	require.Equal(t, "k-7", rec["key"])
}

// jsonNumber reads member key of a JSON object with its number exact.
func jsonNumber(t *testing.T, raw []byte, key string) json.Number {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return json.Number(m[key])
}
