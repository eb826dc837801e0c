package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// Early records for payload matches: a record that reaches no wait is kept for the
// lookback of the events matching it, and a wait registering with its value takes it.

const paymentsTopic = "payments"

// paymentSpecs is how the consumer would match records of the payments topic: by
// order.id, kept for ten minutes.
var paymentSpecs = []aggregator.MatchSpec{{Left: "order.id", Lookback: 10 * time.Minute}}

// paymentRecord is a record of the payments topic for order, as the consumer hands it to
// the aggregator.
func paymentRecord(t *testing.T, order string, n int) aggregator.Event {
	t.Helper()
	payload := fmt.Sprintf(`{"order":{"id":%q},"n":%d}`, order, n)
	decoded := decode(t, []byte(payload))
	partition, offset := int32(0), int64(n)
	return aggregator.Event{
		MatchKeys: aggregator.MatchKeys(paymentsTopic, decoded, paymentSpecs),
		Keep:      aggregator.KeepFor(paymentsTopic, decoded, paymentSpecs),
		Payload:   json.RawMessage(payload),
		Source:    aggregator.Source{Kind: "kafka", Topic: paymentsTopic, Partition: &partition, Offset: &offset},
	}
}

// paymentWait waits for the payment of order, taking a record kept within lookback.
func paymentWait(order string, lookback time.Duration, buffer workflow.BufferMode) aggregator.Registration {
	value, _ := aggregator.MatchValue(order)
	return registration(vocab.StrategyAll, []aggregator.Expected{{Name: "payment", Source: aggregator.SourceKafka, Topic: paymentsTopic,
		Required: true, Match: &aggregator.ExpectedMatch{Left: "order.id", Value: value}, LookbackMS: lookback.Milliseconds(), Buffer: buffer}})
}

// register registers reg for a new execution the way the executor does: the wait, then
// what was kept or buffered for it, in one transaction.
func (f *fixture) register(t *testing.T, reg aggregator.Registration) (wait, aggregator.Result) {
	t.Helper()
	execID := f.newExecutionWithoutWait(t)
	var w wait
	var res aggregator.Result
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		var err error
		w, res, err = f.registerTx(t.Context(), tx, execID, reg)
		return err
	}))
	return w, res
}

func (f *fixture) registerTx(ctx context.Context, tx pgx.Tx, execID uuid.UUID, reg aggregator.Registration) (wait, aggregator.Result, error) {
	reg.ExecutionID, reg.CorrelationID, reg.NodeID = execID, uuid.New(), waitNode
	if _, err := tx.Exec(ctx, `INSERT INTO node_execution_rows (execution_id, node_id, status, attempts, started_at)
		VALUES ($1, $2, 'waiting_for_events', 1, now())`, execID, waitNode); err != nil {
		return wait{}, aggregator.Result{}, err
	}
	ws, err := f.agg.Register(ctx, tx, reg)
	if err != nil {
		return wait{}, aggregator.Result{}, err
	}
	res, err := f.agg.TakeBuffered(ctx, tx, ws)
	return wait{ID: ws.ID, ExecutionID: ws.ExecutionID, CorrelationID: ws.CorrelationID, NodeID: ws.NodeID}, res, err
}

// kept lists the kept records of order by status: the n of each, oldest first.
func (f *fixture) kept(t *testing.T, order string) map[string][]int {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), `SELECT status, (payload->>'n')::int FROM match_lookback
		WHERE payload->'order'->>'id' = $1 ORDER BY id`, order)
	require.NoError(t, err)
	out := map[string][]int{}
	for rows.Next() {
		var status string
		var n int
		require.NoError(t, rows.Scan(&status, &n))
		out[status] = append(out[status], n)
	}
	require.NoError(t, rows.Err())
	return out
}

// paymentOf is the n of the payment a wait recorded.
func (f *fixture) paymentOf(t *testing.T, w wait) int {
	t.Helper()
	var named map[string]struct{ N int }
	require.NoError(t, json.Unmarshal(f.waitState(t, w.ID).EventData, &named))
	return named["payment"].N
}

