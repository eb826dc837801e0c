package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/audit"
	"github.com/rendezvous-run/rendezvous/internal/execstate"
	"github.com/rendezvous-run/rendezvous/internal/workflow"
)

// Events sent to an execution by type (an engine's "send event" step). A sent event goes to every
// open wait of the execution that expects its type; when none does yet, it is buffered
// and taken by the first wait for its type the execution reaches. Sending and
// registering a wait both hold the execution's row lock, so an event is either seen by
// the registration or delivered to the wait it registered — never neither.

// Sent is an event sent to an execution by type.
type Sent struct {
	ExecutionID uuid.UUID
	Type        string
	Payload     json.RawMessage
	// ID, when set, deduplicates: the same id sent to one execution twice is applied once.
	ID     string
	Source Source
	Link   trace.SpanContext
}

// SendOutcome says what a sent event did.
type SendOutcome string

const (
	// SendDelivered: applied to at least one waiting node.
	SendDelivered SendOutcome = "delivered"
	// SendBuffered: no node waits for the type yet; held until one does or it expires.
	SendBuffered SendOutcome = "buffered"
	// SendDuplicate: an event with this id was already sent to the execution.
	SendDuplicate SendOutcome = "duplicate"
	// SendNoExecution: no such execution.
	SendNoExecution SendOutcome = "no_execution"
	// SendExecutionFinished: the execution has finished; nothing can take the event.
	SendExecutionFinished SendOutcome = "execution_finished"
)

// SendResult reports what SendTx did.
type SendResult struct {
	Outcome SendOutcome
	// Deliveries are the results at each wait the event was applied or offered to.
	Deliveries []Result
	// BufferID identifies the buffered event (SendBuffered).
	BufferID int64
	// ExpiresAt is when a buffered event expires.
	ExpiresAt time.Time
	// ExecutionStatus is the execution's status when the event arrived.
	ExecutionStatus execstate.ExecutionStatus
	// Unmatched is the reason recorded in unmatched_events when no wait took the event
	// (buffered ones included); empty when delivered.
	Unmatched string
}

// Queued reports whether a delivery completed a wait, or ended one by writing its passed
// deadline, and its continuation was queued: the workers are woken after the commit.
func (r SendResult) Queued() bool { return Queued(r.Deliveries) }

// Send delivers a sent event in a transaction of its own (SendTx), with its audit row.
func (a *Aggregator) Send(ctx context.Context, s Sent) (SendResult, error) {
	var res SendResult
	err := db.Tx(ctx, a.pool, func(tx pgx.Tx) error {
		var err error
		if res, err = a.SendTx(ctx, tx, s); err != nil {
			return err
		}
		return audit.Record(ctx, tx, "execution/"+s.ExecutionID.String(), string(res.Outcome), "type "+s.Type)
	})
	if err != nil {
		if db.IsUnavailable(err) {
			a.DatabaseError(ctx)
		}
		return SendResult{}, err
	}
	return res, nil
}

// SendTx delivers a sent event inside the caller's transaction; what follows the commit
// (observeSent, waking the workers for a queued continuation) is registered on tx with
// db.AfterCommit. With a Continuer (Config.Continuer), the execution whose wait the event
// completes is continued in tx, as a batch of callbacks or records continues its
// executions: SendTx locks the execution's row before its waits, so the continuation's
// locks keep the order every writer takes — as long as a caller sending several events
// in one transaction sends them in execution id order (the consumer does).
func (a *Aggregator) SendTx(ctx context.Context, tx pgx.Tx, s Sent) (SendResult, error) {
	res, err := a.sendTx(ctx, tx, s)
	if err != nil {
		return res, err
	}
	db.AfterCommit(tx, func() {
		a.observeSent(ctx, s, res)
		if res.Queued() {
			a.wakeContinuations()
		}
	})
	return res, nil
}

