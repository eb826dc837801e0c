package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/dbtest"
)

// TestJoinSurvivesSIGKILL ends both parallel waits of each execution at the same moment,
// one callback to each of two `rendezvous serve` processes, and SIGKILLs one of them
// while its callbacks are inside their transactions. It counts in the database and at
// the external service that every execution completed, each wait recorded its callback
// once and resumed once, and the join after the two waits ran once per execution.
//
// The two transactions ending an execution's waits each continue the execution in the
// transaction that records the callback. Whichever commits second must see the first's
// wait as ended, though that wait's node is still stored as waiting (a node's outcome is
// in its wait's row), or the join never runs. To make them meet, the test locks every
// execution before the callbacks go out: each callback's transaction waits for that lock
// inside its replica, replica 0 is killed while its transactions wait, and the lock is
// released. The killed replica's callbacks are cut off and sent again to replica 1, as a
// caller retries. Nothing the killed replica held outlives it but those transactions:
// every correlated call was answered before, and no continuation had begun, so no lease
// has to pass and the test takes well under a minute.
//
// It does not run in parallel, for the same reason as TestRedriveSurvivesSIGKILL.
func TestJoinSurvivesSIGKILL(t *testing.T) {
	const executions = 40
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "rendezvous-join-kill-*")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	bin, err := buildBinary(ctx, dir)
	require.NoError(t, err)

	fk := startKillFake(t, 0)
	fk.setDown(false)
	cfg := Config{Seed: 1, Replicas: 2, DatabaseURL: dbtest.ServerURL(t)}.WithDefaults()
	cl := &cluster{cfg: cfg, dir: dir, bin: bin, out: t.Output(), adminURL: cfg.DatabaseURL,
		dbName: fmt.Sprintf("%sjoin_kill_%d", dbPrefix, os.Getpid()), group: fmt.Sprintf("join-kill-%d", os.Getpid()),
		fakeURL: fk.url()}
	cl.dbURL, err = withDatabase(cfg.DatabaseURL, cl.dbName)
	require.NoError(t, err)
	require.NoError(t, cl.createDatabase(ctx))
	t.Cleanup(func() { require.NoError(t, cl.dropDatabase()) })
	require.NoError(t, cl.migrate(ctx))
	cl.replicaURL = cl.dbURL
	defer cl.close()
	require.NoError(t, cl.startKafka(ctx))
	for i := range cfg.Replicas {
		port, err := freePort()
		require.NoError(t, err)
		log, err := cl.logFile(replicaLogName(i))
		require.NoError(t, err)
		rep := &replica{index: i, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), log: log}
		cl.replicas = append(cl.replicas, rep)
		require.NoError(t, cl.startReplica(rep))
	}
	for _, rep := range cl.replicas {
		require.NoError(t, cl.waitReady(ctx, rep, 90*time.Second), "logs in %s", dir)
	}
	pool, err := pgxpool.New(ctx, cl.dbURL)
	require.NoError(t, err)
	defer pool.Close()
	client := &http.Client{Timeout: 30 * time.Second, Transport: withToken{http.DefaultTransport}}
	defer client.CloseIdleConnections()
	r := &runner{cl: cl, http: client, ctx: ctx, down: make([]bool, cfg.Replicas)}

	// Two waits side by side, each calling the service, then a join: an http node that
	// runs once both have ended and tells the service so.
	wait := func(branch string) map[string]any {
		return map[string]any{"aggregationStrategy": "all", "timeout": "10m", "onTimeout": "fail",
			"apiCall": map[string]any{"url": "@{_vars.fake}/calls", "method": "POST", "body": map[string]any{"branch": branch}}}
	}
	def := map[string]any{
		"name": "join-kill",
		"vars": map[string]any{"fake": fk.url(), "sender": "unknown"},
		"nodes": []any{
			map[string]any{"id": "a", "type": "wait_events", "data": wait("a")},
			map[string]any{"id": "b", "type": "wait_events", "data": wait("b")},
			map[string]any{"id": "join", "type": "http", "data": map[string]any{
				"url": "@{_vars.fake}/continuations", "method": "POST", "timeout": 5,
				"headers": map[string]any{"X-Chaos-Sender": "@{_vars.sender}"},
				"body":    map[string]any{"kind": "join", "execution_id": "@{_execution.id}"}}},
		},
		"edges": []any{map[string]any{"source": "a", "target": "join"}, map[string]any{"source": "b", "target": "join"}},
	}
	raw, err := json.Marshal(def)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+cl.replicas[0].addr+"/api/v1/workflows/join-kill", bytes.NewReader(raw))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", body)

	ids := make([]uuid.UUID, executions)
	for i := range ids {
		resp, err := client.Post("http://"+cl.replicas[i%2].addr+"/api/v1/workflows/join-kill/executions", "application/json",
			bytes.NewReader([]byte(`{"input":{}}`)))
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode, "%s", raw)
		var started struct {
			ID uuid.UUID `json:"id"`
		}
		require.NoError(t, json.Unmarshal(raw, &started))
		ids[i] = started.ID
	}

	// Both waits of every execution registered, their calls answered and no call left
	// to send: the versions read now are the ones the callbacks move.
	type waitRow struct {
		exec, corr uuid.UUID
		node       string
		version    int64
	}
	var waits []waitRow
	require.Eventually(t, func() bool {
		waits = waits[:0]
		rows, err := pool.Query(ctx, `SELECT execution_id, correlation_id, node_id, version FROM execution_wait_states
			WHERE execution_id = ANY($1) AND status = 'waiting' AND NOT EXISTS (SELECT 1 FROM outbox)`, ids)
		if err != nil {
			return false
		}
		for rows.Next() {
			var w waitRow
			if rows.Scan(&w.exec, &w.corr, &w.node, &w.version) != nil {
				return false
			}
			waits = append(waits, w)
		}
		if rows.Err() != nil || len(waits) != 2*executions {
			return false
		}
		fk.mu.Lock()
		defer fk.mu.Unlock()
		return len(fk.calls) == 2*executions
	}, time.Minute, 100*time.Millisecond, "both waits of every execution registered and called")

	// Every execution locked: the callbacks' transactions wait for the lock inside the
	// replicas, the two of an execution on two replicas.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	// Released at the latest when the test ends, before the pool is closed.
	defer func() { _ = lock.Rollback(context.Background()) }()
	_, err = lock.Exec(ctx, `SELECT 1 FROM executions WHERE id = ANY($1) FOR UPDATE`, ids)
	require.NoError(t, err)
	var mu sync.Mutex
	attempts := map[uuid.UUID][]Attempt{} // by correlation id
	var callbacks sync.WaitGroup
	first := map[uuid.UUID]int{} // the replica each execution's first wait's callback goes to
	for _, w := range waits {
		to, seen := first[w.exec]
		if seen {
			to = 1 - to
		} else {
			to = len(first) % 2
			first[w.exec] = to
		}
		callbacks.Go(func() {
			payload, _ := json.Marshal(map[string]any{"execution_id": w.exec.String(), "correlation_id": w.corr.String(), "decision": "approved"})
			atts := r.post(0, to, "/api/internal/callbacks/chaos", payload, http.Header{"Content-Type": {"application/json"}})
			mu.Lock()
			attempts[w.corr] = atts
			mu.Unlock()
		})
	}
	// A replica records the callbacks that arrive together in one transaction, so a
	// transaction or two of each replica waits for the lock, with the replica's other
	// callbacks queued behind them; half a second more lets every callback reach its
	// replica before the kill.
	require.Eventually(t, func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'`, cl.dbName).Scan(&waiting)
		return err == nil && waiting >= 2
	}, 20*time.Second, 20*time.Millisecond, "callbacks waiting for the locked executions")
	time.Sleep(500 * time.Millisecond)
	killedAt := time.Now()
	kill(r, 0)
	require.NoError(t, lock.Rollback(ctx))
	callbacks.Wait()

	require.Eventually(t, func() bool {
		var open int
		err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM executions WHERE id = ANY($1) AND status <> 'completed')
			+ (SELECT count(*) FROM run_queue) + (SELECT count(*) FROM outbox)`, ids).Scan(&open)
		return err == nil && open == 0
	}, time.Minute, 200*time.Millisecond, "every execution completes and nothing is left queued")

	// Counted in the database: each wait took its callback once, resumed once, and its
	// version moved by that event alone; each join completed.
	cut := 0
	for _, w := range waits {
		var status string
		var events int
		var version int64
		var resumed bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT status, json_array_length(received_events), version, resumed_at IS NOT NULL
			FROM execution_wait_states WHERE correlation_id = $1`, w.corr).Scan(&status, &events, &version, &resumed))
		require.Equal(t, "completed", status, "wait %s of %s", w.node, w.exec)
		require.Equal(t, 1, events, "wait %s of %s: its callback recorded once", w.node, w.exec)
		require.Equal(t, w.version+1, version, "wait %s of %s: version = before + the callback", w.node, w.exec)
		require.True(t, resumed, "wait %s of %s resumed", w.node, w.exec)
		atts := attempts[w.corr]
		last := atts[len(atts)-1]
		// 202, or 200 when an earlier request whose answer was cut off recorded it.
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, last.Status, "wait %s of %s: %+v", w.node, w.exec, atts)
		if slices.ContainsFunc(atts, func(a Attempt) bool { return a.Unsure }) {
			cut++
		}
	}
	for _, id := range ids {
		var join string
		require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM node_executions WHERE execution_id = $1 AND node_id = 'join'`, id).Scan(&join))
		require.Equal(t, "completed", join, "execution %s", id)
	}
	require.Positive(t, cut, "callbacks cut off by the kill of replica 0")

	// Counted at the service: the join called it once per execution.
	fk.mu.Lock()
	conts := slices.Clone(fk.conts)
	fk.mu.Unlock()
	byKey := map[string]int{}
	for _, k := range conts {
		byKey[k.IdempotencyKey]++
	}
	for _, id := range ids {
		require.Equal(t, 1, byKey[id.String()+":join"], "execution %s: the join's calls", id)
	}
	require.Len(t, conts, executions, "no other continuation call")
	t.Logf("%d executions, two waits each: replica 0 killed at %s with callbacks waiting for their executions; %d callbacks cut off and sent again",
		executions, killedAt.Format(time.StampMilli), cut)
}
