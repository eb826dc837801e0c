package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// buffer holds a sent event no wait took for the next wait of its type, and returns the
// unmatched row that says why.
func (a *Aggregator) buffer(ctx context.Context, tx pgx.Tx, s Sent, exec dbsqlc.Execution, res *SendResult) (unmatched, error) {
	ttl, err := a.bufferTTL(ctx, tx, exec.WorkflowName, exec.WorkflowVersion)
	if err != nil {
		return unmatched{}, err
	}
	src, err := json.Marshal(s.Source)
	if err != nil {
		return unmatched{}, err
	}
	res.ExpiresAt = a.now().UTC().Add(ttl)
	res.BufferID, err = a.q.EventBufferInsert(ctx, tx, dbsqlc.EventBufferInsertParams{
		ExecutionID: s.ExecutionID, EventType: s.Type, EventID: nonEmpty(s.ID), Payload: s.Payload, Source: src, ExpiresAt: res.ExpiresAt,
	})
	if err != nil {
		return unmatched{}, fmt.Errorf("buffer event: %w", err)
	}
	res.Outcome = SendBuffered
	reason, detail := UnmatchedBuffered, "no node of the execution waits for type "+s.Type+" yet; buffered until "+res.ExpiresAt.Format(time.RFC3339)
	if len(res.Deliveries) > 0 {
		// Waits of this type exist but none took it (its filter, or they already hold one).
		reason = reasonOf(res.Deliveries[0].Outcome)
		detail = "waiting nodes of this type did not take it (" + string(res.Deliveries[0].Outcome) + "); buffered until " + res.ExpiresAt.Format(time.RFC3339)
	}
	res.Unmatched = reason
	return unmatched{reason: reason, source: s.Source, typ: s.Type, executionID: s.ExecutionID, detail: detail, payload: s.Payload}, nil
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
	return a.takeEarly(ctx, tx, ws, true)
}

// TakeKept is TakeBuffered for a wait registered in the transaction that inserts its
// execution: only the Kafka records kept for a payload match's lookback can be there for
// it. No event can be buffered for an execution that exists in no committed transaction
// yet — a buffered event's row references its execution, and a send to an execution it
// cannot see is refused (no_execution), not buffered — so the buffer is not read: one
// statement less for every start that parks.
func (a *Aggregator) TakeKept(ctx context.Context, tx pgx.Tx, ws dbsqlc.ExecutionWaitState) (Result, error) {
	return a.takeEarly(ctx, tx, ws, false)
}

// takeEarly is TakeBuffered, reading the event buffer only when readBuffer is set.
func (a *Aggregator) takeEarly(ctx context.Context, tx pgx.Tx, ws dbsqlc.ExecutionWaitState, readBuffer bool) (Result, error) {
	res := Result{WaitStateID: ws.ID, NodeID: ws.NodeID, Status: ws.Status, Version: ws.Version}
	if ws.WaitType != vocab.WaitTypeEvents {
		return res, nil
	}
	w, err := decodeWait(ws)
	if err != nil {
		return res, err
	}
	if err := w.decodeExpected(); err != nil {
		return res, err
	}
	now := a.now().UTC()
	var taken, superseded []int64
	for _, e := range slices.Clone(w.expected) {
		if !readBuffer || e.Source != SourceSend || w.row.Status != vocab.WaitWaiting {
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
