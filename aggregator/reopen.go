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
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// ErrNotReopenable is returned by ReopenWait for a wait that a redrive does not open
// again: a timer, a wait that could not be set up (status error), or one that did not
// end without its events (open, or completed). The node runs again from scratch
// instead; ReopenWait has then deleted the finished row to make way for the new one.
var ErrNotReopenable = errors.New("wait cannot be reopened")

// Reopened describes a wait opened again by ReopenWait.
type Reopened struct {
	Wait dbsqlc.ExecutionWaitState
	// CallResent is set when the wait's correlated call was queued again: it was the
	// call that had failed the wait.
	CallResent bool
}

// ReopenWait opens a finished event wait of a failed execution again, for a redrive,
// inside the caller's transaction (which holds the execution's row). The wait keeps its
// correlation id and every event it recorded, so the strategy needs only what is still
// missing, and an event sent for the original wait — by a producer that was late, or a
// retry — applies to the reopened one. Its deadlines start again from now: the overall
// one after timeout (DefaultTimeout when zero), each event's own after its timeout.
// Events timed out before count again. The correlated call is sent again only when it
// was what failed the wait (status failed): a wait that timed out had its call accepted
// and lacks only the reply, and one cancelled with its execution is not re-called.
//
// The row is locked, then written behind its version fence with the version moved on:
// an event decided against the finished row misses its fence and is decided again
// against the open one, so it is recorded once.
//
// A wait it does not reopen (see ErrNotReopenable) is deleted, so that the node can
// register a new one when it runs again; db.ErrNotFound when the node has no wait.
func (a *Aggregator) ReopenWait(ctx context.Context, tx pgx.Tx, executionID uuid.UUID, nodeID string, timeout time.Duration) (Reopened, error) {
	row, err := a.q.WaitStateGetByNodeForUpdate(ctx, tx, dbsqlc.WaitStateGetByNodeForUpdateParams{ExecutionID: executionID, NodeID: nodeID})
	if err != nil {
		return Reopened{}, fmt.Errorf("load wait: %w", db.Interpret(err))
	}
	reopenable := row.WaitType == vocab.WaitTypeEvents &&
		(row.Status == vocab.WaitTimeout || row.Status == vocab.WaitFailed || row.Status == vocab.WaitCancelled)
	if !reopenable {
		if err := a.q.WaitStateDelete(ctx, tx, row.ID); err != nil {
			return Reopened{}, fmt.Errorf("delete finished wait: %w", err)
		}
		return Reopened{}, ErrNotReopenable
	}
	var expected []Expected
	if err := json.Unmarshal(row.ExpectedEvents, &expected); err != nil {
		return Reopened{}, fmt.Errorf("decode wait %s: %w", row.ID, err)
	}
	var received []Received
	if err := json.Unmarshal(row.ReceivedEvents, &received); err != nil {
		return Reopened{}, fmt.Errorf("decode wait %s: %w", row.ID, err)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// As Register: microseconds, so stored deadlines compare exactly.
	now := a.now().UTC().Truncate(time.Microsecond)
	expires := now.Add(timeout)
	next := expires
	for i := range expected {
		expected[i].DeadlineAt = nil
		if expected[i].TimeoutMS <= 0 {
			continue
		}
		at := now.Add(time.Duration(expected[i].TimeoutMS) * time.Millisecond)
		expected[i].DeadlineAt = &at
		// A received event's deadline no longer matters; only a missing one's is next.
		if at.Before(next) && !slices.ContainsFunc(received, func(r Received) bool { return r.Name == expected[i].Name }) {
			next = at
		}
	}
	expectedJSON, err := json.Marshal(expected)
	if err != nil {
		return Reopened{}, err
	}
	ws, err := a.q.WaitStateReopen(ctx, tx, dbsqlc.WaitStateReopenParams{
		ExpectedEvents: expectedJSON, ExpiresAt: expires, NextDeadlineAt: next, ID: row.ID, Version: row.Version,
	})
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			return Reopened{}, errors.New("reopen wait: version fence missed on a locked row")
		}
		return Reopened{}, fmt.Errorf("reopen wait: %w", err)
	}
	out := Reopened{Wait: ws}
	// Only FailCall fails an event wait: its required call failed for good, before any
	// reply arrived.
	if row.Status == vocab.WaitFailed {
		if err := outbound.Queue(ctx, tx, ws); err != nil {
			return Reopened{}, err
		}
		out.CallResent = true
	}
	db.AfterCommit(tx, func() { a.deadlineRegistered(next) })
	a.logger.InfoContext(ctx, "wait reopened", "execution_id", executionID, "correlation_id", ws.CorrelationID,
		"node_id", nodeID, "instance_id", a.cfg.InstanceID, "previous_status", row.Status, "version", ws.Version,
		"call_resent", out.CallResent, "next_deadline_at", next)
	return out, nil
}
