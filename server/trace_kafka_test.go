package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/server"
)

// TestTraceCallbackAndKafkaWait: a wait for a callback and a Kafka record is one trace.
// The node run that registered the wait roots it; the correlated call carries it to the
// external service; the callback (at another replica) and the record each arrive in a
// foreign trace of their own, which their event spans link to rather than adopt; the
// satisfaction and the continuation join the wait's trace.
func TestTraceCallbackAndKafkaWait(t *testing.T) {
	t.Parallel()
	const topic = "trace.shipments"
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	cluster, prod := startKafka(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel := &telemetry.Telemetry{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider(), Propagator: propagation.TraceContext{}}
	var svcs []*server.Service
	for i := range 2 {
		svcs = append(svcs, runService(t, server.Config{
			DatabaseURL: schema.URL, InstanceID: fmt.Sprintf("trace-kafka-%d", i), AutoMigrate: true,
			Telemetry: tel, Kafka: kafkaConfig(cluster),
		}))
	}
	a, b := "http://"+svcs[0].Addr(), "http://"+svcs[1].Addr()

	def := map[string]any{
		"name": "traced-kafka", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{
				"apiCall":             map[string]any{"url": "@{_vars.svc}/process"},
				"kafkaEvent":          map[string]any{"topic": topic},
				"aggregationStrategy": "all",
				"timeout":             120,
			}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST",
				"body": map[string]any{"execution_id": "@{_execution.id}"}}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	}
	status, body := testkit.DoJSON(t, http.MethodPut, a+"/api/v1/workflows/traced-kafka", def, nil)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = testkit.DoJSON(t, http.MethodPost, a+"/api/v1/workflows/traced-kafka/executions", map[string]any{"input": map[string]any{}}, nil)
	require.Equal(t, http.StatusCreated, status, body)
	execID := body["id"].(string)
	call := fake.nextCall(t)
	require.Equal(t, execID, call["execution_id"])
	corrID := call["correlation_id"].(string)
	sent, _ := call["_traceparent"].(string)
	require.NotEmpty(t, sent, "the correlated call carries a traceparent")

	// The external service answers within its trace A, at the other replica; the wait
	// still needs its record.
	callerA, producerB := foreignSpanContext(1), foreignSpanContext(2)
	status, body = testkit.DoJSON(t, http.MethodPost, b+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": execID, "correlation_id": corrID, "approved": true},
		http.Header{"Traceparent": {w3c(callerA)}})
	require.Equal(t, http.StatusAccepted, status, body)
	require.Equal(t, "recorded", body["status"])

	// Another system publishes the record within its trace B.
	value, err := json.Marshal(map[string]any{"execution_id": execID, "correlation_id": corrID, "status": "shipped"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: value,
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(w3c(producerB))}}}).FirstErr())
	waitStatus(t, a, execID, "completed")

	// The continuation's span ends after its commit, which may follow the API's view.
	ended := func(name string) []sdktrace.ReadOnlySpan {
		var out []sdktrace.ReadOnlySpan
		for _, s := range spans.Ended() {
			if s.Name() == name && spanAttr(s, "rendezvous.execution_id") == execID {
				out = append(out, s)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(ended("rendezvous.wait.resume")) == 1 }, 10*time.Second, 20*time.Millisecond)

	var run sdktrace.ReadOnlySpan
	for _, s := range ended("rendezvous.node.run") {
		if spanAttr(s, "rendezvous.node_id") == "wait" {
			require.Nil(t, run, "one run of the wait node")
			run = s
		}
	}
	require.NotNil(t, run, "the wait node's run span")
	waitTrace := run.SpanContext().TraceID()
	require.NotEqual(t, callerA.TraceID(), waitTrace)
	require.NotEqual(t, producerB.TraceID(), waitTrace)
	require.Contains(t, sent, "-"+waitTrace.String()+"-", "the correlated call continues the wait's trace")

	for _, ev := range []struct {
		name, outcome string
		link          trace.SpanContext
	}{
		{"rendezvous.wait.event api_response", "recorded", callerA},
		{"rendezvous.wait.event kafka_event", "completed", producerB},
	} {
		got := ended(ev.name)
		require.Len(t, got, 1, ev.name)
		s := got[0]
		require.Equal(t, waitTrace, s.SpanContext().TraceID(), "%s is in the wait's trace", ev.name)
		require.Equal(t, run.SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of the node run", ev.name)
		require.Equal(t, "wait", spanAttr(s, "rendezvous.node_id"))
		require.Equal(t, corrID, spanAttr(s, "rendezvous.correlation_id"))
		require.Equal(t, ev.outcome, spanAttr(s, "rendezvous.outcome"), ev.name)
		require.Len(t, s.Links(), 1, ev.name)
		require.Equal(t, ev.link.TraceID(), s.Links()[0].SpanContext.TraceID(), "%s links to the trace it arrived in", ev.name)
		require.Equal(t, ev.link.SpanID(), s.Links()[0].SpanContext.SpanID(), ev.name)
	}
	kafkaEvent := ended("rendezvous.wait.event kafka_event")[0]

	// The record completed the wait: satisfaction is an event of its span, the
	// continuation joins.
	require.Len(t, kafkaEvent.Events(), 1)
	satisfied := kafkaEvent.Events()[0]
	require.Equal(t, "rendezvous.wait.satisfied", satisfied.Name)
	require.Equal(t, []attribute.KeyValue{attribute.String("rendezvous.first_event", "api_response")}, satisfied.Attributes)
	for _, s := range spans.Ended() {
		require.NotEqual(t, "rendezvous.wait.satisfied", s.Name(), "no span of its own")
	}
	resume := ended("rendezvous.wait.resume")[0]
	require.Equal(t, waitTrace, resume.SpanContext().TraceID(), "the continuation is in the wait's trace")
	require.Equal(t, "completed", spanAttr(resume, "rendezvous.outcome"))
	calls := ended("rendezvous.wait.call")
	require.Len(t, calls, 1)
	require.Equal(t, waitTrace, calls[0].SpanContext().TraceID())
	require.Equal(t, w3c(calls[0].SpanContext()), sent, "the call announces its own span")

	// Nothing of the wait's trace leaked into the foreign ones: the callback's server span
	// continues A; the record has no span of the Kafka client, only the link above.
	var server sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		require.NotEqual(t, topic+" receive", s.Name(), "no receive span per fetched record")
		if s.SpanKind() == trace.SpanKindServer && s.Parent().SpanID() == callerA.SpanID() {
			server = s
		}
	}
	require.NotNil(t, server, "the callback's server span continues the caller's trace")
	require.Equal(t, callerA.TraceID(), server.SpanContext().TraceID())
}

// foreignSpanContext is a remote, sampled span context of a trace that is not ours,
// distinct per seed.
func foreignSpanContext(seed byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0xf0, seed, 1, 2, 3, 4}, SpanID: trace.SpanID{0x0f, seed, 5, 6},
		TraceFlags: trace.FlagsSampled, Remote: true,
	})
}

// w3c formats a sampled W3C traceparent.
func w3c(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
}

// spanAttr is a span's string attribute, "" when absent.
func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
