package aggregator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
)

// jsonSpace is the whitespace JSON allows between tokens, which json.Compact removes.
const jsonSpace = " \t\r\n"

// Output builds a finished wait's node output, as the JSON document it is written as:
// the outputMapping entries (null for an event that did not arrive), which events
// arrived, when, from where and in what order, which timed out, whether the wait ended by
// timeout, and missing — the required events a wait cut short (by its deadline, or
// cancelled) did not get, [] when nil — so that edges can branch on it. A mapping entry
// named like one of these fixed keys is overridden by it. Numbers stay exact: an id
// mapped into the output is the id that arrived.
//
// The document is written directly rather than built as maps and marshalled: a mapping
// entry naming a whole payload copies the payload's text, compacted when it has spaces;
// one naming a path inside it decodes that payload once. Decoding every payload into maps
// only to encode it again led the CPU profile of applying a batch of events. A payload that is not JSON fails where it is compacted or decoded, and else in
// the json column the output is written to.
func Output(ws dbsqlc.ExecutionWaitState, received []Received, timedOutEvents []string, timedOut bool, missing []string) ([]byte, error) {
	var named map[string]json.RawMessage
	// Most waits name no event of their own, and PostgreSQL writes their event_data as
	// {}: decoding it would only allocate an empty map, for every wait.
	if len(ws.EventData) > 0 && string(ws.EventData) != "{}" {
		if err := json.Unmarshal(ws.EventData, &named); err != nil {
			return nil, fmt.Errorf("decode event_data: %w", err)
		}
	}
	raw := func(name string) []byte {
		if r, ok := named[name]; ok {
			return r
		}
		switch name {
		case EventAPIResponse:
			return ws.ApiResponseData
		case EventKafka:
			return ws.KafkaEventData
		}
		return nil
	}
	mapping, err := outputMapping(ws.OutputMapping)
	if err != nil {
		return nil, err
	}
	// Sized for what is written whole: the payloads, the fixed keys, an entry of about
	// 200 bytes per event received. Growing it copies all that was written before.
	buf := make([]byte, 0, 384+len(ws.KafkaEventData)+len(ws.ApiResponseData)+len(ws.EventData)+200*len(received))
	buf = append(buf, '{')
	var decoded map[string]any // payloads decoded for a path inside them, by name
	for _, m := range mapping {
		if outputFixedKey(m.key) {
			continue // Output sets these after the mapping: theirs win
		}
		buf = appendJSONString(buf, m.key)
		buf = append(buf, ':')
		if buf, err = appendMapped(buf, raw(m.name), m, &decoded); err != nil {
			return nil, err
		}
		buf = append(buf, ',')
	}
	buf = append(buf, `"events":[`...)
	for i, r := range received {
		if i > 0 {
			buf = append(buf, ',')
		}
		// The output shows what arrived, when and from where; the dedup key stays in
		// the wait row.
		if buf, err = appendReceivedJSON(buf, r, false); err != nil {
			return nil, err
		}
	}
	buf = append(buf, `],"arrival_order":[`...)
	for i, r := range received {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, r.Name)
	}
	buf = append(buf, `],"correlation_id":"`...)
	buf = appendUUID(buf, ws.CorrelationID)
	buf = append(buf, `","strategy":`...)
	buf = appendJSONString(buf, string(ws.AggregationStrategy))
	buf = append(buf, `,"timeout":`...)
	buf = strconv.AppendBool(buf, timedOut)
	buf = append(buf, `,"timed_out_events":`...)
	buf = appendJSONStrings(buf, timedOutEvents)
	buf = append(buf, `,"missing_required_events":`...)
	buf = appendJSONStrings(buf, missing)
	return append(buf, '}'), nil
}

