package aggregator_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
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
	"github.com/rendezvous-run/rendezvous/internal/testsignal"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// queryCounter counts the statements a pool sends.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// sweeperFixture is a fixture whose pool counts statements, with the aggregator's
// sweeper reporting what it fired.
type sweeperFixture struct {
	*fixture
	queries *queryCounter
	mu      sync.Mutex
	fired   []aggregator.Expired
	firedCh chan struct{}
	// rounds is the sweeper's SweepRoundDone signal: a round is over, and the sweeper
	// goes to sleep until the time it carries.
	rounds testsignal.Signal[time.Time]
}

func newSweeperFixture(t *testing.T, cfg aggregator.Config) *sweeperFixture {
	t.Helper()
	schema := dbtest.NewSchema(t)
	pcfg, err := pgxpool.ParseConfig(schema.URL)
	require.NoError(t, err)
	counter := &queryCounter{}
	pcfg.ConnConfig.Tracer = counter
	pcfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(t.Context(), `INSERT INTO workflows (name, version, definition) VALUES ('orders', 1, '{}')`)
	require.NoError(t, err)

	sf := &sweeperFixture{queries: counter, firedCh: make(chan struct{}, 1000)}
	logs := &logCapture{}
	cfg.InstanceID, cfg.Logger = "sweeper", slog.New(logs)
	cfg.OnExpired = func(ex []aggregator.Expired) {
		sf.mu.Lock()
		sf.fired = append(sf.fired, ex...)
		sf.mu.Unlock()
		sf.firedCh <- struct{}{}
	}
	cfg.TestSignals.SweepRoundDone.Init()
	sf.rounds = cfg.TestSignals.SweepRoundDone
	agg, err := aggregator.New(pool, cfg)
	require.NoError(t, err)
	sf.fixture = &fixture{pool: pool, agg: agg, q: dbsqlc.New(), logs: logs}
	return sf
}

