package chaos

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/rendezvous-run/rendezvous/consumer"
)

// Event names, as the service stores them. EventMatch is a named Kafka event correlated
// by payload rather than by ids: its record carries the execution's match value at
// MatchPath, and no ids. EventSend is a named event sent to the execution by type
// (POST /api/v1/executions/{id}/events, or a record of SentTopic: type SendType) with an
// id of its own; sent after its wait has ended it is buffered, never recorded.
const (
	EventAPI   = "api_response"
	EventKafka = "kafka_event"
	EventMatch = "paid"
	EventSend  = "approval"
)

// SendType is the type EventSend is sent with.
const SendType = "chaos.approved"

// MatchPath is where a match record carries its value.
const MatchPath = "chaos.match"

// MatchValue is the payload-match value of plan index i: 2^53 + i. A float64 holds
// only every other one of them, so an execution's record is also a test that numbers are
// compared exactly: rounded, it would reach a neighbour's wait too.
func MatchValue(i int) json.Number {
	return json.Number(strconv.FormatUint(1<<53+uint64(i), 10))
}

// kafkaSourced reports whether the named event arrives as a Kafka record.
func kafkaSourced(name string) bool { return name == EventKafka || name == EventMatch }

// Topic is the one Kafka topic every definition waits on; several id layouts share it,
// so the consumer must try each configured layout per record.
const Topic = "chaos.events"

// TopicPartitions is more than the replicas, so every consumer owns some partitions.
// SentTopic has as many.
const TopicPartitions = 6

// consumedTopics are the topics the replicas consume, each with TopicPartitions.
var consumedTopics = []string{Topic, SentTopic, TriggerTopic}

// SentTopic is the events topic the replicas consume (the service's default): the Kafka
// form of sending an event by type.
const SentTopic = consumer.EventsTopicDefault

// How a definition's Kafka records carry their ids.
const (
	IDsFields  = "fields"  // top-level execution_id / correlation_id
	IDsNested  = "nested"  // data.ids.execution / data.ids.correlation (dot paths)
	IDsHeaders = "headers" // record headers named like the default fields
)

// Definition is one workflow of the run: a wait_events node, then one http node per way
// the wait can continue, each posting to the fake service — the continuation's side
// effect that counts resumes.
type Definition struct {
	Name      string
	Strategy  string
	OnTimeout string
	// Custom is requiredEvents, for the custom strategy.
	Custom []string
	// Timeout is the node's overall timeout.
	Timeout time.Duration
	// Events are the enabled events, api_response first (the service's order).
	Events []EventDef
	// KafkaIDs is how records carry ids (IDs*); Filter adds {"type": "chaos.done"}.
	KafkaIDs string
	Filter   bool
	// Lookback gives EventMatch a lookback (MatchLookback): a record produced before
	// the wait exists is kept and taken when the wait registers (ModeEarly).
	Lookback bool
}

// MatchLookback is the lookback of the definitions with Lookback: longer than a
// replica's restart, so an early record outlasts any delay of its wait.
const MatchLookback = 5 * time.Minute

// EventDef is one enabled event of a definition.
type EventDef struct {
	Name     string
	Required bool
	// Timeout is the event's own timeout; zero means the node's.
	Timeout time.Duration
}

// Event returns the named enabled event.
func (d *Definition) Event(name string) (EventDef, bool) {
	for _, e := range d.Events {
		if e.Name == name {
			return e, true
		}
	}
	return EventDef{}, false
}

// eventTimeout is how long after the wait registers ev's deadline falls: its own
// timeout, else the node's.
func (d *Definition) eventTimeout(ev EventDef) time.Duration {
	if ev.Timeout > 0 {
		return ev.Timeout
	}
	return d.Timeout
}

// RequiredSet is what the strategy waits for (the service's required_events).
func (d *Definition) RequiredSet() []string {
	var out []string
	switch d.Strategy {
	case "all":
		for _, e := range d.Events {
			out = append(out, e.Name)
		}
	case "any":
	case "required_only":
		for _, e := range d.Events {
			if e.Required {
				out = append(out, e.Name)
			}
		}
	case "custom":
		out = append(out, d.Custom...)
	}
	return out
}

