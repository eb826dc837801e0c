package executor_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/internal/testsignal"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

func TestMain(m *testing.M) {
	testkit.VerifyTestMain(m)
}

// waitTimeout bounds every wait for asynchronous progress. Work normally lands within
// a few poll intervals; the margin is for -race on a loaded 2-core machine.
const waitTimeout = 20 * time.Second

// config is an executor configuration for tests: fast polling and backoff.
func config(t *testing.T, instance string) executor.Config {
	return executor.Config{
		InstanceID:       instance,
		PollInterval:     50 * time.Millisecond,
		OutboxBackoffMin: 10 * time.Millisecond,
		OutboxBackoffMax: 50 * time.Millisecond,
		ShutdownTimeout:  10 * time.Second,
		// The fake service listens on loopback.
		Outbound: outbound.ClientConfig{Allow: []string{"127.0.0.1"}},
		Logger:   testkit.Logger(t),
	}
}

// pod is one executor (with its aggregator) on a pool, as one replica would run it.
type pod struct {
	pool *pgxpool.Pool
	agg  *aggregator.Aggregator
	ex   *executor.Executor
}

func newPod(t *testing.T, pool *pgxpool.Pool, cfg executor.Config) *pod {
	t.Helper()
	ex, err := executor.New(pool, aggregator.Config{TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider}, cfg)
	require.NoError(t, err)
	return &pod{pool: pool, agg: ex.Aggregator(), ex: ex}
}

// run starts ex.Run and the aggregator's deadline sweeper in goroutines, as a replica
// runs them. The returned stop cancels both and returns once both have returned; it
// also runs when the test ends.
func (p *pod) run(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	swept := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.ex.Run(ctx)
	}()
	go func() {
		defer close(swept)
		p.agg.RunSweeper(ctx)
	}()
	stop = sync.OnceFunc(func() { cancel(); <-done; <-swept })
	t.Cleanup(stop)
	return stop
}

// setup is the common bundle: a fresh schema, a fake external service, and one pod
// "a" (not running yet). opts adjust the pod's configuration.
type harness struct {
	*pod
	fake *fakeService
	// attempts is the pod's OutboxAttempted signal, live when an option initialised it
	// (observeOutbox).
	attempts testsignal.Signal[executor.OutboxAttempt]
}

// observeOutbox makes the pod signal each attempt of a correlated call (h.attempts).
func observeOutbox(c *executor.Config) { c.TestSignals.OutboxAttempted.Init() }

func setup(t *testing.T, opts ...func(*executor.Config)) *harness {
	t.Helper()
	pool := dbtest.NewPool(t)
	fake := newFakeService(t)
	cfg := config(t, "a")
	for _, o := range opts {
		o(&cfg)
	}
	return &harness{pod: newPod(t, pool, cfg), fake: fake, attempts: cfg.TestSignals.OutboxAttempted}
}

// twoPods starts two pods, a and b, on a schema of their own, each with its own pool of
// 12 connections, 8 workers and outboxWorkers outbox workers, as two replicas run; the
// harness drives pod a. Neither pod runs until the test calls run.
func twoPods(t *testing.T, outboxWorkers int) (*harness, []*pod) {
	t.Helper()
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	var pods []*pod
	for _, instance := range []string{"a", "b"} {
		pool, err := db.Connect(context.Background(), schema.URL, 12)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		cfg := config(t, instance)
		cfg.Workers, cfg.OutboxWorkers = 8, outboxWorkers
		pods = append(pods, newPod(t, pool, cfg))
	}
	return &harness{pod: pods[0], fake: fake}, pods
}

// ---- workflows ----

type obj = map[string]any

func node(id, typ string, data obj) obj { return obj{"id": id, "type": typ, "data": data} }

func edge(source, target, condition string) obj {
	e := obj{"source": source, "target": target}
	if condition != "" {
		e["condition"] = condition
	}
	return e
}

// workflow builds a definition; vars.svc is the fake service's URL.
func (h *harness) workflow(name string, nodes []obj, edges []obj) obj {
	if edges == nil {
		edges = []obj{}
	}
	return obj{"name": name, "vars": obj{"svc": h.fake.URL}, "nodes": nodes, "edges": edges}
}

func (p *pod) put(t *testing.T, def obj) string {
	t.Helper()
	raw, err := json.Marshal(def)
	require.NoError(t, err)
	name := def["name"].(string)
	_, err = p.ex.PutWorkflow(context.Background(), name, raw)
	require.NoError(t, err)
	return name
}

func (p *pod) start(t *testing.T, name string, input any) uuid.UUID {
	t.Helper()
	var raw json.RawMessage
	if input != nil {
		var err error
		raw, err = json.Marshal(input)
		require.NoError(t, err)
	}
	st, err := p.ex.StartExecution(context.Background(), name, raw)
	require.NoError(t, err)
	return st.ID
}

// ---- observing executions ----

