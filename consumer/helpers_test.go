package consumer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/server/readmodel"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/vocab"
)

func TestMain(m *testing.M) {
	// Up to three tests at once run replicas with their pools: the server is theirs.
	testkit.NeedsWholeServer()
	testkit.VerifyTestMain(m)
}

// waitTimeout bounds every wait for asynchronous progress. Records normally land within
// a few hundred milliseconds; a consumer-group rebalance takes a few heartbeats (3 s
// each), and -race on a loaded 2-core machine needs margin.
const waitTimeout = 45 * time.Second

// slots bounds the tests that run services at once: each holds PostgreSQL connections
// (the server's max_connections is shared with every other package's tests) and CPU.
var slots = make(chan struct{}, 3)

// limit takes a slot until the test (and all its cleanups) ends. Call it after
// t.Parallel. The subtests of a limited test must not be parallel: a parent waiting for
// parallel subtests keeps its slot while giving up its -parallel run slot, and tests
// blocked here hold run slots, so the subtests could never run.
func limit(t *testing.T) {
	slots <- struct{}{}
	t.Cleanup(func() { <-slots })
}

// testClient is an HTTP client whose idle connections are closed when the test ends.
func testClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

type obj = map[string]any

// env is the bundle of one test: a schema, an in-process Kafka cluster, a producer and
// admin client on it, the fake external service, and a direct pool for assertions.
type env struct {
	schema  dbtest.Schema
	cluster *kfake.Cluster
	prod    *kgo.Client
	adm     *kadm.Client
	fake    *fakeService
	direct  *pgxpool.Pool
	http    *http.Client
	logger  *slog.Logger
}

// setup builds the bundle; kopts add to the cluster's options (three partitions per
// auto-created topic by default).
func setup(t *testing.T, kopts ...kfake.Opt) *env {
	t.Helper()
	e := &env{schema: dbtest.NewSchema(t), fake: newFakeService(t), http: testClient(t), logger: testkit.Logger(t)}
	opts := append([]kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3)}, kopts...)
	var err error
	e.cluster, err = kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(e.cluster.Close)
	e.prod, err = kgo.NewClient(
		kgo.SeedBrokers(e.cluster.ListenAddrs()...),
		kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)
	require.NoError(t, err)
	t.Cleanup(e.prod.Close)
	e.adm = kadm.NewClient(e.prod)
	e.direct, err = db.Connect(context.Background(), e.schema.URL, 2)
	require.NoError(t, err)
	t.Cleanup(e.direct.Close)
	return e
}

// kafkaConfig is the consumer configuration of the tests: fast refresh and backoff.
func (e *env) kafkaConfig() consumer.Config {
	return consumer.Config{
		Brokers:                e.cluster.ListenAddrs(),
		AllowAutoTopicCreation: true,
		TopicRefresh:           200 * time.Millisecond,
		BackoffMin:             20 * time.Millisecond,
		BackoffMax:             200 * time.Millisecond,
	}
}

// svc is one running replica; stop cancels it and returns once Run has returned (it
// also runs when the test ends). signals are its consumer's, initialised.
type svc struct {
	*replica.Replica
	signals consumer.TestSignals
}

func (s *svc) stop() { s.Stop() }

