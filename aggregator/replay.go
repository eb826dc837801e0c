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

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// Resolution is how a dead letter or an unmatched event was resolved.
type Resolution string

// The resolutions.
const (
	ResolutionReplayed  Resolution = "replayed"
	ResolutionDismissed Resolution = "dismissed"
)

// ErrEventNotFound is returned when the dead letter or unmatched event to replay or
// dismiss does not exist (or retention purged it).
var ErrEventNotFound = errors.New("event not found")

// ResolvedError is returned when the dead letter or unmatched event was already
// replayed or dismissed: each is resolved once.
type ResolvedError struct{ Resolution string }

func (e *ResolvedError) Error() string { return "the event was already " + e.Resolution }

// NotReplayableError is returned for an unmatched event that cannot be replayed from
// what was kept of it.
type NotReplayableError struct{ Reason string }

func (e *NotReplayableError) Error() string { return "the event cannot be replayed: " + e.Reason }

// NotAppliedError is returned when a replayed event did nothing at its execution (the
// execution does not exist or finished, the wait ended or does not expect it, …):
// nothing of the replay is kept, and the row stays unresolved, to be replayed into
// another execution, after a redrive, or dismissed.
type NotAppliedError struct {
	Outcome     string
	ExecutionID uuid.UUID
}

func (e *NotAppliedError) Error() string {
	return fmt.Sprintf("the replayed event was not applied to execution %s: %s", e.ExecutionID, e.Outcome)
}

// Replayed reports a replay.
type Replayed struct {
	ID          int64     `json:"id"`
	ExecutionID uuid.UUID `json:"execution_id"`
	// Outcome is what the event did, as for a live event: delivered or buffered (an
	// event sent by type), recorded or completed (an event correlated by its ids), or
	// duplicate — it was there already, and nothing changed.
	Outcome string `json:"outcome"`
}

// replayApplied lists the outcomes that resolve a replayed row.
var replayApplied = []string{
	string(SendDelivered), string(SendBuffered), string(SendDuplicate), string(Recorded), string(Completed),
}

// ReplayDeadLetter sends a dead-lettered event again, to its execution or to
// executionID when not nil, through the path of an event sent by type (SendTx): its id,
// if it had one, still deduplicates, so a dead letter whose event was recorded since is
// a duplicate and changes nothing. The row is locked while it is replayed and marked
// replayed in the same transaction: concurrent replays of one dead letter apply it
// once. An event that does nothing (*NotAppliedError) leaves no trace.
func (a *Aggregator) ReplayDeadLetter(ctx context.Context, id int64, executionID *uuid.UUID) (Replayed, error) {
	var out Replayed
	var s Sent
	var res SendResult
	err := db.Tx(ctx, a.pool, func(tx pgx.Tx) error {
		row, err := a.q.EventDeadLetterGetForUpdate(ctx, tx, id)
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return ErrEventNotFound
			}
			return fmt.Errorf("lock dead letter: %w", err)
		}
		if row.Resolution != nil {
			return &ResolvedError{Resolution: *row.Resolution}
		}
		s = Sent{ExecutionID: row.ExecutionID, Type: row.EventType, Payload: row.Payload, ID: deref(row.EventID)}
		if executionID != nil {
			s.ExecutionID = *executionID
		}
		if err := json.Unmarshal(row.Source, &s.Source); err != nil {
			return fmt.Errorf("decode dead letter source: %w", err)
		}
		if s.ID != "" && s.ExecutionID == row.ExecutionID {
			// Its id was recorded when it was sent and buffered, though no wait took it.
			// Recorded by a wait since (sent again, say), the event is a duplicate and
			// nothing changes; otherwise the id is forgotten, so the replay counts.
			recorded, err := a.q.WaitStateHasEventKey(ctx, tx, dbsqlc.WaitStateHasEventKeyParams{
				ExecutionID: s.ExecutionID, Key: Event{IdempotencyKey: s.ID}.key()})
			if err != nil {
				return fmt.Errorf("look up event id: %w", err)
			}
			if recorded {
				res = SendResult{Outcome: SendDuplicate}
				out = Replayed{ID: id, ExecutionID: s.ExecutionID, Outcome: string(SendDuplicate)}
				return resolveReplayed(ctx, tx, out, func(detail string) error {
					return a.q.EventDeadLetterResolve(ctx, tx, dbsqlc.EventDeadLetterResolveParams{
						Resolution: string(ResolutionReplayed), Detail: detail, ID: id})
				})
			}
			if err := a.q.ExecutionEventIDDelete(ctx, tx, dbsqlc.ExecutionEventIDDeleteParams{
				ExecutionID: s.ExecutionID, EventID: s.ID}); err != nil {
				return fmt.Errorf("forget event id: %w", err)
			}
		}
		if res, err = a.SendTx(ctx, tx, s); err != nil {
			return err
		}
		out = Replayed{ID: id, ExecutionID: s.ExecutionID, Outcome: string(res.Outcome)}
		return resolveReplayed(ctx, tx, out, func(detail string) error {
			return a.q.EventDeadLetterResolve(ctx, tx, dbsqlc.EventDeadLetterResolveParams{
				Resolution: string(ResolutionReplayed), Detail: detail, ID: id})
		})
	})
	if err != nil {
		return Replayed{}, err
	}
	a.logReplay(ctx, "dead letter replayed", out)
	return out, nil
}

