package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// Started describes a new execution.
type Started struct {
	ID              uuid.UUID             `json:"id"`
	Workflow        string                `json:"workflow"`
	WorkflowVersion int32                 `json:"workflow_version"`
	Status          vocab.ExecutionStatus `json:"status"`
	CreatedAt       time.Time             `json:"created_at"`
}

// StartExecution starts the latest version of a workflow with input (a JSON value;
// empty means {}), in a transaction of its own.
func (e *Executor) StartExecution(ctx context.Context, name string, input json.RawMessage) (Started, error) {
	var st Started
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		var err error
		st, err = e.StartTx(ctx, tx, db.NewID(), name, input)
		return err
	})
	return st, err
}

// StartTx starts the latest version of a workflow in tx, as execution id, with input (a
// JSON value; empty means {}): the execution, its nodes, and its root nodes waiting or
// queued (insertExecution). The run queue is woken and the start logged once tx
// commits. A Kafka trigger starts its
// execution this way, in the transaction that records the record's dedupe key.
func (e *Executor) StartTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, name string, input json.RawMessage) (Started, error) {
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	latest, err := e.q.WorkflowGetLatest(ctx, tx, name)
	if err != nil {
		if errors.Is(db.Interpret(err), db.ErrNotFound) {
			return Started{}, fmt.Errorf("%w: %s", ErrWorkflowNotFound, name)
		}
		return Started{}, fmt.Errorf("load workflow: %w", err)
	}
	wf, err := e.definition(ctx, tx, name, latest.Version)
	if err != nil {
		return Started{}, err
	}
	exec, err := e.insertExecution(ctx, tx, id, wf, name, latest.Version, input, nil)
	if err != nil {
		return Started{}, err
	}
	// A start through the API has its audit row in this transaction; a trigger's has
	// none (no request, no principal).
	if err := audit.Record(ctx, tx, "execution/"+exec.ID.String(), audit.OutcomeOK, fmt.Sprintf("workflow %s v%d", name, latest.Version)); err != nil {
		return Started{}, err
	}
	db.AfterCommit(tx, func() {
		e.logger.DebugContext(ctx, "execution started", "execution_id", exec.ID, "workflow", name,
			"workflow_version", latest.Version, "instance_id", e.cfg.InstanceID)
	})
	return Started{ID: exec.ID, Workflow: name, WorkflowVersion: latest.Version, Status: exec.Status, CreatedAt: exec.CreatedAt}, nil
}