// TestLookbackRecordTakenAtRegistration: a record that arrives before its wait is kept;
// the wait takes it in the transaction that registers it and completes exactly as with
// a live record; a redelivery of the record is a duplicate, kept nowhere again.
func TestLookbackRecordTakenAtRegistration(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rec := paymentRecord(t, "o-1", 1)

	res := f.apply(t, rec)
	require.Equal(t, aggregator.Kept, res.Outcome)
	require.WithinDuration(t, time.Now().Add(10*time.Minute), res.KeptUntil, time.Minute)
	require.Equal(t, map[string][]int{"kept": {1}}, f.kept(t, "o-1"))
	var reason, detail string
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT reason, detail FROM unmatched_events`).Scan(&reason, &detail))
	require.Equal(t, string(aggregator.UnmatchedBuffered), reason)
	require.Contains(t, detail, "kept for a wait registering with it until")

	// A wait for another value, and one without lookback, take nothing.
	other, res := f.register(t, paymentWait("o-2", 10*time.Minute, ""))
	require.Empty(t, res.Outcome)
	live, res := f.register(t, paymentWait("o-1", 0, ""))
	require.Empty(t, res.Outcome)

	w, res := f.register(t, paymentWait("o-1", 10*time.Minute, ""))
	require.Equal(t, aggregator.Completed, res.Outcome)
	require.Equal(t, "payment", res.Event)
	ws := f.waitState(t, w.ID)
	require.Equal(t, vocab.WaitCompleted, ws.Status)
	require.Equal(t, 1, f.paymentOf(t, w))
	received := receivedOf(t, ws)
	require.Len(t, received, 1)
	require.Equal(t, payloadKey(string(rec.Payload)), received[0].Key, "recorded under the key a live record has")
	require.Equal(t, int64(1), *received[0].Source.Offset, "with its position")
	require.Equal(t, vocab.NodeCompleted, f.node(t, w).Status)
	require.Equal(t, []string{"resume"}, f.runQueue(t, w))
	require.Equal(t, map[string][]int{"taken": {1}}, f.kept(t, "o-1"))
	var takenBy uuid.UUID
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT taken_by FROM match_lookback`).Scan(&takenBy))
	require.Equal(t, w.ID, takenBy)

	// The redelivery reaches the wait without lookback (live, as before) and is kept
	// nowhere again.
	res = f.apply(t, rec)
	require.Equal(t, aggregator.Completed, res.Outcome)
	require.Equal(t, live.ID, res.WaitStateID)
	require.Equal(t, map[string][]int{"taken": {1}}, f.kept(t, "o-1"))
	// Once no wait expects it, a redelivery is a duplicate of what was kept.
	res = f.apply(t, rec)
	require.Equal(t, aggregator.Duplicate, res.Outcome)
	require.Equal(t, map[string][]int{"taken": {1}}, f.kept(t, "o-1"))
	require.Equal(t, vocab.WaitWaiting, f.waitState(t, other.ID).Status)
}

