package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Event names a wait_events node can wait for.
const (
	EventAPIResponse = "api_response"
	EventKafka       = "kafka_event"
)

// eventNames lists every event name in the order Expected reports them.
var eventNames = []string{EventAPIResponse, EventKafka}

// Source is how an event reaches rendezvous.
type Source string

// Event sources.
const (
	SourceCallback Source = "callback"
	SourceKafka    Source = "kafka"
	// SourceSend is an event sent to an execution by type (POST
	// /api/v1/executions/{id}/events or the Kafka events topic).
	SourceSend Source = "send"
)

// BufferMode is the buffer policy of a send event (or a Kafka event kept for a
// lookback): which of the events that arrived before the node reached its wait
// the wait takes.
type BufferMode string

// Buffer policies.
const (
	BufferFIFO          BufferMode = "fifo"
	BufferLastWriteWins BufferMode = "last_write_wins"
)

// RecordFormat is how a consumed topic's record values are written, as a definition
// names it (kafkaEvent, a Kafka event, a trigger).
type RecordFormat string

// Record formats.
const (
	// FormatAuto: a value in the schema registry wire format (magic byte 0 and a schema
	// id) is decoded under its schema, whatever its kind; any other value is JSON. The
	// default.
	FormatAuto RecordFormat = "auto"
	// FormatJSON: plain JSON; a value in the wire format is a mismatch.
	FormatJSON RecordFormat = "json"
	// FormatAvro, FormatProtobuf, FormatJSONSchema: the wire format with a schema of that
	// kind; anything else is a mismatch.
	FormatAvro       RecordFormat = "avro"
	FormatProtobuf   RecordFormat = "protobuf"
	FormatJSONSchema RecordFormat = "jsonschema"
)

// MatchOpEq is the only payload-match comparison.
const MatchOpEq = "eq"

// DefaultEventBufferTTL is how long an event sent to an execution waits for a
// node to wait for its type, when the definition gives no eventBufferTtl.
const DefaultEventBufferTTL = 24 * time.Hour

// Defaults applied when a field is absent.
const (
	DefaultWaitTimeout         = 300 * time.Second
	DefaultCorrelationIDField  = "correlation_id"
	DefaultCorrelationIDHeader = "X-Correlation-Id"
	DefaultExecutionIDField    = "execution_id"
	DefaultExecutionIDHeader   = "X-Execution-Id"
)

// WaitEvents is the configuration of a wait_events node: it optionally
// calls an external API that answers asynchronously through a callback, and
// waits for that callback and/or a Kafka record correlated to the
// execution.
type WaitEvents struct {
	APICall             *APICall          // nil when absent or enabled:false
	KafkaEvent          *KafkaEvent       // nil when absent or enabled:false
	Events              []NamedEvent      // the events list, in order
	AggregationStrategy vocab.Strategy    // vocab.StrategyAll (default), vocab.StrategyAny, vocab.StrategyRequiredOnly or vocab.StrategyCustom
	RequiredEvents      []string          // event names, for "custom"
	Timeout             time.Duration     // overall, default 300s
	OnTimeout           vocab.OnTimeout   // vocab.OnTimeoutFail (default), vocab.OnTimeoutContinue or vocab.OnTimeoutContinueWithPartial
	OutputMapping       map[string]string // output key -> "<event>" or "<event>.<dot path>"

	warnings []FieldError // fields held to no effect; see Warnings
}

// Warnings lists the fields this node holds to no effect: requiredEvents under a
// strategy other than custom. It makes *WaitEvents a Warner.
func (w *WaitEvents) Warnings() []FieldError { return w.warnings }

// APICall is the outbound request whose answer arrives later as an
// api_response callback correlated by CorrelationIDField/Header.
type APICall struct {
	URL                 string
	Method              string            // GET|POST|PUT|PATCH|DELETE, default POST
	Headers             map[string]string // values may contain templates
	Body                any               // object or string, may contain templates; nil when absent
	CorrelationIDField  string            // default "correlation_id"
	CorrelationIDHeader string            // default "X-Correlation-Id"
	ExecutionIDField    string            // default "execution_id"
	ExecutionIDHeader   string            // default "X-Execution-Id"
	Timeout             time.Duration     // default: the node's overall timeout
	Required            bool              // default true
	FollowRedirects     bool              // default false: a 3xx is the answer
}

