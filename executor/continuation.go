package executor

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// resume continues one execution after its wait was satisfied: a batch of one.
func (e *Executor) resume(ctx context.Context, job dbsqlc.RunQueue) error {
	lost, err := e.resumeBatch(ctx, []dbsqlc.RunQueue{job})
	if err == nil && lost > 0 {
		return errLeaseLost
	}
	return err
}

// resumeBatch continues executions whose waits ended — satisfied, or timed out (the
// aggregator or the sweeper already finished their nodes) — in one transaction with a
// constant number of round trips: lock the executions in id order and fence-delete the
// claimed rows, mark the waits resumed (once: resumed_at is set only if unset) and load
// their nodes, then continue them (continueWaits). It returns how many claims were lost
// to another pod; their work is left to that pod.
func (e *Executor) resumeBatch(ctx context.Context, jobs []dbsqlc.RunQueue) (lost int, err error) {
	var out continuation
	err = db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		lost, out = 0, continuation{}
		// Executions first, then the queue rows: the order every writer of an execution
		// (runs, cancels, failures) takes, so none of them can deadlock with a resume.
		execIDs := make([]uuid.UUID, 0, len(jobs))
		for _, j := range jobs {
			if !slices.Contains(execIDs, j.ExecutionID) {
				execIDs = append(execIDs, j.ExecutionID)
			}
		}
		del := dbsqlc.RunQueueDeleteClaimedManyParams{}
		for _, j := range jobs {
			del.Ids, del.Attempts = append(del.Ids, j.ID), append(del.Attempts, j.Attempt)
		}
		var execs []dbsqlc.Execution
		var owned []int64
		var p db.Pipeline
		p.Queue(e.lockExecutions(ctx, execIDs, &execs))
		p.Queue(func(d dbsqlc.DBTX) (err error) {
			if owned, err = e.q.RunQueueDeleteClaimedMany(ctx, d, del); err != nil {
				return fmt.Errorf("finish run queue items: %w", err)
			}
			return nil
		})
		if err := p.Send(ctx, tx); err != nil {
			return err
		}
		if lost = len(jobs) - len(owned); lost > 0 {
			e.logger.WarnContext(ctx, "lease lost; another instance owns this work now", "lost", lost, "instance_id", e.cfg.InstanceID)
		}
		var markExecs []uuid.UUID
		var markNodes []string
		for _, j := range jobs {
			i := slices.IndexFunc(execs, func(x dbsqlc.Execution) bool { return x.ID == j.ExecutionID })
			if slices.Contains(owned, j.ID) && i >= 0 && !execFinished(execs[i].Status) {
				markExecs, markNodes = append(markExecs, j.ExecutionID), append(markNodes, j.NodeID)
			}
		}
		if len(markExecs) == 0 {
			return nil
		}
		var resumed []aggregator.Ended
		var nodes []dbsqlc.NodeExecution
		p.Queue(e.agg.MarkResumed(ctx, markExecs, markNodes, &resumed))
		p.Queue(e.loadNodes(ctx, markExecs, &nodes))
		if err := p.Send(ctx, tx); err != nil {
			return err
		}
		if out, err = e.continueWaits(ctx, tx, execs, nodes, resumed, &p); err != nil {
			return err
		}
		return p.Send(ctx, tx)
	})
	if err != nil {
		return lost, err
	}
	e.continued(ctx, out)
	return lost, nil
}

// lockExecutions is a pipeline call locking executions, in id order, into out.
func (e *Executor) lockExecutions(ctx context.Context, execIDs []uuid.UUID, out *[]dbsqlc.Execution) func(dbsqlc.DBTX) error {
	return func(d dbsqlc.DBTX) (err error) {
		if *out, err = e.q.ExecutionListForUpdate(ctx, d, execIDs); err != nil {
			return fmt.Errorf("lock executions: %w", err)
		}
		return nil
	}
}

// loadNodes is a pipeline call loading the nodes of executions into out.
func (e *Executor) loadNodes(ctx context.Context, execIDs []uuid.UUID, out *[]dbsqlc.NodeExecution) func(dbsqlc.DBTX) error {
	return func(d dbsqlc.DBTX) (err error) {
		if *out, err = e.q.NodeExecutionListByExecutions(ctx, d, execIDs); err != nil {
			return fmt.Errorf("load node executions: %w", err)
		}
		return nil
	}
}