// TestLookbackExpiry: a wait takes only records younger than its own lookback; a
// record past the lookback it was kept for is not taken by anyone, and the janitor
// deletes it. Age is made by moving the stored times back, not by sleeping.
func TestLookbackExpiry(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.apply(t, paymentRecord(t, "o-1", 1))
	f.apply(t, paymentRecord(t, "o-2", 2))
	// o-1's record is 5 minutes old, o-2's 11: past the ten minutes it was kept for.
	_, err := f.pool.Exec(t.Context(), `UPDATE match_lookback SET kept_at = kept_at - interval '5 minutes',
		expires_at = expires_at - interval '5 minutes' WHERE payload->'order'->>'id' = 'o-1'`)
	require.NoError(t, err)
	_, err = f.pool.Exec(t.Context(), `UPDATE match_lookback SET kept_at = kept_at - interval '11 minutes',
		expires_at = expires_at - interval '11 minutes' WHERE payload->'order'->>'id' = 'o-2'`)
	require.NoError(t, err)

	// A wait looking back 1 minute does not take o-1's 5-minute-old record; one looking
	// back 10 minutes does.
	short, res := f.register(t, paymentWait("o-1", time.Minute, ""))
	require.Empty(t, res.Outcome)
	require.Equal(t, vocab.WaitWaiting, f.waitState(t, short.ID).Status)
	require.Equal(t, map[string][]int{"kept": {1}}, f.kept(t, "o-1"))
	long, res := f.register(t, paymentWait("o-1", 10*time.Minute, ""))
	require.Equal(t, aggregator.Completed, res.Outcome)
	require.Equal(t, 1, f.paymentOf(t, long))

	// o-2's record expired: even a wait looking back an hour does not take it.
	late, res := f.register(t, paymentWait("o-2", time.Hour, ""))
	require.Empty(t, res.Outcome)
	require.Equal(t, vocab.WaitWaiting, f.waitState(t, late.ID).Status)

	_, err = f.agg.Janitor(t.Context())
	require.NoError(t, err)
	require.Empty(t, f.kept(t, "o-2"), "the expired record is pruned")
	require.Equal(t, map[string][]int{"taken": {1}}, f.kept(t, "o-1"), "a record within its expiry stays, taken")
}

// TestLookbackPruneBounded: the janitor deletes expired records in batches of at most
// 1 000 rows, until none is left, and leaves the rest alone.
func TestLookbackPruneBounded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.pool.Exec(t.Context(), `INSERT INTO match_lookback (match_key, event_key, payload, source, kept_at, expires_at)
		SELECT 'k', 'e' || g, '{}', '{}', now() - interval '2 hours', now() - interval '1 hour' FROM generate_series(1, 2500) AS g`)
	require.NoError(t, err)
	_, err = f.pool.Exec(t.Context(), `INSERT INTO match_lookback (match_key, event_key, payload, source, kept_at, expires_at)
		VALUES ('k', 'fresh', '{}', '{}', now(), now() + interval '1 hour')`)
	require.NoError(t, err)
	_, err = f.agg.Janitor(t.Context())
	require.NoError(t, err)
	var left []string
	rows, err := f.pool.Query(t.Context(), `SELECT event_key FROM match_lookback`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		left = append(left, k)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"fresh"}, left)
}

// TestLookbackLastWriteWins: with buffer last_write_wins a wait takes the newest kept
// record of its value; the older ones are dead-lettered as superseded under its
// execution and taken by no later wait. Without it (fifo) each wait takes the oldest.
func TestLookbackLastWriteWins(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for n := 1; n <= 3; n++ {
		require.Equal(t, aggregator.Kept, f.apply(t, paymentRecord(t, "o-1", n)).Outcome)
		require.Equal(t, aggregator.Kept, f.apply(t, paymentRecord(t, "o-2", 10+n)).Outcome)
	}

	w, res := f.register(t, paymentWait("o-1", 10*time.Minute, aggregator.BufferLastWriteWins))
	require.Equal(t, aggregator.Completed, res.Outcome)
	require.Equal(t, 3, f.paymentOf(t, w))
	require.Equal(t, map[string][]int{"superseded": {1, 2}, "taken": {3}}, f.kept(t, "o-1"))
	rows, err := f.pool.Query(t.Context(), `SELECT reason, (payload->>'n')::int FROM event_dead_letters WHERE execution_id = $1 ORDER BY id`, w.ExecutionID)
	require.NoError(t, err)
	var dead []string
	for rows.Next() {
		var reason string
		var n int
		require.NoError(t, rows.Scan(&reason, &n))
		dead = append(dead, fmt.Sprintf("%s %d", reason, n))
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"superseded 1", "superseded 2"}, dead)
	next, res := f.register(t, paymentWait("o-1", 10*time.Minute, ""))
	require.Empty(t, res.Outcome, "superseded records are taken by no later wait")
	require.Equal(t, vocab.WaitWaiting, f.waitState(t, next.ID).Status)

	// fifo: oldest first, one per wait.
	for _, want := range []int{11, 12, 13} {
		w, res := f.register(t, paymentWait("o-2", 10*time.Minute, ""))
		require.Equal(t, aggregator.Completed, res.Outcome)
		require.Equal(t, want, f.paymentOf(t, w))
	}
}