// start runs a replica named id on the test's schema with a Kafka consumer; opts adjust
// its configuration before it starts.
func (e *env) start(t *testing.T, id string, opts ...func(*server.Config)) *svc {
	t.Helper()
	cfg := replica.Config(t, e.schema.URL, id)
	cfg.DBMaxConns, cfg.HTTPShutdown, cfg.Logger = 5, 5*time.Second, e.logger
	cfg.Kafka = e.kafkaConfig()
	cfg.Kafka.TestSignals.Committed.Init()
	cfg.Executor = executor.Config{
		PollInterval: 50 * time.Millisecond, Workers: 4, OutboxWorkers: 2,
		OutboxBackoffMin: 10 * time.Millisecond, OutboxBackoffMax: 100 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second, Outbound: cfg.Executor.Outbound,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return &svc{Replica: replica.Start(t, cfg), signals: cfg.Kafka.TestSignals}
}

// startProxied starts a replica as start does, reaching PostgreSQL through a proxy the
// test can cut.
func (e *env) startProxied(t *testing.T, id string) (*svc, *pgproxy.Proxy) {
	t.Helper()
	target, err := pgproxy.HostPort(e.schema.URL)
	require.NoError(t, err)
	proxy := dbtest.StartProxy(t, target)
	return e.start(t, id, func(c *server.Config) { c.DatabaseURL = pgproxy.ProxiedURL(e.schema.URL, proxy.Addr()) }), proxy
}

// noKafka runs a replica without a consumer.
func noKafka(c *server.Config) { c.Kafka = consumer.Config{} }

// ---- HTTP API ----

func (e *env) do(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	r := testkit.DoWith(t, e.http, method, url, body, nil)
	return r.Status, r.Raw
}

// definition is a wait_events node "wait" with the given data, followed by an http node
// "done" that posts the wait's whole output to the fake service: the continuation whose
// calls the tests count.
func (e *env) definition(name string, wait obj) obj {
	return obj{
		"name": name,
		"vars": obj{"svc": e.fake.URL},
		"nodes": []obj{
			{"id": "wait", "type": "wait_events", "data": wait},
			{"id": "done", "type": "http", "data": obj{
				"url": "@{_vars.svc}/done", "method": "POST",
				"body": obj{"execution_id": "@{_execution.id}", "wait": "@{nodes.wait.output}"},
			}},
		},
		"edges": []obj{{"source": "wait", "target": "done"}},
	}
}

// kafkaOnly is a wait for one record on topic, with default id fields.
func kafkaOnly(topic string) obj {
	return obj{"kafkaEvent": obj{"topic": topic}, "timeout": 600}
}

func (e *env) put(t *testing.T, s *svc, def obj) {
	t.Helper()
	status, body := e.do(t, http.MethodPut, "http://"+s.Addr()+"/api/v1/workflows/"+def["name"].(string), def)
	require.Contains(t, []int{http.StatusCreated, http.StatusOK}, status, string(body))
}

// startExecution starts an execution of the named workflow and returns its id.
func (e *env) startExecution(t *testing.T, s *svc, name string, input any) string {
	t.Helper()
	status, body := e.do(t, http.MethodPost, "http://"+s.Addr()+"/api/v1/workflows/"+name+"/executions", obj{"input": input})
	require.Equal(t, http.StatusCreated, status, string(body))
	var started struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &started))
	return started.ID
}

func (e *env) execution(t *testing.T, s *svc, id string) readmodel.ExecutionView {
	t.Helper()
	status, body := e.do(t, http.MethodGet, "http://"+s.Addr()+"/api/v1/executions/"+id, nil)
	require.Equal(t, http.StatusOK, status, string(body))
	var v readmodel.ExecutionView
	require.NoError(t, json.Unmarshal(body, &v))
	return v
}

// correlationID waits for the execution's wait and returns its correlation id.
func (e *env) correlationID(t *testing.T, s *svc, id string) string {
	t.Helper()
	var corr string
	require.Eventually(t, func() bool {
		v := e.execution(t, s, id)
		if len(v.Waits) == 0 {
			return false
		}
		corr = v.Waits[0].CorrelationID.String()
		return true
	}, waitTimeout, 20*time.Millisecond, "execution %s never registered its wait", id)
	return corr
}

// callback delivers an api_response and returns the status.
func (e *env) callback(t *testing.T, s *svc, execID, corrID string, payload obj) int {
	t.Helper()
	body := obj{"execution_id": execID, "correlation_id": corrID}
	for k, v := range payload {
		body[k] = v
	}
	status, raw := e.do(t, http.MethodPost, "http://"+s.Addr()+"/api/internal/callbacks/acme", body)
	t.Logf("callback for %s: %d %s", execID, status, raw)
	return status
}

