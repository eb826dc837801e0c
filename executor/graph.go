package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// Node and execution statuses, short names of vocab's for this package,
// which moves them.
const (
	nodePending   = vocab.NodePending
	nodeRunning   = vocab.NodeRunning
	nodeWaiting   = vocab.NodeWaiting
	nodeCompleted = vocab.NodeCompleted
	nodeFailed    = vocab.NodeFailed
	nodeSkipped   = vocab.NodeSkipped
	nodeCancelled = vocab.NodeCancelled

	execRunning   = vocab.ExecRunning
	execWaiting   = vocab.ExecWaiting
	execCompleted = vocab.ExecCompleted
	execFailed    = vocab.ExecFailed
	execCancelled = vocab.ExecCancelled
)

func execFinished(status vocab.ExecutionStatus) bool { return vocab.ExecFinished(status) }

// execState is an execution with its definition and node states, loaded together.
type execState struct {
	exec  dbsqlc.Execution
	wf    *workflow.Workflow
	nodes map[string]*dbsqlc.NodeExecution
}

func (e *Executor) loadState(ctx context.Context, q dbsqlc.DBTX, id uuid.UUID, forUpdate bool) (*execState, error) {
	var exec dbsqlc.Execution
	var err error
	if forUpdate {
		exec, err = e.q.ExecutionGetForUpdate(ctx, q, id)
	} else {
		exec, err = e.q.ExecutionGet(ctx, q, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load execution %s: %w", id, db.Interpret(err))
	}
	wf, err := e.definition(ctx, q, exec.WorkflowName, exec.WorkflowVersion)
	if err != nil {
		return nil, err
	}
	rows, err := e.q.NodeExecutionListByExecution(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("load node executions: %w", err)
	}
	st := &execState{exec: exec, wf: wf, nodes: make(map[string]*dbsqlc.NodeExecution, len(rows))}
	for i := range rows {
		st.nodes[rows[i].NodeID] = &rows[i]
	}
	return st, nil
}

// decodeJSON reads stored JSON for templates and conditions, with its numbers exact: an
// input id beyond 2^53 is sent on in API calls as the id it is, not a float64's rounding.
func decodeJSON(raw []byte) any {
	if len(raw) == 0 {
		return nil
	}
	v, err := jsonnum.Decode(raw)
	if err != nil {
		return nil
	}
	return v
}

// scope is what templates of a node may reference: the input, the vars and the outputs
// of nodes that have completed.
func (st *execState) scope() template.Scope {
	outputs := map[string]any{}
	for id, n := range st.nodes {
		if n.Status == nodeCompleted {
			outputs[id] = decodeJSON(n.Output)
		}
	}
	return template.Scope{
		Trigger:     decodeJSON(st.exec.Input),
		Vars:        st.wf.Definition().Vars,
		ExecutionID: st.exec.ID.String(),
		Nodes:       outputs,
	}
}

func (st *execState) setNode(id string, status vocab.NodeStatus, output []byte) {
	if n := st.nodes[id]; n != nil {
		n.Status = status
		if output != nil {
			n.Output = output
		}
	}
}

// advance moves the graph on from a node that just completed (or was skipped): every
// successor whose predecessors are all done runs when at least one incoming edge holds,
// and is skipped otherwise, which propagates. It must run under the execution's row lock.
func (e *Executor) advance(ctx context.Context, w graphWriter, st *execState, from string) (enqueued bool, err error) {
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, out := range st.wf.Outgoing(cur) {
			target := out.Target
			n := st.nodes[target]
			if n == nil || n.Status != nodePending {
				continue
			}
			ready, run := true, false
			for _, in := range st.wf.Incoming(target) {
				src := st.nodes[in.Source]
				switch {
				case src == nil || (src.Status != nodeCompleted && src.Status != nodeSkipped):
					ready = false
				case src.Status == nodeCompleted && !run:
					ok, err := in.Eval(e.conditionEnv(st, in.Source))
					if err != nil {
						return enqueued, &conditionError{edge: in, err: err}
					}
					run = ok
				}
			}
			if !ready {
				continue
			}
			if run {
				if err := w.enqueue(ctx, st.exec.ID, target); err != nil {
					return enqueued, err
				}
				st.setNode(target, nodeRunning, nil)
				enqueued = true
				continue
			}
			if err := w.skip(ctx, st.exec.ID, target); err != nil {
				return enqueued, err
			}
			st.setNode(target, nodeSkipped, nil)
			queue = append(queue, target)
		}
	}
	return enqueued, nil
}

type conditionError struct {
	edge *workflow.CompiledEdge
	err  error
}

func (c *conditionError) Error() string {
	return fmt.Sprintf("edge %s -> %s: condition %q: %v", c.edge.Source, c.edge.Target, c.edge.Condition, c.err)
}

