package executor

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
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/execstate"
	"github.com/rendezvous-run/rendezvous/internal/workflow"
)

// ErrExecutionNotFound is returned for an unknown execution id.
var ErrExecutionNotFound = errors.New("execution not found")

// ExecutionSummary is an execution without its input, nodes and waits: an item of the
// execution list, and the head of ExecutionView.
type ExecutionSummary struct {
	ID              uuid.UUID                 `json:"id"`
	Workflow        string                    `json:"workflow"`
	WorkflowVersion int32                     `json:"workflow_version"`
	Status          execstate.ExecutionStatus `json:"status"`
	Error           *string                   `json:"error,omitempty"`
	CreatedAt       time.Time                 `json:"created_at"`
	UpdatedAt       time.Time                 `json:"updated_at"`
	FinishedAt      *time.Time                `json:"finished_at,omitempty"`
}

// ExecutionView is an execution as the API shows it.
type ExecutionView struct {
	ExecutionSummary
	Input json.RawMessage `json:"input"`
	// RedriveCount is how often the execution was redriven, RedrivenAt when last.
	RedriveCount int32      `json:"redrive_count"`
	RedrivenAt   *time.Time `json:"redriven_at,omitempty"`
	// RestartedFrom is the execution this one restarts; RestartedAs the execution that
	// restarted this one.
	RestartedFrom *uuid.UUID `json:"restarted_from,omitempty"`
	RestartedAs   *uuid.UUID `json:"restarted_as,omitempty"`
	Nodes         []NodeView `json:"nodes"`
	Waits         []WaitView `json:"wait_states"`
	// Timeline is what happened to the execution, oldest first (see Timeline).
	Timeline []TimelineEntry `json:"timeline"`
}

// NodeView is one node execution.
type NodeView struct {
	ID     string               `json:"id"`
	Status execstate.NodeStatus `json:"status"`
	Output json.RawMessage      `json:"output,omitempty"`
	Error  *string              `json:"error,omitempty"`
	// Warning is set on a node that finished but not as asked: a wait that continued
	// after events timed out (onTimeout continue_with_partial).
	Warning    *string    `json:"warning,omitempty"`
	Attempts   int32      `json:"attempts"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// WaitView is one wait state, as an execution's view lists it.
type WaitView struct {
	ID            uuid.UUID `json:"id"`
	NodeID        string    `json:"node_id"`
	CorrelationID uuid.UUID `json:"correlation_id"`
	// WaitType is events or timer; a timer shows its settings and no event fields.
	WaitType       execstate.WaitType    `json:"wait_type"`
	Timer          json.RawMessage       `json:"timer,omitempty"`
	Strategy       workflow.Strategy     `json:"aggregation_strategy,omitempty"`
	Status         execstate.WaitStatus  `json:"status"`
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
}

// newWaitStateView is the one place a stored wait state becomes its view.
func newWaitStateView(w dbsqlc.WaitStateListRow) (WaitStateView, error) {
	v := WaitStateView{
		WaitView: WaitView{
			ID: w.ID, NodeID: w.NodeID, CorrelationID: w.CorrelationID, WaitType: w.WaitType, Timer: w.Timer,
			Strategy: w.AggregationStrategy, Status: w.Status, Version: w.Version, Error: w.Error,
			ResumedAt: w.ResumedAt, ResumedBy: w.ResumedBy, ExpiresAt: w.ExpiresAt, NextDeadlineAt: w.NextDeadlineAt,
			CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
		},
		ExecutionID: w.ExecutionID, Workflow: w.WorkflowName, WorkflowVersion: w.WorkflowVersion,
	}
	if w.WaitType == execstate.WaitTypeTimer {
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

// Execution returns an execution with its nodes and waits, read in one snapshot so that
// a wait and its node never disagree.
func (e *Executor) Execution(ctx context.Context, id uuid.UUID) (*ExecutionView, error) {
	var v *ExecutionView
	err := e.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		v, err = e.execution(ctx, tx, id)
		return err
	})
	return v, err
}

// readTx runs fn in a read-only snapshot in which the operator queries are planned for
// their arguments (see OperatorForceCustomPlans).
func (e *Executor) readTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := e.q.OperatorForceCustomPlans(ctx, tx); err != nil {
			return fmt.Errorf("set plan cache mode: %w", err)
		}
		return fn(tx)
	})
}

func (e *Executor) execution(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*ExecutionView, error) {
	exec, err := e.q.ExecutionGet(ctx, tx, id)
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			return nil, ErrExecutionNotFound
		}
		return nil, fmt.Errorf("load execution: %w", err)
	}
	nodes, err := e.q.NodeExecutionListByExecution(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("load node executions: %w", err)
	}
	waits, err := e.q.WaitStateList(ctx, tx, dbsqlc.WaitStateListParams{ExecutionID: &id})
	if err != nil {
		return nil, fmt.Errorf("load wait states: %w", err)
	}
	v := &ExecutionView{
		ExecutionSummary: ExecutionSummary{
			ID: exec.ID, Workflow: exec.WorkflowName, WorkflowVersion: exec.WorkflowVersion, Status: exec.Status,
			Error: exec.Error, CreatedAt: exec.CreatedAt, UpdatedAt: exec.UpdatedAt, FinishedAt: exec.FinishedAt,
		},
		Input: exec.Input, RedriveCount: exec.RedriveCount, RedrivenAt: exec.RedrivenAt,
		RestartedFrom: exec.RestartedFrom, RestartedAs: exec.RestartedAs, Nodes: []NodeView{}, Waits: []WaitView{},
	}
	for _, n := range nodes {
		v.Nodes = append(v.Nodes, NodeView{ID: n.NodeID, Status: n.Status, Output: n.Output, Error: n.Error, Warning: n.Warning,
			Attempts: n.Attempts, StartedAt: n.StartedAt, FinishedAt: n.FinishedAt})
	}
	for _, w := range waits {
		wv, err := newWaitStateView(w)
		if err != nil {
			return nil, err
		}
		v.Waits = append(v.Waits, wv.WaitView)
	}
	v.Timeline = timeline(v)
	return v, nil
}
