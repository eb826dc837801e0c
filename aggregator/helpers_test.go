package aggregator_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// waitNode is the node id of every wait the tests register.
const waitNode = "wait_for_order"

// fixture is one test's database and aggregator.
type fixture struct {
	pool *pgxpool.Pool
	agg  *aggregator.Aggregator
	q    *dbsqlc.Queries
	logs *logCapture
}

// setup gives the test a migrated schema of its own with one workflow row, and an
// aggregator over it whose logs are captured; configure adjusts its configuration.
func setup(t testing.TB, configure ...func(*aggregator.Config)) *fixture {
	t.Helper()
	pool := dbtest.NewPool(t)
	logs := &logCapture{}
	cfg := aggregator.Config{InstanceID: "test", Logger: slog.New(logs)}
	for _, c := range configure {
		c(&cfg)
	}
	agg, err := aggregator.New(pool, cfg)
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `INSERT INTO workflows (name, version, definition) VALUES ('orders', 1, '{"nodes":[{"id":"wait_for_order","type":"wait_events"}]}')`)
	require.NoError(t, err)
	return &fixture{pool: pool, agg: agg, q: dbsqlc.New(), logs: logs}
}

// withClock has an aggregator decide by c.
func withClock(c clock.Clock) func(*aggregator.Config) {
	return func(cfg *aggregator.Config) { cfg.Clock = c }
}

// wait names a registered wait.
type wait struct {
	ID            uuid.UUID
	ExecutionID   uuid.UUID
	CorrelationID uuid.UUID
	NodeID        string
}

// registration fills the parts of a Registration every test shares.
func registration(strategy vocab.Strategy, expected []aggregator.Expected, custom ...string) aggregator.Registration {
	return aggregator.Registration{
		Strategy:       strategy,
		Expected:       expected,
		RequiredEvents: custom,
		Timeout:        5 * time.Minute,
		OnTimeout:      "fail",
		OutputMapping: map[string]string{
			"apiResponse": api,
			"kafkaEvent":  kafka,
			"orderId":     api + ".order.id",
			"shipment":    kafka + ".shipment",
		},
	}
}

// newWait inserts an execution waiting on one wait_events node and registers reg for it.
func (f *fixture) newWait(t *testing.T, reg aggregator.Registration) wait {
	t.Helper()
	return f.newWaits(t, 1, reg)[0]
}

