package aggregator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// Event is one arrival, whatever its source.
type Event struct {
	ExecutionID   uuid.UUID
	CorrelationID uuid.UUID
	// Name is the expected event this arrival is, e.g. api_response, kafka_event or a
	// name of the node's events list. Empty for a Kafka record correlated by the two ids:
	// the wait's Kafka event that its topic, type and filter select.
	Name    string
	Payload json.RawMessage
	Source  Source
	// IdempotencyKey identifies this very event across redeliveries (a webhook-id). When
	// empty, the SHA-256 of the payload is used, so a redelivered body is a duplicate.
	IdempotencyKey string
	// MatchKeys, instead of the two ids, correlate a Kafka record by its payload
	// (MatchKeys computes them): it is delivered to every open wait holding one of them.
	MatchKeys []string
	// Keep, for an event correlated by payload, lists the match keys under which it is
	// kept when it reaches no open wait, and for how long (KeepFor computes them; capped
	// by Config.MaxLookback): a wait registering later with one of them takes it.
	Keep map[string]time.Duration
	// Link is the trace context the event arrived with (a callback's or a Kafka record's
	// traceparent), linked from the event's span in the wait's trace. Optional.
	Link trace.SpanContext
}

// Source describes where an event came from; it is stored with the event.
type Source struct {
	Kind      workflow.Source `json:"kind"` // SourceCallback, SourceKafka or SourceSend
	Service   string          `json:"service,omitempty"`
	Topic     string          `json:"topic,omitempty"`
	Partition *int32          `json:"partition,omitempty"`
	Offset    *int64          `json:"offset,omitempty"`
}

func (e Event) key() string {
	if e.IdempotencyKey != "" {
		return "id:" + e.IdempotencyKey
	}
	sum := sha256.Sum256(e.Payload)
	// Built on the stack and copied once: every event decided has a key.
	const prefix = "sha256:"
	var key [len(prefix) + 2*sha256.Size]byte
	copy(key[:], prefix)
	hex.Encode(key[len(prefix):], sum[:])
	return string(key[:])
}

// Outcome says what an event did.
type Outcome string

// Result reports what Apply did.
type Result struct {
	Outcome Outcome
	// Event is the expected event the arrival was decided as (empty when no wait was
	// found).
	Event       string
	WaitStateID uuid.UUID
	NodeID      string
	// Status is the wait's status after the event.
	Status  vocab.WaitStatus
	Version int64
	// Conflicts counts optimistic-lock races lost before the decision.
	Conflicts int
	// TraceParent is the wait's trace (empty when no wait of this execution was found).
	TraceParent string
	// FirstEvent names the event that arrived first, for a Completed wait.
	FirstEvent string
	// Deliveries, for an event correlated by payload match, are the results at each wait
	// it reached; the fields above are those of the most advanced.
	Deliveries []Result
	// Continued, for a Completed wait, says its execution was continued inside the
	// transaction (Config.Continuer), so no continuation was queued for it.
	Continued bool
	// KeptUntil, for an event Kept, is when the last of its kept rows expires.
	KeptUntil time.Time
	// Expired is set when a Late event found its wait past a deadline no sweeper had
	// written yet, wrote it itself (see ApplyTx), and that ended the wait; Observe
	// announces it after the commit as a sweeper would.
	Expired *Expired
}

// Queued reports whether any of results completed or ended a wait whose continuation
// went to the run queue, which the workers are woken for after the commit.
func Queued(results []Result) bool {
	for _, r := range results {
		if (r.Outcome == Completed && !r.Continued) || r.Expired != nil || Queued(r.Deliveries) {
			return true
		}
	}
	return false
}

// Received is one recorded event, as stored in received_events (in arrival order).
type Received struct {
	Name       string    `json:"name"`
	ReceivedAt time.Time `json:"received_at"`
	Source     Source    `json:"source"`
	Key        string    `json:"key"`
}

const (
	// Recorded: applied; the wait is still waiting for more.
	Recorded Outcome = "recorded"
	// Completed: applied, and it satisfied the strategy: the continuation is enqueued.
	Completed Outcome = "completed"
	// Duplicate: this very event was already recorded; nothing changed.
	Duplicate Outcome = "duplicate"
	// Late: a new event for a wait that has finished; nothing changed.
	Late Outcome = "late"
	// AlreadyRecorded: the wait is still open but already holds a different event of this
	// name; nothing changed.
	AlreadyRecorded Outcome = "already_recorded"
	// NotExpected: the wait exists but does not expect an event of this name.
	NotExpected Outcome = "not_expected"
	// NotFound: no wait has these ids.
	NotFound Outcome = "not_found"
	// IDMismatch: the correlation id belongs to another execution, or the execution
	// exists but has no wait with this correlation id. Never applied; logged at error.
	IDMismatch Outcome = "id_mismatch"
	// FilterMismatch: a Kafka record for the wait whose payload fails the node's filter,
	// or that came from another topic than the node's. Not applied.
	FilterMismatch Outcome = "filter"
	// NoMatch: an event correlated by payload found no open wait expecting its value.
	NoMatch Outcome = "no_match"
)
