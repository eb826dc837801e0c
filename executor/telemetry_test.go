package executor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/testkit"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// observed is what a pod's telemetry recorded: ended spans, metrics on demand, and
// log lines (JSON, through telemetry.LogHandler).
type observed struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	logs   *logLines
}

// withTelemetry returns providers that record in memory, as a config option for setup;
// newPod hands the same providers to the pod's aggregator.
func withTelemetry(t *testing.T) (*observed, func(*executor.Config)) {
	o := &observed{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader(), logs: &logLines{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return o, func(c *executor.Config) {
		c.TracerProvider, c.MeterProvider = tp, mp
		c.Logger = slog.New(telemetry.LogHandler(slog.NewJSONHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
}

// span waits for an ended span named name about node (its rendezvous.node_id).
func (o *observed) span(t *testing.T, name, node string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	eventually(t, func() bool {
		found = nil
		for _, s := range o.spans.Ended() {
			if s.Name() == name && attr(s, "rendezvous.node_id") == node {
				found = s
				return true
			}
		}
		return false
	}, "span %s of node %s", name, node)
	return found
}

// spansNamed returns the ended spans named name.
func (o *observed) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// traceparent is the W3C header a span announces downstream.
func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// collect reads the metrics of the pod's executor and aggregator; the gauges' callbacks
// must not fail.
func (o *observed) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	return rm
}

func metricNamed(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	require.Failf(t, "metric not recorded", "%s", name)
	return metricdata.Metrics{}
}

// counter returns the value of an int64 counter for exactly these attributes: 0 when
// nothing was counted (no data point, or no such counter yet).
func counter(rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	want := attribute.NewSet(attrs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				if dp.Attributes.Equals(&want) {
					return dp.Value
				}
			}
		}
	}
	return 0
}

// histogram returns the data point of a float64 histogram for exactly these attributes
// (zero when there is none).
func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	t.Helper()
	h, ok := metricNamed(t, rm, name).Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is not a float64 histogram", name)
	want := attribute.NewSet(attrs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

// gauge returns the value of an int64 gauge for exactly these attributes.
func gauge(t *testing.T, rm metricdata.ResourceMetrics, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	g, ok := metricNamed(t, rm, name).Data.(metricdata.Gauge[int64])
	require.True(t, ok, "%s is not an int64 gauge", name)
	want := attribute.NewSet(attrs...)
	for _, dp := range g.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value
		}
	}
	require.Failf(t, "no data point", "%s %v in %+v", name, attrs, g.DataPoints)
	return 0
}

// logLines collects JSON log lines.
type logLines struct{ testkit.Buffer }

// find returns the lines with message msg.
func (l *logLines) find(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(l.Bytes(), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		require.NoError(t, json.Unmarshal(line, &rec), "%s", line)
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestTraceFollowsWait: one trace per wait, across the outbound call (whose request
// carries its traceparent), the event (linked to the context it arrived with), the
// satisfied strategy and the continuation; the node after it traces its own request;
// log lines about the wait carry its trace; metrics count the call, the wait and the
// queue.
func TestTraceFollowsWait(t *testing.T) {
	t.Parallel()
	o, opt := withTelemetry(t)
	h := setup(t, opt)
	name := h.put(t, h.workflow("traced", []obj{
		node("wait", "wait_events", obj{
			"apiCall":             obj{"url": "@{_vars.svc}/process", "body": obj{"order": "@{_trigger.order}"}},
			"aggregationStrategy": "all",
		}),
		node("notify", "http", obj{"url": "@{_vars.svc}/done", "method": "POST"}),
	}, []obj{edge("wait", "notify", "")}))
	h.run(t)
	id := h.start(t, name, obj{"order": 1})

	ws := waitOf(t, h.waitStatus(t, id, "waiting"), "wait")
	run := o.span(t, "rendezvous.node.run", "wait")
	traceID := run.SpanContext().TraceID()
	require.Equal(t, id.String(), attr(run, "rendezvous.execution_id"))
	require.Equal(t, "wait_events", attr(run, "rendezvous.node_type"))
	require.Equal(t, "waiting", attr(run, "rendezvous.outcome"))

	// The call is a client span under the node run, and the service got its traceparent.
	call := o.span(t, "rendezvous.wait.call", "wait")
	require.Equal(t, trace.SpanKindClient, call.SpanKind())
	require.Equal(t, traceID, call.SpanContext().TraceID())
	require.Equal(t, run.SpanContext().SpanID(), call.Parent().SpanID())
	require.Equal(t, http.MethodPost, attr(call, "http.request.method"))
	require.Equal(t, "127.0.0.1", attr(call, "server.address"))
	require.Equal(t, "1", attr(call, "rendezvous.attempt"))
	require.Equal(t, ws.CorrelationID.String(), attr(call, "rendezvous.correlation_id"))
	reqs := h.fake.requests("/process")
	require.Len(t, reqs, 1)
	require.Equal(t, traceparent(call.SpanContext()), reqs[0].Header.Get("traceparent"))

	// The event arrives with a trace of its own (the callback's), linked from the wait's.
	arrived := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0xca, 0x11}, SpanID: trace.SpanID{0xba, 0xc4}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	res, err := h.agg.Apply(context.Background(), aggregator.Event{
		ExecutionID: id, CorrelationID: ws.CorrelationID, Name: aggregator.EventAPIResponse,
		Payload: json.RawMessage(`{"result":"approved"}`), Source: aggregator.Source{Kind: "callback", Service: "fake"},
		Link: arrived,
	})
	require.NoError(t, err)
	require.Equal(t, aggregator.Completed, res.Outcome)
	h.waitStatus(t, id, "completed")

	event := o.span(t, "rendezvous.wait.event api_response", "wait")
	require.Equal(t, traceID, event.SpanContext().TraceID())
	require.Len(t, event.Links(), 1)
	require.Equal(t, arrived.TraceID(), event.Links()[0].SpanContext.TraceID())
	require.Equal(t, arrived.SpanID(), event.Links()[0].SpanContext.SpanID())
	require.Len(t, event.Events(), 1)
	require.Equal(t, "rendezvous.wait.satisfied", event.Events()[0].Name, "the wait satisfied, on the span of the event that completed it")

	resume := o.span(t, "rendezvous.wait.resume", "wait")
	require.Equal(t, traceID, resume.SpanContext().TraceID())
	require.Equal(t, run.SpanContext().SpanID(), resume.Parent().SpanID())
	require.Equal(t, string(vocab.WaitCompleted), attr(resume, "rendezvous.outcome"))
	require.Equal(t, id.String(), attr(resume, "rendezvous.execution_id"))
	require.Equal(t, codes.Unset, resume.Status().Code)

	// The next node runs in a trace of its own and hands it to the service it calls.
	notify := o.span(t, "rendezvous.node.run", "notify")
	require.Equal(t, "http", attr(notify, "rendezvous.node_type"))
	require.Equal(t, "completed", attr(notify, "rendezvous.outcome"))
	eventually(t, func() bool { return h.fake.count("/done") == 1 })
	require.Equal(t, traceparent(notify.SpanContext()), h.fake.requests("/done")[0].Header.Get("traceparent"))

	// Lines about the wait join its trace, and name it.
	for _, msg := range []string{"waiting for events", "correlated call sent", "execution resumed"} {
		lines := o.logs.find(t, msg)
		require.Len(t, lines, 1, msg)
		require.Equal(t, traceID.String(), lines[0]["trace_id"], msg)
		require.Equal(t, id.String(), lines[0]["execution_id"], msg)
		require.Equal(t, "wait", lines[0]["node_id"], msg)
		require.Equal(t, "a", lines[0]["instance_id"], msg)
	}
	require.Equal(t, ws.CorrelationID.String(), o.logs.find(t, "correlated call sent")[0]["correlation_id"])

	rm := o.collect(t)
	ok := attribute.String("result", "ok")
	require.EqualValues(t, 1, counter(rm, "rendezvous.outbound.calls", ok))
	require.EqualValues(t, 0, counter(rm, "rendezvous.outbound.calls", attribute.String("result", "retry")))
	require.EqualValues(t, 1, histogram(t, rm, "rendezvous.outbound.call.duration", ok).Count)
	waited := histogram(t, rm, "rendezvous.wait.duration",
		attribute.String("workflow", name), attribute.String("strategy", "all"), attribute.String("outcome", "completed"))
	require.EqualValues(t, 1, waited.Count)
	require.Positive(t, waited.Sum)
	// The wait registered in the start's transaction and the continuation ran in the
	// callback's, so only the next node was ever queued, and claimed once; nothing is
	// left queued.
	require.EqualValues(t, 1, histogram(t, rm, "rendezvous.run_queue.claim_latency", attribute.String("kind", "run")).Count)
	require.Zero(t, histogram(t, rm, "rendezvous.run_queue.claim_latency", attribute.String("kind", "resume")).Count)
	require.Zero(t, gauge(t, rm, "rendezvous.run_queue.depth", attribute.String("kind", "run")))
	require.Zero(t, gauge(t, rm, "rendezvous.run_queue.depth", attribute.String("kind", "resume")))
	require.Zero(t, counter(rm, telemetry.DatabaseErrorsName, attribute.String("component", "executor")))
}

// TestTraceFollowsTimer: a wait node's timer fires in the trace of the node run that
// scheduled it, and its continuation joins it; the wait's duration is the timer's.
func TestTraceFollowsTimer(t *testing.T) {
	t.Parallel()
	o, opt := withTelemetry(t)
	h := setup(t, opt)
	name := h.put(t, h.workflow("timed", []obj{node("pause", "wait", obj{"for": "300ms"})}, nil))
	h.run(t)
	id := h.start(t, name, nil)
	h.waitStatus(t, id, "completed")

	run := o.span(t, "rendezvous.node.run", "pause")
	require.Equal(t, "wait", attr(run, "rendezvous.node_type"))
	timer := o.span(t, "rendezvous.wait.timer", "pause")
	resume := o.span(t, "rendezvous.wait.resume", "pause")
	for _, s := range []sdktrace.ReadOnlySpan{timer, resume} {
		require.Equal(t, run.SpanContext().TraceID(), s.SpanContext().TraceID(), s.Name())
		require.Equal(t, run.SpanContext().SpanID(), s.Parent().SpanID(), s.Name())
	}
	require.Equal(t, string(vocab.WaitResumed), attr(resume, "rendezvous.outcome"))

	rm := o.collect(t)
	waited := histogram(t, rm, "rendezvous.wait.duration",
		attribute.String("workflow", name), attribute.String("strategy", "timer"), attribute.String("outcome", "resumed"))
	require.EqualValues(t, 1, waited.Count)
	// Registered, then fired no earlier than its deadline 300 ms later (less the moment
	// between planning the deadline and inserting the wait).
	require.Greater(t, waited.Sum, 0.25)
}

// TestOutboundCallResults: a call answered 503 and then 202 counts a retry and an ok,
// each attempt a span of its own in the wait's trace; a call rejected with 400 counts
// failed (and fails its node), its span marked as an error.
func TestOutboundCallResults(t *testing.T) {
	t.Parallel()
	o, opt := withTelemetry(t)
	h := setup(t, opt)
	h.fake.on("/process", func(n int, _ recorded) reply {
		if n == 1 {
			return reply{status: http.StatusServiceUnavailable, body: `{}`}
		}
		return reply{status: http.StatusAccepted, body: `{}`}
	})
	h.fake.on("/reject", func(int, recorded) reply { return reply{status: http.StatusBadRequest, body: `{"error":"no"}`} })
	retried := h.put(t, h.waitDef("retried", nil))
	rejected := h.put(t, h.waitDef("rejected", obj{"url": "@{_vars.svc}/reject"}))
	h.run(t)
	retriedID := h.start(t, retried, obj{"order": 1})
	failedID := h.start(t, rejected, obj{"order": 2})
	h.waitStatus(t, failedID, "failed")
	eventually(t, func() bool { return h.fake.count("/process") == 2 })

	eventually(t, func() bool { return len(o.spansNamed("rendezvous.wait.call")) == 3 })
	byExec := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range o.spansNamed("rendezvous.wait.call") {
		byExec[attr(s, "rendezvous.execution_id")] = append(byExec[attr(s, "rendezvous.execution_id")], s)
	}
	calls := byExec[retriedID.String()]
	require.Len(t, calls, 2)
	require.Equal(t, calls[0].SpanContext().TraceID(), calls[1].SpanContext().TraceID(), "attempts share the wait's trace")
	require.ElementsMatch(t, []string{"503", "202"},
		[]string{attr(calls[0], "http.response.status_code"), attr(calls[1], "http.response.status_code")})
	rejectedCalls := byExec[failedID.String()]
	require.Len(t, rejectedCalls, 1)
	require.Equal(t, codes.Error, rejectedCalls[0].Status().Code)
	require.Equal(t, "400", attr(rejectedCalls[0], "http.response.status_code"))
	failedRun := o.span(t, "rendezvous.node.run", "wait")
	for _, s := range o.spansNamed("rendezvous.node.run") {
		if attr(s, "rendezvous.execution_id") == failedID.String() {
			failedRun = s
		}
	}
	require.Equal(t, failedRun.SpanContext().TraceID(), rejectedCalls[0].SpanContext().TraceID())

	rm := o.collect(t)
	result := func(r string) attribute.KeyValue { return attribute.String("result", r) }
	require.EqualValues(t, 1, counter(rm, "rendezvous.outbound.calls", result("retry")))
	require.EqualValues(t, 1, counter(rm, "rendezvous.outbound.calls", result("ok")))
	require.EqualValues(t, 1, counter(rm, "rendezvous.outbound.calls", result("failed")))
	require.EqualValues(t, 1, histogram(t, rm, "rendezvous.outbound.call.duration", result("failed")).Count)
}

// TestRunQueueDepthGauge: the gauge counts queued work by kind from the database, and
// scrapes within snapshot TTL do not read it again.
func TestRunQueueDepthGauge(t *testing.T) {
	t.Parallel()
	o, opt := withTelemetry(t)
	h := setup(t, opt)
	name := h.put(t, h.workflow("queued", []obj{
		node("a", "http", obj{"url": "@{_vars.svc}/a", "method": "POST"}),
		node("b", "http", obj{"url": "@{_vars.svc}/b", "method": "POST"}),
	}, nil))
	h.start(t, name, nil) // no pod runs: both roots stay queued

	kind := func(k string) attribute.KeyValue { return attribute.String("kind", k) }
	rm := o.collect(t)
	require.EqualValues(t, 2, gauge(t, rm, "rendezvous.run_queue.depth", kind("run")))
	require.EqualValues(t, 0, gauge(t, rm, "rendezvous.run_queue.depth", kind("resume")))

	h.exec(t, `DELETE FROM run_queue`)
	rm = o.collect(t)
	require.EqualValues(t, 2, gauge(t, rm, "rendezvous.run_queue.depth", kind("run")), "read from the cached snapshot")
	h.ex.ExpireQueueSnapshot()
	rm = o.collect(t)
	require.EqualValues(t, 0, gauge(t, rm, "rendezvous.run_queue.depth", kind("run")))
}

// TestDatabaseErrorsCounted: a pod whose database is gone counts the failures of its
// loops under component=executor.
func TestDatabaseErrorsCounted(t *testing.T) {
	t.Parallel()
	o, opt := withTelemetry(t)
	h := setup(t, opt)
	h.pool.Close()
	h.run(t)
	eventually(t, func() bool {
		var rm metricdata.ResourceMetrics
		_ = o.reader.Collect(context.Background(), &rm) // the gauges' own reads fail too
		return counter(rm, telemetry.DatabaseErrorsName, attribute.String("component", "executor")) > 0
	})
}