// appendMapped appends the value of one output mapping entry: the payload r whole
// (compacted), or the value at m.sub inside it, decoded once per payload into decoded.
func appendMapped(buf, r []byte, m mappedOutput, decoded *map[string]any) ([]byte, error) {
	switch {
	case len(r) == 0:
		return append(buf, "null"...), nil
	case m.sub == "" && !bytes.ContainsAny(r, jsonSpace):
		// Already compact, as most producers send it: copied as it is. Every payload
		// here was checked as JSON before it was stored or decided on (CheckStorable),
		// so only its spaces were left for Compact to take out.
		return append(buf, r...), nil
	case m.sub == "":
		w := bytes.NewBuffer(buf) // compacted straight onto the document
		if err := json.Compact(w, r); err != nil {
			return nil, fmt.Errorf("decode %s data: %w", m.name, err)
		}
		return w.Bytes(), nil
	}
	v, ok := (*decoded)[m.name]
	if !ok {
		var err error
		if v, err = jsonnum.Decode(r); err != nil {
			return nil, fmt.Errorf("decode %s data: %w", m.name, err)
		}
		if *decoded == nil {
			*decoded = map[string]any{}
		}
		(*decoded)[m.name] = v
	}
	v, ok = dotpath.Get(v, m.sub)
	if !ok {
		v = nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(buf, b...), nil
}

// outputFixedKey says whether Output writes key itself, over an outputMapping entry of
// that name.
func outputFixedKey(key string) bool {
	switch key {
	case "events", "arrival_order", "correlation_id", "strategy", "timeout", "timed_out_events", "missing_required_events":
		return true
	}
	return false
}

// mappedOutput is one outputMapping entry: the output key, and the event (name) and
// path inside its payload (sub, "" for the whole payload) it takes.
type mappedOutput struct{ key, name, sub string }

// outputMapping decodes a wait's output_mapping. Every wait of one node holds the same,
// so decoded mappings are kept by their text (see decodedCache).
func outputMapping(raw []byte) ([]mappedOutput, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	v, err := decodedCache.get(cacheMapping, raw, func() (any, error) {
		var mapping map[string]string
		if err := json.Unmarshal(raw, &mapping); err != nil {
			return nil, fmt.Errorf("decode output_mapping: %w", err)
		}
		out := make([]mappedOutput, 0, len(mapping))
		for key, path := range mapping {
			name, sub, _ := strings.Cut(path, ".")
			out = append(out, mappedOutput{key: key, name: name, sub: sub})
		}
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]mappedOutput), nil
}

// receivedJSON encodes received events as json.Marshal does, without its reflection.
func receivedJSON(received []Received) ([]byte, error) {
	if received == nil {
		return []byte("null"), nil
	}
	buf := make([]byte, 0, 64+200*len(received))
	buf = append(buf, '[')
	var err error
	for i, r := range received {
		if i > 0 {
			buf = append(buf, ',')
		}
		if buf, err = appendReceivedJSON(buf, r, true); err != nil {
			return nil, err
		}
	}
	return append(buf, ']'), nil
}

// appendReceivedJSON appends one received event as json.Marshal encodes it, its key
// only when withKey (the wait row keeps it; the node output does not show it).
func appendReceivedJSON(buf []byte, r Received, withKey bool) ([]byte, error) {
	buf = append(buf, `{"name":`...)
	buf = appendJSONString(buf, r.Name)
	buf = append(buf, `,"received_at":`...)
	buf, err := appendJSONTime(buf, r.ReceivedAt)
	if err != nil {
		return nil, err
	}
	buf = append(buf, `,"source":`...)
	buf = appendSourceJSON(buf, r.Source)
	if withKey {
		buf = append(buf, `,"key":`...)
		buf = appendJSONString(buf, r.Key)
	}
	return append(buf, '}'), nil
}

// appendSourceJSON appends s as json.Marshal encodes a Source.
func appendSourceJSON(buf []byte, s Source) []byte {
	buf = append(buf, `{"kind":`...)
	buf = appendJSONString(buf, string(s.Kind))
	if s.Service != "" {
		buf = append(buf, `,"service":`...)
		buf = appendJSONString(buf, s.Service)
	}
	if s.Topic != "" {
		buf = append(buf, `,"topic":`...)
		buf = appendJSONString(buf, s.Topic)
	}
	if s.Partition != nil {
		buf = append(buf, `,"partition":`...)
		buf = strconv.AppendInt(buf, int64(*s.Partition), 10)
	}
	if s.Offset != nil {
		buf = append(buf, `,"offset":`...)
		buf = strconv.AppendInt(buf, *s.Offset, 10)
	}
	return append(buf, '}')
}

// appendJSONTime appends t as json.Marshal encodes a time.Time.
func appendJSONTime(buf []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		b, err := json.Marshal(t) // the error json.Marshal gives
		return append(buf, b...), err
	}
	buf = append(buf, '"')
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	return append(buf, '"'), nil
}

// appendJSONStrings appends ss as a JSON array ([] for none).
func appendJSONStrings(buf []byte, ss []string) []byte {
	buf = append(buf, '[')
	for i, s := range ss {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, s)
	}
	return append(buf, ']')
}

// appendJSONString appends s as a JSON string: as is when it needs no escaping, else as
// json.Marshal writes it.
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always encodes
			return append(buf, b...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

// appendUUID appends id's canonical text (8-4-4-4-12 lower-case hex digits), as
// uuid.UUID.String gives it, without making the string first.
func appendUUID(buf []byte, id uuid.UUID) []byte {
	const digits = "0123456789abcdef"
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			buf = append(buf, '-')
		}
		buf = append(buf, digits[b>>4], digits[b&0x0f])
	}
	return buf
}
