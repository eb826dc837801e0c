package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

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
	ID     string           `json:"id"`
	Status vocab.NodeStatus `json:"status"`
	Output json.RawMessage  `json:"output,omitempty"`
	Error  *string          `json:"error,omitempty"`
	// Warning is set on a node that finished but not as asked: a wait that continued
	// after events timed out (onTimeout continue_with_partial).
	Warning    *string    `json:"warning,omitempty"`
	Attempts   int32      `json:"attempts"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Execution returns an execution with its nodes and waits, read in one snapshot so that
// a wait and its node never disagree.
func (r *Reader) Execution(ctx context.Context, id uuid.UUID) (*ExecutionView, error) {
	var v *ExecutionView
	err := Snapshot(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		v, err = r.execution(ctx, tx, id)
		return err
	})
	return v, err
}

func (r *Reader) execution(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*ExecutionView, error) {
	exec, err := r.q.ExecutionGet(ctx, tx, id)
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			return nil, fmt.Errorf("execution %s: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("load execution: %w", err)
	}
	nodes, err := r.q.NodeExecutionListByExecution(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("load node executions: %w", err)
	}
	waits, err := r.q.WaitStateList(ctx, tx, dbsqlc.WaitStateListParams{ExecutionID: &id})
	if err != nil {
		return nil, fmt.Errorf("load wait states: %w", err)
	}
	if err := r.displays.load(ctx, r.q, tx, []wfVersion{{exec.WorkflowName, exec.WorkflowVersion}}); err != nil {
		return nil, err
	}
	v := &ExecutionView{
		ExecutionSummary: ExecutionSummary{
			ID: exec.ID, Workflow: exec.WorkflowName, WorkflowVersion: exec.WorkflowVersion, Status: exec.Status,
			Error: exec.Error, CreatedAt: exec.CreatedAt, UpdatedAt: exec.UpdatedAt, FinishedAt: exec.FinishedAt,
			Summary: r.displays.summary(exec.WorkflowName, exec.WorkflowVersion, exec.Input),
		},
		Input: exec.Input, RedriveCount: exec.RedriveCount, RedrivenAt: exec.RedrivenAt,
		RestartedFrom: exec.RestartedFrom, RestartedAs: exec.RestartedAs, Nodes: []NodeView{}, Waits: []WaitView{},
	}
	for _, n := range nodes {
		v.Nodes = append(v.Nodes, NodeView{ID: n.NodeID, Status: n.Status, Output: n.Output, Error: n.Error, Warning: n.Warning,
			Attempts: n.Attempts, StartedAt: n.StartedAt, FinishedAt: n.FinishedAt})
	}
	for _, w := range waits {
		wv, err := NewWaitStateView(w)
		if err != nil {
			return nil, err
		}
		v.Waits = append(v.Waits, wv.WaitView)
	}
	v.Timeline = timeline(v)
	return v, nil
}
