package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestNoExporterByDefault: without an OTLP endpoint nothing is exported and spans are
// not recorded, but they still have ids (for logs and outbound traceparent); a span under
// a sampled parent from outside is recorded, so that it hands the sampled flag on; and
// metrics reach the Prometheus handler.
func TestNoExporterByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	tel, err := New(context.Background(), Config{ServiceName: "rendezvous", InstanceID: "a", Version: "test"})
	require.NoError(t, err)
	defer func() { require.NoError(t, tel.Shutdown(context.Background())) }()
	require.False(t, tel.Exporting)

	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
	require.True(t, span.SpanContext().IsValid())
	require.False(t, span.IsRecording(), "nowhere to send it")
	_, child := tel.TracerProvider.Tracer("t").Start(ctx, "child")
	require.Equal(t, span.SpanContext().TraceID(), child.SpanContext().TraceID(), "one trace, for the logs")
	require.False(t, child.IsRecording())
	child.End()
	span.End()

	upstream := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled, Remote: true})
	_, under := tel.TracerProvider.Tracer("t").Start(trace.ContextWithRemoteSpanContext(context.Background(), upstream), "s")
	require.True(t, under.SpanContext().IsSampled(), "the sampled flag is handed on")
	require.Equal(t, upstream.TraceID(), under.SpanContext().TraceID())
	under.End()

	c, err := tel.MeterProvider.Meter("t").Int64Counter("rendezvous.test.things", metric.WithDescription("things"))
	require.NoError(t, err)
	c.Add(context.Background(), 3)
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "rendezvous_test_things_total 3")
	require.Contains(t, rec.Body.String(), "go_goroutines")
}

// TestSamplerFromEnvironment: OTEL_TRACES_SAMPLER still chooses, exporter or not.
func TestSamplerFromEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	tel, err := New(context.Background(), Config{ServiceName: "rendezvous"})
	require.NoError(t, err)
	defer func() { require.NoError(t, tel.Shutdown(context.Background())) }()
	_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
	require.True(t, span.IsRecording())
	span.End()
}

// TestOTLPExporter: with OTEL_EXPORTER_OTLP_ENDPOINT set, spans are sent over OTLP/HTTP
// to it, with the headers the standard variables give.
func TestOTLPExporter(t *testing.T) {
	var got atomic.Int32
	var header atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" && r.Method == http.MethodPost {
			_, _ = io.Copy(io.Discard, r.Body)
			header.Store(r.Header.Get("X-Tenant"))
			got.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "X-Tenant=acme")
	tel, err := New(context.Background(), Config{ServiceName: "rendezvous", InstanceID: "a"})
	require.NoError(t, err)
	require.True(t, tel.Exporting)
	_, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "exported")
	span.End()
	require.NoError(t, tel.Shutdown(context.Background())) // flushes the batch
	require.EqualValues(t, 1, got.Load())
	require.Equal(t, "acme", header.Load())
}

func TestTraceParentRoundTrip(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on") // recorded, as with an exporter
	tel, err := New(context.Background(), Config{ServiceName: "rendezvous"})
	require.NoError(t, err)
	defer func() { _ = tel.Shutdown(context.Background()) }()
	require.Empty(t, TraceParent(context.Background()))
	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "wait")
	defer span.End()
	tp := TraceParent(ctx)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tp)

	// Another replica continues the trace from the stored string.
	child, cs := tel.TracerProvider.Tracer("t").Start(WithTraceParent(context.Background(), tp), "event")
	defer cs.End()
	require.Equal(t, span.SpanContext().TraceID(), trace.SpanContextFromContext(child).TraceID())
	require.Equal(t, span.SpanContext().SpanID(), cs.(interface{ Parent() trace.SpanContext }).Parent().SpanID())

	bare := context.Background()
	require.Equal(t, bare, WithTraceParent(bare, ""))
	require.False(t, trace.SpanContextFromContext(WithTraceParent(bare, "garbage")).IsValid())

	h := http.Header{}
	h.Set("Traceparent", tp)
	require.Equal(t, span.SpanContext().TraceID(), SpanContextOf(bare, nil, propagation.HeaderCarrier(h)).TraceID())
	require.False(t, SpanContextOf(bare, nil, propagation.HeaderCarrier(http.Header{})).IsValid())
	require.False(t, SpanContextOf(ctx, nil, propagation.HeaderCarrier(http.Header{})).IsValid(),
		"the span already in ctx is not what the carrier announces")
}

// TestLogHandler: lines logged inside a span carry its ids; others do not.
func TestLogHandler(t *testing.T) {
	tel, err := New(context.Background(), Config{ServiceName: "rendezvous"})
	require.NoError(t, err)
	defer func() { _ = tel.Shutdown(context.Background()) }()
	var buf bytes.Buffer
	logger := slog.New(LogHandler(slog.NewJSONHandler(&buf, nil))).With("instance_id", "a")
	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
	logger.InfoContext(ctx, "inside")
	span.End()
	logger.InfoContext(context.Background(), "outside")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	var in, out map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &in))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &out))
	require.Equal(t, span.SpanContext().TraceID().String(), in["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), in["span_id"])
	require.Equal(t, "a", in["instance_id"])
	require.NotContains(t, out, "trace_id")
}

// TestNewLogger: the replica's logger writes its format at its level and above, joins
// lines to spans, and refuses a format it does not know.
func TestNewLogger(t *testing.T) {
	tel, err := New(context.Background(), Config{ServiceName: "rendezvous"})
	require.NoError(t, err)
	defer func() { _ = tel.Shutdown(context.Background()) }()
	var buf bytes.Buffer
	logger, err := NewLogger(&buf, DefaultLogLevel, DefaultLogFormat)
	require.NoError(t, err)
	ctx, span := tel.TracerProvider.Tracer("t").Start(context.Background(), "s")
	logger.DebugContext(ctx, "a step")
	logger.InfoContext(ctx, "the replica's life")
	span.End()
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), "one JSON line: %s", buf.String())
	require.Equal(t, "the replica's life", line["msg"])
	require.Equal(t, span.SpanContext().TraceID().String(), line["trace_id"])

	buf.Reset()
	logger, err = NewLogger(&buf, slog.LevelDebug, "text")
	require.NoError(t, err)
	logger.Debug("a step")
	require.Contains(t, buf.String(), `level=DEBUG msg="a step"`)

	_, err = NewLogger(&buf, DefaultLogLevel, "yaml")
	require.EqualError(t, err, `must be json or text, not "yaml"`)
}
