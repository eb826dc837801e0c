package consumer_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/pgproxy"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// telTopic is the topic the telemetry tests consume (one partition).
const telTopic = "tel"

// telEnv is a consumer and an aggregator recording into an in-memory tracer provider
// and a manual metric reader, without the rest of a replica.
type telEnv struct {
	*env
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	agg    *aggregator.Aggregator
	cons   *consumer.Consumer
	logs   *logCapture
}

// setupTelemetry starts a consumer of telTopic, on the test schema or on the URL proxied
// returns, whose aggregator works on the schema directly; both report to the same
// providers. tweak, when set, adjusts the consumer's configuration.
func setupTelemetry(t *testing.T, proxied func(e *env) string, tweak func(*consumer.Config)) *telEnv {
	t.Helper()
	e := setup(t, kfake.DefaultNumPartitions(1))
	te := &telEnv{env: e, spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), logs: &logCapture{logStore: &logStore{}}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(te.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(te.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	logger := slog.New(telemetry.LogHandler(te.logs))

	var err error
	te.agg, err = aggregator.New(e.direct, aggregator.Config{InstanceID: "pod-a", Logger: logger, TracerProvider: tp, MeterProvider: mp})
	require.NoError(t, err)
	_, err = e.direct.Exec(context.Background(), `INSERT INTO workflows (name, version, definition) VALUES ('tel', 1, '{"nodes":[{"id":"wait","type":"wait_events"}]}')`)
	require.NoError(t, err)

	url := e.schema.URL
	if proxied != nil {
		url = proxied(e)
	}
	pool, err := db.Connect(context.Background(), url, 4)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg := e.kafkaConfig()
	cfg.ClientID, cfg.Topics, cfg.Logger = "pod-a", []string{telTopic}, logger
	cfg.TracerProvider, cfg.MeterProvider = tp, mp
	if tweak != nil {
		tweak(&cfg)
	}
	te.cons, err = consumer.New(pool, te.agg, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = te.cons.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return te
}

// registerWait registers a Kafka wait for node "wait" of a new execution, in the trace
// traceParent names.
func (te *telEnv) registerWait(t *testing.T, traceParent string) (execID, corrID uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	execID, corrID = uuid.New(), uuid.New()
	err := pgx.BeginFunc(ctx, te.direct, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO executions (id, workflow_name, workflow_version, status, input) VALUES ($1, 'tel', 1, 'waiting', '{}')`, execID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO node_execution_rows (execution_id, node_id, status, attempts, started_at) VALUES ($1, 'wait', 'waiting_for_events', 1, now())`, execID); err != nil {
			return err
		}
		_, err := te.agg.Register(ctx, tx, aggregator.Registration{
			ExecutionID: execID, CorrelationID: corrID, NodeID: "wait", Strategy: vocab.StrategyAll,
			Expected: []aggregator.Expected{{Name: aggregator.EventKafka, Source: "kafka", Topic: telTopic, Required: true}}, Timeout: 10 * time.Minute, OnTimeout: "fail",
			TraceParent: traceParent,
		})
		return err
	})
	require.NoError(t, err)
	return execID, corrID
}

// span waits for an ended span that matches.
func (te *telEnv) span(t *testing.T, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		i := slices.IndexFunc(te.spans.Ended(), match)
		if i < 0 {
			return false
		}
		found = te.spans.Ended()[i]
		return true
	}, waitTimeout, 20*time.Millisecond, "no span %s; ended: %v", what, spanNames(te.spans.Ended()))
	return found
}

func spanNames(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// metric waits until the int64 counter or gauge name has a data point with at least the
// attributes want and the value check accepts, and returns that value.
func (te *telEnv) metric(t *testing.T, name string, want map[string]any, check func(int64) bool) int64 {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var rm metricdata.ResourceMetrics
		// A failing callback (the aggregator's gauges read the database) still yields
		// every other instrument's data; it must not hide them.
		collectErr := te.reader.Collect(context.Background(), &rm)
		var seen []string
		for _, dp := range dataPoints(rm, name) {
			if hasAttrs(dp.Attributes, want) && check(dp.Value) {
				return dp.Value
			}
			seen = append(seen, fmt.Sprintf("%v=%d", dp.Attributes.ToSlice(), dp.Value))
		}
		if time.Now().After(deadline) {
			require.Failf(t, "metric not reached", "%s%v: data points %v (collect: %v)", name, want, seen, collectErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dataPoints(rm metricdata.ResourceMetrics, name string) []metricdata.DataPoint[int64] {
	var out []metricdata.DataPoint[int64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				out = append(out, d.DataPoints...)
			case metricdata.Gauge[int64]:
				out = append(out, d.DataPoints...)
			}
		}
	}
	return out
}

func hasAttrs(set attribute.Set, want map[string]any) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || fmt.Sprint(got.AsInterface()) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

func is(n int64) func(int64) bool      { return func(v int64) bool { return v == n } }
func atLeast(n int64) func(int64) bool { return func(v int64) bool { return v >= n } }

// attrOf is a span's attributes by key.
func attrOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// traceparent formats a sampled W3C traceparent.
func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
}

// newSpanContext is a remote, sampled span context with random ids.
func newSpanContext(t *testing.T) trace.SpanContext {
	t.Helper()
	a, b := uuid.New(), uuid.New()
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], a[:])
	copy(sid[:], b[:8])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	require.True(t, sc.IsValid())
	return sc
}