func (sf *sweeperFixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sf.agg.RunSweeper(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (sf *sweeperFixture) firedCount() int {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	return len(sf.fired)
}

// TestSweeperSleepsUntilTheDeadline: with one deadline ahead and nothing due, the
// sweeper issues a handful of statements, not a poll loop, and sleeps until the
// deadline; it then fires the deadline when its clock reaches it, and goes quiet again.
// The sweeper's clock is a stub: the deadline comes when the test moves it there, while
// the quiet spells are measured in real time.
func TestSweeperSleepsUntilTheDeadline(t *testing.T) {
	t.Parallel()
	stub := clock.NewStub(time.Now())
	sf := newSweeperFixture(t, aggregator.Config{SweepMaxSleep: time.Minute, Clock: stub})
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	reg.Timeout = 1500 * time.Millisecond
	w := sf.newWait(t, reg)
	deadline := sf.waitState(t, w.ID).NextDeadlineAt

	before := sf.queries.n.Load()
	sf.run(t)
	target := sf.rounds.Wait(t)
	require.True(t, target.Equal(deadline), "the first round sleeps until %v, not the deadline %v", target, deadline)
	time.Sleep(time.Second)
	idle := sf.queries.n.Load() - before
	// A sweep that finds nothing (begin, claim, commit) and one look at the next deadline.
	require.LessOrEqual(t, idle, int64(6), "statements in 1 s while nothing was due")
	require.Zero(t, sf.firedCount(), "fired before its clock reached the deadline")

	stub.Set(deadline)
	select {
	case <-sf.firedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline never fired")
	}
	sf.mu.Lock()
	require.Len(t, sf.fired, 1)
	require.Equal(t, w.ID.String(), sf.fired[0].WaitStateID)
	require.Less(t, sf.fired[0].Lateness, time.Second)
	require.GreaterOrEqual(t, sf.fired[0].Lateness, time.Duration(0))
	sf.mu.Unlock()
	require.Equal(t, vocab.WaitTimeout, sf.waitState(t, w.ID).Status)

	// The round that fired the deadline ends with nothing left: the sweeper goes to sleep
	// for SweepMaxSleep (earlier rounds slept until the deadline).
	for target := sf.rounds.Wait(t); target.Sub(stub.Now()) < 30*time.Second; target = sf.rounds.Wait(t) {
	}
	quiet := sf.queries.n.Load()
	time.Sleep(time.Second)
	require.LessOrEqual(t, sf.queries.n.Load()-quiet, int64(2), "statements in 1 s after the only deadline fired")
}

// TestSweeperWokenByEarlierRegistration: a sweeper asleep for long is woken by a wait
// registered in its process with an earlier deadline, and fires it on time.
//
// The clock is a stub moved to the earlier deadline only: a sweeper still asleep until
// the hour is up would not fire.
func TestSweeperWokenByEarlierRegistration(t *testing.T) {
	t.Parallel()
	stub := clock.NewStub(time.Now())
	sf := newSweeperFixture(t, aggregator.Config{SweepMaxSleep: time.Minute, Clock: stub})
	far := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	far.Timeout = time.Hour
	sf.newWait(t, far)
	sf.run(t)
	sf.rounds.Wait(t) // asleep until the hour is up

	soon := far
	soon.Timeout = 400 * time.Millisecond
	w := sf.newWait(t, soon)
	stub.Set(sf.waitState(t, w.ID).NextDeadlineAt)
	select {
	case <-sf.firedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the earlier deadline did not wake the sweeper")
	}
	require.Equal(t, 1, sf.firedCount())
	require.Equal(t, vocab.WaitTimeout, sf.waitState(t, w.ID).Status)
}

// TestSweeperToldAfterCommit: a wait whose deadline passes before its registering
// transaction commits (a short timeout, a slow node run) is fired right after the commit.
// Told at registration, the sweeper woke at the deadline, found nothing it could see yet,
// and slept for SweepMaxSleep.
//
// The clock is a stub, moved past the deadline inside the registering transaction.
func TestSweeperToldAfterCommit(t *testing.T) {
	t.Parallel()
	stub := clock.NewStub(time.Now())
	sf := newSweeperFixture(t, aggregator.Config{SweepMaxSleep: time.Minute, Clock: stub})
	sf.run(t)
	sf.rounds.Wait(t) // asleep: nothing is registered
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	reg.Timeout = 100 * time.Millisecond
	reg.ExecutionID, reg.CorrelationID, reg.NodeID = uuid.New(), uuid.New(), waitNode
	var id uuid.UUID
	require.NoError(t, db.Tx(t.Context(), sf.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `INSERT INTO executions (id, workflow_name, workflow_version, status, input) VALUES ($1, 'orders', 1, 'waiting', '{}')`, reg.ExecutionID); err != nil {
			return err
		}
		ws, err := sf.agg.Register(t.Context(), tx, reg)
		id = ws.ID
		stub.Advance(500 * time.Millisecond) // the deadline passes before the commit
		return err
	}))
	committed := time.Now()
	select {
	case <-sf.firedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the deadline did not fire after the commit")
	}
	require.Less(t, time.Since(committed), 2*time.Second)
	require.Equal(t, vocab.WaitTimeout, sf.waitState(t, id).Status)
}