// newWaits does what newWait does n times, in one transaction.
func (f *fixture) newWaits(t testing.TB, n int, reg aggregator.Registration) []wait {
	t.Helper()
	ctx := t.Context()
	out := make([]wait, n)
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		for i := range out {
			r := reg
			r.ExecutionID, r.CorrelationID, r.NodeID = uuid.New(), uuid.New(), waitNode
			if _, err := tx.Exec(ctx, `INSERT INTO executions (id, workflow_name, workflow_version, status, input) VALUES ($1, 'orders', 1, 'waiting', '{"order":"o-1"}')`, r.ExecutionID); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO node_execution_rows (execution_id, node_id, status, attempts, started_at) VALUES ($1, $2, 'waiting_for_events', 1, now())`, r.ExecutionID, r.NodeID); err != nil {
				return err
			}
			ws, err := f.agg.Register(ctx, tx, r)
			if err != nil {
				return err
			}
			out[i] = wait{ID: ws.ID, ExecutionID: ws.ExecutionID, CorrelationID: ws.CorrelationID, NodeID: ws.NodeID}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// newExecutionWithoutWait inserts a running execution that has no wait state.
func (f *fixture) newExecutionWithoutWait(t *testing.T) uuid.UUID {
	t.Helper()
	id := uuid.New()
	_, err := f.pool.Exec(t.Context(), `INSERT INTO executions (id, workflow_name, workflow_version, status) VALUES ($1, 'orders', 1, 'running')`, id)
	require.NoError(t, err)
	return id
}

// event builds the event name for w with the given payload.
func (w wait) event(name, payload string) aggregator.Event {
	ev := aggregator.Event{ExecutionID: w.ExecutionID, CorrelationID: w.CorrelationID, Name: name, Payload: json.RawMessage(payload)}
	switch name {
	case kafka:
		partition, offset := int32(3), int64(42)
		ev.Source = aggregator.Source{Kind: "kafka", Topic: "orders", Partition: &partition, Offset: &offset}
	default:
		ev.Source = aggregator.Source{Kind: "callback", Service: "payments"}
	}
	return ev
}

// Payloads of the two events; their keys are what outputMapping points at.
const (
	apiPayload   = `{"order":{"id":"o-1","total":12.5},"ok":true}`
	kafkaPayload = `{"shipment":{"carrier":"dhl"},"status":"shipped"}`
)

func (f *fixture) apply(t *testing.T, ev aggregator.Event) aggregator.Result {
	t.Helper()
	res, err := f.agg.Apply(t.Context(), ev)
	require.NoError(t, err)
	return res
}

func (f *fixture) waitState(t *testing.T, id uuid.UUID) dbsqlc.ExecutionWaitState {
	t.Helper()
	ws, err := f.q.WaitStateGetByID(t.Context(), f.pool, id)
	require.NoError(t, err)
	return ws
}

func receivedOf(t *testing.T, ws dbsqlc.ExecutionWaitState) []aggregator.Received {
	t.Helper()
	var received []aggregator.Received
	require.NoError(t, json.Unmarshal(ws.ReceivedEvents, &received))
	return received
}

func receivedNames(t *testing.T, ws dbsqlc.ExecutionWaitState) []string {
	t.Helper()
	names := []string{}
	for _, r := range receivedOf(t, ws) {
		names = append(names, r.Name)
	}
	return names
}

func (f *fixture) node(t *testing.T, w wait) dbsqlc.NodeExecution {
	t.Helper()
	var n dbsqlc.NodeExecution
	err := f.pool.QueryRow(t.Context(), `SELECT execution_id, node_id, status, output, error, attempts, created_at, updated_at, started_at, finished_at, warning
		FROM node_executions WHERE execution_id = $1 AND node_id = $2`, w.ExecutionID, w.NodeID).
		Scan(&n.ExecutionID, &n.NodeID, &n.Status, &n.Output, &n.Error, &n.Attempts, &n.CreatedAt, &n.UpdatedAt, &n.StartedAt, &n.FinishedAt, &n.Warning)
	require.NoError(t, err)
	return n
}

// runQueue returns the kinds of the execution's run queue rows, all of which must be for w's node.
func (f *fixture) runQueue(t *testing.T, w wait) []string {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), `SELECT node_id, kind FROM run_queue WHERE execution_id = $1 ORDER BY id`, w.ExecutionID)
	require.NoError(t, err)
	kinds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var node, kind string
		err := r.Scan(&node, &kind)
		require.Equal(t, w.NodeID, node)
		return kind, err
	})
	require.NoError(t, err)
	return kinds
}

// snapshot dumps every row the aggregator could touch for the given executions, so a test
// can assert that an event changed nothing at all (not even updated_at).
func (f *fixture) snapshot(t *testing.T, executionIDs ...uuid.UUID) string {
	t.Helper()
	ids := make([]string, len(executionIDs))
	for i, id := range executionIDs {
		ids[i] = id.String()
	}
	var s string
	err := f.pool.QueryRow(t.Context(), `
		SELECT jsonb_build_object(
			'executions', (SELECT coalesce(jsonb_agg(to_jsonb(e) ORDER BY e.id), '[]') FROM executions e WHERE e.id = ANY($1::uuid[])),
			'waits', (SELECT coalesce(jsonb_agg(to_jsonb(w) ORDER BY w.id), '[]') FROM execution_wait_states w WHERE w.execution_id = ANY($1::uuid[])),
			'nodes', (SELECT coalesce(jsonb_agg(to_jsonb(n) ORDER BY n.execution_id, n.node_id), '[]') FROM node_executions n WHERE n.execution_id = ANY($1::uuid[])),
			'run_queue', (SELECT coalesce(jsonb_agg(to_jsonb(r) ORDER BY r.id), '[]') FROM run_queue r WHERE r.execution_id = ANY($1::uuid[])),
			'outbox', (SELECT coalesce(jsonb_agg(to_jsonb(o) ORDER BY o.id), '[]') FROM outbox o WHERE o.execution_id = ANY($1::uuid[]))
		)::text`, ids).Scan(&s)
	require.NoError(t, err)
	return s
}

func decode(t *testing.T, raw []byte) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	return v
}

func payloadKey(payload string) string {
	sum := sha256.Sum256([]byte(payload))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// interleave makes the optimistic fence lose deterministically. rival runs in a
// transaction that stays open, holding its row locks; op then starts in its own
// transaction, reads the wait (not seeing rival's uncommitted change) and blocks in its
// fenced UPDATE; only then is rival committed, so op's UPDATE matches zero rows and op
// must reload and decide again. It returns op's error.
func (f *fixture) interleave(t *testing.T, rival func(ctx context.Context, tx pgx.Tx) error, op func(ctx context.Context, tx pgx.Tx) error) error {
	t.Helper()
	ctx := t.Context()
	// Both run in db.Tx, as the product's transactions do, so that what the aggregator
	// registers for after the commit runs after it, and not at once.
	done := make(chan error, 1)
	var neverBlocked error
	err := db.Tx(ctx, f.pool, func(rtx pgx.Tx) error {
		var holder int32
		require.NoError(t, rtx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))
		require.NoError(t, rival(ctx, rtx))

		go func() {
			done <- db.Tx(ctx, f.pool, func(tx pgx.Tx) error { return op(ctx, tx) })
		}()

		deadline := time.Now().Add(15 * time.Second)
		for {
			var blocked int
			err := f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, holder).Scan(&blocked)
			require.NoError(t, err)
			if blocked > 0 {
				return nil // the rival commits
			}
			select {
			case err := <-done:
				require.FailNow(t, "operation finished without blocking on the rival's row lock", "error: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				neverBlocked = errors.New("operation never blocked on the rival's row lock")
				return neverBlocked // the rival rolls back, which frees the operation
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	if neverBlocked != nil {
		<-done
		require.FailNow(t, neverBlocked.Error())
	}
	require.NoError(t, err)
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		require.FailNow(t, "operation did not finish after the rival committed")
		return nil
	}
}

// logCapture is a slog.Handler keeping every record, so tests can assert on what the
// aggregator logged.
type logCapture struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r.Clone())
	return nil
}

func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// find returns the attributes of records at level with message msg whose attribute key
// equals value.
func (l *logCapture) find(level slog.Level, msg, key string, value any) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, r := range l.records {
		if r.Level != level || r.Message != msg {
			continue
		}
		attrs := map[string]any{}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value.Any()
			return true
		})
		if attrs[key] == value {
			out = append(out, attrs)
		}
	}
	return out
}
