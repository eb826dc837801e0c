package consumer

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
)

// scope names the consumer's meter.
const scope = "github.com/rendezvous-run/rendezvous/consumer"

// sourceKind is the aggregator.Source kind of every event the consumer hands over.
const sourceKind = aggregator.SourceKafka

// Categories of poison records: the reason attribute of rendezvous.dead_letter.records.
// The rendezvous-dlq-reason header carries the full text; a metric attribute must stay a
// small fixed set.
const (
	poisonTooLarge   = "too_large"
	poisonNotJSON    = "not_json"
	poisonUnstorable = "unstorable"
	// poisonInvalidEvent: a record of the events topic that is JSON but no sent event.
	poisonInvalidEvent = "invalid_event"
	// poisonSchemaUnknown: a value in the schema registry wire format whose schema id the
	// registry does not know (or no registry is configured).
	poisonSchemaUnknown = "schema_unknown"
	// poisonDecodeFailed: a value that does not decode under its schema.
	poisonDecodeFailed = "decode_failed"
	// poisonFormatMismatch: a value not in the format its topic's definitions name.
	poisonFormatMismatch = "format_mismatch"
)

// instruments are the consumer's own metrics; the Kafka client's (bytes, records,
// connections) and its spans come from kotel.
type instruments struct {
	deadLetters        metric.Int64Counter
	deadLetterFailures metric.Int64Counter
	triggered          metric.Int64Counter
	dbErrors           metric.Int64Counter
	partitionsReg      metric.Registration
}

// Categories of failed dead-letter writes: the reason attribute of
// rendezvous.dead_letter.write_failures.
const (
	dlqFailUnknownTopic  = "unknown_topic"
	dlqFailAuthorization = "authorization"
	dlqFailTimeout       = "timeout"
	dlqFailShutdown      = "shutdown"
	dlqFailOther         = "other"
)

// initTelemetry creates the consumer's instruments. The lag and stalled gauges are
// observable over the partitions this member owns: a synchronous gauge would keep
// exporting the last value of a partition after a rebalance moved it away (cumulative
// last-value never forgets an attribute set), and the replicas' lags would no longer add
// up.
func (c *Consumer) initTelemetry() error {
	m := c.cfg.MeterProvider.Meter(scope)
	in := &c.ins
	var err error
	if in.deadLetters, err = m.Int64Counter("rendezvous.dead_letter.records",
		metric.WithDescription("Kafka records written to a dead-letter topic, by source topic and reason (too_large, not_json, unstorable, invalid_event: an events-topic record that is no sent event; schema_unknown, decode_failed, format_mismatch: a record under a schema registry).")); err != nil {
		return err
	}
	if in.deadLetterFailures, err = m.Int64Counter("rendezvous.dead_letter.write_failures",
		metric.WithDescription("Failed attempts to write a poison record to its dead-letter topic, by source topic and reason (unknown_topic, authorization, timeout, shutdown, other). The record's partition stops until a retry succeeds.")); err != nil {
		return err
	}
	if in.triggered, err = m.Int64Counter("rendezvous.kafka.triggered",
		metric.WithDescription("Kafka records a workflow's trigger accepted, by workflow and outcome (started: an execution started; trigger_duplicate: its dedupe key had started one already).")); err != nil {
		return err
	}
	if in.dbErrors, err = m.Int64Counter(telemetry.DatabaseErrorsName, metric.WithDescription(telemetry.DatabaseErrorsDescription)); err != nil {
		return err
	}
	lag, err := m.Int64ObservableGauge("rendezvous.kafka.consumer.lag",
		metric.WithDescription("Records of a partition not applied yet: high watermark (as of this member's last fetch of it) − the first offset not yet applied. Records rewound after a failure count until applied."))
	if err != nil {
		return err
	}
	stalled, err := m.Int64ObservableGauge("rendezvous.kafka.partition.stalled",
		metric.WithDescription("1 while a partition this member owns cannot advance, by reason (dead_letter_write_failed, database_error, schema_registry_unavailable); 0 otherwise. /readyz lists stalled partitions with the reason and since when."))
	if err != nil {
		return err
	}
	in.partitionsReg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		c.progress.each(func(p tp, n int64, reason StallReason) {
			where := []attribute.KeyValue{attribute.String("topic", p.topic), attribute.Int("partition", int(p.partition))}
			o.ObserveInt64(lag, n, metric.WithAttributes(where...))
			for _, r := range stallReasons {
				v := int64(0)
				if r == reason {
					v = 1
				}
				o.ObserveInt64(stalled, v, metric.WithAttributes(append(where, attribute.String("reason", string(r)))...))
			}
		})
		return nil
	}, lag, stalled)
	return err
}