// KafkaEvent describes the Kafka record a wait_events node waits for.
type KafkaEvent struct {
	Topic              string         // required when enabled
	Format             RecordFormat   // how the topic's values are written, default auto
	CorrelationIDField string         // dot path, default "correlation_id"
	ExecutionIDField   string         // dot path, default "execution_id"
	Filter             map[string]any // dot path -> scalar that must be equal
	Timeout            time.Duration  // default: the node's overall timeout
	Required           bool           // default true
}

// NamedEvent is one entry of a wait_events node's events list.
type NamedEvent struct {
	Name   string
	Source Source // SourceCallback | SourceKafka | SourceSend
	Topic  string // Kafka topic, source kafka only
	// Format is how the topic's values are written: source kafka only, default auto.
	Format RecordFormat
	// Type is the type a send event is sent with, or the top-level "type" field
	// a Kafka record must carry; empty for none.
	Type     string
	Match    *Match         // source kafka only; nil: correlated by the two ids
	Filter   map[string]any // dot path -> scalar the payload must hold
	Timeout  time.Duration  // default: the node's overall timeout
	Required bool           // default true
	// Buffer: which early event the wait takes, BufferFIFO (default) or
	// BufferLastWriteWins; source send, and source kafka with a Lookback.
	Buffer BufferMode
	// Lookback, source kafka with Match only: how long a record that matched no
	// wait is kept for a wait that registers later with its value; 0 keeps none.
	Lookback time.Duration
}

// Match correlates a Kafka record by its payload: the value at Left (a dot
// path in the record) must equal Right, a reference resolved when the wait is
// registered.
type Match struct {
	Left  string
	Op    string // MatchOpEq
	Right string // input.<path> | nodes.<id>.output.<path> | _vars.<name>[.<path>]
}

// RightTemplate is Right as a template placeholder, for rendering against
// the execution's scope: input.x reads the execution input (_trigger).
func (m *Match) RightTemplate() string {
	if rest, ok := strings.CutPrefix(m.Right, "input."); ok {
		return "@{_trigger." + rest + "}"
	}
	return "@{" + m.Right + "}"
}

// ExpectedEvent is one event an enabled wait_events node waits for.
type ExpectedEvent struct {
	Name     string // EventAPIResponse, EventKafka or a name of the events list
	Source   Source // SourceCallback, SourceKafka or SourceSend
	Topic    string // Kafka topic, empty for other sources
	Type     string
	Match    *Match
	Filter   map[string]any
	Required bool
	Timeout  time.Duration
	Buffer   BufferMode
	Lookback time.Duration
}

// Expected returns the enabled events: api_response, kafka_event, then the
// events list in order.
func (w *WaitEvents) Expected() []ExpectedEvent {
	var out []ExpectedEvent
	if w == nil {
		return out
	}
	if w.APICall != nil {
		out = append(out, ExpectedEvent{Name: EventAPIResponse, Source: SourceCallback, Required: w.APICall.Required, Timeout: w.APICall.Timeout})
	}
	if w.KafkaEvent != nil {
		out = append(out, ExpectedEvent{Name: EventKafka, Source: SourceKafka, Topic: w.KafkaEvent.Topic, Filter: w.KafkaEvent.Filter,
			Required: w.KafkaEvent.Required, Timeout: w.KafkaEvent.Timeout})
	}
	for _, e := range w.Events {
		out = append(out, ExpectedEvent{Name: e.Name, Source: e.Source, Topic: e.Topic, Type: e.Type, Match: e.Match,
			Filter: e.Filter, Required: e.Required, Timeout: e.Timeout, Buffer: e.Buffer, Lookback: e.Lookback})
	}
	return out
}

// enabled reports whether the named event is enabled.
func (w *WaitEvents) enabled(name string) bool {
	switch name {
	case EventAPIResponse:
		return w.APICall != nil
	case EventKafka:
		return w.KafkaEvent != nil
	}
	return slices.ContainsFunc(w.Events, func(e NamedEvent) bool { return e.Name == name })
}