// ReplayUnmatched applies an event that matched nothing again, through the path a live
// event of its kind takes: one sent by type through SendTx, one correlated by its ids
// through ApplyBatch — to its execution, or to executionID when not nil. Only what was
// kept of it can be replayed: its payload must be whole (unmatched events keep an
// excerpt of at most 512 bytes), and a Kafka record that was correlated by its payload
// carries no ids to replay it by. Concurrency and failure as ReplayDeadLetter.
func (a *Aggregator) ReplayUnmatched(ctx context.Context, id int64, executionID *uuid.UUID) (Replayed, error) {
	var out Replayed
	var sent *Sent
	var sendRes SendResult
	var events []Event
	var results []Result
	err := db.Tx(ctx, a.pool, func(tx pgx.Tx) error {
		row, err := a.q.UnmatchedEventGetForUpdate(ctx, tx, id)
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return ErrEventNotFound
			}
			return fmt.Errorf("lock unmatched event: %w", err)
		}
		if row.Resolution != nil {
			return &ResolvedError{Resolution: *row.Resolution}
		}
		if !json.Valid([]byte(row.PayloadExcerpt)) {
			return &NotReplayableError{Reason: "only an excerpt of its payload was kept; replay it from its source"}
		}
		var src Source
		if err := json.Unmarshal(row.Source, &src); err != nil {
			return fmt.Errorf("decode unmatched event source: %w", err)
		}
		target := executionID
		if target == nil {
			target = row.ExecutionID
		}
		if target == nil {
			return &NotReplayableError{Reason: "it names no execution; name one"}
		}
		payload := json.RawMessage(row.PayloadExcerpt)
		resolve := func(detail string) error {
			return a.q.UnmatchedEventResolve(ctx, tx, dbsqlc.UnmatchedEventResolveParams{
				Resolution: string(ResolutionReplayed), Detail: detail, ID: id})
		}
		switch {
		case row.CorrelationID != nil:
			events = []Event{{ExecutionID: *target, CorrelationID: *row.CorrelationID, Name: deref(row.EventName),
				Payload: payload, Source: src}}
			if results, err = a.ApplyBatch(ctx, tx, events); err != nil {
				return err
			}
			out = Replayed{ID: id, ExecutionID: *target, Outcome: string(results[0].Outcome)}
		case row.EventType != nil:
			sent = &Sent{ExecutionID: *target, Type: *row.EventType, Payload: payload, Source: src}
			if sendRes, err = a.SendTx(ctx, tx, *sent); err != nil {
				return err
			}
			out = Replayed{ID: id, ExecutionID: *target, Outcome: string(sendRes.Outcome)}
		default:
			return &NotReplayableError{Reason: "it was correlated by its payload, not by ids; replay it from its source"}
		}
		return resolveReplayed(ctx, tx, out, resolve)
	})
	if err != nil {
		return Replayed{}, err
	}
	a.logReplay(ctx, "unmatched event replayed", out)
	return out, nil
}

