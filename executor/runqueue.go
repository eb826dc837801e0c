package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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
		ExecutionID: job.ExecutionID, Node: node, Scope: st.scope(), HTTP: e.client, Now: e.cfg.Clock.Now(),
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
// ids. wait_state_id is spelled like every other key here; waitStateId, enabledEvents,
// and for an event wait correlationId and executionId too, the names engines with this
// node give these fields, so a flow ported from one reads them unchanged.
func waitingOutput(out Outcome, ws dbsqlc.ExecutionWaitState) ([]byte, error) {
	out.Output["wait_state_id"] = ws.ID.String()
	out.Output["waitStateId"] = ws.ID.String()
	if ws.WaitType != vocab.WaitTypeTimer {
		out.Output["correlation_id"] = ws.CorrelationID.String()
		out.Output["correlationId"] = ws.CorrelationID.String()
		out.Output["execution_id"] = ws.ExecutionID.String()
		out.Output["executionId"] = ws.ExecutionID.String()
		var enabled []string
		if err := json.Unmarshal(ws.EnabledEvents, &enabled); err != nil {
			return nil, fmt.Errorf("decode enabled events: %w", err)
		}
		out.Output["enabledEvents"] = enabled
	}
	return json.Marshal(out.Output)
}
