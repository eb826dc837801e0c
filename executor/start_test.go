package executor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/vocab"
)

// rowsWrittenBy counts the rows of every table of the test's schema whose current
// version the transaction that wrote execution id's row wrote (inserted, or updated last).
func rowsWrittenBy(t *testing.T, p *pod, id uuid.UUID) map[string]int {
	t.Helper()
	ctx := context.Background()
	var xid string
	require.NoError(t, p.pool.QueryRow(ctx, `SELECT xmin::text FROM executions WHERE id = $1`, id).Scan(&xid))
	rows, err := p.pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]int{}
	for _, tbl := range tables {
		var n int
		require.NoError(t, p.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{tbl}.Sanitize()+` WHERE xmin::text = $1`, xid).Scan(&n))
		if n > 0 {
			out[tbl] = n
		}
	}
	return out
}

// TestStartParksRootWaitInItsTransaction: a root wait_events node is run and its wait
// registered in the transaction that starts the execution — no worker runs (the pod is
// not running), no run-queue row is written — and that transaction writes the three rows
// a parked workflow needs, each inserted in its final state: the execution, its node and
// the wait (a start through the API adds its audit row; this one has no principal).
func TestStartParksRootWaitInItsTransaction(t *testing.T) {
	t.Parallel()
	h := setup(t)
	name := h.put(t, h.workflow("park", []obj{
		node("w", "wait_events", obj{"events": []obj{{"name": "go", "source": "send", "type": "go"}}, "timeout": 3600}),
	}, nil))
	id := h.start(t, name, nil)

	v := h.view(t, id)
	require.Equal(t, vocab.ExecWaiting, v.Status)
	require.Len(t, v.Nodes, 1)
	n := v.Nodes[0]
	require.Equal(t, vocab.NodeWaiting, n.Status)
	require.Equal(t, 1, h.count(t, `SELECT attempts FROM node_executions WHERE execution_id = $1`, id))
	var out map[string]any
	require.NoError(t, json.Unmarshal(n.Output, &out))
	var wsID string
	require.NoError(t, h.pool.QueryRow(context.Background(),
		`SELECT id::text FROM execution_wait_states WHERE execution_id = $1 AND status = 'waiting'`, id).Scan(&wsID))
	require.Equal(t, wsID, out["wait_state_id"])
	require.Equal(t, []any{"go"}, out["enabledEvents"])
	require.Zero(t, h.count(t, `SELECT count(*) FROM run_queue`))

	require.Equal(t, map[string]int{"executions": 1, "node_execution_rows": 1, "execution_wait_states": 1},
		rowsWrittenBy(t, h.pod, id))

	// The wait is an ordinary wait: the event sent to it completes the execution. That
	// transaction writes two rows: the wait, which takes its node's outcome, and the
	// execution. The node's stored row stays as registration wrote it; the node reads as
	// completed, with its output, all the same.
	h.run(t)
	h.send(t, id, "go", obj{"ok": true}, "")
	v = h.waitStatus(t, id, "completed")
	require.Equal(t, map[string]int{"executions": 1, "execution_wait_states": 1}, rowsWrittenBy(t, h.pod, id))
	n = nodeOf(t, v, "w")
	require.Equal(t, vocab.NodeCompleted, n.Status)
	require.NotNil(t, n.FinishedAt)
	require.NoError(t, json.Unmarshal(n.Output, &out))
	require.Equal(t, map[string]any{"ok": true}, out["go"])
	require.Equal(t, 1, h.count(t, `SELECT count(*) FROM node_execution_rows WHERE execution_id = $1 AND status = 'waiting_for_events'`, id))
}
