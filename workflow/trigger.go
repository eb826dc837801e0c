package workflow

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/rendezvous-run/rendezvous/internal/dotpath"
)

// Trigger is one entry of a definition's triggers: Kafka records of Topic that start an
// execution of the workflow. A record is accepted when its top-level type field equals
// Type (when set) and its value holds Filter; each accepted record starts exactly one
// execution, recognised again by its dedupe key.
type Trigger struct {
	Topic  string
	Format RecordFormat   // how the topic's values are written, default auto
	Type   string         // "": any record
	Filter map[string]any // dot path -> scalar the value must hold
	// Input maps each member of the execution input to the part of the record it is
	// read from; nil: the record's value.
	Input map[string]RecordRef
	// DedupeKey is what makes two records the same start; nil: the record's position.
	DedupeKey *RecordRef
}

// RecordPart is a part of a Kafka record a trigger reads.
type RecordPart string

// The parts of a record a trigger's input and dedupe key name.
const (
	RecordValue     RecordPart = "value"     // the JSON value, or the value at Path
	RecordKey       RecordPart = "key"       // the key, as text
	RecordHeader    RecordPart = "headers"   // the header named Path, as text
	RecordTopic     RecordPart = "topic"     // the topic name
	RecordPartition RecordPart = "partition" // the partition number
	RecordOffset    RecordPart = "offset"    // the offset
	RecordTimestamp RecordPart = "timestamp" // the record's timestamp, RFC 3339
)

// RecordInputKey is the member of a triggered execution's input that names the record
// that started it (topic, partition, offset, key, dedupe key).
const RecordInputKey = "_record"

// RecordRef names a part of a Kafka record: value, value.<dot path>, key,
// headers.<name>, topic, partition, offset or timestamp.
type RecordRef struct {
	Part RecordPart
	// Path is the dot path into the value (RecordValue; "" for the whole value) or the
	// header name (RecordHeader).
	Path string
}

// String renders the reference as written in a definition.
func (r RecordRef) String() string {
	if r.Path == "" {
		return string(r.Part)
	}
	return string(r.Part) + "." + r.Path
}

// ParseRecordRef reads a reference to a part of a Kafka record.
func ParseRecordRef(s string) (RecordRef, error) {
	part, rest, dotted := strings.Cut(s, ".")
	switch RecordPart(part) {
	case RecordValue:
		if dotted {
			if _, err := dotpath.Split(rest); err != nil {
				return RecordRef{}, fmt.Errorf("invalid dot path %q: %v", rest, err)
			}
		}
		return RecordRef{Part: RecordValue, Path: rest}, nil
	case RecordHeader:
		if !dotted || rest == "" {
			return RecordRef{}, fmt.Errorf("%q: name the header, as headers.<name>", s)
		}
		return RecordRef{Part: RecordHeader, Path: rest}, nil
	case RecordKey, RecordTopic, RecordPartition, RecordOffset, RecordTimestamp:
		if dotted {
			return RecordRef{}, fmt.Errorf("%q: %s has no parts", s, part)
		}
		return RecordRef{Part: RecordPart(part)}, nil
	}
	return RecordRef{}, fmt.Errorf("%q is not a part of a record: use value, value.<dot path>, key, headers.<name>, topic, partition, offset or timestamp", s)
}

// ParseTrigger reads one stored trigger (an element of a definition's triggers, which
// validation accepted), for the consumer; path prefixes its errors.
func ParseTrigger(raw json.RawMessage, path string) (Trigger, []FieldError) {
	v, err := decodeInstance(raw)
	if err != nil {
		return Trigger{}, []FieldError{{Path: path, Message: "malformed JSON: " + err.Error()}}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Trigger{}, []FieldError{{Path: path, Message: "must be a JSON object"}}
	}
	var errs errList
	t := parseTrigger(&object{path: path, m: m, errs: &errs, rejected: map[string]bool{}})
	return t, errs
}

// parseTriggers reads the definition's triggers; the schema has checked their shape.
func parseTriggers(top *object) []Trigger {
	arr, ok := top.m["triggers"].([]any)
	if !ok {
		return nil
	}
	var out []Trigger
	for i, e := range arr {
		m, ok := e.(map[string]any)
		p := indexPath(top.p("triggers"), i)
		if !ok || top.rejected[p] {
			continue
		}
		out = append(out, parseTrigger(&object{path: p, m: m, errs: top.errs, rejected: top.rejected}))
	}
	return out
}

// parseTrigger checks what the schema cannot: record references and filter paths.
func parseTrigger(o *object) Trigger {
	t := Trigger{Topic: o.str("topic", ""), Format: enum(o, "format", FormatAuto), Type: o.str("type", ""), Filter: parseFilter(o)}
	if in := o.child("input"); in != nil {
		t.Input = map[string]RecordRef{}
		for _, k := range sortedKeys(in.m) {
			s, ok := in.m[k].(string)
			if !ok || in.rejected[in.p(k)] {
				continue
			}
			ref, err := ParseRecordRef(s)
			if err != nil {
				in.errs.add(in.p(k), "%s", err)
				continue
			}
			t.Input[k] = ref
		}
	}
	if v, ok := o.checkable("dedupeKey"); ok {
		s, _ := v.(string)
		ref, err := ParseRecordRef(s)
		switch {
		case err != nil:
			o.errs.add(o.p("dedupeKey"), "%s", err)
		case ref.Part != RecordValue && ref.Part != RecordKey && ref.Part != RecordHeader:
			o.errs.add(o.p("dedupeKey"), "%q cannot tell two records apart: use value.<dot path>, key or headers.<name> (absent: the record's position)", ref)
		case ref.Part == RecordValue && ref.Path == "":
			o.errs.add(o.p("dedupeKey"), "name a member of the value, as value.<dot path>")
		default:
			t.DedupeKey = &ref
		}
	}
	return t
}