func (e *Executor) conditionEnv(st *execState, source string) map[string]any {
	nodes := map[string]any{}
	for id, n := range st.nodes {
		if n.Status == nodeCompleted {
			nodes[id] = map[string]any{"output": decodeJSON(n.Output)}
		}
	}
	return map[string]any{
		"output": decodeJSON(st.nodes[source].Output),
		"input":  decodeJSON(st.exec.Input),
		"vars":   st.wf.Definition().Vars,
		"nodes":  nodes,
	}
}

// settle derives the execution's status from its nodes and stores it when it changed.
func (e *Executor) settle(ctx context.Context, w graphWriter, st *execState) error {
	status := execCompleted
	waiting, running := false, false
	for _, n := range st.nodes {
		switch n.Status {
		case nodeFailed:
			return nil // failExecution already decided
		case nodeRunning:
			running = true
		case nodeWaiting:
			waiting = true
		case nodePending:
			status = ""
		}
	}
	switch {
	case running:
		status = execRunning
	case waiting:
		status = execWaiting
	case status == "":
		// Pending nodes behind nothing runnable cannot happen in a valid DAG; keep it
		// visible rather than calling it finished.
		status = execRunning
	}
	if status == st.exec.Status {
		return nil
	}
	if err := w.setStatus(ctx, st.exec.ID, status); err != nil {
		return err
	}
	if status == execCompleted && e.logger.Enabled(ctx, slog.LevelDebug) { // see continueWaits
		e.logger.DebugContext(ctx, "execution completed", "execution_id", st.exec.ID, "instance_id", e.cfg.InstanceID)
	}
	st.exec.Status = status
	return nil
}

// failExecution fails the execution and stops everything else it had going: open waits
// are cancelled (behind their version fence), its other unfinished nodes are cancelled
// (so that no node of a finished execution still reads pending or running), queued work
// and unsent calls are dropped.
func (e *Executor) failExecution(ctx context.Context, tx pgx.Tx, st *execState, reason string) error {
	if err := e.q.ExecutionSetStatus(ctx, tx, dbsqlc.ExecutionSetStatusParams{ID: st.exec.ID, Status: string(execFailed), Error: &reason}); err != nil {
		return fmt.Errorf("fail execution: %w", err)
	}
	if err := e.agg.CancelOpenWaits(ctx, tx, st.exec.ID, "execution failed: "+reason); err != nil {
		return err
	}
	if err := e.q.NodeExecutionCancelOpen(ctx, tx, dbsqlc.NodeExecutionCancelOpenParams{
		ExecutionID: st.exec.ID, Error: "execution failed: " + reason,
	}); err != nil {
		return fmt.Errorf("cancel unfinished nodes: %w", err)
	}
	for _, n := range st.nodes {
		if n.Status == nodePending || n.Status == nodeRunning || n.Status == nodeWaiting {
			n.Status = nodeCancelled
		}
	}
	if err := e.q.RunQueueDeleteForExecution(ctx, tx, st.exec.ID); err != nil {
		return fmt.Errorf("drop queued work: %w", err)
	}
	if err := e.q.OutboxDeleteForExecution(ctx, tx, st.exec.ID); err != nil {
		return fmt.Errorf("drop queued calls: %w", err)
	}
	st.exec.Status = execFailed
	e.logger.WarnContext(ctx, "execution failed", "execution_id", st.exec.ID, "instance_id", e.cfg.InstanceID, "reason", reason)
	return nil
}

// failNode records a node failure and fails the execution.
func (e *Executor) failNode(ctx context.Context, tx pgx.Tx, st *execState, nodeID, reason string) error {
	if err := e.q.NodeExecutionFinish(ctx, tx, dbsqlc.NodeExecutionFinishParams{Status: string(nodeFailed), Error: &reason, ExecutionID: st.exec.ID, NodeID: nodeID}); err != nil {
		return fmt.Errorf("fail node %s: %w", nodeID, err)
	}
	st.setNode(nodeID, nodeFailed, nil)
	return e.failExecution(ctx, tx, st, fmt.Sprintf("node %s: %s", nodeID, reason))
}

// advanceOrFail advances from a node, turning a condition error into a failure of the
// edge's target node (written at once, in tx; the writer drops what it had collected for
// that execution).
func (e *Executor) advanceOrFail(ctx context.Context, tx pgx.Tx, w graphWriter, st *execState, from string) (bool, error) {
	enqueued, err := e.advance(ctx, w, st, from)
	var ce *conditionError
	if errors.As(err, &ce) {
		w.drop(st.exec.ID)
		return false, e.failNode(ctx, tx, st, ce.edge.Target, ce.Error())
	}
	if err != nil {
		return false, err
	}
	return enqueued, e.settle(ctx, w, st)
}

