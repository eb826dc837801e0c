package client

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/google/uuid"
)

// Every type the API returns keeps the object it was decoded from in Raw, so that a
// caller can pass the server's JSON on unchanged (rendezvous … -o json), fields this
// client does not know included.

// StoredWorkflow is the answer to storing a definition.
type StoredWorkflow struct {
	Name      string    `json:"name"`
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	// Unchanged is true when the definition equalled the latest version, which was kept.
	Unchanged bool `json:"unchanged"`
	// Warnings lists what the definition holds to no effect, each at its JSON path.
	Warnings []FieldError `json:"warnings"`
	// Created is true when this was the first version of the name (201 Created).
	Created bool            `json:"-"`
	Raw     json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (s *StoredWorkflow) UnmarshalJSON(b []byte) error {
	type plain StoredWorkflow
	return decodeKeepingRaw(b, (*plain)(s), &s.Raw)
}

// Validation is the answer to validating a definition that is valid.
type Validation struct {
	Valid bool `json:"valid"`
	Nodes int  `json:"nodes"`
	// Warnings lists what the definition holds to no effect, each at its JSON path.
	Warnings []FieldError    `json:"warnings"`
	Raw      json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (v *Validation) UnmarshalJSON(b []byte) error {
	type plain Validation
	return decodeKeepingRaw(b, (*plain)(v), &v.Raw)
}

// WorkflowSummary is one workflow name in a listing.
type WorkflowSummary struct {
	Name          string `json:"name"`
	LatestVersion int32  `json:"latest_version"`
	Versions      int32  `json:"versions"`
	// CreatedAt is when the first version was stored, UpdatedAt the latest.
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	Raw       json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (w *WorkflowSummary) UnmarshalJSON(b []byte) error {
	type plain WorkflowSummary
	return decodeKeepingRaw(b, (*plain)(w), &w.Raw)
}

// Workflow is one version of a workflow with its definition.
type Workflow struct {
	Name          string `json:"name"`
	LatestVersion int32  `json:"latest_version"`
	// Version is the version shown.
	Version    int32           `json:"version"`
	Definition json.RawMessage `json:"definition"`
	// Versions lists every stored version, newest first.
	Versions []WorkflowVersion `json:"versions"`
	Raw      json.RawMessage   `json:"-"`
}

// WorkflowVersion is one stored version of a name.
type WorkflowVersion struct {
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (w *Workflow) UnmarshalJSON(b []byte) error {
	type plain Workflow
	return decodeKeepingRaw(b, (*plain)(w), &w.Raw)
}

// ExecutionSummary is one execution in a listing.
type ExecutionSummary struct {
	ID              uuid.UUID       `json:"id"`
	Workflow        string          `json:"workflow"`
	WorkflowVersion int32           `json:"workflow_version"`
	Status          string          `json:"status"`
	Error           string          `json:"error,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	FinishedAt      *time.Time      `json:"finished_at,omitempty"`
	Raw             json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (e *ExecutionSummary) UnmarshalJSON(b []byte) error {
	type plain ExecutionSummary
	return decodeKeepingRaw(b, (*plain)(e), &e.Raw)
}

// Execution is one execution with its nodes and waits, as one snapshot.
type Execution struct {
	ID              uuid.UUID       `json:"id"`
	Workflow        string          `json:"workflow"`
	WorkflowVersion int32           `json:"workflow_version"`
	Status          string          `json:"status"`
	Input           json.RawMessage `json:"input"`
	Error           string          `json:"error,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	FinishedAt      *time.Time      `json:"finished_at,omitempty"`
	// RedriveCount is how often the execution was redriven, RedrivenAt when last.
	RedriveCount int32      `json:"redrive_count"`
	RedrivenAt   *time.Time `json:"redriven_at,omitempty"`
	// RestartedFrom is the execution this one restarts; RestartedAs the one that
	// restarted it.
	RestartedFrom *uuid.UUID      `json:"restarted_from,omitempty"`
	RestartedAs   *uuid.UUID      `json:"restarted_as,omitempty"`
	Nodes         []Node          `json:"nodes"`
	Waits         []WaitState     `json:"wait_states"`
	Raw           json.RawMessage `json:"-"`
}

// Redriven is the answer to a redrive: the execution's status and redrive count after
// it, and what it did with each node it set going again.
type Redriven struct {
	ExecutionID  uuid.UUID       `json:"execution_id"`
	Status       string          `json:"status"`
	RedriveCount int32           `json:"redrive_count"`
	Nodes        []RedrivenNode  `json:"nodes"`
	Raw          json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (r *Redriven) UnmarshalJSON(b []byte) error {
	type plain Redriven
	return decodeKeepingRaw(b, (*plain)(r), &r.Raw)
}

// RedrivenNode is one node a redrive set going: Action is run (queued to run again),
// reopened (its wait opened again) or call_resent (reopened, its call sent again).
type RedrivenNode struct {
	ID     string `json:"id"`
	Action string `json:"action"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (e *Execution) UnmarshalJSON(b []byte) error {
	type plain Execution
	return decodeKeepingRaw(b, (*plain)(e), &e.Raw)
}

// Node is one node of an execution.
type Node struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Warning: the node finished, but not as asked (a wait that continued with
	// partial data).
	Warning    string     `json:"warning,omitempty"`
	Attempts   int32      `json:"attempts"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// StartedExecution is the answer to starting an execution.
type StartedExecution struct {
	ID              uuid.UUID       `json:"id"`
	Workflow        string          `json:"workflow"`
	WorkflowVersion int32           `json:"workflow_version"`
	Status          string          `json:"status"`
	CreatedAt       time.Time       `json:"created_at"`
	Raw             json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (s *StartedExecution) UnmarshalJSON(b []byte) error {
	type plain StartedExecution
	return decodeKeepingRaw(b, (*plain)(s), &s.Raw)
}

// Restarted is the answer to a restart: the new execution, the one it restarts, and
// whether that one was still open and got cancelled.
type Restarted struct {
	ID              uuid.UUID       `json:"id"`
	Workflow        string          `json:"workflow"`
	WorkflowVersion int32           `json:"workflow_version"`
	Status          string          `json:"status"`
	CreatedAt       time.Time       `json:"created_at"`
	RestartedFrom   uuid.UUID       `json:"restarted_from"`
	Cancelled       bool            `json:"cancelled"`
	Raw             json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (r *Restarted) UnmarshalJSON(b []byte) error {
	type plain Restarted
	return decodeKeepingRaw(b, (*plain)(r), &r.Raw)
}

// RestartOptions adjust a restart: Version "same" (the default when empty) or
// "latest"; Input replaces the old input when set; Reason is recorded with the old
// execution when the restart cancels it.
type RestartOptions struct {
	Version string          `json:"version,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	Reason  string          `json:"reason,omitempty"`
}

// Wait types.
const (
	WaitTypeEvents = "events"
	WaitTypeTimer  = "timer"
)

// Open wait statuses: an events wait is waiting, a timer scheduled, until it ends.
const (
	StatusWaiting   = "waiting"
	StatusScheduled = "scheduled"
)

// WaitState is one wait of an execution: what it waits for, what arrived, and its
// deadlines. The listing and a single wait carry every field; the waits inside an
// Execution lack the execution and workflow fields (ExecutionID is zero there).
type WaitState struct {
	ID              uuid.UUID `json:"id"`
	ExecutionID     uuid.UUID `json:"execution_id"`
	Workflow        string    `json:"workflow,omitempty"`
	WorkflowVersion int32     `json:"workflow_version,omitempty"`
	NodeID          string    `json:"node_id"`
	CorrelationID   uuid.UUID `json:"correlation_id"`
	// WaitType is WaitTypeEvents or WaitTypeTimer; a timer has Timer and no event fields.
	WaitType       string          `json:"wait_type"`
	Timer          json.RawMessage `json:"timer,omitempty"`
	Strategy       string          `json:"aggregation_strategy,omitempty"`
	Status         string          `json:"status"`
	Version        int64           `json:"version"`
	EnabledEvents  []string        `json:"enabled_events"`
	RequiredEvents []string        `json:"required_events"`
	ReceivedEvents []ReceivedEvent `json:"received_events"`
	// MissingEvents are the enabled events neither received nor timed out; nil when the
	// server did not send the field (see Missing).
	MissingEvents  []string        `json:"missing_events"`
	TimedOutEvents []string        `json:"timed_out_events"`
	NextDeadlineAt time.Time       `json:"next_deadline_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	CreatedAt      time.Time       `json:"created_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	ResumedAt      *time.Time      `json:"resumed_at,omitempty"`
	ResumedBy      string          `json:"resumed_by,omitempty"`
	Error          string          `json:"error,omitempty"`
	Raw            json.RawMessage `json:"-"`
}

// ReceivedEvent is one event recorded on a wait.
type ReceivedEvent struct {
	Name       string    `json:"name"`
	ReceivedAt time.Time `json:"received_at"`
	// Source says where it came from: {"kind": "callback", "service": …} or
	// {"kind": "kafka", "topic", "partition", "offset"}.
	Source json.RawMessage `json:"source"`
	Key    string          `json:"key"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (w *WaitState) UnmarshalJSON(b []byte) error {
	type plain WaitState
	return decodeKeepingRaw(b, (*plain)(w), &w.Raw)
}

// Open reports whether the wait has not ended yet.
func (w *WaitState) Open() bool {
	return w.Status == StatusWaiting || w.Status == StatusScheduled
}

// Arrived names the received events in arrival order.
func (w *WaitState) Arrived() []string {
	out := make([]string, 0, len(w.ReceivedEvents))
	for _, r := range w.ReceivedEvents {
		out = append(out, r.Name)
	}
	return out
}

// Missing is the enabled events neither received nor timed out: what an open wait still
// waits for, what never came to an ended one. The server's missing_events when it sent
// them, else derived the same way (a server that predates the field).
func (w *WaitState) Missing() []string {
	if w.MissingEvents != nil {
		return w.MissingEvents
	}
	var out []string
	arrived := w.Arrived()
	for _, e := range w.EnabledEvents {
		if !slices.Contains(arrived, e) && !slices.Contains(w.TimedOutEvents, e) {
			out = append(out, e)
		}
	}
	return out
}

// decodeKeepingRaw decodes b into dst (a method-less alias of the caller's type, so
// that this does not recurse) and keeps a copy of b in raw.
func decodeKeepingRaw(b []byte, dst any, raw *json.RawMessage) error {
	if err := json.Unmarshal(b, dst); err != nil {
		return err
	}
	*raw = append(json.RawMessage(nil), b...)
	return nil
}

// Outcomes of a sent event.
const (
	SendDelivered = "delivered"
	SendBuffered  = "buffered"
	SendDuplicate = "duplicate"
)

// SentEvent is the answer to sending an event: delivered (Deliveries says what it did at
// each waiting node), buffered until a node waits for its type (BufferID, ExpiresAt), or
// a duplicate of an event sent with the same id.
type SentEvent struct {
	Outcome    string          `json:"outcome"`
	Deliveries []Delivery      `json:"deliveries,omitempty"`
	BufferID   int64           `json:"buffer_id,omitempty"`
	ExpiresAt  *time.Time      `json:"expires_at,omitempty"`
	Raw        json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (s *SentEvent) UnmarshalJSON(b []byte) error {
	type plain SentEvent
	return decodeKeepingRaw(b, (*plain)(s), &s.Raw)
}

// Delivery is what a sent event did at one waiting node.
type Delivery struct {
	NodeID      string    `json:"node_id"`
	WaitStateID uuid.UUID `json:"wait_state_id"`
	// Event is the node's expected event the sent event was taken as.
	Event string `json:"event"`
	// Outcome is recorded or completed when the event was applied, else why not.
	Outcome    string `json:"outcome"`
	WaitStatus string `json:"wait_status"`
	Version    int64  `json:"version"`
}

// UnmatchedEvent is an event that reached no wait, and why (Reason, Detail).
type UnmatchedEvent struct {
	ID     int64  `json:"id"`
	Reason string `json:"reason"`
	// Source says where it came from, as ReceivedEvent.Source, or {"kind": "send"}.
	Source         json.RawMessage `json:"source"`
	EventName      string          `json:"event_name,omitempty"`
	EventType      string          `json:"event_type,omitempty"`
	ExecutionID    *uuid.UUID      `json:"execution_id,omitempty"`
	CorrelationID  *uuid.UUID      `json:"correlation_id,omitempty"`
	Detail         string          `json:"detail"`
	PayloadExcerpt string          `json:"payload_excerpt"`
	CreatedAt      time.Time       `json:"created_at"`
	Raw            json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (u *UnmatchedEvent) UnmarshalJSON(b []byte) error {
	type plain UnmatchedEvent
	return decodeKeepingRaw(b, (*plain)(u), &u.Raw)
}

// Replayed is the answer to replaying a dead letter or an unmatched event: what the
// event did at its execution (delivered, buffered, recorded, completed or duplicate).
type Replayed struct {
	ID          int64           `json:"id"`
	ExecutionID uuid.UUID       `json:"execution_id"`
	Outcome     string          `json:"outcome"`
	Raw         json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes the object and keeps it in Raw.
func (r *Replayed) UnmarshalJSON(b []byte) error {
	type plain Replayed
	return decodeKeepingRaw(b, (*plain)(r), &r.Raw)
}

// EventRows names the rows an event replay or dismissal acts on.
type EventRows string

// Event rows.
const (
	DeadLetters     EventRows = "dead-letters"
	UnmatchedEvents EventRows = "unmatched"
)

// RedriveFilter selects failed executions for a bulk redrive; zero fields do not filter.
type RedriveFilter struct {
	Workflow      string     `json:"workflow,omitempty"`
	Node          string     `json:"node,omitempty"`
	ErrorContains string     `json:"error_contains,omitempty"`
	FailedAfter   *time.Time `json:"failed_after,omitempty"`
	FailedBefore  *time.Time `json:"failed_before,omitempty"`
	DryRun        bool       `json:"dry_run,omitempty"`
	Limit         int        `json:"limit,omitempty"`
	Batch         int        `json:"batch,omitempty"`
}

// RedrivenMany reports one bulk redrive call: More says to call again.
type RedrivenMany struct {
	Matched  int64 `json:"matched"`
	Redriven int   `json:"redriven"`
	Batches  int   `json:"batches"`
	DryRun   bool  `json:"dry_run"`
	More     bool  `json:"more"`
}

// DismissFilter selects unresolved dead letters for a bulk dismissal (zero fields do not
// filter) and says why they are dismissed.
type DismissFilter struct {
	ExecutionID      *uuid.UUID `json:"execution_id,omitempty"`
	Workflow         string     `json:"workflow,omitempty"`
	EventType        string     `json:"event_type,omitempty"`
	DeadLetterReason string     `json:"dead_letter_reason,omitempty"`
	CreatedAfter     *time.Time `json:"created_after,omitempty"`
	CreatedBefore    *time.Time `json:"created_before,omitempty"`
	Reason           string     `json:"reason,omitempty"`
	DryRun           bool       `json:"dry_run,omitempty"`
	Limit            int        `json:"limit,omitempty"`
	Batch            int        `json:"batch,omitempty"`
}

// DismissedMany reports one bulk dismissal call: More says to call again.
type DismissedMany struct {
	Matched   int64 `json:"matched"`
	Dismissed int   `json:"dismissed"`
	Batches   int   `json:"batches"`
	DryRun    bool  `json:"dry_run"`
	More      bool  `json:"more"`
}
