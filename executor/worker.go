package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/startstop"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// errLeaseLost means another pod claimed the work after our lease ran out; our result is
// discarded by rolling back.
var errLeaseLost = errors.New("lease lost")

// Run works the run queue and the outbox until ctx ends, then waits up to
// Config.ShutdownTimeout for work in flight and hands back whatever it had claimed but
// not finished, so another pod takes it over at once.
func (e *Executor) Run(ctx context.Context) error {
	services := e.Services()
	if err := startstop.StartAll(ctx, services...); err != nil {
		return err
	}
	<-ctx.Done()
	startstop.StopAll(services...)
	return nil
}

// Services are the executor's background loops, for the service to start and stop: the
// run-queue workers, the outbox sender, the LISTEN for other replicas' wake-ups, the
// notifier that sends this replica's, and the retention pass.
func (e *Executor) Services() []startstop.Service {
	return []startstop.Service{
		startstop.NewLoop("run queue workers", func(ctx context.Context) {
			runLoop(ctx, e, "run_queue", e.cfg.Workers, e.wakeRun, e.claimWork, e.processWork)
		}),
		startstop.NewLoop("outbox sender", func(ctx context.Context) {
			runLoop(ctx, e, "outbox", e.cfg.OutboxWorkers, e.wakeOutbox, e.calls.Claim, e.calls.Process)
		}),
		startstop.NewLoop("wake-up listener", e.listen),
		startstop.NewLoop("wake-up notifier", e.notifier),
		startstop.NewLoop("retention", e.runRetention),
	}
}

// runLoop claims up to slots items at a time and processes each in its own goroutine.
// Items are processed with a context that outlives ctx by the shutdown budget, so a
// SIGTERM lets in-flight work finish instead of abandoning it half-done.
func runLoop[T any](ctx context.Context, e *Executor, name string, slots int, wake <-chan struct{},
	claim func(context.Context, int) ([]T, error), process func(context.Context, T),
) {
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var inflight atomic.Int64
	var wg sync.WaitGroup
	freed := make(chan struct{}, 1)
	timer := time.NewTimer(0)
	defer timer.Stop()
	backoff := time.Duration(0)

	for ctx.Err() == nil {
		free := slots - int(inflight.Load())
		if free > 0 {
			// A shutdown does not interrupt a claim: a claim cancelled mid-statement may
			// have committed, and a claim may fail after claiming part of its rows; either
			// way rows claimed but never processed would wait out their lease. Whatever
			// was claimed is processed below (or handed back when the budget runs out).
			claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			items, err := claim(claimCtx, free)
			cancelClaim()
			if err != nil {
				backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
				e.logger.WarnContext(ctx, "claim failed", "queue", name, "instance_id", e.cfg.InstanceID, "err", err, "retry_in", backoff)
				e.databaseError(ctx)
			} else {
				backoff = 0
			}
			for _, it := range items {
				inflight.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					process(workCtx, it)
					inflight.Add(-1)
					poke(freed)
				}()
			}
			if err == nil && len(items) == free {
				continue // there may be more
			}
		}
		wait := e.cfg.PollInterval
		if backoff > 0 {
			wait = backoff
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-freed:
		case <-timer.C:
		}
	}

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.cfg.ShutdownTimeout):
		e.logger.Warn("shutdown budget spent; abandoning in-flight work to its lease", "queue", name, "instance_id", e.cfg.InstanceID)
		cancelWork()
		<-done
	}
}

// ResumeBatchDefault bounds the continuations handled in one transaction.
const ResumeBatchDefault = 64

// resumeMinBatch is the fewest continuations a batch is given when more are claimed.
const resumeMinBatch = 16