// waitStatus polls until the execution has status want; reaching another final status
// fails at once, with the execution in the message.
func (p *pod) waitStatus(t *testing.T, id uuid.UUID, want vocab.ExecutionStatus) *readmodel.ExecutionView {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		v, err := readmodel.New(p.pool).Execution(context.Background(), id)
		require.NoError(t, err)
		if v.Status == want {
			return v
		}
		if (vocab.ExecFinished(v.Status) && v.Status != want) || time.Now().After(deadline) {
			require.Failf(t, "execution did not reach status", "want %s, have %s:\n%s", want, v.Status, dump(v))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *pod) view(t *testing.T, id uuid.UUID) *readmodel.ExecutionView {
	t.Helper()
	v, err := readmodel.New(p.pool).Execution(context.Background(), id)
	require.NoError(t, err)
	return v
}

func dump(v any) string {
	raw, _ := json.MarshalIndent(v, "", "  ")
	return string(raw)
}

func nodeOf(t *testing.T, v *readmodel.ExecutionView, id string) readmodel.NodeView {
	t.Helper()
	for _, n := range v.Nodes {
		if n.ID == id {
			return n
		}
	}
	require.Failf(t, "no such node", "%s in\n%s", id, dump(v))
	return readmodel.NodeView{}
}

func waitOf(t *testing.T, v *readmodel.ExecutionView, nodeID string) readmodel.WaitView {
	t.Helper()
	for _, w := range v.Waits {
		if w.NodeID == nodeID {
			return w
		}
	}
	require.Failf(t, "no wait state", "for node %s in\n%s", nodeID, dump(v))
	return readmodel.WaitView{}
}

func output(t *testing.T, n readmodel.NodeView) obj {
	t.Helper()
	var out obj
	require.NoError(t, json.Unmarshal(n.Output, &out), "output of %s: %s", n.ID, n.Output)
	return out
}

func errText(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// count runs a query returning one integer.
func (p *pod) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, p.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func (p *pod) exec(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	tag, err := p.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
	return tag.RowsAffected()
}

func (p *pod) apply(t *testing.T, execID, corrID uuid.UUID, name string, payload any) aggregator.Outcome {
	t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	src := aggregator.Source{Kind: "callback", Service: "fake"}
	if name == aggregator.EventKafka {
		src = aggregator.Source{Kind: "kafka", Topic: "orders"}
	}
	res, err := p.agg.Apply(context.Background(), aggregator.Event{
		ExecutionID: execID, CorrelationID: corrID, Name: name, Payload: raw, Source: src,
	})
	require.NoError(t, err)
	return res.Outcome
}

// applyQueued decides a Kafka event through ApplyTx, whose continuation goes to the run
// queue (Apply's batches continue the execution in their own transaction): for tests of
// the queued continuation.
func (p *pod) applyQueued(t *testing.T, execID, corrID uuid.UUID, payload any) aggregator.Outcome {
	t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	var res aggregator.Result
	require.NoError(t, db.Tx(context.Background(), p.pool, func(tx pgx.Tx) error {
		res, err = p.agg.ApplyTx(context.Background(), tx, aggregator.Event{
			ExecutionID: execID, CorrelationID: corrID, Name: aggregator.EventKafka, Payload: raw,
			Source: aggregator.Source{Kind: "kafka", Topic: "orders"},
		})
		return err
	}))
	return res.Outcome
}

// applyBatch decides a Kafka event through ApplyBatch in a transaction of its own, as the
// consumer decides a batch of records.
func (p *pod) applyBatch(t *testing.T, execID, corrID uuid.UUID, payload any) aggregator.Outcome {
	t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(t, err)
	var res []aggregator.Result
	require.NoError(t, db.Tx(context.Background(), p.pool, func(tx pgx.Tx) error {
		res, err = p.agg.ApplyBatch(context.Background(), tx, []aggregator.Event{{
			ExecutionID: execID, CorrelationID: corrID, Name: aggregator.EventKafka, Payload: raw,
			Source: aggregator.Source{Kind: "kafka", Topic: "orders"},
		}})
		return err
	}))
	require.Len(t, res, 1)
	return res[0].Outcome
}

// ---- the fake external service ----

// recorded is a request the fake service received.
type recorded = testkit.Request

// reply is how a route of the fake service answers.
type reply struct {
	status int
	body   string
	header map[string]string
	// delay holds the answer back (or until the client gives up).
	delay time.Duration
}

// fakeService is the test kit's fake external service, with routes written as this
// package's tests write them: a route gets the 1-based number of the request on its
// path; the default answer is 202 with {}.
type fakeService struct{ *testkit.FakeService }

func newFakeService(t *testing.T) *fakeService { return &fakeService{testkit.NewFakeService(t)} }

func (f *fakeService) on(path string, route func(n int, r recorded) reply) {
	f.On(path, func(n int, r testkit.Request) testkit.Reply {
		rep := route(n, r)
		return testkit.Reply{Status: rep.status, Body: rep.body, Header: rep.header, Delay: rep.delay}
	})
}

func (f *fakeService) requests(path string) []recorded { return f.Requests(path) }

func (f *fakeService) count(path string) int { return f.Count(path) }

// countBy counts the requests on path per value of a body field.
func (f *fakeService) countBy(path, field string) map[string]int { return f.CountBy(path, field) }

// eventually waits for cond, with the standard timeout.
func eventually(t *testing.T, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, waitTimeout, 20*time.Millisecond, msgAndArgs...)
}

// stays checks that cond holds during d (sampled), e.g. that nothing is sent twice.
func stays(t *testing.T, d time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Never(t, func() bool { return !cond() }, d, 20*time.Millisecond, msgAndArgs...)
}