// ParseWaitEventsNode is the NodeParser for wait_events nodes; config is a
// *WaitEvents with defaults applied. The data is validated against
// wait_events.json first; this checks what the schema cannot: durations,
// dot paths and templates, and which events requiredEvents and
// outputMapping may name given the events that are enabled.
func ParseWaitEventsNode(data json.RawMessage, path string) (any, []FieldError) {
	var errs errList
	o, ok := parseNodeData(TypeWaitEvents, data, path, &errs)
	if !ok {
		return nil, errs
	}
	// An event without a timeout of its own waits as long as the node does: the
	// overall timeout is its default (300 s when the node gives none either).
	overall := o.duration("timeout", DefaultWaitTimeout)
	w := &WaitEvents{
		APICall:             parseAPICall(o, overall),
		KafkaEvent:          parseKafkaEvent(o, overall),
		Events:              parseEvents(o, overall),
		AggregationStrategy: enum(o, "aggregationStrategy", vocab.StrategyAll),
		RequiredEvents:      o.stringSlice("requiredEvents"),
		Timeout:             overall,
		OnTimeout:           enum(o, "onTimeout", vocab.OnTimeoutFail),
	}

	// The schema requires requiredEvents for "custom" and knows the event names;
	// whether a named event is enabled depends on the rest of the node. Under another
	// strategy the list decides nothing, so it is not checked: a definition written
	// with it (the list of what "all" waits for, spelled out) is stored and runs as
	// if it were absent, and its author is told so.
	reqPath := o.p("requiredEvents")
	arr, listed := o.m["requiredEvents"].([]any)
	if w.AggregationStrategy != vocab.StrategyCustom {
		if len(arr) > 0 {
			w.warnings = append(w.warnings, FieldError{Path: reqPath,
				Message: fmt.Sprintf("ignored: only used with aggregationStrategy %q; this node's strategy %q decides what it waits for", vocab.StrategyCustom, w.AggregationStrategy)})
		}
		w.RequiredEvents = nil
		listed = false
	}
	if listed {
		for i, e := range arr {
			name, ok := e.(string)
			p := indexPath(reqPath, i)
			if ok && !o.rejected[p] && !w.enabled(name) {
				if slices.Contains(eventNames, name) {
					errs.add(p, "names disabled event %q", name)
				} else {
					errs.add(p, "names no event of this node: %q is neither an enabled api_response/kafka_event nor in events", name)
				}
			}
		}
	}

	if w.AggregationStrategy == vocab.StrategyRequiredOnly {
		anyRequired := false
		for _, e := range w.Expected() {
			anyRequired = anyRequired || e.Required
		}
		if !anyRequired {
			errs.add(o.p("aggregationStrategy"), "%q needs at least one enabled event with required: true", vocab.StrategyRequiredOnly)
		}
	}

	w.OutputMapping = parseOutputMapping(o, w)
	return w, errs
}

// enabledChild reads an optional event object: absent, null or
// enabled:false yields nil, and then no other field is validated (the schema
// ignores it too) so that authors can switch an event off without deleting
// its configuration.
func enabledChild(o *object, key string) *object {
	c := o.child(key)
	if c == nil || !c.boolean("enabled", true) {
		return nil
	}
	return c
}

func parseAPICall(o *object, overall time.Duration) *APICall {
	c := enabledChild(o, "apiCall")
	if c == nil {
		return nil
	}
	return &APICall{
		URL:                 c.url(),
		Method:              c.method("POST"),
		Headers:             c.headers(),
		Body:                c.body(),
		CorrelationIDField:  c.dotPathField("correlationIdField", DefaultCorrelationIDField),
		CorrelationIDHeader: c.str("correlationIdHeader", DefaultCorrelationIDHeader),
		ExecutionIDField:    c.dotPathField("executionIdField", DefaultExecutionIDField),
		ExecutionIDHeader:   c.str("executionIdHeader", DefaultExecutionIDHeader),
		Timeout:             c.duration("timeout", overall),
		Required:            c.boolean("required", true),
		FollowRedirects:     c.boolean("followRedirects", false),
	}
}

func parseKafkaEvent(o *object, overall time.Duration) *KafkaEvent {
	c := enabledChild(o, "kafkaEvent")
	if c == nil {
		return nil
	}
	k := &KafkaEvent{
		Topic:              c.str("topic", ""),
		Format:             enum(c, "format", FormatAuto),
		CorrelationIDField: c.dotPathField("correlationIdField", DefaultCorrelationIDField),
		ExecutionIDField:   c.dotPathField("executionIdField", DefaultExecutionIDField),
		Timeout:            c.duration("timeout", overall),
		Required:           c.boolean("required", true),
	}
	k.Filter = parseFilter(c)
	return k
}

