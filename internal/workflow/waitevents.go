package workflow

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/dotpath"
)

// Event names a wait_events node can wait for.
const (
	EventAPIResponse = "api_response"
	EventKafka       = "kafka_event"
)

// eventNames lists every event name in the order Expected reports them.
var eventNames = []string{EventAPIResponse, EventKafka}

// Event sources, i.e. how an event reaches rendezvous.
const (
	SourceCallback = "callback"
	SourceKafka    = "kafka"
)

// Aggregation strategies decide when a wait_events node is satisfied.
const (
	StrategyAll          = "all"           // every enabled event arrived
	StrategyAny          = "any"           // the first enabled event arrived
	StrategyRequiredOnly = "required_only" // every enabled event with required:true arrived
	StrategyCustom       = "custom"        // every event in RequiredEvents arrived
)

var strategies = []string{StrategyAll, StrategyAny, StrategyRequiredOnly, StrategyCustom}

// OnTimeout policies decide what a timed-out wait_events node does.
const (
	OnTimeoutFail                = "fail"
	OnTimeoutContinue            = "continue"
	OnTimeoutContinueWithPartial = "continue_with_partial"
)

var onTimeouts = []string{OnTimeoutFail, OnTimeoutContinue, OnTimeoutContinueWithPartial}

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
	AggregationStrategy string            // "all" (default) | "any" | "required_only" | "custom"
	RequiredEvents      []string          // event names, for "custom"
	Timeout             time.Duration     // overall, default 300s
	OnTimeout           string            // "fail" (default) | "continue" | "continue_with_partial"
	OutputMapping       map[string]string // output key -> "<event>" or "<event>.<dot path>"
}

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
}

// KafkaEvent describes the Kafka record a wait_events node waits for.
type KafkaEvent struct {
	Topic              string         // required when enabled
	CorrelationIDField string         // dot path, default "correlation_id"
	ExecutionIDField   string         // dot path, default "execution_id"
	Filter             map[string]any // dot path -> scalar that must be equal
	Timeout            time.Duration  // default: the node's overall timeout
	Required           bool           // default true
}

// ExpectedEvent is one event an enabled wait_events node waits for.
type ExpectedEvent struct {
	Name     string // EventAPIResponse or EventKafka
	Source   string // SourceCallback or SourceKafka
	Topic    string // Kafka topic, empty for callbacks
	Required bool
	Timeout  time.Duration
}