// PrepareContinue makes the executor the aggregator's Continuer (aggregator.Continuer):
// it continues the executions whose waits a batch of events completes, inside that
// batch's transaction, which saves the run queue row, its claim, its deletion, a second
// write of each wait and a second transaction per continuation. The aggregator drives
// it: it sends LockExecutions before writing the waits (unless it holds the executions'
// rows already, and hands them over in locked) and LoadNodes after (unless it read the
// nodes before the write, and hands them over in nodes), then calls Continue with the
// waits that ended; if Continue fails, it undoes the write (to a savepoint, or the whole
// transaction, to decide again under one) and queues those continuations instead.
func (e *Executor) PrepareContinue(ctx context.Context, execIDs []uuid.UUID, locked []dbsqlc.Execution, nodes []dbsqlc.NodeExecution) aggregator.Continuation {
	return &inTxContinuation{e: e, ctx: ctx, execIDs: execIDs, execs: locked, nodes: nodes}
}

// inTxContinuation is one continuation run in the aggregator's transaction.
type inTxContinuation struct {
	e       *Executor
	ctx     context.Context
	execIDs []uuid.UUID
	execs   []dbsqlc.Execution
	nodes   []dbsqlc.NodeExecution
	// stored: nodes are the stored rows (LoadNodes), not node_executions' reading.
	stored bool
}

func (c *inTxContinuation) LockExecutions(d dbsqlc.DBTX) error {
	return c.e.lockExecutions(c.ctx, c.execIDs, &c.execs)(d)
}

// LoadNodes reads the stored rows, sent in the round trip that writes the waits. Read
// through node_executions there, each node whose wait the write has just ended would
// look its wait up again and find the version the write made: on the Kafka path that
// look-up cost PostgreSQL CPU per record (rendezvous-bench part b), for outcomes the
// continuation holds already (Ended.Outcome).
func (c *inTxContinuation) LoadNodes(d dbsqlc.DBTX) error {
	rows, err := c.e.q.NodeExecutionStoredListByExecutions(c.ctx, d, c.execIDs)
	if err != nil {
		return fmt.Errorf("load node executions: %w", err)
	}
	c.nodes = make([]dbsqlc.NodeExecution, len(rows))
	for i := range rows {
		c.nodes[i] = dbsqlc.NodeExecution(rows[i])
	}
	c.stored = true
	return nil
}

func (c *inTxContinuation) Continue(ctx context.Context, tx pgx.Tx, p *db.Pipeline, ended []aggregator.Ended) (func(), error) {
	e := c.e
	if e.continueStart != nil {
		e.continueStart()
	}
	nodes := c.nodes
	if c.stored {
		var err error
		if nodes, err = e.readWaitingNodes(ctx, tx, nodes, ended); err != nil {
			return nil, err
		}
	}
	out, err := e.continueWaits(ctx, tx, c.execs, nodes, ended, p)
	if err != nil {
		return nil, err
	}
	if e.continueWriteFault {
		p.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, "SELECT 1/0")
			return err
		})
	}
	if e.continueFault != nil {
		if err := p.Send(ctx, tx); err != nil {
			return nil, err
		}
		if err := e.continueFault(); err != nil {
			return nil, err
		}
	}
	return func() { e.continued(ctx, out) }, nil
}

// readWaitingNodes turns nodes read as stored into nodes as node_executions reads them,
// for a continuation of the waits ended, whose outcomes it holds (settleAhead gives them
// to their nodes). Any other node stored as waiting may have had its outcome decided by
// a wait that ended earlier — one of parallel waits, or of waits in sequence — which its
// stored row does not show: the nodes of its execution are read again, through
// node_executions. Most continuations read nothing more.
func (e *Executor) readWaitingNodes(ctx context.Context, tx pgx.Tx, nodes []dbsqlc.NodeExecution,
	ended []aggregator.Ended,
) ([]dbsqlc.NodeExecution, error) {
	type waitingNode struct {
		exec uuid.UUID
		node string
	}
	known := make(map[waitingNode]bool, len(ended))
	for _, r := range ended {
		if r.Outcome != nil {
			known[waitingNode{r.ExecutionID, r.NodeID}] = true
		}
	}
	var again []uuid.UUID
	reread := map[uuid.UUID]bool{}
	for i := range nodes {
		n := &nodes[i]
		if n.Status == nodeWaiting && !known[waitingNode{n.ExecutionID, n.NodeID}] && !reread[n.ExecutionID] {
			reread[n.ExecutionID] = true
			again = append(again, n.ExecutionID)
		}
	}
	if len(again) == 0 {
		return nodes, nil
	}
	read, err := e.q.NodeExecutionListByExecutions(ctx, tx, again)
	if err != nil {
		return nil, fmt.Errorf("load node executions: %w", err)
	}
	kept := make([]dbsqlc.NodeExecution, 0, len(nodes))
	for _, n := range nodes {
		if !reread[n.ExecutionID] {
			kept = append(kept, n)
		}
	}
	return append(kept, read...), nil
}