// insertExecution creates an execution of a definition version in tx; restartedFrom
// links a restart to what it restarts.
//
// A root node whose type runs inline (NodeType.Inline) and waits is run here and its wait
// registered in tx: the execution, its nodes, the wait (and its outbound call's outbox
// row) and the start's audit row are then all the rows a start writes, in the caller's
// one transaction, and a crash before its commit leaves nothing to recover. Every other
// root is queued for the run queue's workers, shown as running. The nodes and the
// execution are inserted in the statuses this leaves them in, not updated after.
func (e *Executor) insertExecution(ctx context.Context, tx pgx.Tx, id uuid.UUID, wf *workflow.Workflow, name string, version int32,
	input json.RawMessage, restartedFrom *uuid.UUID,
) (dbsqlc.Execution, error) {
	st := &execState{
		exec:  dbsqlc.Execution{ID: id, WorkflowName: name, WorkflowVersion: version, Status: execRunning, Input: input},
		wf:    wf,
		nodes: make(map[string]*dbsqlc.NodeExecution, len(wf.Nodes())),
	}
	for _, n := range wf.Nodes() {
		st.nodes[n.ID] = &dbsqlc.NodeExecution{ExecutionID: id, NodeID: n.ID, Status: nodePending}
	}
	inline, queued := e.runInlineRoots(ctx, st)
	defer func() {
		for _, r := range inline {
			r.span.End()
		}
	}()
	if len(queued) == 0 && len(inline) > 0 {
		st.exec.Status = execWaiting
	}
	// The execution, its waits, its nodes and its queued roots are inserted in one round
	// trip: queued in this order (a wait references its execution), sent together. A
	// registration that cannot be queued (a timer, a correlated call) sends what is queued
	// first and runs on its own.
	var p db.Pipeline
	var exec dbsqlc.Execution
	p.Queue(func(d dbsqlc.DBTX) error {
		var err error
		if exec, err = e.q.ExecutionInsert(ctx, d, dbsqlc.ExecutionInsertParams{
			ID: id, WorkflowName: name, WorkflowVersion: version, Status: string(st.exec.Status), Input: input, RestartedFrom: restartedFrom,
		}); err != nil {
			return fmt.Errorf("insert execution: %w", err)
		}
		return nil
	})
	refused, tooMany, err := e.registerInlineWaits(ctx, tx, &p, st, inline)
	if err != nil {
		return exec, err
	}
	for _, root := range queued {
		st.setNode(root, nodeRunning, nil)
	}
	if refused != nil {
		// Admission control refused a wait: the node fails, and the execution with it, as
		// when a worker registers it. The nodes go in as they stand (those not reached
		// pending), then fail.
		st.setNode(refused.node, nodeRunning, nil)
	}
	e.queueNodeInserts(ctx, &p, st)
	if len(queued) > 0 && refused == nil {
		e.queueRoots(ctx, tx, &p, id, queued)
	}
	if err := p.Send(ctx, tx); err != nil {
		return exec, err
	}
	st.exec = exec
	if refused != nil {
		return exec, e.failNode(ctx, tx, st, refused.node, tooMany.Error())
	}
	return exec, e.takeKeptForInline(ctx, tx, inline)
}

// registerInlineWaits registers the waits of the roots run inline, queued on p where a
// registration can be, and records each node as waiting. A wait that admission control
// refuses stops the loop: it is returned with the refusal, and the caller fails its node.
func (e *Executor) registerInlineWaits(ctx context.Context, tx pgx.Tx, p *db.Pipeline, st *execState, inline []inlineRoot,
) (refused *inlineRoot, tooMany *aggregator.TooManyWaitersError, err error) {
	for i := range inline {
		r := &inline[i]
		reg := *r.out.Wait
		var ws dbsqlc.ExecutionWaitState
		if aggregator.Queueable(reg) {
			ws, err = e.agg.QueueRegister(r.ctx, tx, p, reg, &r.ws)
		} else if err = p.Send(ctx, tx); err == nil {
			r.ws, err = e.agg.Register(r.ctx, tx, reg)
			ws = r.ws
		}
		if errors.As(err, &tooMany) {
			return r, tooMany, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("register wait of node %s: %w", r.node, err)
		}
		raw, err := waitingOutput(r.out, ws)
		if err != nil {
			return nil, nil, err
		}
		st.setNode(r.node, nodeWaiting, raw)
	}
	return nil, nil, nil
}

// queueNodeInserts queues the insert of every node of a new execution, as it stands.
func (e *Executor) queueNodeInserts(ctx context.Context, p *db.Pipeline, st *execState) {
	nodes := dbsqlc.NodeExecutionInsertParams{ExecutionID: st.exec.ID}
	for _, n := range st.wf.Nodes() {
		ne := st.nodes[n.ID]
		nodes.NodeIds, nodes.Statuses, nodes.Outputs = append(nodes.NodeIds, n.ID), append(nodes.Statuses, string(ne.Status)), append(nodes.Outputs, string(ne.Output))
	}
	p.Queue(func(d dbsqlc.DBTX) error {
		if err := e.q.NodeExecutionInsert(ctx, d, nodes); err != nil {
			return fmt.Errorf("insert node executions: %w", err)
		}
		return nil
	})
}