// resolveReplayed marks a replayed row resolved when its event applied (or was there
// already), with the audit row of the request, and otherwise fails the transaction with
// a *NotAppliedError.
func resolveReplayed(ctx context.Context, tx pgx.Tx, out Replayed, resolve func(detail string) error) error {
	if !slices.Contains(replayApplied, out.Outcome) {
		return &NotAppliedError{Outcome: out.Outcome, ExecutionID: out.ExecutionID}
	}
	detail := fmt.Sprintf("%s into execution %s", out.Outcome, out.ExecutionID)
	if err := resolve(detail); err != nil {
		return fmt.Errorf("mark replayed: %w", err)
	}
	return audit.Record(ctx, tx, fmt.Sprintf("event/%d", out.ID), audit.OutcomeOK, detail)
}

func (a *Aggregator) logReplay(ctx context.Context, msg string, out Replayed) {
	a.logger.InfoContext(ctx, msg, "id", out.ID, "execution_id", out.ExecutionID, "outcome", out.Outcome,
		"instance_id", a.cfg.InstanceID)
}

// DismissDeadLetter marks a dead letter dismissed, with why: it stays listed, resolved,
// until retention purges it.
func (a *Aggregator) DismissDeadLetter(ctx context.Context, id int64, reason string) error {
	return a.dismiss(ctx, id, reason, func(tx pgx.Tx) (*string, error) {
		row, err := a.q.EventDeadLetterGetForUpdate(ctx, tx, id)
		return row.Resolution, err
	}, func(tx pgx.Tx) error {
		return a.q.EventDeadLetterResolve(ctx, tx, dbsqlc.EventDeadLetterResolveParams{
			Resolution: string(ResolutionDismissed), Detail: reason, ID: id})
	})
}

// DismissUnmatched marks an unmatched event dismissed, with why.
func (a *Aggregator) DismissUnmatched(ctx context.Context, id int64, reason string) error {
	return a.dismiss(ctx, id, reason, func(tx pgx.Tx) (*string, error) {
		row, err := a.q.UnmatchedEventGetForUpdate(ctx, tx, id)
		return row.Resolution, err
	}, func(tx pgx.Tx) error {
		return a.q.UnmatchedEventResolve(ctx, tx, dbsqlc.UnmatchedEventResolveParams{
			Resolution: string(ResolutionDismissed), Detail: reason, ID: id})
	})
}

func (a *Aggregator) dismiss(ctx context.Context, id int64, reason string, lock func(pgx.Tx) (*string, error), mark func(pgx.Tx) error) error {
	if reason == "" {
		return errors.New("reason: must not be empty")
	}
	err := db.Tx(ctx, a.pool, func(tx pgx.Tx) error {
		resolution, err := lock(tx)
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return ErrEventNotFound
			}
			return fmt.Errorf("lock event: %w", err)
		}
		if resolution != nil {
			return &ResolvedError{Resolution: *resolution}
		}
		if err := mark(tx); err != nil {
			return err
		}
		return audit.Record(ctx, tx, fmt.Sprintf("event/%d", id), audit.OutcomeOK, "dismissed: "+reason)
	})
	if err == nil {
		a.logger.InfoContext(ctx, "event dismissed", "id", id, "reason", reason, "instance_id", a.cfg.InstanceID)
	}
	return err
}