// claimWork claims up to n units of work: each run job is a unit (it runs a node, maybe
// an HTTP call), while resume jobs are claimed n×ResumeBatch at a time and grouped, so
// a burst of satisfied waits costs a few transactions instead of one each.
func (e *Executor) claimWork(ctx context.Context, n int) ([][]dbsqlc.RunQueue, error) {
	runs, err := e.q.RunQueueClaim(ctx, e.pool, dbsqlc.RunQueueClaimParams{
		InstanceID: e.cfg.InstanceID, LeaseSeconds: e.cfg.Lease.Seconds(), Kind: string(vocab.KindRun), Max: int32(n),
	})
	if err != nil {
		return nil, err
	}
	e.observeClaims(ctx, "run", runs)
	units := make([][]dbsqlc.RunQueue, 0, n)
	for _, r := range runs {
		units = append(units, []dbsqlc.RunQueue{r})
	}
	free := n - len(units)
	if free <= 0 {
		return units, nil
	}
	resumes, err := e.q.RunQueueClaim(ctx, e.pool, dbsqlc.RunQueueClaimParams{
		InstanceID: e.cfg.InstanceID, LeaseSeconds: e.cfg.Lease.Seconds(), Kind: string(vocab.KindResume), Max: int32(free * ResumeBatchDefault),
	})
	if err != nil {
		return units, err
	}
	e.observeClaims(ctx, "resume", resumes)
	// Spread over the free slots so that batches run side by side, but not thinner than
	// resumeMinBatch: a batch costs a constant number of statements, and a wake-up after
	// a group commit finds only a few continuations, which spread one per slot cost a
	// transaction each.
	per := max((len(resumes)+free-1)/free, resumeMinBatch)
	for start := 0; start < len(resumes); start += per {
		units = append(units, resumes[start:min(start+per, len(resumes))])
	}
	return units, nil
}

func (e *Executor) processWork(ctx context.Context, unit []dbsqlc.RunQueue) {
	if len(unit) == 1 {
		e.processRun(ctx, unit[0])
		return
	}
	if _, err := e.resumeBatch(ctx, unit); err != nil {
		// Each job falls back to the single path, which isolates a failing one.
		e.logger.WarnContext(ctx, "resume batch failed; resuming one by one", "jobs", len(unit), "instance_id", e.cfg.InstanceID, "err", err)
		if ctx.Err() == nil {
			e.databaseError(ctx)
		}
		for _, job := range unit {
			e.processRun(ctx, job)
		}
	}
}

func (e *Executor) releaseRun(job dbsqlc.RunQueue, delay time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = e.q.RunQueueRelease(ctx, e.pool, dbsqlc.RunQueueReleaseParams{DelaySeconds: delay.Seconds(), ID: job.ID, Attempt: job.Attempt})
}

// processRun handles one claimed run-queue row. A node run is a span of its own (its
// lines below join it); a continuation's spans are per wait, in resumeBatch.
func (e *Executor) processRun(ctx context.Context, job dbsqlc.RunQueue) {
	log := e.logger.With("execution_id", job.ExecutionID, "node_id", job.NodeID, "instance_id", e.cfg.InstanceID, "kind", job.Kind, "attempt", job.Attempt)
	var err error
	switch job.Kind {
	case vocab.KindResume:
		err = e.resume(ctx, job)
	default:
		runCtx, span := e.startNodeRun(ctx, job.ExecutionID, job.NodeID, job.Attempt)
		err = e.runNode(runCtx, job)
		endSpan(span, err)
		ctx = runCtx
	}
	switch {
	case err == nil:
	case errors.Is(err, errLeaseLost):
		log.WarnContext(ctx, "lease lost; another instance owns this work now")
	default:
		// Left claimed: it becomes visible again when the lease runs out. Hand it back
		// sooner, after a backoff, when the database is reachable; at once when a
		// shutdown abandoned it. A node's own failed attempt (a network error of an
		// http node) says nothing about the database, even though it looks like a
		// network error.
		log.ErrorContext(ctx, "run queue item failed; will retry", "err", err)
		var attemptErr *nodeAttemptError
		if !errors.As(err, &attemptErr) && ctx.Err() == nil {
			e.databaseError(ctx)
		}
		switch {
		case ctx.Err() != nil:
			e.releaseRun(job, 0)
		case errors.As(err, &attemptErr) || !db.IsUnavailable(err):
			e.releaseRun(job, e.backoff(job.Attempt))
		}
	}
}

