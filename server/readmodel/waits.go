package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// ErrNotFound is returned by a lookup of one item that does not exist.
var ErrNotFound = errors.New("not found")

// WaitStatuses are the statuses a wait state can have, the values of the wait-state
// list's status filter.
var WaitStatuses = []vocab.WaitStatus{
	vocab.WaitWaiting, vocab.WaitScheduled, vocab.WaitCompleted, vocab.WaitTimeout,
	vocab.WaitFailed, vocab.WaitCancelled, vocab.WaitResumed, vocab.WaitError,
}

// WaitView is one wait state, as an execution's view lists it.
type WaitView struct {
	ID            uuid.UUID `json:"id"`
	NodeID        string    `json:"node_id"`
	CorrelationID uuid.UUID `json:"correlation_id"`
	// WaitType is events or timer; a timer shows its settings and no event fields.
	WaitType       vocab.WaitType        `json:"wait_type"`
	Timer          json.RawMessage       `json:"timer,omitempty"`
	Strategy       vocab.Strategy        `json:"aggregation_strategy,omitempty"`
	Status         vocab.WaitStatus      `json:"status"`
	Version        int64                 `json:"version"`
	EnabledEvents  []string              `json:"enabled_events"`
	RequiredEvents []string              `json:"required_events"`
	ReceivedEvents []aggregator.Received `json:"received_events"`
	// MissingEvents are the enabled events neither received nor timed out: what the
	// wait is still waiting for, or, once it ended, what never came. Derived, so that
	// every client shows the same answer.
	MissingEvents  []string   `json:"missing_events"`
	TimedOutEvents []string   `json:"timed_out_events"`
	Error          *string    `json:"error,omitempty"`
	ResumedAt      *time.Time `json:"resumed_at,omitempty"`
	ResumedBy      *string    `json:"resumed_by,omitempty"`
	ExpiresAt      time.Time  `json:"expires_at"`
	// NextDeadlineAt is the earliest deadline still ahead of a waiting state.
	NextDeadlineAt time.Time `json:"next_deadline_at"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// WaitStateView is a wait state on its own (the wait-state list and lookup): the wait
// and the execution and workflow it belongs to.
type WaitStateView struct {
	WaitView
	ExecutionID     uuid.UUID `json:"execution_id"`
	Workflow        string    `json:"workflow"`
	WorkflowVersion int32     `json:"workflow_version"`
	// Summary is the execution's business key (ExecutionSummary.Summary).
	Summary string `json:"summary,omitempty"`
}

// NewWaitStateView is the one place a stored wait state becomes its view; an
// execution's view shows its waits through it too.
func NewWaitStateView(w dbsqlc.WaitStateListRow) (WaitStateView, error) {
	v := WaitStateView{
		WaitView: WaitView{
			ID: w.ID, NodeID: w.NodeID, CorrelationID: w.CorrelationID, WaitType: w.WaitType, Timer: w.Timer,
			Strategy: w.AggregationStrategy, Status: w.Status, Version: w.Version, Error: w.Error,
			ResumedAt: w.ResumedAt, ResumedBy: w.ResumedBy, ExpiresAt: w.ExpiresAt, NextDeadlineAt: w.NextDeadlineAt,
			CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		},
		ExecutionID: w.ExecutionID, Workflow: w.WorkflowName, WorkflowVersion: w.WorkflowVersion,
	}
	if w.WaitType == vocab.WaitTypeTimer {
		v.Strategy = "" // unused columns of a timer are not shown
	}
	for _, part := range []struct {
		raw []byte
		dst any
	}{{w.EnabledEvents, &v.EnabledEvents}, {w.RequiredEvents, &v.RequiredEvents}, {w.ReceivedEvents, &v.ReceivedEvents}, {w.TimedOutEvents, &v.TimedOutEvents}} {
		if err := json.Unmarshal(part.raw, part.dst); err != nil {
			return WaitStateView{}, fmt.Errorf("decode wait state %s: %w", w.ID, err)
		}
	}
	v.MissingEvents = missingEvents(v.EnabledEvents, v.ReceivedEvents, v.TimedOutEvents)
	return v, nil
}

// missingEvents is enabled minus received minus timed out, in the order of enabled.
func missingEvents(enabled []string, received []aggregator.Received, timedOut []string) []string {
	out := []string{}
	for _, name := range enabled {
		if slices.Contains(timedOut, name) || slices.ContainsFunc(received, func(r aggregator.Received) bool { return r.Name == name }) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// WaitStateFilter selects wait states; zero fields do not filter.
type WaitStateFilter struct {
	Status   string
	Workflow string
	NodeID   string
	// ExecutionID, when set, lists that execution's waits only.
	ExecutionID *uuid.UUID
}

// WaitStates returns wait states oldest first — the longest waiting at the top — by
// (created_at, id). A wait created while a client pages may be missed if it sorts before
// the cursor, but no wait is ever listed twice or skipped when it existed throughout.
func (r *Reader) WaitStates(ctx context.Context, f WaitStateFilter, pg Paging) (Page[WaitStateView], error) {
	limit, err := limitOf(pg.Limit)
	if err != nil {
		return Page[WaitStateView]{}, err
	}
	p := dbsqlc.WaitStateListParams{Max: ptr(int32(limit + 1)), ExecutionID: f.ExecutionID}
	if p.Status, err = oneOf("status", f.Status, WaitStatuses); err != nil {
		return Page[WaitStateView]{}, err
	}
	if p.Workflow, err = Text("workflow", f.Workflow); err != nil {
		return Page[WaitStateView]{}, err
	}
	if p.NodeID, err = Text("node", f.NodeID); err != nil {
		return Page[WaitStateView]{}, err
	}
	if pg.Cursor != "" {
		at, id, err := decodeTimeID(kindWaitStates, pg.Cursor)
		if err != nil {
			return Page[WaitStateView]{}, err
		}
		p.AfterCreatedAt, p.AfterID = &at, &id
	}
	rows, err := read(ctx, r, "wait states", func(tx pgx.Tx) ([]dbsqlc.WaitStateListRow, error) {
		rows, err := r.q.WaitStateList(ctx, tx, p)
		if err != nil {
			return nil, err
		}
		return rows, r.displays.load(ctx, r.q, tx, versionsOf(rows, func(w dbsqlc.WaitStateListRow) (string, int32) { return w.WorkflowName, w.WorkflowVersion }))
	})
	if err != nil {
		return Page[WaitStateView]{}, err
	}
	withSummary := func(w dbsqlc.WaitStateListRow) (WaitStateView, error) {
		v, err := NewWaitStateView(w)
		v.Summary = r.displays.summary(w.WorkflowName, w.WorkflowVersion, w.Input)
		return v, err
	}
	return pageOf(rows, limit, withSummary, func(w dbsqlc.WaitStateListRow) string {
		return encodeTimeID(kindWaitStates, w.CreatedAt, w.ID)
	})
}

// WaitState returns one wait state, or ErrNotFound.
func (r *Reader) WaitState(ctx context.Context, id uuid.UUID) (WaitStateView, error) {
	rows, err := read(ctx, r, "wait state", func(tx pgx.Tx) ([]dbsqlc.WaitStateListRow, error) {
		return r.q.WaitStateList(ctx, tx, dbsqlc.WaitStateListParams{ID: &id, Max: ptr(int32(1))})
	})
	if err != nil {
		return WaitStateView{}, err
	}
	if len(rows) == 0 {
		return WaitStateView{}, fmt.Errorf("wait state %s: %w", id, ErrNotFound)
	}
	return NewWaitStateView(rows[0])
}
