package api_test

// Sent events are decided in shared transactions (group commit): these tests hold the
// audit log's table so that concurrent sends pile up behind the transactions in flight,
// then look at what each request got and at the rows each transaction wrote.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// groupEnv is a replica with enough connections for the held lock and the leaders
// blocked behind it, and a connection of the test's own to the same schema.
func groupEnv(t *testing.T) (*env, *pgx.Conn) {
	t.Helper()
	schema := dbtest.NewSchema(t)
	cfg := replica.Config(t, schema.URL, "t")
	cfg.DBMaxConns = 10
	s := replica.Start(t, cfg).Service
	conn, err := pgx.Connect(t.Context(), schema.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &env{svc: s, base: "http://" + s.Addr()}, conn
}

// sendAllHeld sends bodies[i] to ids[i] at once while a transaction of the test holds
// audit_log against inserts: the first sends' transactions block at their audit rows,
// and the others queue behind them. It releases the table once some transactions wait
// for it and the others have had time to queue, and returns each request's answer.
func sendAllHeld(t *testing.T, e *env, conn *pgx.Conn, ids []string, bodies [][]byte) []testkit.Response {
	t.Helper()
	ctx := t.Context()
	hold, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = hold.Exec(ctx, "LOCK TABLE audit_log IN SHARE MODE")
	require.NoError(t, err)
	answers := make([]testkit.Response, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { answers[i] = e.do(t, http.MethodPost, eventsPath(id), bodies[i]) })
	}
	var pool = e.svc.Pool()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE relation = 'audit_log'::regclass AND NOT granted`).Scan(&n)
		return err == nil && n > 0
	}, 20*time.Second, 5*time.Millisecond, "no send reached its audit row")
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, hold.Rollback(ctx))
	wg.Wait()
	return answers
}

// startDecisions starts n executions, the i-th of workflow(i), each waiting with one
// wait, and returns them with the body of an event for each: type approved, decision
// d<i>.
func startDecisions(t *testing.T, e *env, n int, workflow func(i int) string) (ids []string, bodies [][]byte) {
	t.Helper()
	ids, bodies = make([]string, n), make([][]byte, n)
	for i := range ids {
		ids[i] = e.startWaiting(t, workflow(i), 1)
		bodies[i] = mustJSON(t, map[string]any{"type": "approved", "payload": map[string]any{"decision": fmt.Sprint("d", i)}})
	}
	return ids, bodies
}

// TestConcurrentSendsShareTransactions: sends that arrive while others are being decided
// are decided together, in fewer transactions than sends; each request still gets its
// own answer (its own wait completed) and its own audit row.
func TestConcurrentSendsShareTransactions(t *testing.T) {
	t.Parallel()
	e, conn := groupEnv(t)
	eventDefs(t, e)
	ids, bodies := startDecisions(t, e, 24, func(int) string { return "approve" })
	answers := sendAllHeld(t, e, conn, ids, bodies)
	for i, r := range answers {
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.Equal(t, "delivered", r.JSON["outcome"])
		v := e.awaitStatus(t, ids[i], status("completed"))
		_, out, _ := v.node(t, "wait")
		require.Equal(t, fmt.Sprint("d", i), out["decision"], "each send completed its own execution")
	}
	rows, err := conn.Query(t.Context(), `SELECT target, outcome, detail, xmin::text FROM audit_log WHERE action = 'event.send'`)
	require.NoError(t, err)
	targets := map[string]int{}
	txs := map[string]bool{}
	for rows.Next() {
		var target, outcome, detail, xmin string
		require.NoError(t, rows.Scan(&target, &outcome, &detail, &xmin))
		require.Equal(t, "delivered", outcome)
		require.Equal(t, "type approved", detail)
		targets[target]++
		txs[xmin] = true
	}
	require.NoError(t, rows.Err())
	for _, id := range ids {
		require.Equal(t, 1, targets["execution/"+id], "one audit row per send")
	}
	require.Len(t, targets, len(ids))
	require.Less(t, len(txs), len(ids), "concurrent sends shared transactions")
}

// TestSendGroupWritesAheadOfContinuing: a group of sends makes the continuations of the
// waits it completes before writing them, and checks with the write that every wait
// holds what the write gave it — the waits it completes and those it only records an
// event on ("twice" waits for two events). Here groups mix both: each execution gets
// what its send did, and every wait was written in its group's own transaction (the
// xmin of its send's audit row), not under the savepoint of a group decided again
// after a failed check.
func TestSendGroupWritesAheadOfContinuing(t *testing.T) {
	t.Parallel()
	e, conn := groupEnv(t)
	eventDefs(t, e)
	const n = 16
	completes := func(i int) bool { return i%2 == 0 }
	ids, bodies := startDecisions(t, e, n, func(i int) string {
		if completes(i) {
			return "approve"
		}
		return "twice"
	})
	answers := sendAllHeld(t, e, conn, ids, bodies)
	for i, r := range answers {
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.Equal(t, "delivered", r.JSON["outcome"])
		if completes(i) {
			v := e.awaitStatus(t, ids[i], status("completed"))
			_, out, _ := v.node(t, "wait")
			require.Equal(t, fmt.Sprint("d", i), out["decision"], "each send completed its own execution")
			continue
		}
		require.Equal(t, vocab.WaitWaiting, e.get(t, ids[i]).Waits[0].Status, "one of its two events recorded")
	}
	rows, err := conn.Query(t.Context(), `SELECT a.target, a.xmin::text, w.xmin::text, w.version, w.status
		FROM audit_log AS a JOIN execution_wait_states AS w ON 'execution/' || w.execution_id = a.target
		WHERE a.action = 'event.send'`)
	require.NoError(t, err)
	kinds := map[string]map[string]bool{} // per transaction, the kinds of wait it wrote
	seen := 0
	for rows.Next() {
		var target, tx, waitTx, st string
		var version int64
		require.NoError(t, rows.Scan(&target, &tx, &waitTx, &version, &st))
		require.Equal(t, tx, waitTx, "%s: its wait written in its group's transaction, not under a savepoint", target)
		require.EqualValues(t, 2, version, "%s: one event applied once", target)
		if kinds[tx] == nil {
			kinds[tx] = map[string]bool{}
		}
		kinds[tx][st] = true
		seen++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, n, seen)
	mixed := false
	for _, k := range kinds {
		mixed = mixed || (k["completed"] && k["waiting"])
	}
	require.True(t, mixed, "a group both completed waits and recorded an event on others: %v", kinds)
}

// TestSendRefusedInAGroupFailsOnlyItsSender: a value PostgreSQL refuses that no check
// foresaw (a trigger stands for it) fails the group transaction it is in; its sender
// alone gets the error, with a failed audit row, and the sends grouped with it are
// delivered, each with its row.
func TestSendRefusedInAGroupFailsOnlyItsSender(t *testing.T) {
	t.Parallel()
	e, conn := groupEnv(t)
	eventDefs(t, e)
	dbtest.FailUpdates(t, e.svc.Pool(), "refuse_marked", "execution_wait_states",
		`position('refuse-me' in NEW.event_data::text) > 0`, "22023", "value refused for the test")
	const good, bad = 18, 6
	ids := make([]string, good+bad)
	bodies := make([][]byte, good+bad)
	for i := range ids {
		ids[i] = e.startWaiting(t, "approve", 1)
		decision := "fine"
		if i%4 == 3 {
			decision = "refuse-me"
		}
		bodies[i] = mustJSON(t, map[string]any{"type": "approved", "payload": map[string]any{"decision": decision}})
	}
	answers := sendAllHeld(t, e, conn, ids, bodies)
	// A refused request's row may be written just after its answer.
	var n int
	require.Eventually(t, func() bool {
		err := conn.QueryRow(t.Context(), `SELECT count(*) FROM audit_log WHERE action = 'event.send'`).Scan(&n)
		return err == nil && n >= good+bad
	}, 10*time.Second, 10*time.Millisecond)
	outcomes := map[string]string{}
	rows, err := conn.Query(t.Context(), `SELECT target, outcome FROM audit_log WHERE action = 'event.send'`)
	require.NoError(t, err)
	for rows.Next() {
		var target, outcome string
		require.NoError(t, rows.Scan(&target, &outcome))
		require.NotContains(t, outcomes, target, "one audit row per send")
		outcomes[target] = outcome
	}
	require.NoError(t, rows.Err())
	for i, r := range answers {
		if i%4 == 3 {
			require.Equal(t, http.StatusInternalServerError, r.Status, string(r.Raw))
			require.Equal(t, "failed 500", outcomes[eventsPath(ids[i])], "the row of a request that changed nothing names its path")
			v := e.get(t, ids[i])
			require.Equal(t, vocab.ExecWaiting, v.Status, "the refused event changed nothing")
			continue
		}
		require.Equal(t, http.StatusAccepted, r.Status, string(r.Raw))
		require.Equal(t, "delivered", outcomes["execution/"+ids[i]])
		e.awaitStatus(t, ids[i], status("completed"))
	}
	require.Len(t, outcomes, good+bad)
}