// nodeAttemptError is a node run that could not be made (NodeType.Run returned an
// error); it is retried up to Config.NodeMaxAttempts.
type nodeAttemptError struct{ err error }

func (e *nodeAttemptError) Error() string { return e.err.Error() }
func (e *nodeAttemptError) Unwrap() error { return e.err }

// finishJob removes the claimed row inside tx; zero rows means the lease was lost.
func (e *Executor) finishJob(ctx context.Context, tx pgx.Tx, job dbsqlc.RunQueue) error {
	n, err := e.q.RunQueueDeleteClaimed(ctx, tx, dbsqlc.RunQueueDeleteClaimedParams{ID: job.ID, Attempt: job.Attempt})
	if err != nil {
		return fmt.Errorf("finish run queue item: %w", err)
	}
	if n == 0 {
		return errLeaseLost
	}
	return nil
}

// runNode runs a node outside any transaction, then records its outcome and advances
// the graph in one transaction under the execution's row lock. The span in ctx (the
// node run's) is what a wait the node registers carries on to its call, events and
// continuation.
func (e *Executor) runNode(ctx context.Context, job dbsqlc.RunQueue) error {
	span := trace.SpanFromContext(ctx)
	st, err := e.loadState(ctx, e.pool, job.ExecutionID, false)
	if err != nil {
		return err
	}
	span.SetAttributes(attribute.String("rendezvous.workflow", st.exec.WorkflowName))
	n := st.nodes[job.NodeID]
	if execFinished(st.exec.Status) || n == nil || (n.Status != nodeRunning && n.Status != nodePending) {
		span.SetAttributes(attribute.String("rendezvous.outcome", "skipped"))
		return db.Tx(ctx, e.pool, func(tx pgx.Tx) error { return e.finishJob(ctx, tx, job) })
	}
	node, ok := st.wf.Node(job.NodeID)
	if !ok {
		return fmt.Errorf("node %s not in definition", job.NodeID)
	}
	span.SetAttributes(attribute.String("rendezvous.node_type", node.Type))
	typ, ok := e.cfg.NodeTypes[node.Type]
	if !ok {
		return fmt.Errorf("node type %q not registered", node.Type)
	}
	if err := e.q.NodeExecutionMarkRunning(ctx, e.pool, dbsqlc.NodeExecutionMarkRunningParams{ExecutionID: job.ExecutionID, NodeID: job.NodeID}); err != nil {
		return fmt.Errorf("mark node running: %w", err)
	}
	out, runErr := typ.Run(ctx, &RunContext{
		ExecutionID: job.ExecutionID, Node: node, Scope: st.scope(), HTTP: e.cfg.HTTPClient, Now: e.cfg.Clock.Now(),
		Logger: e.logger.With("execution_id", job.ExecutionID, "node_id", job.NodeID, "instance_id", e.cfg.InstanceID),
	})
	if runErr != nil {
		if int(job.Attempt) < e.cfg.NodeMaxAttempts {
			return &nodeAttemptError{runErr}
		}
		out = Failed("%v (after %d attempts)", runErr, job.Attempt)
	}
	if out.Wait != nil {
		out.Wait.TraceParent = telemetry.TraceParent(ctx)
	}

	rec, err := e.recordRun(ctx, job, out)
	if err != nil {
		return err
	}
	switch {
	case rec.discarded: // the execution finished (was cancelled) while the node ran
		span.SetAttributes(attribute.String("rendezvous.outcome", "skipped"))
	case rec.out.Status == OutcomeFailed:
		span.SetAttributes(attribute.String("rendezvous.outcome", "failed"))
		span.SetStatus(codes.Error, rec.out.Error)
	case rec.out.Status == OutcomeWaiting:
		span.SetAttributes(attribute.String("rendezvous.outcome", "waiting"))
	default:
		span.SetAttributes(attribute.String("rendezvous.outcome", "completed"))
	}
	if rec.enqueued {
		e.WakeRunQueue()
	}
	if rec.notifyOutbox {
		e.wakeOutboxQueue()
	}
	return nil
}

