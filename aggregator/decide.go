package aggregator

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// wait is a wait state decoded for deciding events in memory. ApplyTx and ApplyBatch
// both decide with it, so one event is judged the same way whatever path it takes.
type wait struct {
	row dbsqlc.ExecutionWaitState
	// enabled, required and expected are written once, at registration, and shared
	// between the waits of one node (decodedCache): they are only ever read.
	enabled  []string
	required []string
	received []Received
	timedOut []string
	expected []Expected // decoded on demand (Kafka filters, deadlines)
	// applied counts events recorded in memory and not yet written.
	applied int
	// due is set when an event was judged late by the clock alone: a deadline has passed
	// that the stored row does not show yet. The caller must write that deadline (as the
	// sweeper would) before answering late; see ApplyTx.
	due bool
}

func decodeWait(row dbsqlc.ExecutionWaitState) (*wait, error) {
	w := &wait{row: row}
	var err error
	if w.enabled, err = decodeNames(row.EnabledEvents); err != nil {
		return nil, fmt.Errorf("decode wait %s: %w", row.ID, err)
	}
	if w.required, err = decodeNames(row.RequiredEvents); err != nil {
		return nil, fmt.Errorf("decode wait %s: %w", row.ID, err)
	}
	for _, part := range []struct {
		raw []byte
		dst any
	}{{row.ReceivedEvents, &w.received}, {row.TimedOutEvents, &w.timedOut}} {
		if string(part.raw) == "[]" {
			// The usual value of both until something arrives or times out: empty, not nil.
			switch dst := part.dst.(type) {
			case *[]Received:
				*dst = []Received{}
			case *[]string:
				*dst = []string{}
			}
			continue
		}
		if err := json.Unmarshal(part.raw, part.dst); err != nil {
			return nil, fmt.Errorf("decode wait %s: %w", row.ID, err)
		}
	}
	return w, nil
}

// decodeNames decodes a list of event names written at registration (enabled_events,
// required_events), shared through decodedCache: the result must only be read.
func decodeNames(raw []byte) ([]string, error) {
	v, err := decodedCache.get(cacheNames, raw, func() (any, error) {
		var names []string
		err := json.Unmarshal(raw, &names)
		return names, err
	})
	if err != nil {
		return nil, err
	}
	return v.([]string), nil
}

// decide judges one event against the wait and, when it applies, records it in memory:
// received events, payload, status. Nothing is written; the caller persists the result
// behind the version fence of the row it loaded. It returns the expected event the
// arrival was judged as (a Kafka record correlated by ids names none: it is the wait's
// Kafka event its topic, type and filter select).
func (w *wait) decide(ev Event, key string, now time.Time) (Outcome, string, error) {
	name := ev.Name
	if name == "" {
		var outcome Outcome
		var err error
		if name, outcome, err = w.resolveKafka(ev, key, now); err != nil || outcome != "" {
			return outcome, name, err
		}
	}
	if i := slices.IndexFunc(w.received, func(r Received) bool { return r.Name == name }); i >= 0 {
		switch {
		case w.received[i].Key == key:
			return Duplicate, name, nil
		case w.row.Status != vocab.WaitWaiting:
			return Late, name, nil
		default:
			return AlreadyRecorded, name, nil
		}
	}
	if !slices.Contains(w.enabled, name) {
		return NotExpected, name, nil
	}
	if ev.Source.Kind != SourceCallback || name != EventAPIResponse {
		// Everything but the apiCall callback (api_response) checks where the event may come from
		// and what it must hold; the apiCall's own api_response is decided without decoding.
		if err := w.decodeExpected(); err != nil {
			return "", name, err
		}
		exp := w.expectedByName(name)
		if exp == nil || !sourceFits(exp.Source, ev.Source.Kind) {
			return NotExpected, name, nil
		}
		if !exp.accepts(ev) {
			return FilterMismatch, name, nil
		}
	}
	if w.row.Status != vocab.WaitWaiting || slices.Contains(w.timedOut, name) {
		return Late, name, nil // as the stored row says: every replica sees the same
	}
	if w.eventPastDeadline(name, now) || w.endedByDeadline(now) {
		// Late by the clock, while the row still shows the event open. Another replica
		// may be committing this very event, decided before the deadline, with the row
		// locked: answering late from this snapshot alone would contradict it.
		w.due = true
		return Late, name, nil
	}
	w.received = append(w.received, Received{Name: name, ReceivedAt: now, Source: ev.Source, Key: key})
	payload := ev.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	switch name {
	case EventAPIResponse:
		w.row.ApiResponseData = payload
	case EventKafka:
		w.row.KafkaEventData = payload
	default:
		if err := w.setEventData(name, payload); err != nil {
			return "", name, err
		}
	}
	w.applied++
	if Satisfied(w.row.AggregationStrategy, w.enabled, w.required, w.receivedNames()) {
		if err := w.notePassedDeadlines(now); err != nil {
			return "", name, err
		}
		w.row.Status = vocab.WaitCompleted
		return Completed, name, nil
	}
	return Recorded, name, nil
}

