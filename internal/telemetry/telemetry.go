// Package telemetry sets up OpenTelemetry for one rendezvous process: a tracer provider
// (recording and exporting spans over OTLP/HTTP only when the standard
// OTEL_EXPORTER_OTLP_* variables name an endpoint; otherwise spans keep their ids but are
// not recorded), a meter provider read by a Prometheus handler for /metrics, the W3C
// propagator, and the replica's logger, whose lines carry trace and span ids.
//
// Providers are handed to each component through its Config rather than installed as
// OpenTelemetry globals: tests start several replicas in one process, and each must
// expose its own metrics. The helpers here also carry a wait's trace across replicas: a
// wait stores the traceparent of the span that registered it, and whoever later handles
// its call, events, deadline or continuation starts a span under it.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Config names the process in its telemetry.
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME overrides it.
	ServiceName string
	InstanceID  string
	Version     string
}

// Telemetry is one process's providers. The zero value is not usable; see New.
type Telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// Exporting reports whether spans leave the process (an OTLP endpoint is set).
	Exporting bool
	registry  *promclient.Registry
	shutdown  []func(context.Context) error
}

// New builds the providers. Spans are always recorded — their ids reach log lines and
// outbound traceparent headers — but leave the process only when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; the
// exporter then reads the other standard variables (headers, timeout, certificates).
// The sampler follows OTEL_TRACES_SAMPLER, parent-based always-on by default.
func New(ctx context.Context, cfg Config) (*Telemetry, error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(cfg.ServiceName),
		semconv.ServiceInstanceID(cfg.InstanceID),
		semconv.ServiceVersion(cfg.Version),
	))
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over what the process says.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	t := &Telemetry{Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}

	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		topts = append(topts, sdktrace.WithBatcher(exp))
		t.Exporting = true
	} else if os.Getenv("OTEL_TRACES_SAMPLER") == "" {
		// With nowhere to send them, recording spans is work thrown away at their end
		// (several spans per event). Unrecorded spans keep their ids — for log lines, the
		// traceparent stored with a wait and sent to the services called — so only spans
		// under a sampled parent from outside are recorded, to hand its sampled flag on.
		topts = append(topts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	tp := sdktrace.NewTracerProvider(topts...)
	t.TracerProvider = tp
	t.shutdown = append(t.shutdown, tp.Shutdown)

	// A registry of its own, so two replicas in one test process do not collide; the Go
	// runtime and process collectors come along for the usual dashboards.
	t.registry = promclient.NewRegistry()
	t.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(t.registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(exp))
	t.MeterProvider = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)
	return t, nil
}

// MetricsHandler serves the Prometheus text format.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{})
}

// Shutdown flushes spans still buffered for export and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

// W3C trace context, the only propagation format stored with a wait.
var traceContext propagation.TraceContext

// TraceParent returns the W3C traceparent of the span in ctx, "" when there is none.
func TraceParent(ctx context.Context) string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent returns ctx carrying the remote span context of a stored traceparent,
// so that spans started from it join that trace; ctx is returned unchanged when tp is
// empty or malformed.
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return traceContext.Extract(ctx, traceParentCarrier(tp))
}

// traceParentCarrier is a carrier holding only a traceparent: one is read for every
// event applied and every wait resumed, where a map would be built for each.
type traceParentCarrier string

func (c traceParentCarrier) Get(key string) string {
	if key == "traceparent" {
		return string(c)
	}
	return ""
}

func (traceParentCarrier) Set(string, string) {}

func (traceParentCarrier) Keys() []string { return []string{"traceparent"} }

// SpanContextOf returns the span context that a carrier (HTTP headers, Kafka record
// headers) announces, for linking; it is invalid when the carrier has none.
func SpanContextOf(ctx context.Context, p propagation.TextMapPropagator, c propagation.TextMapCarrier) trace.SpanContext {
	if p == nil {
		p = traceContext
	}
	// Without the span ctx may hold (a server span of this very request), a carrier
	// announcing nothing yields nothing rather than that span.
	ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	return trace.SpanContextFromContext(p.Extract(ctx, c))
}

// The replica's logging when no flag says otherwise.
const (
	DefaultLogLevel  = slog.LevelInfo
	DefaultLogFormat = "json"
)

// NewLogger is a replica's logger: lines in format ("json" or "text") on w, at level and
// above, each carrying trace_id and span_id when logged inside a span (LogHandler).
func NewLogger(w io.Writer, level slog.Level, format string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "json":
		return slog.New(LogHandler(slog.NewJSONHandler(w, opts))), nil
	case "text":
		return slog.New(LogHandler(slog.NewTextHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("must be json or text, not %q", format)
}

// LogHandler wraps h so that a record logged with a context holding a span carries
// trace_id and span_id, joining log lines to traces.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

type logHandler struct{ slog.Handler }

func (l logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return l.Handler.Handle(ctx, r)
}

func (l logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{l.Handler.WithAttrs(attrs)}
}

func (l logHandler) WithGroup(name string) slog.Handler { return logHandler{l.Handler.WithGroup(name)} }

// The database error counter is shared by every component (told apart by a component
// attribute), so all of them create it with this name and description.
const (
	DatabaseErrorsName        = "rendezvous.database.errors"
	DatabaseErrorsDescription = "Database operations that failed, by component; work is retried."
)

// EnvVars are the standard OpenTelemetry variables a rendezvous process honours (read by
// the SDK and the OTLP exporter, not by flags); deployment files may set them.
var EnvVars = []string{
	"OTEL_SERVICE_NAME",
	"OTEL_RESOURCE_ATTRIBUTES",
	"OTEL_TRACES_SAMPLER",
	"OTEL_TRACES_SAMPLER_ARG",
	"OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_HEADERS",
	"OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_TIMEOUT",
	"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
	"OTEL_EXPORTER_OTLP_COMPRESSION",
	"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
	"OTEL_EXPORTER_OTLP_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_KEY",
	"OTEL_EXPORTER_OTLP_INSECURE",
}

// GaugeTTL bounds how often a gauge read from the database reads it, however often
// /metrics is scraped (by several Prometheus servers, or by hand).
const GaugeTTL = 5 * time.Second

// Cached holds the last reading of a gauge that is read from the database. The zero value
// is ready; a failed read is not cached.
type Cached[T any] struct {
	mu sync.Mutex
	at time.Time
	v  T
}

// Get returns the value read within the last GaugeTTL, or reads it now.
func (c *Cached[T]) Get(ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < GaugeTTL {
		return c.v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := read(ctx)
	if err != nil {
		return v, err
	}
	c.v, c.at = v, time.Now()
	return v, nil
}

// Expire makes the next Get read again.
func (c *Cached[T]) Expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = time.Time{}
}