// kotelHooks instrument the Kafka client: a publish span per dead letter, and the
// client's byte, record and connection counters. A fetched record gets no receive span
// (kotel's tracer would start one when the client buffers the record and end it when the
// consumer polls it): it told only how long the record sat in the buffer, and cost a
// replica applying records with every span recorded a share of its CPU and allocations
// per record (rendezvous-bench --only kafka, with and without it). What a record did is traced where it happened, in the wait's trace (the event's
// span, linked to the producer's), and the log lines and dead letter about it carry the
// producer's trace (recordCtx).
func (c *Consumer) kotelHooks() []kgo.Hook {
	return []kgo.Hook{
		publishSpans{kotel.NewTracer(
			kotel.TracerProvider(c.cfg.TracerProvider),
			kotel.TracerPropagator(c.cfg.Propagator),
			kotel.ClientID(c.cfg.ClientID),
		)},
		kotel.NewMeter(kotel.MeterProvider(c.cfg.MeterProvider)),
	}
}

// publishSpans are kotel's spans of produced records only. The Kafka client calls a hook
// for every kind of hook it implements: kotel's tracer also implements the fetch hooks,
// which this type does not pass on.
type publishSpans struct{ t *kotel.Tracer }

func (p publishSpans) OnProduceRecordBuffered(r *kgo.Record) { p.t.OnProduceRecordBuffered(r) }
func (p publishSpans) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	p.t.OnProduceRecordUnbuffered(r, err)
}

// databaseError counts a failed database operation of the consumer; the work is retried.
func (c *Consumer) databaseError(ctx context.Context) {
	c.ins.dbErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("component", "consumer")))
}

// deadLetterFailed counts a failed dead-letter write of a record of topic.
func (c *Consumer) deadLetterFailed(ctx context.Context, topic, category string) {
	c.ins.deadLetterFailures.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", topic), attribute.String("reason", category)))
}

// deadLettered counts a record written to its dead-letter topic, here and as an event
// the aggregator never saw.
func (c *Consumer) deadLettered(ctx context.Context, topic, category string) {
	c.ins.deadLetters.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", topic), attribute.String("reason", category)))
	c.agg.RecordRejected(ctx, sourceKind, string(ReasonPoison))
}

// recordCtx is ctx (its deadline, its values) carrying the span context r's headers
// announce (its producer's), so that log lines about r and its dead letter's publish
// span join the record's trace.
func (c *Consumer) recordCtx(ctx context.Context, r *kgo.Record) context.Context {
	return linkCtx(ctx, c.linkOf(r))
}

// linkCtx is ctx carrying a record's producer span context, read before (linkOf), if
// it is valid.
func linkCtx(ctx context.Context, producer trace.SpanContext) context.Context {
	if producer.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, producer)
	}
	return ctx
}

// linkOf is the span context a record's headers announce (its producer's), for the
// link from the event's span in the wait's trace. It extracts from a bare context: one
// holding a span would be returned for a record without a traceparent.
func (c *Consumer) linkOf(r *kgo.Record) trace.SpanContext {
	return telemetry.SpanContextOf(context.Background(), c.cfg.Propagator, kotel.NewRecordCarrier(r))
}