// variant is an event layout crossed with every onTimeout mode.
type variant struct {
	key      string
	strategy string
	custom   []string
	// timeout is the overall timeout in units of Config.WaitTimeout.
	timeout float64
	events  []eventVariant
	ids     string
	filter  bool
	// lookback: see Definition.Lookback.
	lookback bool
}

type eventVariant struct {
	name     string
	required bool
	// timeout in units of Config.WaitTimeout; zero is the node's.
	timeout float64
}

// variants cover each strategy with required and optional events, per-event timeouts
// shorter than the node's, single-event waits, and the three id layouts of records.
var variants = []variant{
	{key: "all-both", strategy: "all", timeout: 1, ids: IDsFields,
		events: []eventVariant{{EventAPI, true, 0}, {EventKafka, true, 0}}},
	{key: "all-api-deadline", strategy: "all", timeout: 1.5, ids: IDsNested,
		events: []eventVariant{{EventAPI, true, 0.5}, {EventKafka, false, 0}}},
	{key: "any-both", strategy: "any", timeout: 1, ids: IDsHeaders,
		events: []eventVariant{{EventAPI, false, 0}, {EventKafka, false, 0.5}}},
	{key: "any-api-required", strategy: "any", timeout: 1, ids: IDsFields, filter: true,
		events: []eventVariant{{EventAPI, true, 0}, {EventKafka, false, 0}}},
	{key: "required-api", strategy: "required_only", timeout: 1, ids: IDsFields,
		events: []eventVariant{{EventAPI, true, 0}, {EventKafka, false, 0.4}}},
	{key: "required-kafka", strategy: "required_only", timeout: 1.5, ids: IDsNested, filter: true,
		events: []eventVariant{{EventAPI, false, 0}, {EventKafka, true, 0.6}}},
	{key: "custom-kafka", strategy: "custom", custom: []string{EventKafka}, timeout: 1, ids: IDsHeaders,
		events: []eventVariant{{EventAPI, true, 0.5}, {EventKafka, true, 0}}},
	{key: "custom-api", strategy: "custom", custom: []string{EventAPI}, timeout: 1, ids: IDsFields,
		events: []eventVariant{{EventAPI, false, 0}, {EventKafka, true, 0.5}}},
	{key: "api-only", strategy: "all", timeout: 1,
		events: []eventVariant{{EventAPI, true, 0}}},
	{key: "kafka-only", strategy: "all", timeout: 1, ids: IDsNested, filter: true,
		events: []eventVariant{{EventKafka, true, 0}}},
	{key: "kafka-only-any", strategy: "any", timeout: 1.5, ids: IDsHeaders,
		events: []eventVariant{{EventKafka, false, 0}}},
	{key: "all-match", strategy: "all", timeout: 1,
		events: []eventVariant{{EventAPI, true, 0}, {EventMatch, true, 0.5}}},
	{key: "any-match", strategy: "any", timeout: 1,
		events: []eventVariant{{EventMatch, false, 0}}},
	{key: "all-match-lookback", strategy: "all", timeout: 1, lookback: true,
		events: []eventVariant{{EventAPI, true, 0}, {EventMatch, true, 0}}},
	{key: "all-send", strategy: "all", timeout: 1, ids: IDsFields,
		events: []eventVariant{{EventKafka, true, 0}, {EventSend, true, 0.5}}},
	{key: "any-send", strategy: "any", timeout: 1,
		events: []eventVariant{{EventAPI, false, 0}, {EventSend, false, 0}}},
}

var onTimeouts = []string{"fail", "continue", "continue_with_partial"}

// Definitions returns the run's definitions: every variant with every onTimeout mode.
// The list depends on the base timeout only, not on the seed.
func Definitions(base time.Duration) []Definition {
	scale := func(f float64) time.Duration {
		return (time.Duration(f * float64(base))).Round(100 * time.Millisecond)
	}
	var out []Definition
	for _, v := range variants {
		for _, ot := range onTimeouts {
			d := Definition{
				Name: fmt.Sprintf("chaos-%s-%s", v.key, ot), Strategy: v.strategy, OnTimeout: ot,
				Custom: v.custom, Timeout: scale(v.timeout), KafkaIDs: v.ids, Filter: v.filter, Lookback: v.lookback,
			}
			for _, e := range v.events {
				d.Events = append(d.Events, EventDef{Name: e.name, Required: e.required, Timeout: scale(e.timeout)})
			}
			out = append(out, d)
		}
	}
	return out
}

