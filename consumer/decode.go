package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
)

// decode validates a record and extracts its ids and match keys, or, on the events
// topic, the event it sends. Besides the schema registry, asked for a schema it has not
// cached, it is pure.
func (c *Consumer) decode(ctx context.Context, r *kgo.Record) item {
	if r.Topic == c.cfg.EventsTopic {
		return c.decodeSent(r)
	}
	it := item{rec: r}
	fields := c.fieldsFor(r.Topic)
	poison := func(category, reason string, payload any) item {
		it.poison, it.poisonCategory = reason, category
		// Best effort, for the log line: the ids in the payload when it could be read,
		// else in the headers.
		it.events, _ = extract(payload, nil, r, fields)
		return it
	}
	if len(r.Value) > c.cfg.MaxRecordBytes {
		return poison(poisonTooLarge, fmt.Sprintf("record value of %d bytes exceeds %d", len(r.Value), c.cfg.MaxRecordBytes), nil)
	}
	val, fail := c.readValue(ctx, r)
	if fail == nil {
		it.key, fail = c.readKey(ctx, r)
	}
	if fail != nil {
		it.schemaID = fail.schemaID
		if fail.unavailable != nil {
			it.unavailable = fail.unavailable
			return it
		}
		return poison(fail.category, fail.reason, val.v)
	}
	payload, raw := val.v, val.raw
	if err := aggregator.CheckStorable(raw); err != nil {
		return poison(poisonUnstorable, unstorableReason(err), payload)
	}
	events, reason := extract(payload, raw, r, fields)
	specs := c.matchSpecsFor(r.Topic)
	if keys := aggregator.MatchKeys(r.Topic, payload, specs); len(keys) > 0 {
		// Besides its ids, if any: a record may answer waits of both kinds. Keep: the keys
		// it is kept under for a wait registering later, should it reach none now.
		events = append(events, aggregator.Event{MatchKeys: keys, Keep: aggregator.KeepFor(r.Topic, payload, specs),
			Payload: raw, Source: sourceOf(r)})
	}
	// A record may also start executions, whether or not it answers waits.
	starts, err := c.starts(r, it.key, payload)
	if err != nil {
		return poison(poisonUnstorable, "the trigger's input cannot be built: "+err.Error(), payload)
	}
	it.starts = starts
	if len(events) == 0 {
		if len(starts) == 0 {
			it.skip = reason
		}
		return it
	}
	link := c.linkOf(r)
	for i := range events {
		events[i].Link = link
	}
	it.events = events
	return it
}

// unstorableReason is the dead-letter reason of a value PostgreSQL cannot store.
func unstorableReason(err error) string {
	var ue *aggregator.UnstorableError
	if errors.As(err, &ue) {
		return "value cannot be stored in PostgreSQL: " + ue.Reason
	}
	return err.Error()
}

// sourceOf is where an event read from r came from.
func sourceOf(r *kgo.Record) aggregator.Source {
	// One allocation for both, not one each: every record consumed has a source.
	at := &struct {
		partition int32
		offset    int64
	}{r.Partition, r.Offset}
	return aggregator.Source{Kind: sourceKind, Topic: r.Topic, Partition: &at.partition, Offset: &at.offset}
}

// extract finds the ids of a record: each configured field pair in the payload, else
// the record header of the same name. Several configurations of one topic may yield
// several candidates; each distinct one is tried. raw is the payload's JSON text.
func extract(payload any, raw []byte, r *kgo.Record, fields []idFields) ([]aggregator.Event, DeadLetterReason) {
	field := func(path string) string {
		if v, ok := dotpath.Get(payload, path); ok {
			if s, ok := v.(string); ok {
				return s
			}
		}
		return headerOf(r, path)
	}
	var events []aggregator.Event
	reason := ReasonMissingID
	for _, f := range fields {
		execRaw, corrRaw := field(f.exec), field(f.corr)
		if execRaw == "" || corrRaw == "" {
			continue
		}
		execID, err1 := uuid.Parse(execRaw)
		corrID, err2 := uuid.Parse(corrRaw)
		if err1 != nil || err2 != nil {
			reason = ReasonInvalidID
			continue
		}
		if slices.ContainsFunc(events, func(e aggregator.Event) bool { return e.ExecutionID == execID && e.CorrelationID == corrID }) {
			continue
		}
		// No name: the aggregator decides which of the wait's Kafka events (kafka_event or
		// a named one) the record is, by its topic, type and filter.
		events = append(events, aggregator.Event{
			ExecutionID: execID, CorrelationID: corrID, Payload: raw, Source: sourceOf(r),
		})
	}
	if len(events) == 0 {
		return nil, reason
	}
	return events, ""
}
