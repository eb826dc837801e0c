package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
)

// ErrExecutionNotFound is returned for an unknown execution id.
var ErrExecutionNotFound = errors.New("execution not found")

// ExecutionView is an execution as the API shows it.
type ExecutionView struct {
	ID              uuid.UUID       `json:"id"`
	Workflow        string          `json:"workflow"`
	WorkflowVersion int32           `json:"workflow_version"`
	Status          string          `json:"status"`
	Input           json.RawMessage `json:"input"`
	Error           *string         `json:"error,omitempty"`
	CreatedAt       time.Time       `json:"created_at"`
	UpdatedAt       time.Time       `json:"updated_at"`
	FinishedAt      *time.Time      `json:"finished_at,omitempty"`
	Nodes           []NodeView      `json:"nodes"`
	Waits           []WaitView      `json:"wait_states"`
}

// NodeView is one node execution.
type NodeView struct {
	ID         string          `json:"id"`
	Status     string          `json:"status"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      *string         `json:"error,omitempty"`
	Attempts   int32           `json:"attempts"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

// WaitView is one wait state.
type WaitView struct {
	ID            uuid.UUID `json:"id"`
	NodeID        string    `json:"node_id"`
	CorrelationID uuid.UUID `json:"correlation_id"`
	// WaitType is events or timer; a timer shows its settings and no event fields.
	WaitType       string                `json:"wait_type"`
	Timer          json.RawMessage       `json:"timer,omitempty"`
	Strategy       string                `json:"aggregation_strategy,omitempty"`
	Status         string                `json:"status"`
	Version        int64                 `json:"version"`
	EnabledEvents  []string              `json:"enabled_events"`
	RequiredEvents []string              `json:"required_events"`
	ReceivedEvents []aggregator.Received `json:"received_events"`
	TimedOutEvents []string              `json:"timed_out_events"`
	Error          *string               `json:"error,omitempty"`
	ResumedAt      *time.Time            `json:"resumed_at,omitempty"`
	ResumedBy      *string               `json:"resumed_by,omitempty"`
	ExpiresAt      time.Time             `json:"expires_at"`
	// NextDeadlineAt is the earliest deadline still ahead of a waiting state.
	NextDeadlineAt time.Time `json:"next_deadline_at"`
	CreatedAt      time.Time `json:"created_at"`
}

// Execution returns an execution with its nodes and waits, read in one snapshot so that
// a wait and its node never disagree.
func (e *Executor) Execution(ctx context.Context, id uuid.UUID) (*ExecutionView, error) {
	var v *ExecutionView
	err := pgx.BeginTxFunc(ctx, e.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		v, err = e.execution(ctx, tx, id)
		return err
	})
	return v, err
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
	waits, err := e.q.WaitStateListByExecution(ctx, tx, id)
	if err != nil {
		return nil, fmt.Errorf("load wait states: %w", err)
	}
	v := &ExecutionView{
		ID: exec.ID, Workflow: exec.WorkflowName, WorkflowVersion: exec.WorkflowVersion, Status: exec.Status,
		Input: exec.Input, Error: exec.Error, CreatedAt: exec.CreatedAt, UpdatedAt: exec.UpdatedAt, FinishedAt: exec.FinishedAt,
		Nodes: []NodeView{}, Waits: []WaitView{},
	}
	for _, n := range nodes {
		v.Nodes = append(v.Nodes, NodeView{ID: n.NodeID, Status: n.Status, Output: n.Output, Error: n.Error,
			Attempts: n.Attempts, StartedAt: n.StartedAt, FinishedAt: n.FinishedAt})
	}
	for _, w := range waits {
		wv := WaitView{ID: w.ID, NodeID: w.NodeID, CorrelationID: w.CorrelationID, WaitType: w.WaitType, Timer: w.Timer,
			Strategy: w.AggregationStrategy, Status: w.Status, Version: w.Version, Error: w.Error, ResumedAt: w.ResumedAt,
			ResumedBy: w.ResumedBy, ExpiresAt: w.ExpiresAt, NextDeadlineAt: w.NextDeadlineAt, CreatedAt: w.CreatedAt}
		if w.WaitType == aggregator.WaitTypeTimer {
			wv.Strategy = "" // unused columns of a timer are not shown
		}
		for _, part := range []struct {
			raw []byte
			dst any
		}{{w.EnabledEvents, &wv.EnabledEvents}, {w.RequiredEvents, &wv.RequiredEvents}, {w.ReceivedEvents, &wv.ReceivedEvents}, {w.TimedOutEvents, &wv.TimedOutEvents}} {
			if err := json.Unmarshal(part.raw, part.dst); err != nil {
				return nil, fmt.Errorf("decode wait state %s: %w", w.ID, err)
			}
		}
		v.Waits = append(v.Waits, wv)
	}
	return v, nil
}