// queueRoots queues the run of the roots a worker runs, and wakes the run queue after
// the commit.
func (e *Executor) queueRoots(ctx context.Context, tx pgx.Tx, p *db.Pipeline, id uuid.UUID, roots []string) {
	arg := dbsqlc.RunQueueInsertManyParams{Kind: string(vocab.KindRun)}
	for _, root := range roots {
		arg.ExecutionIds, arg.NodeIds = append(arg.ExecutionIds, id), append(arg.NodeIds, root)
	}
	p.Queue(func(d dbsqlc.DBTX) error {
		if err := e.q.RunQueueInsertMany(ctx, d, arg); err != nil {
			return fmt.Errorf("enqueue root nodes: %w", err)
		}
		return nil
	})
	db.AfterCommit(tx, e.WakeRunQueue)
}

// takeKeptForInline hands each inline root's new wait the Kafka records kept for it. A
// new execution has nothing buffered yet, but a record kept for a payload match's
// lookback may be waiting for this wait: taken now, it may complete it. (A wait it
// completes is continued by the aggregator after the commit.)
func (e *Executor) takeKeptForInline(ctx context.Context, tx pgx.Tx, inline []inlineRoot) error {
	for _, r := range inline {
		if _, err := e.agg.TakeKept(ctx, tx, r.ws); err != nil {
			return fmt.Errorf("take early events of node %s: %w", r.node, err)
		}
		e.logWaiting(r.ctx, r.ws)
		if r.out.Wait.APICall {
			db.AfterCommit(tx, e.wakeOutboxQueue)
		}
	}
	return nil
}

// inlineRoot is a root node run in its execution's starting transaction: its outcome
// (waiting), and the wait it registered.
type inlineRoot struct {
	node string
	out  Outcome
	ws   dbsqlc.ExecutionWaitState
	// ctx holds span, the node run's, which ends once its wait is registered.
	ctx  context.Context
	span trace.Span
}

// runInlineRoots runs the roots of a new execution whose type runs inline. Those that
// wait are returned to be registered in the starting transaction; every other root
// (another type, or an inline one that completed or failed at once) is left to the run
// queue, whose worker runs it again and records what it does.
func (e *Executor) runInlineRoots(ctx context.Context, st *execState) (inline []inlineRoot, queued []string) {
	for _, root := range st.wf.Roots() {
		node, _ := st.wf.Node(root)
		typ, ok := e.cfg.NodeTypes[node.Type]
		if !ok || !typ.Inline {
			queued = append(queued, root)
			continue
		}
		runCtx, span := e.startNodeRun(ctx, st.exec.ID, root, 1)
		out, err := typ.Run(runCtx, &RunContext{
			ExecutionID: st.exec.ID, Node: node, Scope: st.scope(), HTTP: e.client, Now: e.cfg.Clock.Now(),
			Logger: e.logger.With("execution_id", st.exec.ID, "node_id", root, "instance_id", e.cfg.InstanceID),
		})
		if err != nil || out.Status != OutcomeWaiting || out.Wait == nil {
			span.SetAttributes(attribute.String("rendezvous.outcome", "queued"))
			span.End()
			queued = append(queued, root)
			continue
		}
		out.Wait.TraceParent = telemetry.TraceParent(runCtx)
		span.SetAttributes(attribute.String("rendezvous.workflow", st.exec.WorkflowName), attribute.String("rendezvous.node_type", node.Type),
			attribute.String("rendezvous.outcome", "waiting"))
		inline = append(inline, inlineRoot{node: root, out: out, ctx: runCtx, span: span})
	}
	return inline, queued
}

// enqueueRun queues a node and shows it as running: from here on it is the run queue's.
func (e *Executor) enqueueRun(ctx context.Context, tx pgx.Tx, execID uuid.UUID, nodeID string) error {
	if _, err := e.q.RunQueueInsert(ctx, tx, dbsqlc.RunQueueInsertParams{ExecutionID: execID, NodeID: nodeID, Kind: string(vocab.KindRun)}); err != nil {
		return fmt.Errorf("enqueue node %s: %w", nodeID, err)
	}
	if err := e.q.NodeExecutionFinish(ctx, tx, dbsqlc.NodeExecutionFinishParams{Status: string(nodeRunning), ExecutionID: execID, NodeID: nodeID}); err != nil {
		return fmt.Errorf("mark node %s running: %w", nodeID, err)
	}
	return nil
}