// TestTelemetryKafkaEvent follows one record into a wait's trace: the record announces
// its producer's span in a traceparent header; the aggregator's event span is in the
// wait's trace and links to the producer, and is the record's only span. The events and
// lag metrics count it, and the log line about it names the wait and carries the
// producer's trace.
func TestTelemetryKafkaEvent(t *testing.T) {
	t.Parallel()
	limit(t)
	te := setupTelemetry(t, nil, nil)
	waitSC, producerSC := newSpanContext(t), newSpanContext(t)
	execID, corrID := te.registerWait(t, traceparent(waitSC))

	te.produce(t, record(telTopic, 0, ids(execID.String(), corrID.String(), obj{"status": "shipped"}), header("traceparent", traceparent(producerSC))))

	event := te.span(t, "rendezvous.wait.event kafka_event", func(s sdktrace.ReadOnlySpan) bool {
		return s.Name() == "rendezvous.wait.event kafka_event"
	})
	require.Equal(t, waitSC.TraceID(), event.SpanContext().TraceID(), "the event span is in the wait's trace")
	require.Equal(t, waitSC.SpanID(), event.Parent().SpanID())
	require.Len(t, event.Links(), 1)
	link := event.Links()[0].SpanContext
	require.Equal(t, producerSC.TraceID(), link.TraceID(), "linked to the producer's span")
	require.Equal(t, producerSC.SpanID(), link.SpanID())
	require.Equal(t, execID.String(), attrOf(event)["rendezvous.execution_id"].AsString())
	for _, s := range te.spans.Ended() {
		require.NotEqual(t, trace.SpanKindConsumer, s.SpanKind(), "no span of the Kafka client for a fetched record: %s", s.Name())
	}

	te.metric(t, "rendezvous.events.applied", map[string]any{"source": "kafka", "outcome": "completed"}, is(1))
	// One record, consumed: the high watermark (1) less the next offset (0 + 1).
	te.metric(t, "rendezvous.kafka.consumer.lag", map[string]any{"topic": telTopic, "partition": 0}, is(0))
	require.Equal(t, int64(1), te.cons.Counts()["completed"])

	line := te.logs.wait(t, "kafka event completed a wait")
	require.Equal(t, map[string]string{
		"execution_id": execID.String(), "correlation_id": corrID.String(), "node_id": "wait", "instance_id": "pod-a",
		"trace_id": producerSC.TraceID().String(), "span_id": producerSC.SpanID().String(),
	}, line.pick("execution_id", "correlation_id", "node_id", "instance_id", "trace_id", "span_id"))
	// A step of an execution is logged at debug: at the default level (info) a replica
	// writes no line per record.
	require.Equal(t, slog.LevelDebug, line.level)
	for _, l := range te.logs.all() {
		if l.level >= slog.LevelInfo {
			require.NotEqual(t, execID.String(), l.attrs["execution_id"], "%s %q logged for one record", l.level, l.msg)
		}
	}
}

