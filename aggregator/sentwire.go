package aggregator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/rendezvous-run/rendezvous/workflow"
)

// The wire format of an event sent by type, read by one parser for both of its ways in:
// the body of POST /api/v1/executions/{id}/events, and a record of the Kafka events
// topic, whose value may also name the execution:
//
//	{"execution_id": "<uuid>", "type": "<type>", "payload": <any JSON>, "id": "<id>"}
//
// type is required, payload and id are optional (null is absent); no other member is
// accepted, so that a misspelt member is refused rather than silently ignored. Each
// caller says what a refusal is in its own terms (an RFC 7807 problem, a dead letter).

// MaxSentBytes bounds a sent event's body over HTTP, as a callback's body is bounded by
// default: an event is a message, not a document. (A Kafka record is bounded by the
// consumer's record limit, which applies to every topic it reads.)
const MaxSentBytes = 1 << 20

// MaxEventTextLen bounds a sent event's type and id, in characters: the definition
// schema's maxLength of a send event's type.
const MaxEventTextLen = 200

// SentForm says which members a sent event's JSON object may have.
type SentForm int

const (
	// SentBody is the HTTP body: the execution is named by the path, not the body.
	SentBody SentForm = iota
	// SentRecord is a Kafka record value, which may carry execution_id.
	SentRecord
)

// SentWire is a parsed sent event, its members as sent: execution_id is not parsed as a
// UUID here because a record may name its execution in a header instead.
type SentWire struct {
	// ExecutionID is the execution_id member (SentRecord only); "" when absent or null.
	ExecutionID string
	Type        string
	// Payload is the payload member as sent; nil when absent.
	Payload json.RawMessage
	// ID is the id member; HasID is false when it is absent or null.
	ID    string
	HasID bool
}

// SentRefusal says what kind of fault a refused sent event has.
type SentRefusal int

const (
	// SentEmpty: nothing but white space.
	SentEmpty SentRefusal = iota + 1
	// SentNotJSON: not JSON, or JSON followed by more data.
	SentNotJSON
	// SentNotObject: JSON, but not an object (null included).
	SentNotObject
	// SentUnknownMember: a member the form does not have (Field names it).
	SentUnknownMember
	// SentNotString: a member that must be a string is not (Field names it).
	SentNotString
	// SentMissingMember: type is absent or null (Field names it).
	SentMissingMember
	// SentInvalidMember: type or id empty, too long or holding NUL (Field names it).
	SentInvalidMember
)

// SentWireError is why ParseSent refused a value.
type SentWireError struct {
	Refusal SentRefusal
	// Field is the member at fault; "" when the fault is the whole value.
	Field string
	// Reason is a sentence fragment: "must be 1 to 200 characters", "not a JSON object".
	Reason string
}

func (e *SentWireError) Error() string {
	if e.Field == "" {
		return "sent event: " + e.Reason
	}
	return "sent event: " + e.Field + ": " + e.Reason
}

// ParseSent reads a sent event's JSON object in the given form. A refusal is a
// *SentWireError. It does not check that the payload can be stored (CheckStorable):
// sending does, and the consumer checks the whole value before it reads members.
func ParseSent(raw []byte, form SentForm) (SentWire, error) {
	var w SentWire
	refuse := func(r SentRefusal, field, reason string) (SentWire, error) {
		return w, &SentWireError{Refusal: r, Field: field, Reason: reason}
	}
	var members map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	decErr := dec.Decode(&members)
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(decErr, io.EOF):
		return refuse(SentEmpty, "", "empty")
	case decErr != nil && !errors.As(decErr, &te):
		return refuse(SentNotJSON, "", decErr.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return refuse(SentNotJSON, "", "unexpected data after the JSON object")
	}
	if decErr != nil {
		return refuse(SentNotObject, "", "not a JSON object")
	}
	if members == nil {
		return refuse(SentNotObject, "", "null, not a JSON object")
	}
	for _, k := range slices.Sorted(maps.Keys(members)) {
		switch k {
		case "type", "payload", "id":
		case workflow.DefaultExecutionIDField:
			if form == SentRecord {
				continue
			}
			fallthrough
		default:
			return refuse(SentUnknownMember, k, "unknown member")
		}
	}
	// str reads a string member; absent and null are "", false.
	str := func(key string) (v string, present bool, err error) {
		raw, ok := members[key]
		if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return "", false, nil
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", true, &SentWireError{Refusal: SentNotString, Field: key, Reason: "must be a string, not " + jsonKind(raw)}
		}
		return v, true, nil
	}
	var err error
	if w.ExecutionID, _, err = str(workflow.DefaultExecutionIDField); err != nil {
		return w, err
	}
	typ, present, err := str("type")
	if err != nil {
		return w, err
	}
	if !present {
		return refuse(SentMissingMember, "type", "required")
	}
	if reason := eventTextFault(typ); reason != "" {
		return refuse(SentInvalidMember, "type", reason)
	}
	w.Type = typ
	if w.ID, w.HasID, err = str("id"); err != nil {
		return w, err
	}
	if w.HasID {
		if reason := eventTextFault(w.ID); reason != "" {
			return refuse(SentInvalidMember, "id", reason)
		}
	}
	w.Payload = members["payload"]
	return w, nil
}

// eventTextFault is why a type or id cannot be used, or "": PostgreSQL stores it as
// text, which cannot hold NUL. (The JSON decoder has already made it valid UTF-8.)
func eventTextFault(s string) string {
	if n := utf8.RuneCountInString(s); n < 1 || n > MaxEventTextLen {
		return fmt.Sprintf("must be 1 to %d characters", MaxEventTextLen)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return `must not contain NUL (\u0000)`
	}
	return ""
}

// jsonKind names the kind of a JSON value, as encoding/json's type errors do.
func jsonKind(raw json.RawMessage) string {
	switch b := bytes.TrimSpace(raw); {
	case len(b) == 0:
		return "nothing"
	case b[0] == '{':
		return "object"
	case b[0] == '[':
		return "array"
	case b[0] == 't' || b[0] == 'f':
		return "bool"
	default:
		return "number"
	}
}