// graphWriter receives the changes that advancing a graph makes. The single path writes
// each at once in its transaction; a batch collects them and writes each kind with one
// statement.
type graphWriter interface {
	enqueue(ctx context.Context, execID uuid.UUID, nodeID string) error
	skip(ctx context.Context, execID uuid.UUID, nodeID string) error
	setStatus(ctx context.Context, execID uuid.UUID, status vocab.ExecutionStatus) error
	// drop forgets what was collected for an execution that is being failed instead.
	drop(execID uuid.UUID)
}

// txWriter writes at once.
type txWriter struct {
	e  *Executor
	tx pgx.Tx
}

func (w txWriter) enqueue(ctx context.Context, execID uuid.UUID, nodeID string) error {
	return w.e.enqueueRun(ctx, w.tx, execID, nodeID)
}

func (w txWriter) skip(ctx context.Context, execID uuid.UUID, nodeID string) error {
	if err := w.e.q.NodeExecutionFinish(ctx, w.tx, dbsqlc.NodeExecutionFinishParams{Status: string(nodeSkipped), ExecutionID: execID, NodeID: nodeID}); err != nil {
		return fmt.Errorf("skip node %s: %w", nodeID, err)
	}
	return nil
}

func (w txWriter) setStatus(ctx context.Context, execID uuid.UUID, status vocab.ExecutionStatus) error {
	if err := w.e.q.ExecutionSetStatus(ctx, w.tx, dbsqlc.ExecutionSetStatusParams{ID: execID, Status: string(status)}); err != nil {
		return fmt.Errorf("set execution status: %w", err)
	}
	return nil
}

func (txWriter) drop(uuid.UUID) {}

// batchWriter collects changes of many executions for a set-based flush.
type batchWriter struct {
	runs     []execNode
	nodes    []execNode
	statuses map[uuid.UUID]vocab.ExecutionStatus
}

type execNode struct {
	exec   uuid.UUID
	node   string
	status vocab.NodeStatus
}

func (w *batchWriter) enqueue(_ context.Context, execID uuid.UUID, nodeID string) error {
	w.runs = append(w.runs, execNode{execID, nodeID, nodeRunning})
	w.nodes = append(w.nodes, execNode{execID, nodeID, nodeRunning})
	return nil
}

func (w *batchWriter) skip(_ context.Context, execID uuid.UUID, nodeID string) error {
	w.nodes = append(w.nodes, execNode{execID, nodeID, nodeSkipped})
	return nil
}

func (w *batchWriter) setStatus(_ context.Context, execID uuid.UUID, status vocab.ExecutionStatus) error {
	if w.statuses == nil {
		w.statuses = map[uuid.UUID]vocab.ExecutionStatus{}
	}
	w.statuses[execID] = status
	return nil
}

func (w *batchWriter) drop(execID uuid.UUID) {
	keep := func(s []execNode) []execNode {
		out := s[:0]
		for _, x := range s {
			if x.exec != execID {
				out = append(out, x)
			}
		}
		return out
	}
	w.runs, w.nodes = keep(w.runs), keep(w.nodes)
	delete(w.statuses, execID)
}

// flush queues what was collected on p: one statement per kind of change, all sent in
// one round trip by the caller.
func (w *batchWriter) flush(ctx context.Context, e *Executor, p *db.Pipeline) {
	if len(w.runs) > 0 {
		arg := dbsqlc.RunQueueInsertManyParams{Kind: string(vocab.KindRun)}
		for _, r := range w.runs {
			arg.ExecutionIds, arg.NodeIds = append(arg.ExecutionIds, r.exec), append(arg.NodeIds, r.node)
		}
		p.Queue(func(d dbsqlc.DBTX) error {
			if err := e.q.RunQueueInsertMany(ctx, d, arg); err != nil {
				return fmt.Errorf("enqueue nodes: %w", err)
			}
			return nil
		})
	}
	if len(w.nodes) > 0 {
		var arg dbsqlc.NodeExecutionSetStatusManyParams
		for _, n := range w.nodes {
			arg.ExecutionIds, arg.NodeIds, arg.Statuses = append(arg.ExecutionIds, n.exec), append(arg.NodeIds, n.node), append(arg.Statuses, string(n.status))
		}
		p.Queue(func(d dbsqlc.DBTX) error {
			if err := e.q.NodeExecutionSetStatusMany(ctx, d, arg); err != nil {
				return fmt.Errorf("set node statuses: %w", err)
			}
			return nil
		})
	}
	if len(w.statuses) > 0 {
		var arg dbsqlc.ExecutionSetStatusManyParams
		for id, status := range w.statuses {
			arg.Ids, arg.Statuses = append(arg.Ids, id), append(arg.Statuses, string(status))
		}
		p.Queue(func(d dbsqlc.DBTX) error {
			if err := e.q.ExecutionSetStatusMany(ctx, d, arg); err != nil {
				return fmt.Errorf("set execution statuses: %w", err)
			}
			return nil
		})
	}
}