// TestSweeperFindsOtherReplicasDeadlines: a wait registered elsewhere (no hint reaches
// this sweeper) is still found within SweepMaxSleep.
//
// Both replicas share a stub clock, moved to the end of the sweeper's sleep: past the
// deadline, which only that wake-up can find.
func TestSweeperFindsOtherReplicasDeadlines(t *testing.T) {
	t.Parallel()
	stub := clock.NewStub(time.Now())
	sf := newSweeperFixture(t, aggregator.Config{SweepMaxSleep: 300 * time.Millisecond, Clock: stub})
	sf.run(t)
	asleepUntil := sf.rounds.Wait(t) // asleep: nothing is registered here

	other, err := aggregator.New(sf.pool, aggregator.Config{InstanceID: "other", Logger: slog.New(slog.DiscardHandler), Clock: stub})
	require.NoError(t, err)
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	reg.Timeout = 200 * time.Millisecond
	otherFixture := &fixture{pool: sf.pool, agg: other, q: dbsqlc.New(), logs: sf.logs}
	w := otherFixture.newWait(t, reg)
	stub.Set(asleepUntil)
	select {
	case <-sf.firedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline registered by another replica was never fired")
	}
	require.Equal(t, vocab.WaitTimeout, sf.waitState(t, w.ID).Status)
	sf.mu.Lock()
	require.Less(t, sf.fired[0].Lateness, 300*time.Millisecond+500*time.Millisecond)
	sf.mu.Unlock()
}

// TestSweeperDoesNotSpinOnLockedDueWaits: a due wait that another transaction holds
// (another pod's sweep, an event being applied) is looked at again shortly, not in a
// tight loop.
func TestSweeperDoesNotSpinOnLockedDueWaits(t *testing.T) {
	t.Parallel()
	sf := newSweeperFixture(t, aggregator.Config{SweepMaxSleep: time.Minute})
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	reg.Timeout = 50 * time.Millisecond
	w := sf.newWait(t, reg)
	time.Sleep(100 * time.Millisecond)

	holder, err := sf.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	_, err = holder.Exec(t.Context(), `SELECT 1 FROM execution_wait_states WHERE id = $1 FOR UPDATE`, w.ID)
	require.NoError(t, err)

	before := sf.queries.n.Load()
	sf.run(t)
	time.Sleep(500 * time.Millisecond)
	spent := sf.queries.n.Load() - before
	// One look every 25 ms is about 20 rounds of 4 statements; a spin is thousands.
	require.Less(t, spent, int64(200), "statements in 500 ms while the only due wait was locked")
	require.Zero(t, sf.firedCount())

	require.NoError(t, holder.Rollback(t.Context()))
	select {
	case <-sf.firedCh:
	case <-time.After(5 * time.Second):
		t.Fatal("the wait was not fired once released")
	}
	require.Equal(t, vocab.WaitTimeout, sf.waitState(t, w.ID).Status)
}

// TestSweeperDrainsABurstOnce: a burst of deadlines several batches deep, due at once,
// is drained by the sweeper's workers together (drainDue), and every wait times out
// exactly once.
func TestSweeperDrainsABurstOnce(t *testing.T) {
	t.Parallel()
	stub := clock.NewStub(time.Now())
	sf := newSweeperFixture(t, aggregator.Config{SweepBatch: 8, SweepWorkers: 3, SweepMaxSleep: time.Minute, Clock: stub})
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	reg.Timeout = time.Minute
	const waitCount = 60
	ids := make(map[string]bool, waitCount)
	var deadline time.Time
	for range waitCount {
		w := sf.newWait(t, reg)
		ids[w.ID.String()] = true
		if d := sf.waitState(t, w.ID).NextDeadlineAt; d.After(deadline) {
			deadline = d
		}
	}
	sf.run(t)
	sf.rounds.Wait(t)
	stub.Set(deadline)
	require.Eventually(t, func() bool { return sf.firedCount() >= waitCount }, 20*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // a second decision of a wait would be reported by now

	sf.mu.Lock()
	defer sf.mu.Unlock()
	seen := map[string]int{}
	for _, e := range sf.fired {
		seen[e.WaitStateID]++
	}
	require.Len(t, seen, waitCount)
	for id, n := range seen {
		require.True(t, ids[id], "an unknown wait fired: %s", id)
		require.Equal(t, 1, n, "wait %s fired %d times", id, n)
	}
	var timedOut int
	require.NoError(t, sf.pool.QueryRow(t.Context(),
		`SELECT count(*) FROM execution_wait_states WHERE status = 'timeout' AND version = 2`).Scan(&timedOut))
	require.Equal(t, waitCount, timedOut)
}
