package aggregator_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
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
	r.OnTimeout, r.TraceParent = vocab.OnTimeoutContinueWithPartial, tp
	o.newWait(t, r)
	o.newWait(t, r)
	failing := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	failing.OnTimeout = vocab.OnTimeoutFail
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
		attribute.String("on_timeout", string(vocab.OnTimeoutContinueWithPartial)), attribute.String("outcome", "partial")))
	require.EqualValues(t, 1, o.counter(t, "rendezvous.timeouts",
		attribute.String("on_timeout", string(vocab.OnTimeoutFail)), attribute.String("outcome", "fail")))
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

// TestTelemetryReplicasAndStaleWaits: open waits are counted by the replica that
// registered them; an event wait open longer than StaleWaitAfter with no event is stale
// (one with an event, a young one and a timer are not); every replica's heartbeat age is
// exported from the database, a replica silent for over an hour is forgotten, and one
// that stops in order removes its own row.
func TestTelemetryReplicasAndStaleWaits(t *testing.T) {
	t.Parallel()
	o := setupObserved(t)
	ctx := t.Context()
	other, err := aggregator.New(o.pool, aggregator.Config{InstanceID: "other", Logger: slog.New(o.logs)})
	require.NoError(t, err)

	events := registration(vocab.StrategyAll, []aggregator.Expected{{Name: api, Source: "callback", Required: true}})
	old := o.newWait(t, events)
	oldWithEvent := o.newWait(t, events)
	o.newWait(t, events) // young
	timer := registration(vocab.StrategyAll, nil)
	timer.Timer = &aggregator.Timer{At: time.Now().Add(3 * time.Hour), Settings: map[string]any{"for": "3h"}}
	oldTimer := o.newWait(t, timer)
	byOther := (&fixture{pool: o.pool, agg: other, q: o.q, logs: o.logs}).newWait(t, events)
	for _, id := range []uuid.UUID{old.ID, oldWithEvent.ID, oldTimer.ID, byOther.ID} {
		_, err := o.pool.Exec(ctx, `UPDATE execution_wait_states SET created_at = now() - interval '2 hours' WHERE id = $1`, id)
		require.NoError(t, err)
	}
	_, err = o.pool.Exec(ctx, `UPDATE execution_wait_states SET received_events = '["api_response"]' WHERE id = $1`, oldWithEvent.ID)
	require.NoError(t, err)
	_, err = o.pool.Exec(ctx, `UPDATE execution_wait_states SET registered_by = NULL WHERE id = $1`, oldTimer.ID)
	require.NoError(t, err)

	// Heartbeats: this replica now, the other ten minutes ago, a third two hours ago.
	require.NoError(t, other.Heartbeat(ctx, time.Now()))
	_, err = o.pool.Exec(ctx, `UPDATE replica_heartbeats SET beat_at = now() - interval '10 minutes' WHERE instance_id = 'other'`)
	require.NoError(t, err)
	_, err = o.pool.Exec(ctx, `INSERT INTO replica_heartbeats (instance_id, started_at, beat_at) VALUES ('gone', now() - interval '3 hours', now() - interval '2 hours')`)
	require.NoError(t, err)
	require.NoError(t, o.agg.Heartbeat(ctx, time.Now()))

	g := o.replicaGauges(t)
	require.Equal(t, map[string]int64{"waiting/test": 3, "waiting/other": 1, "scheduled/unknown": 1}, g.byReplica)
	require.EqualValues(t, 2, g.stale, "the old event waits without an event: one per replica")
	require.Len(t, g.heartbeatAge, 2, "the replica silent for two hours is forgotten: %v", g.heartbeatAge)
	require.InDelta(t, 0, g.heartbeatAge["test"], 30)
	require.InDelta(t, 600, g.heartbeatAge["other"], 30)

	// A replica that has started has announced itself; one that stops in order takes
	// its row away.
	third, err := aggregator.New(o.pool, aggregator.Config{InstanceID: "third", Logger: slog.New(o.logs)})
	require.NoError(t, err)
	loop := third.Services()[2]
	require.Equal(t, "replica heartbeat", loop.Name())
	require.NoError(t, loop.Start(ctx))
	rows := func() (n int) {
		require.NoError(t, o.pool.QueryRow(ctx, `SELECT count(*) FROM replica_heartbeats WHERE instance_id = 'third'`).Scan(&n))
		return n
	}
	require.Equal(t, 1, rows())
	<-loop.Started()
	loop.Stop()
	require.Zero(t, rows())
}

type replicaGauges struct {
	byReplica    map[string]int64 // "status/replica" → open waits
	stale        int64
	heartbeatAge map[string]float64
}

func (o *observed) replicaGauges(t *testing.T) replicaGauges {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	g := replicaGauges{byReplica: map[string]int64{}, stale: -1, heartbeatAge: map[string]float64{}}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case "rendezvous.wait_states.by_replica":
				for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
					s, _ := dp.Attributes.Value("status")
					r, _ := dp.Attributes.Value("replica")
					g.byReplica[s.AsString()+"/"+r.AsString()] = dp.Value
				}
			case "rendezvous.wait_states.stale":
				g.stale = m.Data.(metricdata.Gauge[int64]).DataPoints[0].Value
			case "rendezvous.replica.heartbeat_age":
				for _, dp := range m.Data.(metricdata.Gauge[float64]).DataPoints {
					r, _ := dp.Attributes.Value("replica")
					g.heartbeatAge[r.AsString()] = dp.Value
				}
			}
		}
	}
	return g
}
