package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// ExecutionFinishedError is returned when an execution to change has already finished.
type ExecutionFinishedError struct{ Status vocab.ExecutionStatus }

func (e *ExecutionFinishedError) Error() string { return "execution is already " + string(e.Status) }

// ErrWaitNotFound is returned when an execution has no wait for the node.
var ErrWaitNotFound = errors.New("wait not found")

// Then is what an execution does after one of its waits is cancelled.
type Then string

// The choices.
const (
	ThenFail     Then = "fail"
	ThenContinue Then = "continue"
)

// CancelExecution cancels a running or waiting execution: its open waits become
// cancelled (behind their version fence, so a racing event is either recorded first or
// late), its unfinished nodes cancelled, its queued work and unsent calls dropped. A node
// running right now loses its claim and its result is rolled back. Cancelling a
// cancelled execution changes nothing; a completed or failed one is an
// *ExecutionFinishedError.
func (e *Executor) CancelExecution(ctx context.Context, id uuid.UUID, reason string) (dbsqlc.Execution, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var exec dbsqlc.Execution
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		exec, err = e.q.ExecutionGetForUpdate(ctx, tx, id)
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return ErrExecutionNotFound
			}
			return fmt.Errorf("lock execution: %w", err)
		}
		if exec.Status == execCancelled {
			return nil
		}
		if execFinished(exec.Status) {
			return &ExecutionFinishedError{Status: exec.Status}
		}
		if exec, err = e.cancelTx(ctx, tx, id, reason); err != nil {
			return err
		}
		return audit.Record(ctx, tx, "execution/"+id.String(), audit.OutcomeOK, reason)
	})
	if err == nil && exec.Status == execCancelled {
		e.logger.InfoContext(ctx, "execution cancelled", "execution_id", id, "instance_id", e.cfg.InstanceID, "reason", reason)
	}
	return exec, err
}

// cancelTx cancels an open execution whose row tx holds locked: the execution, its open
// waits and unfinished nodes are cancelled, its queued work and unsent calls dropped. It
// returns the execution as cancelled.
func (e *Executor) cancelTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) (dbsqlc.Execution, error) {
	if err := e.q.ExecutionSetStatus(ctx, tx, dbsqlc.ExecutionSetStatusParams{ID: id, Status: string(execCancelled), Error: &reason}); err != nil {
		return dbsqlc.Execution{}, fmt.Errorf("cancel execution: %w", err)
	}
	if err := e.agg.CancelOpenWaits(ctx, tx, id, "execution cancelled: "+reason); err != nil {
		return dbsqlc.Execution{}, err
	}
	if err := e.q.NodeExecutionCancelOpen(ctx, tx, dbsqlc.NodeExecutionCancelOpenParams{ExecutionID: id, Error: "execution cancelled: " + reason}); err != nil {
		return dbsqlc.Execution{}, fmt.Errorf("cancel nodes: %w", err)
	}
	if err := e.q.RunQueueDeleteForExecution(ctx, tx, id); err != nil {
		return dbsqlc.Execution{}, fmt.Errorf("drop queued work: %w", err)
	}
	if err := e.q.OutboxDeleteForExecution(ctx, tx, id); err != nil {
		return dbsqlc.Execution{}, fmt.Errorf("drop unsent calls: %w", err)
	}
	return e.q.ExecutionGet(ctx, tx, id)
}

// CancelWait cancels one open wait of a running execution (a wait that already finished
// is an *aggregator.WaitFinishedError). then says what follows:
// ThenFail fails the node and the execution; ThenContinue completes the node with what
// arrived so far (output cancelled: true) and the workflow goes on along its edges.
func (e *Executor) CancelWait(ctx context.Context, execID uuid.UUID, nodeID string, then Then, reason string) error {
	if then == "" {
		then = ThenFail
	}
	if then != ThenFail && then != ThenContinue {
		return fmt.Errorf("then: must be %q or %q", ThenFail, ThenContinue)
	}
	if reason == "" {
		reason = "wait cancelled"
	}
	var enqueued bool
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		st, err := e.loadState(ctx, tx, execID, true)
		if err != nil {
			if errors.Is(err, db.ErrNotFound) {
				return ErrExecutionNotFound
			}
			return err
		}
		if execFinished(st.exec.Status) {
			return &ExecutionFinishedError{Status: st.exec.Status}
		}
		// The aggregator ends the wait and its node together: failed, or completed with
		// what arrived so far, which the workflow goes on from here.
		output, err := e.agg.CancelWait(ctx, tx, execID, nodeID, reason, then == ThenContinue)
		if err != nil {
			if errors.Is(err, db.ErrNotFound) {
				return ErrWaitNotFound
			}
			return err
		}
		if err := audit.Record(ctx, tx, "execution/"+execID.String()+"/waits/"+nodeID, audit.OutcomeOK, "then "+string(then)+": "+reason); err != nil {
			return err
		}
		if then == ThenFail {
			st.setNode(nodeID, nodeFailed, nil)
			return e.failExecution(ctx, tx, st, fmt.Sprintf("node %s: %s", nodeID, reason))
		}
		st.setNode(nodeID, nodeCompleted, output)
		enqueued, err = e.advanceOrFail(ctx, tx, txWriter{e, tx}, st, nodeID)
		return err
	})
	if err == nil && enqueued {
		e.WakeRunQueue()
	}
	return err
}
