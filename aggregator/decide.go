package aggregator

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// wait is a wait state decoded for deciding events in memory. ApplyTx and ApplyBatch
// both decide with it, so one event is judged the same way whatever path it takes.
type wait struct {
	row      dbsqlc.ExecutionWaitState
	enabled  []string
	required []string
	received []Received
	timedOut []string
	expected []Expected // decoded on demand (Kafka filters, deadlines)
	// applied counts events recorded in memory and not yet written.
	applied int
}

func decodeWait(row dbsqlc.ExecutionWaitState) (*wait, error) {
	w := &wait{row: row}
	for _, part := range []struct {
		raw []byte
		dst any
	}{{row.EnabledEvents, &w.enabled}, {row.RequiredEvents, &w.required}, {row.ReceivedEvents, &w.received}, {row.TimedOutEvents, &w.timedOut}} {
		if err := json.Unmarshal(part.raw, part.dst); err != nil {
			return nil, fmt.Errorf("decode wait %s: %w", row.ID, err)
		}
	}
	return w, nil
}

// decide judges one event against the wait and, when it applies, records it in memory:
// received events, payload, status. Nothing is written; the caller persists the result
// behind the version fence of the row it loaded.
func (w *wait) decide(ev Event, key string, now time.Time) (Outcome, error) {
	if i := slices.IndexFunc(w.received, func(r Received) bool { return r.Name == ev.Name }); i >= 0 {
		switch {
		case w.received[i].Key == key:
			return Duplicate, nil
		case w.row.Status != StatusWaiting:
			return Late, nil
		default:
			return AlreadyRecorded, nil
		}
	}
	if !slices.Contains(w.enabled, ev.Name) {
		return NotExpected, nil
	}
	if ev.Source.Kind == "kafka" {
		if err := w.decodeExpected(); err != nil {
			return "", err
		}
		if !matchesKafka(w.expected, ev) {
			return FilterMismatch, nil
		}
	}
	if w.row.Status != StatusWaiting || w.eventPastDeadline(ev.Name, now) || w.endedByDeadline(now) {
		return Late, nil
	}
	w.received = append(w.received, Received{Name: ev.Name, ReceivedAt: now, Source: ev.Source, Key: key})
	payload := ev.Payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	switch ev.Name {
	case EventAPIResponse:
		w.row.ApiResponseData = payload
	case EventKafka:
		w.row.KafkaEventData = payload
	}
	w.applied++
	if Satisfied(w.row.AggregationStrategy, w.enabled, w.required, w.receivedNames()) {
		if err := w.notePassedDeadlines(now); err != nil {
			return "", err
		}
		w.row.Status = StatusCompleted
		return Completed, nil
	}
	return Recorded, nil
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
	if err := json.Unmarshal(w.row.ExpectedEvents, &w.expected); err != nil {
		return fmt.Errorf("decode expected_events of wait %s: %w", w.row.ID, err)
	}
	return nil
}

// output is the node output of a wait that decide completed.
func (w *wait) output() ([]byte, error) {
	out, err := Output(w.row, w.received, w.timedOut, false)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// firstEvent names the event that arrived first when outcome completed the wait.
func (w *wait) firstEvent(outcome Outcome) string {
	if outcome != Completed || len(w.received) == 0 {
		return ""
	}
	return w.received[0].Name
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