// sendTx is SendTx without what follows the commit.
func (a *Aggregator) sendTx(ctx context.Context, tx pgx.Tx, s Sent) (SendResult, error) {
	if err := CheckStorable(s.Payload); err != nil {
		return SendResult{}, err
	}
	if len(s.Payload) == 0 {
		s.Payload = json.RawMessage("null")
	}
	if s.Source.Kind == "" {
		s.Source.Kind = SourceSend
	}
	reject := func(outcome SendOutcome, reason, detail string, status execstate.ExecutionStatus) (SendResult, error) {
		err := a.recordUnmatched(ctx, tx, []unmatched{{reason: reason, source: s.Source, typ: s.Type,
			executionID: s.ExecutionID, detail: detail, payload: s.Payload}})
		return SendResult{Outcome: outcome, ExecutionStatus: status, Unmatched: reason}, err
	}
	exec, err := a.q.ExecutionGetForUpdate(ctx, tx, s.ExecutionID)
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			return reject(SendNoExecution, UnmatchedNoExecution, "no execution has this id", "")
		}
		return SendResult{}, fmt.Errorf("lock execution: %w", err)
	}
	if execstate.ExecFinished(exec.Status) {
		// A retry of an event that was applied (and perhaps finished the execution) is a
		// duplicate, not a conflict: sending stays idempotent.
		if s.ID != "" {
			seen, err := a.q.ExecutionEventIDExists(ctx, tx, dbsqlc.ExecutionEventIDExistsParams{ExecutionID: s.ExecutionID, EventID: s.ID})
			if err != nil {
				return SendResult{}, fmt.Errorf("look up event id: %w", err)
			}
			if seen {
				return reject(SendDuplicate, UnmatchedDuplicate, "an event with id "+s.ID+" was already sent to this execution", exec.Status)
			}
		}
		return reject(SendExecutionFinished, UnmatchedExecutionFinished, "the execution is "+string(exec.Status), exec.Status)
	}
	if s.ID != "" {
		n, err := a.q.ExecutionEventIDInsert(ctx, tx, dbsqlc.ExecutionEventIDInsertParams{ExecutionID: s.ExecutionID, EventID: s.ID})
		if err != nil {
			return SendResult{}, fmt.Errorf("record event id: %w", err)
		}
		if n == 0 {
			return reject(SendDuplicate, UnmatchedDuplicate, "an event with id "+s.ID+" was already sent to this execution", exec.Status)
		}
	}
	rows, err := a.q.WaitStateListOpenByExecution(ctx, tx, s.ExecutionID)
	if err != nil {
		return SendResult{}, fmt.Errorf("load open waits: %w", err)
	}
	var events []Event
	now := time.Now().UTC()
	for _, row := range rows {
		w, err := decodeWait(row)
		if err != nil {
			return SendResult{}, err
		}
		if err := w.decodeExpected(); err != nil {
			return SendResult{}, err
		}
		// One event per wait: to the first of its events of this type still open.
		var names []string
		for _, e := range w.expected {
			if e.Source == SourceSend && e.Type == s.Type {
				names = append(names, e.Name)
			}
		}
		if name, ok := w.firstOpen(names, now); ok {
			events = append(events, Event{ExecutionID: s.ExecutionID, CorrelationID: row.CorrelationID, Name: name,
				Payload: s.Payload, Source: s.Source, IdempotencyKey: s.ID, Link: s.Link})
		}
	}
	res := SendResult{ExecutionStatus: exec.Status}
	if len(events) > 0 {
		if res.Deliveries, err = a.applyBatch(ctx, tx, events, true); err != nil {
			return SendResult{}, err
		}
		for i := range res.Deliveries {
			res.Deliveries[i].Event = events[i].Name
		}
		if slices.ContainsFunc(res.Deliveries, func(r Result) bool { return r.Outcome == Recorded || r.Outcome == Completed }) {
			res.Outcome = SendDelivered
			return res, nil
		}
	}
	// No wait took it: hold it for the next wait of its type.
	ttl, err := a.bufferTTL(ctx, tx, exec.WorkflowName, exec.WorkflowVersion)
	if err != nil {
		return SendResult{}, err
	}
	src, err := json.Marshal(s.Source)
	if err != nil {
		return SendResult{}, err
	}
	res.ExpiresAt = time.Now().UTC().Add(ttl)
	res.BufferID, err = a.q.EventBufferInsert(ctx, tx, dbsqlc.EventBufferInsertParams{
		ExecutionID: s.ExecutionID, EventType: s.Type, EventID: nullable(s.ID), Payload: s.Payload, Source: src, ExpiresAt: res.ExpiresAt,
	})
	if err != nil {
		return SendResult{}, fmt.Errorf("buffer event: %w", err)
	}
	res.Outcome = SendBuffered
	reason, detail := UnmatchedBuffered, "no node of the execution waits for type "+s.Type+" yet; buffered until "+res.ExpiresAt.Format(time.RFC3339)
	if len(res.Deliveries) > 0 {
		// Waits of this type exist but none took it (its filter, or they already hold one).
		reason = reasonOf(res.Deliveries[0].Outcome)
		detail = "waiting nodes of this type did not take it (" + string(res.Deliveries[0].Outcome) + "); buffered until " + res.ExpiresAt.Format(time.RFC3339)
	}
	res.Unmatched = reason
	err = a.recordUnmatched(ctx, tx, []unmatched{{reason: reason, source: s.Source, typ: s.Type, executionID: s.ExecutionID,
		detail: detail, payload: s.Payload}})
	return res, err
}