// recorded is what recording a node run did, for what follows its commit.
type recorded struct {
	// out is the outcome as recorded: a wait the aggregator refused turns it failed.
	out Outcome
	// discarded: the execution had finished while the node ran; nothing was recorded.
	discarded bool
	// enqueued: nodes were queued; notifyOutbox: a correlated call was.
	enqueued, notifyOutbox bool
}

// recordRun records a node run's outcome and advances the graph, in one transaction
// under the execution's row lock: the node failed (failRun), waiting (registerWait) or
// completed (completeRun).
func (e *Executor) recordRun(ctx context.Context, job dbsqlc.RunQueue, out Outcome) (recorded, error) {
	var rec recorded
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		rec = recorded{out: out}
		st, err := e.loadState(ctx, tx, job.ExecutionID, true)
		if err != nil {
			return err
		}
		if err := e.finishJob(ctx, tx, job); err != nil {
			return err
		}
		if rec.discarded = execFinished(st.exec.Status); rec.discarded {
			return nil
		}
		switch out.Status {
		case OutcomeFailed:
			return e.failRun(ctx, tx, st, job.NodeID, out)
		case OutcomeWaiting:
			return e.registerWait(ctx, tx, st, job.NodeID, &rec)
		default:
			rec.enqueued, err = e.completeRun(ctx, tx, st, job.NodeID, out)
			return err
		}
	})
	return rec, err
}

// failRun fails the node of a run that failed, and its execution. A wait that could not
// be set up is kept, in status error, for operators.
func (e *Executor) failRun(ctx context.Context, tx pgx.Tx, st *execState, nodeID string, out Outcome) error {
	if out.Wait != nil {
		if _, err := e.agg.Register(ctx, tx, *out.Wait); err != nil {
			return fmt.Errorf("record failed wait: %w", err)
		}
	}
	return e.failNode(ctx, tx, st, nodeID, out.Error)
}

// registerWait registers the wait of a node that suspends (rec.out.Wait) and marks the
// node waiting, with the wait's ids in its output; events sent to the execution before
// it reached the wait are taken at once (TakeBuffered), and may complete it. A wait the
// aggregator refuses (too many waiters of its match type) fails the node instead, and
// rec.out says so.
func (e *Executor) registerWait(ctx context.Context, tx pgx.Tx, st *execState, nodeID string, rec *recorded) error {
	out := rec.out
	ws, err := e.agg.Register(ctx, tx, *out.Wait)
	var tooMany *aggregator.TooManyWaitersError
	if errors.As(err, &tooMany) {
		rec.out = Failed("%v", tooMany)
		return e.failNode(ctx, tx, st, nodeID, rec.out.Error)
	}
	if err != nil {
		return fmt.Errorf("register wait: %w", err)
	}
	raw, err := waitingOutput(out, ws)
	if err != nil {
		return err
	}
	if err := e.q.NodeExecutionFinish(ctx, tx, dbsqlc.NodeExecutionFinishParams{Status: string(nodeWaiting), Output: raw, ExecutionID: st.exec.ID, NodeID: nodeID}); err != nil {
		return fmt.Errorf("mark node waiting: %w", err)
	}
	st.setNode(nodeID, nodeWaiting, raw)
	// Events sent to the execution before it reached this wait are taken now; if they
	// satisfy it, it completes in this transaction and never suspends.
	if _, err := e.agg.TakeBuffered(ctx, tx, ws); err != nil {
		return fmt.Errorf("take buffered events: %w", err)
	}
	rec.notifyOutbox = out.Wait.APICall
	e.logWaiting(ctx, ws)
	return e.settle(ctx, txWriter{e, tx}, st)
}

