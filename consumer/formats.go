package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/wireformat"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// value is a record's value (or key) read: in the JSON value model, and as JSON text
// (the text the aggregator stores and matches).
type value struct {
	v   any
	raw []byte
}

// readFailure is why a record's value (or key) could not be read: poison, with its
// category and text, or — unavailable set — not the record's fault.
type readFailure struct {
	category, reason string
	schemaID         int
	// unavailable: the schema registry could not be asked; the partition stalls here.
	unavailable error
}

// accepts reports whether a topic declared with formats (none: auto) takes a value
// found to be in format f.
func accepts(formats []workflow.RecordFormat, f workflow.RecordFormat) bool {
	return len(formats) == 0 || slices.Contains(formats, workflow.FormatAuto) || slices.Contains(formats, f)
}

// formatsFor returns the formats the definitions declare for topic's values; none
// means auto. A topic may be declared by several definitions: a record is taken when
// it is in any of their formats.
func (c *Consumer) formatsFor(topic string) []workflow.RecordFormat {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.formats[topic]
}

// readValue reads r's value under its topic's formats: a value in the schema registry
// wire format is decoded under its schema (asking the registry once per schema id),
// any other value is JSON.
func (c *Consumer) readValue(ctx context.Context, r *kgo.Record) (value, *readFailure) {
	formats := c.formatsFor(r.Topic)
	if !wireformat.Framed(r.Value) {
		if !accepts(formats, workflow.FormatJSON) {
			return value{}, &readFailure{category: poisonFormatMismatch,
				reason: fmt.Sprintf("%s: the value is not in the schema registry wire format (no magic byte and schema id); the topic's definitions say %s", poisonFormatMismatch, formatList(formats))}
		}
		// Numbers stay exact (jsonnum): 1e400 is JSON, and an id beyond 2^53 is not
		// rounded into its neighbour's.
		v, err := jsonnum.Decode(r.Value)
		if err != nil {
			return value{}, &readFailure{category: poisonNotJSON, reason: "value is not JSON: " + err.Error()}
		}
		return value{v: v, raw: r.Value}, nil
	}
	id := wireformat.SchemaID(r.Value)
	if !slices.ContainsFunc([]workflow.RecordFormat{workflow.FormatAvro, workflow.FormatProtobuf, workflow.FormatJSONSchema},
		func(f workflow.RecordFormat) bool { return accepts(formats, f) }) {
		// Declared json only: no schema could make it acceptable, so none is fetched.
		return value{}, &readFailure{category: poisonFormatMismatch, schemaID: id,
			reason: fmt.Sprintf("%s: the value is in the schema registry wire format (schema id %d); the topic's definitions say %s", poisonFormatMismatch, id, formatList(formats))}
	}
	return c.readFramed(ctx, r.Value, formats)
}

// readFramed decodes a framed value or key under its schema.
func (c *Consumer) readFramed(ctx context.Context, b []byte, formats []workflow.RecordFormat) (value, *readFailure) {
	id := wireformat.SchemaID(b)
	rec, err := c.registry.Decode(ctx, b)
	switch {
	case errors.Is(err, wireformat.ErrRegistryUnavailable):
		return value{}, &readFailure{unavailable: err, schemaID: id}
	case errors.Is(err, wireformat.ErrSchemaUnknown):
		// The error's text begins with its category (wireformat's errors say so).
		return value{}, &readFailure{category: poisonSchemaUnknown, schemaID: id, reason: err.Error()}
	case err != nil:
		return value{}, &readFailure{category: poisonDecodeFailed, schemaID: id, reason: err.Error()}
	}
	if !accepts(formats, rec.Format) {
		return value{}, &readFailure{category: poisonFormatMismatch, schemaID: id,
			reason: fmt.Sprintf("%s: schema id %d is %s; the topic's definitions say %s", poisonFormatMismatch, id, rec.Format, formatList(formats))}
	}
	return value{v: rec.Value, raw: rec.JSON}, nil
}

// readKey reads r's key for its topic's triggers: a key in the schema registry wire
// format, when a trigger names the key, decoded under its schema (whatever the value's
// format); any other key as text. A record without a key, or of a topic without
// triggers (nothing reads its key), has none (nil).
func (c *Consumer) readKey(ctx context.Context, r *kgo.Record) (any, *readFailure) {
	if r.Key == nil {
		return nil, nil
	}
	specs := c.triggersFor(r.Topic)
	if len(specs) == 0 {
		return nil, nil
	}
	if !wireformat.Framed(r.Key) || !readsKey(specs) {
		return string(r.Key), nil
	}
	k, fail := c.readFramed(ctx, r.Key, nil)
	if fail != nil {
		fail.reason = "key: " + fail.reason
		return nil, fail
	}
	return k.v, nil
}

// readsKey reports whether one of specs reads the record's key (in its input or as its
// dedupe key).
func readsKey(specs []triggerSpec) bool {
	for _, spec := range specs {
		t := spec.trigger
		if t.DedupeKey != nil && t.DedupeKey.Part == workflow.RecordKey {
			return true
		}
		for _, ref := range t.Input {
			if ref.Part == workflow.RecordKey {
				return true
			}
		}
	}
	return false
}

func formatList(formats []workflow.RecordFormat) string {
	words := make([]string, len(formats))
	for i, f := range formats {
		words[i] = string(f)
	}
	return strings.Join(words, " or ")
}
