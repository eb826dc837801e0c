package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkRecordedSpan is what one span costs a replica whose spans are recorded: the
// wait's traceparent read (WithTraceParent), a span started under it with the seven
// attributes an event's span carries, ended and handed to a batch processor (whose
// exporter drops it, as in make bench). A Kafka record that completes a wait records
// three spans; docs/development.md sets this against the Kafka run's tracing cost.
//
//	go test ./internal/telemetry -run '^$' -bench RecordedSpan
func BenchmarkRecordedSpan(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("bench")
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	b.ReportAllocs()
	for b.Loop() {
		_, span := tracer.Start(WithTraceParent(context.Background(), parent), "rendezvous.wait.event kafka_event")
		span.SetAttributes(
			attribute.String("rendezvous.execution_id", "0b0c3c52-58a5-4cf4-9b3e-2d8c1f6f0a11"),
			attribute.String("rendezvous.correlation_id", "7d1e2f4a-9c3b-4e5d-8f6a-1b2c3d4e5f60"),
			attribute.String("rendezvous.node_id", "wait"),
			attribute.String("rendezvous.event", "kafka_event"),
			attribute.String("rendezvous.source", "kafka"),
			attribute.String("rendezvous.outcome", "completed"),
			attribute.Int64("rendezvous.version", 2),
		)
		span.End()
	}
}