// TestTelemetryPoisonRecord dead-letters a record that is not JSON: it is counted as a
// dead letter (by source topic and reason category) and as an event not applied for
// reason poison; its dead letter is published under the record's trace; the consumer's
// own counts still see it.
func TestTelemetryPoisonRecord(t *testing.T) {
	t.Parallel()
	limit(t)
	te := setupTelemetry(t, nil, nil)
	execID, corrID := te.registerWait(t, "")
	producerSC := newSpanContext(t)

	te.produce(t, record(telTopic, 0, `{"oops`, header("traceparent", traceparent(producerSC)),
		header("execution_id", execID.String()), header("correlation_id", corrID.String())))

	te.metric(t, "rendezvous.dead_letter.records", map[string]any{"topic": telTopic, "reason": "not_json"}, is(1))
	te.metric(t, "rendezvous.events.not_applied", map[string]any{"source": "kafka", "reason": "poison"}, is(1))
	require.Equal(t, int64(1), te.cons.Counts()[string(consumer.ReasonPoison)])

	publish := te.span(t, "kotel publish of the dead letter", func(s sdktrace.ReadOnlySpan) bool {
		return s.Name() == telTopic+".dlq publish"
	})
	require.Equal(t, producerSC.TraceID(), publish.SpanContext().TraceID(), "the dead letter continues the record's trace")
	dl := te.deadLetters(t, telTopic+".dlq", 1)[0]
	tp, ok := headerValue(dl, "traceparent")
	require.True(t, ok)
	require.Equal(t, traceparent(publish.SpanContext()), tp, "the dead letter announces its publish span")

	line := te.logs.wait(t, "poison record dead-lettered")
	require.Equal(t, map[string]string{
		"execution_id": execID.String(), "correlation_id": corrID.String(), "instance_id": "pod-a",
		"trace_id": producerSC.TraceID().String(),
	}, line.pick("execution_id", "correlation_id", "instance_id", "trace_id"))
	for _, n := range spanNames(te.spans.Ended()) {
		require.NotContains(t, n, "rendezvous.wait.event", "a poison record is not an event of the wait")
	}
}

// TestTelemetryDatabaseErrors cuts the consumer off PostgreSQL while a record waits to
// be applied: the failed attempts are counted as database errors of component consumer,
// and the record applies once the database is back.
func TestTelemetryDatabaseErrors(t *testing.T) {
	t.Parallel()
	limit(t)
	var proxy *pgproxy.Proxy
	te := setupTelemetry(t, func(e *env) string {
		target, err := pgproxy.HostPort(e.schema.URL)
		require.NoError(t, err)
		proxy = dbtest.StartProxy(t, target)
		return pgproxy.ProxiedURL(e.schema.URL, proxy.Addr())
	}, func(c *consumer.Config) {
		c.TopicRefresh = time.Hour // only applying the record reads the database during the cut
	})
	exec1, corr1 := te.registerWait(t, "")
	exec2, corr2 := te.registerWait(t, "")
	completed := map[string]any{"source": "kafka", "outcome": "completed"}
	// A first record shows the consumer subscribed before the cut.
	te.produce(t, record(telTopic, 0, ids(exec1.String(), corr1.String(), nil)))
	te.metric(t, "rendezvous.events.applied", completed, is(1))
	var rm metricdata.ResourceMetrics
	_ = te.reader.Collect(context.Background(), &rm)
	for _, dp := range dataPoints(rm, telemetry.DatabaseErrorsName) {
		require.False(t, hasAttrs(dp.Attributes, map[string]any{"component": "consumer"}), "no database error before the cut")
	}

	proxy.Cut()
	te.produce(t, record(telTopic, 0, ids(exec2.String(), corr2.String(), nil)))

	te.metric(t, telemetry.DatabaseErrorsName, map[string]any{"component": "consumer"}, atLeast(2))
	require.Error(t, te.cons.Ready(context.Background()), "the consumer reports the failing database")
	proxy.Restore()
	te.metric(t, "rendezvous.events.applied", completed, is(2))
}

// logCapture keeps every log record, with its attributes flattened to strings.
type logCapture struct {
	*logStore
	attrs []slog.Attr // from WithAttrs
}

type logStore struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l logLine) pick(keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		if v, ok := l.attrs[k]; ok {
			out[k] = v
		}
	}
	return out
}

func (c *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (c *logCapture) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range c.attrs {
		line.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, line)
	return nil
}

func (c *logCapture) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logCapture{logStore: c.logStore, attrs: append(slices.Clip(c.attrs), attrs...)}
}

func (c *logCapture) WithGroup(string) slog.Handler { return c }

// all returns the lines logged so far.
func (c *logCapture) all() []logLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

// wait returns the first line logged with msg, waiting for it.
func (c *logCapture) wait(t *testing.T, msg string) logLine {
	t.Helper()
	var found logLine
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.IndexFunc(c.lines, func(l logLine) bool { return l.msg == msg })
		if i < 0 {
			return false
		}
		found = c.lines[i]
		return true
	}, waitTimeout, 20*time.Millisecond, "no log line %q", msg)
	return found
}
