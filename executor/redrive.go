package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// ExecutionNotFailedError is returned when a redrive names an execution that has not
// failed (it is running, waiting, completed or cancelled — or another redrive got there
// first).
type ExecutionNotFailedError struct{ Status vocab.ExecutionStatus }

func (e *ExecutionNotFailedError) Error() string {
	return "execution is " + string(e.Status) + ", not failed: only a failed execution can be redriven"
}

// RedriveAction says what a redrive did with one node.
type RedriveAction string

// Redrive actions.
const (
	// RedriveRun: the node was queued to run again from scratch.
	RedriveRun RedriveAction = "run"
	// RedriveReopened: the node's wait was opened again, its recorded events kept.
	RedriveReopened RedriveAction = "reopened"
	// RedriveCallResent: the wait was opened again and its correlated call, which had
	// failed it, queued again.
	RedriveCallResent RedriveAction = "call_resent"
)

// RedrivenNode is one node a redrive set going again.
type RedrivenNode struct {
	ID     string        `json:"id"`
	Action RedriveAction `json:"action"`
}

// Redriven describes a redrive.
type Redriven struct {
	ExecutionID uuid.UUID `json:"execution_id"`
	// Status is the execution's status once the redrive committed: running or waiting,
	// or failed again when a condition on an edge still fails.
	Status       vocab.ExecutionStatus `json:"status"`
	RedriveCount int32                 `json:"redrive_count"`
	Nodes        []RedrivenNode        `json:"nodes"`
}

// Redrive continues a failed execution from where it failed. Completed and skipped nodes
// keep their outcome and output. Every node that failed, or was cancelled because the
// execution failed, is pending again, and the graph is advanced from what completed,
// exactly as after a node completes: a node whose predecessors are done runs again
// through the run queue — or, if it is a wait_events node with a wait, that wait is
// reopened (see aggregator.ReopenWait) and ends through the aggregator as any wait does.
//
// It runs in one transaction under the execution's row lock, and only a failed execution
// moves, so of concurrent redrives exactly one wins; the others get an
// *ExecutionNotFailedError. Work of the failed life still in flight (a node run, a
// call) holds a claim on a queue row that failing the execution deleted: its commit
// misses that fence and is discarded.
func (e *Executor) Redrive(ctx context.Context, id uuid.UUID) (Redriven, error) {
	var out redriveOutcome
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) (err error) {
		out, err = e.redriveTx(ctx, tx, id)
		return err
	})
	if err != nil {
		return Redriven{}, err
	}
	e.redriven(ctx, out)
	return out.Redriven, nil
}

// redriveOutcome is a committed redrive and the wake-ups it owes.
type redriveOutcome struct {
	Redriven
	enqueued, resent bool
}

// redriven announces a committed redrive: the run queue and the outbox wake for what it
// queued, and the line that says it happened.
func (e *Executor) redriven(ctx context.Context, out redriveOutcome) {
	if out.enqueued {
		e.WakeRunQueue()
	}
	if out.resent {
		e.wakeOutboxQueue()
	}
	e.logger.InfoContext(ctx, "execution redriven", "execution_id", out.ExecutionID, "instance_id", e.cfg.InstanceID,
		"redrive_count", out.RedriveCount, "status", out.Status, "nodes", len(out.Nodes))
}