// parseFilter reads an optional filter object: dot path -> scalar.
func parseFilter(c *object) map[string]any {
	f := c.child("filter")
	if f == nil {
		return nil
	}
	out := make(map[string]any, len(f.m))
	for _, key := range sortedKeys(f.m) {
		p := f.p(key)
		if c.rejected[p] {
			continue
		}
		if _, err := dotpath.Split(key); err != nil {
			c.errs.add(p, "invalid dot path %q: %v", key, err)
			continue
		}
		out[key] = f.m[key]
	}
	return out
}

// parseEvents reads the events list. The schema checks each entry's shape and
// which fields its source allows; here: unique names, names other than the
// two events of apiCall/kafkaEvent, dot paths, and match references.
func parseEvents(o *object, overall time.Duration) []NamedEvent {
	arr, ok := o.m["events"].([]any)
	if !ok {
		return nil
	}
	lp := o.p("events")
	var out []NamedEvent
	seen := map[string]bool{}
	for i, raw := range arr {
		m, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		c := &object{path: indexPath(lp, i), m: m, errs: o.errs, rejected: o.rejected}
		e := NamedEvent{
			Name:     c.str("name", ""),
			Source:   enum[Source](c, "source", ""),
			Topic:    c.str("topic", ""),
			Type:     c.str("type", ""),
			Filter:   parseFilter(c),
			Timeout:  c.duration("timeout", overall),
			Required: c.boolean("required", true),
		}
		if e.Source == SourceSend {
			e.Buffer = enum(c, "buffer", BufferFIFO)
		}
		if e.Source == SourceKafka {
			e.Format = enum(c, "format", FormatAuto)
		}
		if _, ok := c.checkable("name"); ok {
			switch {
			case slices.Contains(eventNames, e.Name):
				c.errs.add(c.p("name"), "%q is reserved for %s; give this event another name", e.Name,
					map[string]string{EventAPIResponse: "apiCall", EventKafka: "kafkaEvent"}[e.Name])
			case seen[e.Name]:
				c.errs.add(c.p("name"), "duplicate event name %q", e.Name)
			}
			seen[e.Name] = true
		}
		if mc := c.child("match"); mc != nil {
			e.Match = &Match{Left: mc.dotPathField("left", ""), Op: mc.str("op", MatchOpEq), Right: mc.str("right", "")}
			if _, ok := mc.checkable("right"); ok {
				checkTemplate(c.errs, mc.p("right"), e.Match.RightTemplate())
			}
			if e.Source == SourceKafka {
				// The schema allows lookback (and then buffer) only here; the
				// server's maximum is checked where definitions are stored.
				if e.Lookback = c.duration("lookback", 0); e.Lookback > 0 {
					e.Buffer = enum(c, "buffer", BufferFIFO)
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// parseOutputMapping reads outputMapping, or builds the default mapping
// for the enabled events. The schema checks that each value starts with an
// event name; its dot path and whether the event is enabled are checked here.
func parseOutputMapping(o *object, w *WaitEvents) map[string]string {
	if _, present := o.get("outputMapping"); !present {
		m := map[string]string{}
		if w.APICall != nil {
			m["apiResponse"] = EventAPIResponse
		}
		if w.KafkaEvent != nil {
			m["kafkaEvent"] = EventKafka
		}
		for _, e := range w.Events {
			if _, taken := m[e.Name]; !taken {
				m[e.Name] = e.Name
			}
		}
		return m
	}
	m := o.stringMap("outputMapping")
	mp := o.p("outputMapping")
	for _, key := range sortedKeys(m) {
		p := childPath(mp, key)
		if o.rejected[p] {
			continue
		}
		val := m[key]
		segs, err := dotpath.Split(val)
		switch {
		case err != nil:
			o.errs.add(p, "invalid dot path %q: %v", val, err)
		case len(segs) > 0 && !w.enabled(segs[0]) && slices.Contains(eventNames, segs[0]):
			o.errs.add(p, "names disabled event %q", segs[0])
		case len(segs) > 0 && !w.enabled(segs[0]):
			o.errs.add(p, "names no event of this node: %q is neither an enabled api_response/kafka_event nor in events", segs[0])
		}
	}
	return m
}