// TestLookbackBoundedByServerMaximum: a record is kept no longer than MaxLookback, and a
// wait looks back no further, whatever the definitions ask.
func TestLookbackBoundedByServerMaximum(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	agg, err := aggregator.New(pool, aggregator.Config{InstanceID: "test", Logger: slog.New(slog.DiscardHandler), MaxLookback: time.Minute})
	require.NoError(t, err)
	f := &fixture{pool: pool, agg: agg, logs: &logCapture{}}
	_, err = pool.Exec(t.Context(), `INSERT INTO workflows (name, version, definition) VALUES ('orders', 1, '{}')`)
	require.NoError(t, err)

	res := f.apply(t, paymentRecord(t, "o-1", 1)) // its spec asks ten minutes
	require.Equal(t, aggregator.Kept, res.Outcome)
	require.WithinDuration(t, time.Now().Add(time.Minute), res.KeptUntil, 10*time.Second)
	_, err = pool.Exec(t.Context(), `UPDATE match_lookback SET kept_at = kept_at - interval '2 minutes', expires_at = expires_at + interval '1 hour'`)
	require.NoError(t, err)
	_, res = f.register(t, paymentWait("o-1", 10*time.Minute, ""))
	require.Empty(t, res.Outcome, "a wait asking ten minutes looks back one")
}

// TestLookbackRecordMeetsRegistration proves the race closed both ways, with the worst
// interleaving forced: each side runs while the other's transaction is open, and must
// block on the key's lock until the other commits, then see what it committed. Without
// the lock the record would be kept and the wait left waiting — each missing the other.
func TestLookbackRecordMeetsRegistration(t *testing.T) {
	t.Parallel()
	t.Run("registration first, the record waits for it and is delivered live", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		execID := f.newExecutionWithoutWait(t)
		var w wait
		var results []aggregator.Result
		err := f.interleave(t,
			func(ctx context.Context, tx pgx.Tx) error {
				var err error
				w, _, err = f.registerTx(ctx, tx, execID, paymentWait("o-1", 10*time.Minute, ""))
				return err
			},
			func(ctx context.Context, tx pgx.Tx) error {
				var err error
				results, err = f.agg.ApplyBatch(ctx, tx, []aggregator.Event{paymentRecord(t, "o-1", 1)})
				return err
			})
		require.NoError(t, err)
		require.Equal(t, aggregator.Completed, results[0].Outcome)
		require.Equal(t, vocab.WaitCompleted, f.waitState(t, w.ID).Status)
		require.Equal(t, 1, f.paymentOf(t, w))
		require.Empty(t, f.kept(t, "o-1"), "delivered live, not kept")
		require.Equal(t, []string{"resume"}, f.runQueue(t, w))
	})
	t.Run("record first, the registration waits for it and takes it", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		execID := f.newExecutionWithoutWait(t)
		var w wait
		var res aggregator.Result
		err := f.interleave(t,
			func(ctx context.Context, tx pgx.Tx) error {
				results, err := f.agg.ApplyBatch(ctx, tx, []aggregator.Event{paymentRecord(t, "o-1", 1)})
				require.Equal(t, aggregator.Kept, results[0].Outcome)
				return err
			},
			func(ctx context.Context, tx pgx.Tx) error {
				var err error
				w, res, err = f.registerTx(ctx, tx, execID, paymentWait("o-1", 10*time.Minute, ""))
				return err
			})
		require.NoError(t, err)
		require.Equal(t, aggregator.Completed, res.Outcome)
		require.Equal(t, 1, f.paymentOf(t, w))
		require.Equal(t, map[string][]int{"taken": {1}}, f.kept(t, "o-1"))
	})
}
