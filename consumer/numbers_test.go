package consumer_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
)

// TestExactNumbers sends numbers that a float64 does not hold: ids beyond 2^53, which
// a float64 rounds into their neighbour's, and 1e400, beyond its range. A record matched
// by such an id reaches only the wait expecting that very id, a filter on one accepts
// only that id, and both numbers arrive unchanged in the node output and in the calls
// made from it; 1e400 is JSON, not a poison record.
func TestExactNumbers(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("byorder", events(obj{
		"name": "paid", "source": "kafka", "topic": "orders",
		"match": obj{"left": "order_id", "op": "eq", "right": "input.order_id"},
	})))
	e.put(t, s, e.definition("byaccount", events(obj{
		"name": "settled", "source": "kafka", "topic": "settled",
		"filter": obj{"account": json.Number("9007199254740993")},
	})))

	const low, high = "9007199254740992", "9007199254740993" // one float64
	lowExec := e.startExecution(t, s, "byorder", obj{"order_id": json.Number(low)})
	highExec := e.startExecution(t, s, "byorder", obj{"order_id": json.Number(high)})
	e.waits(t, 2)

	e.produce(t, record("orders", 0, `{"order_id": 9007199254740993}`))
	e.waitStatus(t, s, highExec, "completed")
	require.True(t, e.outputHas(t, highExec, "paid", `{"order_id": 9007199254740993}`))
	_, raw := e.fake.firstDone(t, highExec)
	requireNumbers(t, raw, obj{"order_id": json.Number(high)})
	// Both waits were decided in the record's one transaction.
	status, version := e.waitState(t, lowExec, "wait")
	require.Equal(t, "waiting", status, "a record for %s reached the wait for %s", high, low)
	require.Equal(t, int64(1), version)

	e.produce(t, record("orders", 0, `{"order_id": 9007199254740992, "amount": 1e400}`))
	e.waitStatus(t, s, lowExec, "completed")
	require.True(t, e.outputHas(t, lowExec, "paid", `{"order_id": 9007199254740992, "amount": 1e400}`))
	_, raw = e.fake.firstDone(t, lowExec)
	requireNumbers(t, raw, obj{"order_id": json.Number(low), "amount": json.Number("1e400")})

	acct := e.startExecution(t, s, "byaccount", nil)
	corr := e.correlationID(t, s, acct)
	e.produce(t, record("settled", 0, ids(acct, corr, obj{"account": json.Number(low)})))
	requireCount(t, s, "filter", 1)
	status, version = e.waitState(t, acct, "wait")
	require.Equal(t, "waiting", status, "the filter on %s accepted %s", high, low)
	require.Equal(t, int64(1), version)
	e.produce(t, record("settled", 0, ids(acct, corr, obj{"account": json.Number("9007199254740993.0")})))
	e.waitStatus(t, s, acct, "completed")

	e.waitCommitted(t, s, "orders", 0, 2)
	require.Zero(t, s.Consumer.Counts()["poison"], "%v", s.Consumer.Counts())
}

// outputHas reports whether the execution's wait output holds want (JSON, compared by
// PostgreSQL's jsonb, numbers by value) under key.
func (e *env) outputHas(t *testing.T, execID, key, want string) bool {
	t.Helper()
	var same bool
	require.NoError(t, e.direct.QueryRow(t.Context(),
		"SELECT output::jsonb -> $2::text = $3::jsonb FROM node_executions WHERE execution_id = $1 AND node_id = 'wait'",
		execID, key, want).Scan(&same))
	return same
}

// requireNumbers checks that a continuation's body carries, as the wait's "paid" event,
// exactly the numbers of want.
func requireNumbers(t *testing.T, body []byte, want obj) {
	t.Helper()
	v, err := jsonnum.Decode(body)
	require.NoError(t, err)
	paid, ok := dotpath.Get(v, "wait.paid")
	require.True(t, ok, "%s", body)
	got := paid.(map[string]any)
	require.Len(t, got, len(want), "%s", body)
	for k, n := range want {
		require.True(t, jsonnum.Equal(n, got[k]), "%s: want %v, have %v", k, n, got[k])
	}
}