// resolveKafka names the expected event a Kafka record correlated by the two ids is:
// among the wait's Kafka events not correlated by payload match, those whose topic, type
// and filter the record satisfies, the first still open — neither received nor past its
// own deadline. A non-empty outcome ends the decision there.
func (w *wait) resolveKafka(ev Event, key string, now time.Time) (string, Outcome, error) {
	if err := w.decodeExpected(); err != nil {
		return "", "", err
	}
	for _, r := range w.received {
		if r.Key == key && r.Source.Kind == SourceKafka {
			return r.Name, Duplicate, nil
		}
	}
	var fits []string
	for i := range w.expected {
		e := &w.expected[i]
		if e.Source == SourceKafka && e.Match == nil && e.accepts(ev) {
			fits = append(fits, e.Name)
		}
	}
	if len(fits) == 0 {
		return "", FilterMismatch, nil
	}
	if name, ok := w.firstOpen(fits, now); ok {
		return name, "", nil
	}
	return fits[0], "", nil // all received: decided as the first, which reports why not
}

// firstOpen picks, among names, the event an arrival fitting them all counts as: the
// first neither received nor past its own deadline (an optional event that timed out
// must not take the arrival from one still awaited); failing that, the first not
// received, whose decision then reports it late. ok is false when all were received.
func (w *wait) firstOpen(names []string, now time.Time) (name string, ok bool) {
	received := func(n string) bool {
		return slices.ContainsFunc(w.received, func(r Received) bool { return r.Name == n })
	}
	for _, n := range names {
		if !received(n) && !w.eventPastDeadline(n, now) {
			return n, true
		}
	}
	for _, n := range names {
		if !received(n) {
			return n, true
		}
	}
	return "", false
}

// sourceFits says whether an arrival of kind may be an expected event of source. An
// event sent by type may arrive over HTTP (kind send) or on the Kafka events topic (kind
// kafka); only the send path names send events, so a Kafka record correlated by ids or
// by payload never lands on one.
func sourceFits(expected, kind workflow.Source) bool {
	return expected == kind || (expected == SourceSend && kind == SourceKafka)
}

func (w *wait) expectedByName(name string) *Expected {
	for i := range w.expected {
		if w.expected[i].Name == name {
			return &w.expected[i]
		}
	}
	return nil
}

// setEventData stores a named event's payload under its name in event_data.
func (w *wait) setEventData(name string, payload json.RawMessage) error {
	m := map[string]json.RawMessage{}
	if len(w.row.EventData) > 0 {
		if err := json.Unmarshal(w.row.EventData, &m); err != nil {
			return fmt.Errorf("decode event_data of wait %s: %w", w.row.ID, err)
		}
	}
	m[name] = payload
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	w.row.EventData = b
	return nil
}

// receivedNames lists the names of the events received, in arrival order.
func (w *wait) receivedNames() []string {
	names := make([]string, len(w.received))
	for i, r := range w.received {
		names[i] = r.Name
	}
	return names
}

// timedOutJSON encodes the timed-out events for timed_out_events, [] when none.
func (w *wait) timedOutJSON() []byte {
	if len(w.timedOut) == 0 {
		return []byte("[]")
	}
	b, _ := json.Marshal(w.timedOut) // a []string always encodes
	return b
}

func (w *wait) decodeExpected() error {
	if w.expected != nil {
		return nil
	}
	v, err := decodedCache.get(cacheExpected, w.row.ExpectedEvents, func() (any, error) {
		var expected []Expected
		err := json.Unmarshal(w.row.ExpectedEvents, &expected)
		return expected, err
	})
	if err != nil {
		return fmt.Errorf("decode expected_events of wait %s: %w", w.row.ID, err)
	}
	w.expected = v.([]Expected)
	return nil
}

// output is the node output of a wait that decide completed.
func (w *wait) output() ([]byte, error) {
	return Output(w.row, w.received, w.timedOut, false, nil)
}

// eventData is what event_data is written as: the row's, or {} for a row that has none.
func (w *wait) eventData() []byte {
	if len(w.row.EventData) == 0 {
		return []byte("{}")
	}
	return w.row.EventData
}

// firstEvent names the event that arrived first when outcome completed the wait.
func (w *wait) firstEvent(outcome Outcome) string {
	if outcome != Completed || len(w.received) == 0 {
		return ""
	}
	return w.received[0].Name
}

// deref is *s, or the empty string for nil: nonEmpty's inverse.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nonEmpty is s, or nil for the empty string.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	// A copy made here, not a pointer to s: s would be moved to the heap on entry, and
	// the empty string, which most calls pass, would allocate too.
	p := new(string)
	*p = s
	return p
}
