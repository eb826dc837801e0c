package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// The executor's part in a correlated call, whose lifecycle package outbound owns: it
// runs the sender's loop (Services), tells the sender what a node's call is and the
// scope it renders in, and fails the node when a required call is given up. It is the
// sender's outbound.Executions.

// CallOf returns the correlated call of a node and the scope its templates render in:
// the execution's input, vars and completed outputs, read now.
func (e *Executor) CallOf(ctx context.Context, executionID uuid.UUID, nodeID string) (*workflow.APICall, template.Scope, error) {
	st, err := e.loadState(ctx, e.pool, executionID, false)
	if err != nil {
		return nil, template.Scope{}, err
	}
	node, ok := st.wf.Node(nodeID)
	if !ok {
		return nil, template.Scope{}, fmt.Errorf("node %s not in definition", nodeID)
	}
	cfg, ok := node.Config.(*workflow.WaitEvents)
	if !ok || cfg.APICall == nil {
		return nil, template.Scope{}, nil
	}
	return cfg.APICall, st.scope(), nil
}

// FailNode locks the execution in tx, runs decide, and when it returns true fails the
// node and the execution, unless the execution has finished.
func (e *Executor) FailNode(ctx context.Context, tx pgx.Tx, executionID uuid.UUID, nodeID, reason string, decide func() (bool, error)) error {
	st, err := e.loadState(ctx, tx, executionID, true)
	if err != nil {
		return err
	}
	failed, err := decide()
	if err != nil || !failed || execFinished(st.exec.Status) {
		return err
	}
	return e.failNode(ctx, tx, st, nodeID, reason)
}

// backoff returns the delay before a node's attempt+1, as between a call's attempts.
func (e *Executor) backoff(attempt int32) time.Duration {
	return outbound.Backoff(e.cfg.OutboxBackoffMin, e.cfg.OutboxBackoffMax, attempt)
}