// observeSent records a committed send: the unmatched reason it left, the buffer
// counter, and the deliveries that applied, like any decided events.
func (a *Aggregator) observeSent(ctx context.Context, s Sent, res SendResult) {
	if res.Unmatched != "" {
		a.countUnmatched(ctx, res.Unmatched)
	}
	if res.Outcome == SendBuffered {
		a.ins.buffered.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "buffered")))
	}
	var evs []Event
	var applied []Result
	for _, d := range res.Deliveries {
		if d.Outcome == Recorded || d.Outcome == Completed {
			evs = append(evs, Event{ExecutionID: s.ExecutionID, Name: d.Event, Source: s.Source, Link: s.Link})
			applied = append(applied, d)
		}
	}
	a.observeCommitted(ctx, evs, applied)
	a.announceExpired(ctx, expiredOf(res.Deliveries))
}

// bufferTTL is the eventBufferTtl of a definition version, cached: versions never change.
func (a *Aggregator) bufferTTL(ctx context.Context, tx pgx.Tx, name string, version int32) (time.Duration, error) {
	key := fmt.Sprintf("%s@%d", name, version)
	if v, ok := a.ttls.Load(key); ok {
		return v.(time.Duration), nil
	}
	raw, err := a.q.WorkflowEventBufferTTL(ctx, tx, dbsqlc.WorkflowEventBufferTTLParams{Name: name, Version: version})
	if err != nil {
		return 0, fmt.Errorf("read eventBufferTtl: %w", err)
	}
	ttl := workflow.DefaultEventBufferTTL
	if len(raw) > 0 && string(raw) != "null" {
		if ttl, err = workflow.ParseDurationJSON(raw); err != nil {
			return 0, fmt.Errorf("eventBufferTtl of %s: %w", key, err)
		}
	}
	a.ttls.Store(key, ttl)
	return ttl, nil
}