// DeadLetterFilter selects unresolved dead letters for DismissDeadLetters; zero fields
// do not filter.
type DeadLetterFilter struct {
	ExecutionID *uuid.UUID `json:"execution_id,omitempty"`
	Workflow    string     `json:"workflow,omitempty"`
	EventType   string     `json:"event_type,omitempty"`
	// Reason is why the event was dead-lettered: expired, superseded or
	// execution_finished.
	Reason string `json:"dead_letter_reason,omitempty"`
	// CreatedAfter and CreatedBefore bound when it was dead-lettered; CreatedBefore
	// defaults to the start of the call.
	CreatedAfter  time.Time `json:"created_after,omitzero"`
	CreatedBefore time.Time `json:"created_before,omitzero"`
}

// DismissedMany reports a DismissDeadLetters call.
type DismissedMany struct {
	// Matched is how many unresolved dead letters matched when the call began.
	Matched   int64 `json:"matched"`
	Dismissed int   `json:"dismissed"`
	Batches   int   `json:"batches"`
	DryRun    bool  `json:"dry_run"`
	// More is set when the call stopped at limit with matching dead letters left.
	More bool `json:"more"`
}

// DismissDeadLetters dismisses, with why, the unresolved dead letters a filter selects,
// counting them first (dryRun stops there). It works in statements of at most batch
// rows, oldest first, skipping rows a replay holds, and stops after limit; calling again
// resumes, since a dismissed dead letter no longer matches.
func (a *Aggregator) DismissDeadLetters(ctx context.Context, f DeadLetterFilter, why string, dryRun bool, limit, batch int) (DismissedMany, error) {
	if f.CreatedBefore.IsZero() {
		f.CreatedBefore = a.now()
	}
	p := dbsqlc.EventDeadLetterDismissBatchParams{Detail: why, CreatedBefore: f.CreatedBefore, ExecutionID: f.ExecutionID,
		EventType: nonEmpty(f.EventType), Reason: nonEmpty(f.Reason), Workflow: nonEmpty(f.Workflow)}
	if !f.CreatedAfter.IsZero() {
		p.CreatedAfter = &f.CreatedAfter
	}
	out := DismissedMany{DryRun: dryRun}
	var err error
	if out.Matched, err = a.q.EventDeadLetterCountOpen(ctx, a.pool, dbsqlc.EventDeadLetterCountOpenParams{
		CreatedBefore: p.CreatedBefore, CreatedAfter: p.CreatedAfter, ExecutionID: p.ExecutionID,
		EventType: p.EventType, Reason: p.Reason, Workflow: p.Workflow,
	}); err != nil {
		return out, fmt.Errorf("count dead letters: %w", err)
	}
	if dryRun || out.Matched == 0 {
		return out, nil
	}
	if why == "" {
		return out, errors.New("reason: must not be empty")
	}
	for out.Dismissed < limit {
		p.Max = int32(min(batch, limit-out.Dismissed))
		// Each batch commits with its audit row: what it dismissed, and why.
		var n int64
		err := db.Tx(ctx, a.pool, func(tx pgx.Tx) (err error) {
			if n, err = a.q.EventDeadLetterDismissBatch(ctx, tx, p); err != nil || n == 0 {
				return err
			}
			return audit.Record(ctx, tx, "dead-letters", audit.OutcomeOK, fmt.Sprintf("dismissed %d: %s", n, why))
		})
		if err != nil {
			return out, fmt.Errorf("dismiss dead letters: %w", err)
		}
		if n == 0 {
			break
		}
		out.Batches++
		out.Dismissed += int(n)
		if n < int64(p.Max) {
			break
		}
	}
	out.More = out.Dismissed >= limit && int64(out.Dismissed) < out.Matched
	a.logger.InfoContext(ctx, "dead letters dismissed in bulk", "dismissed", out.Dismissed, "matched", out.Matched,
		"reason", why, "instance_id", a.cfg.InstanceID)
	return out, nil
}