// waitStatus polls until the execution has status want; another final status fails at
// once.
func (e *env) waitStatus(t *testing.T, s *svc, id string, want vocab.ExecutionStatus) readmodel.ExecutionView {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		v := e.execution(t, s, id)
		if v.Status == want {
			return v
		}
		if vocab.ExecFinished(v.Status) || time.Now().After(deadline) {
			raw, _ := json.MarshalIndent(v, "", "  ")
			require.Failf(t, "execution did not reach status", "want %s, have %s:\n%s", want, v.Status, raw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitOutput returns the output of the execution's node "wait".
func waitOutput(t *testing.T, v readmodel.ExecutionView) obj {
	t.Helper()
	for _, n := range v.Nodes {
		if n.ID == "wait" {
			var out obj
			require.NoError(t, json.Unmarshal(n.Output, &out), "output %s", n.Output)
			return out
		}
	}
	require.Fail(t, "no node wait", "%+v", v)
	return nil
}

// ---- Kafka ----

// record builds a record for topic/partition; value is marshalled unless it is []byte or
// a string.
func record(topic string, partition int32, value any, headers ...kgo.RecordHeader) *kgoRecord {
	var raw []byte
	switch v := value.(type) {
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			panic(err)
		}
	}
	return &kgo.Record{Topic: topic, Partition: partition, Value: raw, Headers: headers}
}

func header(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// ids is the usual record body: both ids plus extra fields.
func ids(execID, corrID string, extra obj) obj {
	out := obj{"execution_id": execID, "correlation_id": corrID}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func (e *env) produce(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, e.prod.ProduceSync(ctx, recs...).FirstErr())
}

// produceOneBatch produces recs, all to one partition, as one record batch: with
// flushing left to it, the producer may send the first record before the others are
// buffered, and a consumer may then fetch them apart.
func (e *env) produceOneBatch(t *testing.T, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing())
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	errs := make(chan error, len(recs))
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
	}
	require.NoError(t, cl.Flush(ctx))
	for range recs {
		require.NoError(t, <-errs)
	}
}

// committed returns the group's committed offsets of topic by partition (partitions
// without a commit are absent).
func (e *env) committed(t *testing.T, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := e.adm.FetchOffsets(ctx, consumer.GroupDefault)
	require.NoError(t, err)
	out := map[int32]int64{}
	for p, r := range resps[topic] {
		require.NoError(t, r.Err)
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out
}

// waitCommitted waits until s's consumer committed partition p of topic up to offset
// want (its Committed signal, set once the commit succeeded), then checks that the
// group's offset on the broker is exactly want; msg says what it means when it is not.
func (e *env) waitCommitted(t *testing.T, s *svc, topic string, p int32, want int64, msg ...any) {
	t.Helper()
	s.signals.Committed.WaitAtLeastFor(t, consumer.TopicPartition{Topic: topic, Partition: p}, want, waitTimeout)
	require.Equal(t, want, e.committed(t, topic)[p], msg...)
}

func (e *env) committedSum(t *testing.T, topic string) int64 {
	var sum int64
	for _, at := range e.committed(t, topic) {
		sum += at
	}
	return sum
}

// deadLetters reads every record of topic from the start until want arrived.
func (e *env) deadLetters(t *testing.T, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			require.Failf(t, "dead letters missing", "%d of %d on %s", len(out), want, topic)
		}
		out = append(out, fs.Records()...)
	}
	slices.SortFunc(out, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
	return out
}

// endOffset is how many records partition 0 of topic holds.
func (e *env) endOffset(t *testing.T, topic string) int64 {
	t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), topic)
	require.NoError(t, err)
	o, ok := ends.Lookup(topic, 0)
	require.True(t, ok, "no partition 0 of %s", topic)
	require.NoError(t, o.Err)
	return o.Offset
}

func headerValue(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// ---- database ----

func (e *env) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.direct.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// waits waits until n wait states exist and returns execution id -> correlation id.
func (e *env) waits(t *testing.T, n int) map[string]string {
	t.Helper()
	require.Eventually(t, func() bool {
		return e.count(t, "SELECT count(*) FROM execution_wait_states") >= n
	}, waitTimeout, 20*time.Millisecond, "wait states never reached %d", n)
	rows, err := e.direct.Query(context.Background(), "SELECT execution_id, correlation_id FROM execution_wait_states")
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var ex, corr uuid.UUID
		require.NoError(t, rows.Scan(&ex, &corr))
		out[ex.String()] = corr.String()
	}
	require.NoError(t, rows.Err())
	return out
}