// TakeBuffered gives a wait just registered (inside the caller's transaction, under the
// execution's row lock) the events sent to its execution before it existed: for each of
// its send events, the oldest buffered event of the type its filter accepts (fifo), or
// the newest (last_write_wins, the older ones going to the dead letters as superseded);
// and for each payload match with a lookback, likewise a Kafka record kept because it
// reached no wait (see lookback.go).
// If they satisfy the wait it completes in this transaction — the node never suspends —
// and its continuation is queued; the workers are woken after the commit. The caller
// marks the node waiting before calling it.
func (a *Aggregator) TakeBuffered(ctx context.Context, tx pgx.Tx, ws dbsqlc.ExecutionWaitState) (Result, error) {
	res := Result{WaitStateID: ws.ID, NodeID: ws.NodeID, Status: ws.Status, Version: ws.Version}
	if ws.WaitType != execstate.WaitTypeEvents {
		return res, nil
	}
	w, err := decodeWait(ws)
	if err != nil {
		return res, err
	}
	if err := w.decodeExpected(); err != nil {
		return res, err
	}
	now := time.Now().UTC()
	var taken, superseded []int64
	for _, e := range slices.Clone(w.expected) {
		if e.Source != SourceSend || w.row.Status != execstate.WaitWaiting {
			continue
		}
		buffered, err := a.q.EventBufferList(ctx, tx, dbsqlc.EventBufferListParams{ExecutionID: ws.ExecutionID, EventType: e.Type, Now: now})
		if err != nil {
			return res, fmt.Errorf("read event buffer: %w", err)
		}
		buffered = slices.DeleteFunc(buffered, func(b dbsqlc.EventBuffer) bool { return slices.Contains(taken, b.ID) })
		if e.Buffer == BufferLastWriteWins {
			slices.Reverse(buffered)
		}
		for k, b := range buffered {
			var src Source
			if err := json.Unmarshal(b.Source, &src); err != nil {
				return res, fmt.Errorf("decode buffered event source: %w", err)
			}
			ev := Event{ExecutionID: ws.ExecutionID, CorrelationID: ws.CorrelationID, Name: e.Name, Payload: b.Payload,
				Source: src, IdempotencyKey: deref(b.EventID)}
			outcome, _, err := w.decide(ev, ev.key(), now)
			if err != nil {
				return res, err
			}
			if outcome != Recorded && outcome != Completed {
				continue // its filter refused this one; try the next
			}
			taken = append(taken, b.ID)
			res.Outcome, res.Event = outcome, e.Name
			if e.Buffer == BufferLastWriteWins {
				for _, older := range buffered[k+1:] {
					superseded = append(superseded, older.ID)
				}
			}
			break
		}
	}
	// Then the Kafka records its payload matches with a lookback found no wait for.
	keptOutcome, keptName, keptTaken, _, err := a.takeKept(ctx, tx, w, now)
	if err != nil {
		return res, err
	}
	if keptTaken > 0 {
		res.Outcome, res.Event = keptOutcome, keptName
	}
	if len(taken) == 0 && keptTaken == 0 {
		return res, nil
	}
	if len(taken) > 0 {
		if err := a.q.EventBufferDelete(ctx, tx, taken); err != nil {
			return res, fmt.Errorf("take buffered events: %w", err)
		}
	}
	if len(superseded) > 0 {
		if _, err := a.q.EventBufferSupersede(ctx, tx, superseded); err != nil {
			return res, fmt.Errorf("supersede buffered events: %w", err)
		}
	}
	won, err := a.write(ctx, tx, w, ws.Version)
	if err != nil {
		return res, err
	}
	if !won {
		// The wait was inserted by this transaction and nobody else can have changed it.
		return res, fmt.Errorf("wait %s changed under its own registration", ws.ID)
	}
	res.Status, res.Version = w.row.Status, ws.Version+int64(w.applied)
	res.FirstEvent = w.firstEvent(res.Outcome)
	db.AfterCommit(tx, func() {
		a.ins.buffered.Add(ctx, int64(len(taken)), metric.WithAttributes(attribute.String("outcome", "taken")))
		if len(superseded) > 0 {
			a.ins.buffered.Add(ctx, int64(len(superseded)), metric.WithAttributes(attribute.String("outcome", "superseded")))
			a.ins.deadLetters.Add(ctx, int64(len(superseded)), metric.WithAttributes(attribute.String("reason", "superseded")))
		}
		if res.Outcome == Completed {
			a.wakeContinuations()
		}
	})
	return res, nil
}
