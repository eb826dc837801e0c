package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
)

// TestTraceAcrossReplicas: one trace per wait, over HTTP and across replicas — the node
// starts on one replica, its call carries the wait's traceparent, the callback arrives
// at another replica with the caller's own traceparent (linked, not adopted), and the
// continuation joins the same trace.
func TestTraceAcrossReplicas(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	tel := &telemetry.Telemetry{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider(), Propagator: propagation.TraceContext{}}
	var svcs []*replica.Replica
	for i := range 2 {
		cfg := replica.Config(t, schema.URL, fmt.Sprintf("trace-%d", i))
		cfg.DBMaxConns, cfg.Telemetry = 8, tel
		svcs = append(svcs, replica.Start(t, cfg))
	}
	a, b := "http://"+svcs[0].Addr(), "http://"+svcs[1].Addr()

	def := map[string]any{
		"name": "traced", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{"apiCall": map[string]any{"url": "@{_vars.svc}/process"}}},
			map[string]any{"id": "notify", "type": "http", "data": map[string]any{"url": "@{_vars.svc}/done", "method": "POST",
				"body": map[string]any{"execution_id": "@{_execution.id}"}}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "notify"}},
	}
	status, body := testkit.DoJSON(t, http.MethodPut, a+"/api/v1/workflows/traced", def, nil)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = testkit.DoJSON(t, http.MethodPost, a+"/api/v1/workflows/traced/executions", map[string]any{"input": map[string]any{}}, nil)
	require.Equal(t, http.StatusCreated, status, body)
	call := fake.nextCall(t)
	sent := call["_traceparent"].(string)
	require.NotEmpty(t, sent, "the correlated call carries a traceparent")

	// The external service calls back within its own trace.
	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	hdr := http.Header{"Traceparent": {fmt.Sprintf("00-%s-%s-01", caller.TraceID(), caller.SpanID())}}
	status, body = testkit.DoJSON(t, http.MethodPost, b+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": call["execution_id"], "correlation_id": call["correlation_id"], "ok": true}, hdr)
	require.Equal(t, http.StatusAccepted, status, body)
	require.Eventually(t, func() bool {
		status, body := testkit.DoJSON(t, http.MethodGet, a+"/api/v1/executions/"+call["execution_id"].(string), nil, nil)
		return status == http.StatusOK && body["status"] == "completed"
	}, 20*time.Second, 20*time.Millisecond)

	byName := map[string]sdktrace.ReadOnlySpan{}
	require.Eventually(t, func() bool {
		for _, s := range spans.Ended() {
			byName[s.Name()] = s
		}
		return byName["rendezvous.wait.resume"] != nil
	}, 10*time.Second, 20*time.Millisecond)
	var run sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		for _, kv := range s.Attributes() {
			if s.Name() == "rendezvous.node.run" && kv.Key == "rendezvous.node_id" && kv.Value.AsString() == "wait" {
				run = s
			}
		}
	}
	require.NotNil(t, run, "the wait node's run span")
	waitTrace := run.SpanContext().TraceID()
	require.Contains(t, sent, waitTrace.String(), "the call continues the wait's trace")
	for _, name := range []string{"rendezvous.wait.call", "rendezvous.wait.event api_response", "rendezvous.wait.resume"} {
		require.NotNil(t, byName[name], name)
		require.Equal(t, waitTrace, byName[name].SpanContext().TraceID(), "%s is in the wait's trace", name)
	}
	event := byName["rendezvous.wait.event api_response"]
	require.Len(t, event.Events(), 1)
	require.Equal(t, "rendezvous.wait.satisfied", event.Events()[0].Name, "the callback completed the wait")
	require.Len(t, event.Links(), 1)
	require.Equal(t, caller.TraceID(), event.Links()[0].SpanContext.TraceID(), "the callback's own trace is linked")
	// The callback's server span (Echo middleware) continues the caller's trace.
	var server sdktrace.ReadOnlySpan
	for _, s := range spans.Ended() {
		if s.SpanKind() == trace.SpanKindServer && s.Parent().SpanID() == caller.SpanID() {
			server = s
		}
	}
	require.NotNil(t, server, "a server span under the caller's span")
}
