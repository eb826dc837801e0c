package aggregator_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// observed is an aggregator whose spans and metrics the test reads.
type observed struct {
	*fixture
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func setupObserved(t *testing.T) *observed {
	t.Helper()
	f := setup(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	agg, err := aggregator.New(f.pool, aggregator.Config{
		InstanceID: "test", Logger: slog.New(f.logs),
		TracerProvider: tp, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)
	f.agg = agg
	return &observed{fixture: f, spans: spans, reader: reader, tp: tp}
}

// counter returns the value of a counter's data point with exactly these attributes.
func (o *observed) counter(t *testing.T, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&want) {
					return dp.Value
				}
			}
		}
	}
	return -1 // no such series
}

// gauge returns the data points of an int64 gauge by their status attribute.
func (o *observed) gauges(t *testing.T) (open map[string]int64, lag float64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	open, lag = map[string]int64{}, -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "rendezvous.wait_states":
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					s, _ := dp.Attributes.Value("status")
					open[s.AsString()] = dp.Value
				}
			case "rendezvous.sweeper.lag":
				lag = m.Data.(metricdata.Gauge[float64]).DataPoints[0].Value
			}
		}
	}
	return open, lag
}

func (o *observed) span(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range o.spans.Ended() {
		if s.Name() == name {
			return s
		}
	}
	require.Failf(t, "no span", "%s", name)
	return nil
}

// TestTelemetryEvents: events join the wait's trace, linked to the trace they came with;
// counters count committed outcomes by source and reason; the gauges read the database.
func TestTelemetryEvents(t *testing.T) {
	t.Parallel()
	o := setupObserved(t)
	ctx := context.Background()

	// The span that registered the wait: its trace is the wait's.
	_, reg := o.tp.Tracer("test").Start(ctx, "node")
	r := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}, {Name: kafka, Source: "kafka", Topic: "orders", Required: true}})
	r.TraceParent = telemetry.TraceParent(trace.ContextWithSpan(ctx, reg))
	reg.End()
	w := o.newWait(t, r)

	open, lag := o.gauges(t)
	require.Equal(t, map[string]int64{"waiting": 1, "scheduled": 0}, open)
	require.Zero(t, lag)

	// The caller's own trace, as a callback's traceparent would announce it.
	_, caller := o.tp.Tracer("test").Start(ctx, "caller")
	caller.End()
	ev := w.event(api, apiPayload)
	ev.Link = caller.SpanContext()
	require.Equal(t, aggregator.Recorded, o.apply(t, ev).Outcome)
	require.Equal(t, aggregator.Duplicate, o.apply(t, ev).Outcome)
	require.Equal(t, aggregator.Completed, o.apply(t, w.event(kafka, kafkaPayload)).Outcome)
	other := w
	other.ExecutionID = o.newExecutionWithoutWait(t)
	require.Equal(t, aggregator.IDMismatch, o.apply(t, other.event(api, apiPayload)).Outcome)
	o.agg.RecordRejected(ctx, aggregator.SourceKafka, "poison")

	src := func(s string) attribute.KeyValue { return attribute.String("source", s) }
	require.EqualValues(t, 1, o.counter(t, "rendezvous.events.applied", src("callback"), attribute.String("outcome", "recorded")))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.events.applied", src("kafka"), attribute.String("outcome", "completed")))
	require.EqualValues(t, 0, o.counter(t, "rendezvous.events.applied", src("kafka"), attribute.String("outcome", "recorded")), "zero series exist from the start")
	require.EqualValues(t, 1, o.counter(t, "rendezvous.events.not_applied", src("callback"), attribute.String("reason", "duplicate")))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.events.not_applied", src("callback"), attribute.String("reason", "id_mismatch")))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.events.not_applied", src("kafka"), attribute.String("reason", "poison")))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.wait.first_event", attribute.String("event", api)))

	recorded := o.span(t, "rendezvous.wait.event api_response")
	require.Equal(t, reg.SpanContext().TraceID(), recorded.SpanContext().TraceID(), "the event joined the wait's trace")
	require.Equal(t, reg.SpanContext().SpanID(), recorded.Parent().SpanID())
	require.Len(t, recorded.Links(), 1)
	require.Equal(t, caller.SpanContext().TraceID(), recorded.Links()[0].SpanContext.TraceID(), "linked to the caller's trace")
	completing := o.span(t, "rendezvous.wait.event kafka_event")
	require.Equal(t, reg.SpanContext().TraceID(), completing.SpanContext().TraceID())
	require.Len(t, completing.Events(), 1, "the wait satisfied, on the span of the event that completed it")
	require.Equal(t, "rendezvous.wait.satisfied", completing.Events()[0].Name)
	require.Empty(t, recorded.Events(), "an event that only recorded did not satisfy the wait")

}

// TestTelemetryDeadlines: timeouts and a timer fire in their waits' traces, starting at
// their deadlines, and are counted by outcome, waits of one outcome in one sweep
// together; a due wait shows as sweeper lag.
func TestTelemetryDeadlines(t *testing.T) {
	t.Parallel()
	o := setupObserved(t)
	ctx := context.Background()
	_, reg := o.tp.Tracer("test").Start(ctx, "node")
	tp := telemetry.TraceParent(trace.ContextWithSpan(ctx, reg))
	reg.End()

	r := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	r.OnTimeout, r.TraceParent = aggregator.OnTimeoutContinueWithPartial, tp
	o.newWait(t, r)
	o.newWait(t, r)
	failing := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	failing.OnTimeout = aggregator.OnTimeoutFail
	o.newWait(t, failing)
	timer := registration(vocab.StrategyAll, nil)
	timer.Timer = &aggregator.Timer{At: time.Now().Add(time.Minute), Settings: map[string]any{"for": "1m"}}
	timer.TraceParent = tp
	o.newWait(t, timer)

	open, lag := o.gauges(t)
	require.Equal(t, map[string]int64{"waiting": 3, "scheduled": 1}, open)
	require.Zero(t, lag)

	n, err := o.agg.Sweep(ctx, time.Now().Add(10*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.EqualValues(t, 2, o.counter(t, "rendezvous.timeouts",
		attribute.String("on_timeout", string(aggregator.OnTimeoutContinueWithPartial)), attribute.String("outcome", "partial")))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.timeouts",
		attribute.String("on_timeout", string(aggregator.OnTimeoutFail)), attribute.String("outcome", "fail")))
	require.EqualValues(t, 2, o.counter(t, "rendezvous.nodes.warnings", attribute.String("reason", aggregator.WarningPartialData)))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.timers.fired"))
	for _, name := range []string{"rendezvous.wait.timeout", "rendezvous.wait.timer"} {
		s := o.span(t, name)
		require.Equal(t, reg.SpanContext().TraceID(), s.SpanContext().TraceID(), name)
		require.Equal(t, reg.SpanContext().SpanID(), s.Parent().SpanID(), name)
	}
}

// TestTelemetrySweeperLag: a due wait nobody swept shows as lag.
func TestTelemetrySweeperLag(t *testing.T) {
	t.Parallel()
	o := setupObserved(t)
	w := o.newWait(t, registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}}))
	_, err := o.pool.Exec(t.Context(), `UPDATE execution_wait_states SET next_deadline_at = now() - interval '2 hours' WHERE id = $1`, w.ID)
	require.NoError(t, err)
	_, lag := o.gauges(t)
	require.Greater(t, lag, (2*time.Hour).Seconds()-60)
}