// Record field paths of each id layout (headers use the default names).
func kafkaIDFields(layout string) (execField, corrField string) {
	if layout == IDsNested {
		return "data.ids.execution", "data.ids.correlation"
	}
	return "execution_id", "correlation_id"
}

// JSON renders the definition for PUT /api/v1/workflows/:name. fakeURL is the fake
// external service; the var sender is overridden per replica process
// (RENDEZVOUS_VAR_SENDER), so each continuation call names the process that made it.
func (d *Definition) JSON(fakeURL string) ([]byte, error) {
	wait := map[string]any{
		"aggregationStrategy": d.Strategy,
		"timeout":             d.Timeout.String(),
		"onTimeout":           d.OnTimeout,
	}
	if len(d.Custom) > 0 {
		wait["requiredEvents"] = d.Custom
	}
	var named []any
	for _, e := range d.Events {
		switch e.Name {
		case EventAPI:
			call := map[string]any{
				"url":      "@{_vars.fake}/calls",
				"method":   "POST",
				"required": e.Required,
				"body":     map[string]any{"plan": "@{_trigger.chaos_plan}"},
			}
			if e.Timeout > 0 {
				call["timeout"] = e.Timeout.String()
			}
			wait["apiCall"] = call
		case EventKafka:
			execField, corrField := kafkaIDFields(d.KafkaIDs)
			ke := map[string]any{
				"topic": Topic, "executionIdField": execField, "correlationIdField": corrField, "required": e.Required,
			}
			if d.Filter {
				ke["filter"] = map[string]any{"type": "chaos.done"}
			}
			if e.Timeout > 0 {
				ke["timeout"] = e.Timeout.String()
			}
			wait["kafkaEvent"] = ke
		case EventMatch:
			ev := map[string]any{
				"name": EventMatch, "source": "kafka", "topic": Topic, "required": e.Required,
				"match": map[string]any{"left": MatchPath, "op": "eq", "right": "input.chaos_match"},
			}
			if e.Timeout > 0 {
				ev["timeout"] = e.Timeout.String()
			}
			if d.Lookback {
				ev["lookback"] = MatchLookback.String()
			}
			named = append(named, ev)
		case EventSend:
			ev := map[string]any{"name": EventSend, "source": "send", "type": SendType, "required": e.Required}
			if e.Timeout > 0 {
				ev["timeout"] = e.Timeout.String()
			}
			named = append(named, ev)
		}
	}
	if len(named) > 0 {
		wait["events"] = named
	}
	continuation := func(kind string) map[string]any {
		return map[string]any{
			"url":     "@{_vars.fake}/continuations",
			"method":  "POST",
			"timeout": 5,
			"headers": map[string]any{"X-Chaos-Sender": "@{_vars.sender}"},
			"body": map[string]any{
				"kind":             kind,
				"execution_id":     "@{_execution.id}",
				"correlation_id":   "@{nodes.wait.output.correlation_id}",
				"arrival_order":    "@{nodes.wait.output.arrival_order}",
				"timed_out_events": "@{nodes.wait.output.timed_out_events}",
			},
		}
	}
	def := map[string]any{
		"name": d.Name,
		"vars": map[string]any{"fake": fakeURL, "sender": "unknown"},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": wait},
			map[string]any{"id": NodeSatisfied, "type": "http", "data": continuation(KindSatisfied)},
			map[string]any{"id": NodeTimedOut, "type": "http", "data": continuation(KindTimedOut)},
		},
		"edges": []any{
			map[string]any{"source": "wait", "target": NodeSatisfied, "condition": "output.timeout == false"},
			map[string]any{"source": "wait", "target": NodeTimedOut, "condition": "output.timeout == true"},
		},
	}
	return json.Marshal(def)
}

// Continuation nodes and the kinds their calls report.
const (
	NodeSatisfied = "on_satisfied"
	NodeTimedOut  = "on_timeout"
	KindSatisfied = "satisfied"
	KindTimedOut  = "timeout"
)