// continuation is what a committed continuation leaves to do: end its spans, and wake
// the run queue for the nodes it enqueued.
type continuation struct {
	done     []resumedWait
	enqueued bool
}

// continued finishes a committed continuation.
func (e *Executor) continued(ctx context.Context, out continuation) {
	e.observeResumed(ctx, out.done)
	if out.enqueued {
		e.WakeRunQueue()
	}
}

// continueWaits advances the graphs of executions whose waits were just marked resumed,
// in tx, which holds the executions' rows (execs; nodes are theirs): it advances each
// graph in memory and queues the changes, set-based, on p for the caller to send. Each
// resumed wait gets a span in its own trace, ended (and its duration recorded) by
// continued once tx has committed.
func (e *Executor) continueWaits(ctx context.Context, tx pgx.Tx, execs []dbsqlc.Execution, nodes []dbsqlc.NodeExecution,
	resumed []aggregator.Ended, p *db.Pipeline,
) (out continuation, err error) {
	states := make(map[uuid.UUID]*execState, len(execs))
	byID := make(map[uuid.UUID]int, len(execs))
	for i := range execs {
		byID[execs[i].ID] = i
	}
	for _, r := range resumed {
		if states[r.ExecutionID] != nil {
			continue
		}
		i, ok := byID[r.ExecutionID]
		if !ok {
			return out, fmt.Errorf("execution %s of a resumed wait is not locked", r.ExecutionID)
		}
		wf, err := e.definition(ctx, tx, execs[i].WorkflowName, execs[i].WorkflowVersion)
		if err != nil {
			return out, err
		}
		states[r.ExecutionID] = &execState{exec: execs[i], wf: wf, nodes: map[string]*dbsqlc.NodeExecution{}}
	}
	for i := range nodes {
		if st := states[nodes[i].ExecutionID]; st != nil {
			st.nodes[nodes[i].NodeID] = &nodes[i]
		}
	}
	for _, r := range resumed {
		settleAhead(states[r.ExecutionID].nodes[r.NodeID], r)
	}
	w := &batchWriter{}
	out.done = make([]resumedWait, 0, len(resumed))
	for _, r := range resumed {
		st := states[r.ExecutionID]
		rctx, span := e.startResume(ctx, r)
		out.done = append(out.done, resumedWait{wait: r, workflow: st.exec.WorkflowName, span: span})
		if execFinished(st.exec.Status) { // finished before, or failed by an earlier wait of this batch
			span.SetAttributes(attribute.Bool("rendezvous.execution_finished", true))
			continue
		}
		if n := st.nodes[r.NodeID]; n != nil && n.Status == nodeFailed {
			// A deadline failed the node (onTimeout fail, or continue without what it
			// must have): the execution fails with it.
			reason := "failed"
			if n.Error != nil {
				reason = *n.Error
			}
			w.drop(r.ExecutionID)
			span.SetStatus(codes.Error, "node failed: "+reason)
			if err := e.failExecution(rctx, tx, st, fmt.Sprintf("node %s: %s", r.NodeID, reason)); err != nil {
				return out, err
			}
			continue
		}
		// Asked first: the arguments of a line that is off would still be boxed, once for
		// every wait a Kafka batch resumes.
		if e.logger.Enabled(rctx, slog.LevelDebug) {
			e.logger.DebugContext(rctx, "execution resumed", "execution_id", r.ExecutionID, "node_id", r.NodeID,
				"instance_id", e.cfg.InstanceID, "wait_status", r.Status)
		}
		more, err := e.advanceOrFail(rctx, tx, w, st, r.NodeID)
		if err != nil {
			return out, err
		}
		if st.exec.Status == execFailed { // a condition on an outgoing edge failed
			span.SetStatus(codes.Error, "execution failed")
		}
		out.enqueued = out.enqueued || more
	}
	w.flush(ctx, e, p)
	return out, nil
}

// settleAhead gives n, read before the write that ended wait r, the outcome that write
// gives it (r.Outcome), as node_executions reads it once written: from the wait's row,
// for a node that waits for events (text given empty is stored as none).
func settleAhead(n *dbsqlc.NodeExecution, r aggregator.Ended) {
	if n == nil || r.Outcome == nil || n.Status != nodeWaiting {
		return
	}
	n.Status, n.Output = r.Outcome.Status, r.Outcome.Output
	n.Error, n.Warning = nonEmpty(r.Outcome.Error), nonEmpty(r.Outcome.Warning)
	ended := r.EndedAt // its own variable: pointing into r would move all of r to the heap
	n.UpdatedAt, n.FinishedAt = ended, &ended
}