// completeRun completes the node of a run that completed and advances the graph from
// it; it reports whether nodes were queued.
func (e *Executor) completeRun(ctx context.Context, tx pgx.Tx, st *execState, nodeID string, out Outcome) (bool, error) {
	raw, err := json.Marshal(out.Output)
	if err != nil {
		return false, err
	}
	if err := e.q.NodeExecutionFinish(ctx, tx, dbsqlc.NodeExecutionFinishParams{Status: string(nodeCompleted), Output: raw, ExecutionID: st.exec.ID, NodeID: nodeID}); err != nil {
		return false, fmt.Errorf("complete node: %w", err)
	}
	st.setNode(nodeID, nodeCompleted, raw)
	return e.advanceOrFail(ctx, tx, txWriter{e, tx}, st, nodeID)
}

// logWaiting says a node waits (on a timer or for events).
func (e *Executor) logWaiting(ctx context.Context, ws dbsqlc.ExecutionWaitState) {
	msg := "waiting for events"
	if ws.WaitType == vocab.WaitTypeTimer {
		msg = "timer scheduled"
	}
	e.logger.DebugContext(ctx, msg, "execution_id", ws.ExecutionID, "node_id", ws.NodeID,
		"correlation_id", ws.CorrelationID, "instance_id", e.cfg.InstanceID, "wait_state_id", ws.ID,
		"next_deadline_at", ws.NextDeadlineAt)
}

// waitingOutput is the output of a node waiting on ws: the node's own, with the wait's
// ids. wait_state_id is spelled like every other key here; waitStateId and
// enabledEvents too, the names engines with this node give these fields, so a flow
// ported from one reads them unchanged.
func waitingOutput(out Outcome, ws dbsqlc.ExecutionWaitState) ([]byte, error) {
	out.Output["wait_state_id"] = ws.ID.String()
	out.Output["waitStateId"] = ws.ID.String()
	if ws.WaitType != vocab.WaitTypeTimer {
		var enabled []string
		if err := json.Unmarshal(ws.EnabledEvents, &enabled); err != nil {
			return nil, fmt.Errorf("decode enabled events: %w", err)
		}
		out.Output["enabledEvents"] = enabled
	}
	return json.Marshal(out.Output)
}

// resume continues one execution after its wait was satisfied: a batch of one.
func (e *Executor) resume(ctx context.Context, job dbsqlc.RunQueue) error {
	lost, err := e.resumeBatch(ctx, []dbsqlc.RunQueue{job})
	if err == nil && lost > 0 {
		return errLeaseLost
	}
	return err
}

// notifier tells other replicas about committed work with NOTIFY, each in its own short
// transaction. Requests that arrive while one is being sent coalesce into the next, so
// a burst of commits costs a few notifications, and no committing transaction ever
// waits on PostgreSQL's notification lock.
func (e *Executor) notifier(ctx context.Context) {
	for {
		var ch string
		select {
		case <-ctx.Done():
			return
		case <-e.notifyRun:
			ch = db.ChannelRunQueue
		case <-e.notifyOutbox:
			ch = db.ChannelOutbox
		}
		if err := e.q.Notify(ctx, e.pool, ch); err != nil && ctx.Err() == nil {
			// Only a hint: the others still poll.
			e.logger.DebugContext(ctx, "notify failed", "channel", ch, "instance_id", e.cfg.InstanceID, "err", err)
		}
	}
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
// look-up cost PostgreSQL about a tenth of its CPU per record, for outcomes the
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

// listen turns NOTIFYs into wake-ups. Losing the connection only delays work until the
// next poll, so it reconnects with backoff and pokes both loops after each reconnect.
func (e *Executor) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := e.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		e.logger.WarnContext(ctx, "notification listener lost its connection", "instance_id", e.cfg.InstanceID, "err", err, "retry_in", backoff)
		e.databaseError(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (e *Executor) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{db.ChannelRunQueue, db.ChannelOutbox} {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			return err
		}
	}
	poke(e.wakeRun)
	poke(e.wakeOutbox)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case db.ChannelRunQueue:
			poke(e.wakeRun)
		case db.ChannelOutbox:
			poke(e.wakeOutbox)
		}
	}
}