// Expected returns the enabled events, api_response first.
func (w *WaitEvents) Expected() []ExpectedEvent {
	var out []ExpectedEvent
	if w == nil {
		return out
	}
	if w.APICall != nil {
		out = append(out, ExpectedEvent{Name: EventAPIResponse, Source: SourceCallback, Required: w.APICall.Required, Timeout: w.APICall.Timeout})
	}
	if w.KafkaEvent != nil {
		out = append(out, ExpectedEvent{Name: EventKafka, Source: SourceKafka, Topic: w.KafkaEvent.Topic, Required: w.KafkaEvent.Required, Timeout: w.KafkaEvent.Timeout})
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
	return false
}

// kafkaTopic matches Kafka's legal topic names.
var kafkaTopic = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// ParseWaitEventsNode is the NodeParser for wait_events nodes; config is a
// *WaitEvents with defaults applied.
func ParseWaitEventsNode(data json.RawMessage, path string) (any, []FieldError) {
	var errs errList
	o, ok := parseData(data, path, &errs)
	if !ok {
		return nil, errs
	}
	o.unknown("apiCall", "kafkaEvent", "aggregationStrategy", "requiredEvents", "timeout", "onTimeout", "outputMapping")
	// An event without a timeout of its own waits as long as the node does: the
	// overall timeout is its default (300 s when the node gives none either).
	overall := o.duration("timeout", DefaultWaitTimeout)
	w := &WaitEvents{
		APICall:    parseAPICall(o, overall),
		KafkaEvent: parseKafkaEvent(o, overall),
		Timeout:    overall,
	}

	w.AggregationStrategy = o.str("aggregationStrategy", StrategyAll)
	if !slices.Contains(strategies, w.AggregationStrategy) {
		errs.add(o.p("aggregationStrategy"), "unknown strategy %q (allowed: %s)", w.AggregationStrategy, strings.Join(strategies, ", "))
	}
	w.OnTimeout = o.str("onTimeout", OnTimeoutFail)
	if !slices.Contains(onTimeouts, w.OnTimeout) {
		errs.add(o.p("onTimeout"), "unknown value %q (allowed: %s)", w.OnTimeout, strings.Join(onTimeouts, ", "))
	}

	// requiredEvents
	w.RequiredEvents = o.stringSlice("requiredEvents")
	reqPath := o.p("requiredEvents")
	switch {
	case w.AggregationStrategy == StrategyCustom && len(w.RequiredEvents) == 0:
		errs.add(reqPath, "required for aggregationStrategy %q", StrategyCustom)
	case w.AggregationStrategy != StrategyCustom && len(w.RequiredEvents) > 0:
		// Silently ignoring it would hide a misunderstanding of the
		// strategy; tell the author instead.
		errs.add(reqPath, "only used with aggregationStrategy %q", StrategyCustom)
	}
	if raw, ok := o.get("requiredEvents"); ok {
		if arr, ok := raw.([]any); ok {
			seen := map[string]int{}
			for i, e := range arr {
				name, ok := e.(string)
				if !ok {
					continue // already reported by stringSlice
				}
				p := indexPath(reqPath, i)
				switch {
				case !slices.Contains(eventNames, name):
					errs.add(p, "unknown event %q (known: %s)", name, strings.Join(eventNames, ", "))
				case !w.enabled(name):
					errs.add(p, "names disabled event %q", name)
				}
				if prev, dup := seen[name]; dup {
					errs.add(p, "duplicate event %q (also %s)", name, indexPath("requiredEvents", prev))
				} else {
					seen[name] = i
				}
			}
		}
	}

	if w.AggregationStrategy == StrategyRequiredOnly {
		anyRequired := false
		for _, e := range w.Expected() {
			anyRequired = anyRequired || e.Required
		}
		if !anyRequired {
			errs.add(o.p("aggregationStrategy"), "%q needs at least one enabled event with required: true", StrategyRequiredOnly)
		}
	}

	w.OutputMapping = parseOutputMapping(o, w)
	return w, errs
}

// enabledChild reads an optional event object: absent, null or
// enabled:false yields nil, and then no other field is validated so that
// authors can switch an event off without deleting its configuration.
func enabledChild(o *object, key string) *object {
	c, ok := o.child(key)
	if !ok {
		return nil
	}
	if !c.boolean("enabled", true) {
		return nil
	}
	return c
}

func parseAPICall(o *object, overall time.Duration) *APICall {
	c := enabledChild(o, "apiCall")
	if c == nil {
		return nil
	}
	c.unknown("enabled", "url", "method", "headers", "body", "correlationIdField", "correlationIdHeader",
		"executionIdField", "executionIdHeader", "timeout", "required")
	a := &APICall{
		URL:                 c.url("required when enabled"),
		Method:              c.method("POST"),
		Headers:             c.headers(),
		Body:                c.body(),
		CorrelationIDField:  c.str("correlationIdField", DefaultCorrelationIDField),
		CorrelationIDHeader: c.headerField("correlationIdHeader", DefaultCorrelationIDHeader),
		ExecutionIDField:    c.str("executionIdField", DefaultExecutionIDField),
		ExecutionIDHeader:   c.headerField("executionIdHeader", DefaultExecutionIDHeader),
		Timeout:             c.duration("timeout", overall),
		Required:            c.boolean("required", true),
	}
	checkDotPath(c.errs, c.p("correlationIdField"), a.CorrelationIDField)
	checkDotPath(c.errs, c.p("executionIdField"), a.ExecutionIDField)
	return a
}

func parseKafkaEvent(o *object, overall time.Duration) *KafkaEvent {
	c := enabledChild(o, "kafkaEvent")
	if c == nil {
		return nil
	}
	c.unknown("enabled", "topic", "correlationIdField", "executionIdField", "filter", "timeout", "required")
	k := &KafkaEvent{
		Topic:              c.str("topic", ""),
		CorrelationIDField: c.str("correlationIdField", DefaultCorrelationIDField),
		ExecutionIDField:   c.str("executionIdField", DefaultExecutionIDField),
		Timeout:            c.duration("timeout", overall),
		Required:           c.boolean("required", true),
	}
	if v, ok := c.get("topic"); !ok || v == "" {
		c.errs.add(c.p("topic"), "required when enabled")
	} else if k.Topic != "" && !kafkaTopic.MatchString(k.Topic) {
		c.errs.add(c.p("topic"), "invalid Kafka topic %q (letters, digits, '.', '_', '-'; at most 249)", k.Topic)
	}
	checkDotPath(c.errs, c.p("correlationIdField"), k.CorrelationIDField)
	checkDotPath(c.errs, c.p("executionIdField"), k.ExecutionIDField)
	if f, ok := c.child("filter"); ok {
		k.Filter = make(map[string]any, len(f.m))
		for _, key := range sortedKeys(f.m) {
			p := f.p(key)
			if _, err := dotpath.Split(key); err != nil || key == "" {
				c.errs.add(p, "invalid dot path %q: %v", key, errOrEmpty(err))
				continue
			}
			switch f.m[key].(type) {
			case string, json.Number, bool, nil:
				k.Filter[key] = f.m[key]
			default:
				c.errs.add(p, "must be a scalar (string, number, boolean or null)")
			}
		}
	}
	return k
}

func errOrEmpty(err error) error {
	if err == nil {
		return fmt.Errorf("empty path")
	}
	return err
}

// parseOutputMapping reads outputMapping, or builds the default mapping
// for the enabled events.
func parseOutputMapping(o *object, w *WaitEvents) map[string]string {
	if _, present := o.get("outputMapping"); !present {
		m := map[string]string{}
		if w.APICall != nil {
			m["apiResponse"] = EventAPIResponse
		}
		if w.KafkaEvent != nil {
			m["kafkaEvent"] = EventKafka
		}
		return m
	}
	m := o.stringMap("outputMapping")
	mp := o.p("outputMapping")
	for _, key := range sortedKeys(m) {
		p := childPath(mp, key)
		if key == "" {
			o.errs.add(p, "output key must not be empty")
			continue
		}
		val := m[key]
		segs, err := dotpath.Split(val)
		switch {
		case val == "":
			o.errs.add(p, "must be %s or %s.<dot path>", strings.Join(eventNames, "|"), "<event>")
		case err != nil:
			o.errs.add(p, "invalid dot path %q: %v", val, err)
		case !slices.Contains(eventNames, segs[0]):
			o.errs.add(p, "names unknown event %q (known: %s)", segs[0], strings.Join(eventNames, ", "))
		case !w.enabled(segs[0]):
			o.errs.add(p, "names disabled event %q", segs[0])
		}
	}
	return m
}