// applied counts the wait states that hold a kafka_event.
func (e *env) applied(t *testing.T) int {
	return e.count(t, `SELECT count(*) FROM execution_wait_states WHERE received_events::jsonb @> '[{"name": "kafka_event"}]'`)
}

// requireResumedOnce checks that every wait state of the schema completed with exactly
// `events` recorded events, resumed once, and that each execution's continuation reached
// the fake service exactly once.
func (e *env) requireResumedOnce(t *testing.T, execIDs []string, events int) {
	t.Helper()
	if !assert.Eventually(t, func() bool {
		return e.count(t, "SELECT count(*) FROM executions WHERE status = 'completed'") == len(execIDs)
	}, waitTimeout, 50*time.Millisecond, "executions not all completed") {
		e.dumpState(t)
		t.FailNow()
	}
	require.Zero(t, e.count(t, `SELECT count(*) FROM execution_wait_states
		WHERE status <> 'completed' OR version <> $1 OR json_array_length(received_events) <> $2 OR resumed_at IS NULL`,
		1+events, events), "each wait records its events once, one version bump each, and is resumed")
	done := e.fake.doneBy()
	for _, id := range execIDs {
		require.Equal(t, 1, done[id], "continuation of %s ran %d times", id, done[id])
	}
}

// ---- the fake external service ----

// fakeService is the test kit's fake external service, answering the continuations'
// calls (POST /done) with {"ok":true}, with this package's views of those calls.
type fakeService struct{ *testkit.FakeService }

func newFakeService(t *testing.T) *fakeService {
	f := testkit.NewFakeService(t)
	f.On("/done", testkit.Always(testkit.OK))
	return &fakeService{f}
}

// doneBy counts the continuation calls per execution.
func (f *fakeService) doneBy() map[string]int { return f.CountBy("/done", "execution_id") }

// continuation returns the body of the execution's only continuation call, waiting for
// it.
func (f *fakeService) continuation(t *testing.T, execID string) obj {
	t.Helper()
	body, _ := f.firstDone(t, execID)
	return body
}

// firstDone waits for the execution's first continuation call and returns its body,
// decoded and as sent.
func (f *fakeService) firstDone(t *testing.T, execID string) (body obj, raw []byte) {
	t.Helper()
	r := f.Await(t, waitTimeout, "/done", func(r testkit.Request) bool { return r.Field("execution_id") == execID },
		"continuation for "+execID)
	return r.Body, r.Raw
}

// sumCounts adds the consumers' counts.
func sumCounts(ss ...*svc) map[string]int64 {
	out := map[string]int64{}
	for _, s := range ss {
		for k, v := range s.Consumer.Counts() {
			out[k] += v
		}
	}
	return out
}

// jsonOf round-trips v through JSON, so that it compares with decoded output.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	var out any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

type kgoRecord = kgo.Record

// dumpState logs a summary of the schema's executions, waits and queues, for failures.
func (e *env) dumpState(t *testing.T) {
	t.Helper()
	for _, q := range []string{
		"SELECT status, count(*) FROM executions GROUP BY 1",
		"SELECT status, version, json_array_length(received_events), resumed_at IS NOT NULL, count(*) FROM execution_wait_states GROUP BY 1, 2, 3, 4",
		"SELECT node_id, status, count(*) FROM node_executions GROUP BY 1, 2",
		"SELECT kind, node_id, attempt, claimed_by, visible_at > now(), count(*) FROM run_queue GROUP BY 1, 2, 3, 4, 5",
	} {
		rows, err := e.direct.Query(context.Background(), q)
		if err != nil {
			t.Logf("%s: %v", q, err)
			continue
		}
		for rows.Next() {
			vals, _ := rows.Values()
			t.Logf("%s: %v", q, vals)
		}
		rows.Close()
	}
}