// redriveTx redrives one execution in tx (see Redrive); it takes the execution's row
// lock itself.
func (e *Executor) redriveTx(ctx context.Context, tx pgx.Tx, id uuid.UUID) (redriveOutcome, error) {
	out := redriveOutcome{Redriven: Redriven{ExecutionID: id, Nodes: []RedrivenNode{}}}
	st, err := e.loadState(ctx, tx, id, true)
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return out, ErrExecutionNotFound
		}
		return out, err
	}
	if st.exec.Status != execFailed {
		return out, &ExecutionNotFailedError{Status: st.exec.Status}
	}
	if st.exec, err = e.q.ExecutionRedrive(ctx, tx, id); err != nil {
		return out, fmt.Errorf("redrive execution: %w", err)
	}
	if err := e.q.NodeExecutionReopen(ctx, tx, id); err != nil {
		return out, fmt.Errorf("reopen nodes: %w", err)
	}
	for _, n := range st.nodes {
		if n.Status == nodeFailed || n.Status == nodeCancelled {
			n.Status, n.Output, n.Error = nodePending, nil, nil
		}
	}
	w := &redriveWriter{txWriter: txWriter{e, tx}, st: st, waiting: map[string][]byte{}}
	// Roots have no edge to advance along; every other node is reached from what is
	// done, in a fixed order so that a redrive's writes do not depend on map order.
	for _, root := range st.wf.Roots() {
		if n := st.nodes[root]; n != nil && n.Status == nodePending {
			if err := w.enqueue(ctx, id, root); err != nil {
				return out, err
			}
			st.setNode(root, nodeRunning, nil)
		}
	}
	done := make([]string, 0, len(st.nodes))
	for nid, n := range st.nodes {
		if n.Status == nodeCompleted || n.Status == nodeSkipped {
			done = append(done, nid)
		}
	}
	slices.Sort(done)
	for _, from := range done {
		if _, err := e.advance(ctx, w, st, from); err != nil {
			var ce *conditionError
			if !errors.As(err, &ce) {
				return out, err
			}
			// The same condition fails again: the redrive stands, and the execution
			// fails again with it.
			if err := e.failNode(ctx, tx, st, ce.edge.Target, ce.Error()); err != nil {
				return out, err
			}
			out.Status, out.RedriveCount = st.exec.Status, st.exec.RedriveCount
			return out, nil
		}
	}
	for nid, raw := range w.waiting {
		st.setNode(nid, nodeWaiting, raw)
	}
	if err := e.settle(ctx, w, st); err != nil {
		return out, err
	}
	out.Status, out.RedriveCount, out.Nodes = st.exec.Status, st.exec.RedriveCount, w.actions
	out.enqueued, out.resent = w.enqueued, w.resent
	if out.Nodes == nil {
		out.Nodes = []RedrivenNode{}
	}
	// Each redriven execution has its audit row in the transaction that redrove it (a
	// bulk redrive writes one per execution).
	return out, audit.Record(ctx, tx, "execution/"+id.String(), audit.OutcomeOK, fmt.Sprintf("redrive %d", out.RedriveCount))
}

// redriveWriter writes a redrive's graph changes at once, like txWriter, except that a
// wait node whose wait can be reopened is not queued to run but reopened.
type redriveWriter struct {
	txWriter
	st *execState
	// waiting holds the output of each node whose wait was reopened: the node waits
	// again, which the graph in memory learns once advancing is done.
	waiting  map[string][]byte
	actions  []RedrivenNode
	enqueued bool
	resent   bool
}

func (w *redriveWriter) enqueue(ctx context.Context, execID uuid.UUID, nodeID string) error {
	node, ok := w.st.wf.Node(nodeID)
	if !ok {
		return fmt.Errorf("node %s not in definition", nodeID)
	}
	switch cfg := node.Config.(type) {
	case *workflow.WaitEvents:
		r, err := w.e.agg.ReopenWait(ctx, w.tx, execID, nodeID, cfg.Timeout)
		switch {
		case err == nil:
			return w.reopened(ctx, execID, nodeID, r)
		case errors.Is(err, aggregator.ErrNotReopenable), errors.Is(err, db.ErrNotFound):
		default:
			return err
		}
	case *workflow.Wait:
		// A timer is set again from its settings, as when the node first ran.
		if _, err := w.e.agg.ReopenWait(ctx, w.tx, execID, nodeID, 0); err != nil &&
			!errors.Is(err, aggregator.ErrNotReopenable) && !errors.Is(err, db.ErrNotFound) {
			return err
		}
	}
	if err := w.txWriter.enqueue(ctx, execID, nodeID); err != nil {
		return err
	}
	w.enqueued = true
	w.actions = append(w.actions, RedrivenNode{ID: nodeID, Action: RedriveRun})
	return nil
}

// reopened shows the node waiting again, with the output a waiting node has.
func (w *redriveWriter) reopened(ctx context.Context, execID uuid.UUID, nodeID string, r aggregator.Reopened) error {
	raw, err := waitingOutput(Outcome{Output: map[string]any{"status": string(vocab.WaitWaiting)}}, r.Wait)
	if err != nil {
		return err
	}
	if err := w.e.q.NodeExecutionFinish(ctx, w.tx, dbsqlc.NodeExecutionFinishParams{
		Status: string(nodeWaiting), Output: raw, ExecutionID: execID, NodeID: nodeID,
	}); err != nil {
		return fmt.Errorf("mark node %s waiting: %w", nodeID, err)
	}
	w.waiting[nodeID] = raw
	action := RedriveReopened
	if r.CallResent {
		action, w.resent = RedriveCallResent, true
	}
	w.actions = append(w.actions, RedrivenNode{ID: nodeID, Action: action})
	return nil
}
