package executor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/internal/workflow"
)

func (e *Executor) claimOutbox(ctx context.Context, n int) ([]dbsqlc.Outbox, error) {
	return e.q.OutboxClaim(ctx, e.pool, dbsqlc.OutboxClaimParams{
		InstanceID: e.cfg.InstanceID, LeaseSeconds: e.cfg.Lease.Seconds(), Max: int32(n),
	})
}

// retryable reports whether a send that ended this way may succeed later.
func retryable(resp *Response, err error) bool {
	if err != nil {
		return true
	}
	return resp.Status >= 500 || resp.Status == http.StatusTooManyRequests || resp.Status == http.StatusRequestTimeout
}

// backoff returns the delay before attempt+1: exponential, capped, with full jitter so
// that many calls failing together do not retry together.
func (e *Executor) backoff(attempt int32) time.Duration {
	d := e.cfg.OutboxBackoffMin << min(attempt-1, 20)
	if d <= 0 || d > e.cfg.OutboxBackoffMax {
		d = e.cfg.OutboxBackoffMax
	}
	return d/2 + rand.N(d/2+1)
}

// processOutbox sends one correlated call. The request is rendered from the database at
// send time, so it is the same on every attempt and on every pod.
func (e *Executor) processOutbox(ctx context.Context, item dbsqlc.Outbox) {
	log := e.logger.With("execution_id", item.ExecutionID, "node_id", item.NodeID, "instance_id", e.cfg.InstanceID, "attempt", item.Attempt)
	ctx, err := e.sendOutbox(ctx, item)
	e.cfg.TestSignals.OutboxAttempted.Signal(OutboxAttempt{ExecutionID: item.ExecutionID, NodeID: item.NodeID, Attempt: item.Attempt, Err: err})
	if err != nil {
		if errors.Is(err, errLeaseLost) {
			log.WarnContext(ctx, "outbox lease lost; another instance owns this call now")
			return
		}
		log.ErrorContext(ctx, "outbox item failed; will retry", "err", err)
		if ctx.Err() == nil {
			e.databaseError(ctx)
		}
	}
}

// sendOutbox makes one attempt of a call, in a span of the wait's trace; it returns the
// span's context (ctx itself when it ended before starting one) for the caller's lines.
func (e *Executor) sendOutbox(ctx context.Context, item dbsqlc.Outbox) (_ context.Context, err error) {
	ws, err := e.q.WaitStateGetByID(ctx, e.pool, item.WaitStateID)
	if err != nil && !errors.Is(db.Interpret(err), db.ErrNotFound) {
		return ctx, err
	}
	if err != nil || ws.Status != aggregator.StatusWaiting {
		// Finished or cancelled before the call left: it is no longer wanted.
		return ctx, e.deleteOutbox(ctx, item)
	}
	tp := ""
	if ws.TraceParent != nil {
		tp = *ws.TraceParent
	}
	ctx, span := e.ins.tracer.Start(telemetry.WithTraceParent(ctx, tp), "rendezvous.wait.call",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("rendezvous.execution_id", item.ExecutionID.String()),
			attribute.String("rendezvous.node_id", item.NodeID),
			attribute.String("rendezvous.correlation_id", ws.CorrelationID.String()),
			attribute.Int("rendezvous.attempt", int(item.Attempt)),
		))
	defer func() { endSpan(span, err) }()
	return ctx, e.call(ctx, span, item, ws)
}

// call renders and sends the request of a claimed outbox row, then records the result:
// the row deleted, retried later, or the call failed for good.
func (e *Executor) call(ctx context.Context, span trace.Span, item dbsqlc.Outbox, ws dbsqlc.ExecutionWaitState) error {
	st, err := e.loadState(ctx, e.pool, item.ExecutionID, false)
	if err != nil {
		return err
	}
	node, ok := st.wf.Node(item.NodeID)
	if !ok {
		return fmt.Errorf("node %s not in definition", item.NodeID)
	}
	cfg, ok := node.Config.(*workflow.WaitEvents)
	if !ok || cfg.APICall == nil {
		return e.deleteOutbox(ctx, item)
	}
	scope := st.scope()
	scope.CorrelationID = ws.CorrelationID.String()
	req, err := BuildAPIRequest(cfg.APICall, scope, item.ExecutionID, ws.CorrelationID)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return e.callFailed(ctx, item, ws, cfg.APICall, err.Error())
	}
	log := e.logger.With("execution_id", item.ExecutionID, "node_id", item.NodeID, "correlation_id", ws.CorrelationID, "instance_id", e.cfg.InstanceID)
	span.SetAttributes(callAttributes(req)...)
	// Do sends the span's traceparent: the service may continue the wait's trace.
	sent := time.Now()
	resp, sendErr := Do(ctx, e.cfg.HTTPClient, req, e.cfg.OutboxTimeout)
	took := time.Since(sent)
	if resp != nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.Status))
	}
	if sendErr == nil && resp.Status >= 200 && resp.Status <= 299 {
		e.recordCall(ctx, resultOK, took)
		log.InfoContext(ctx, "correlated call sent", "method", req.Method, "url", req.URL, "status", resp.Status, "attempt", item.Attempt)
		return e.deleteOutbox(ctx, item)
	}
	reason := ""
	if sendErr != nil {
		reason = fmt.Sprintf("api call %s %s: %v", req.Method, req.URL, sendErr)
	} else {
		reason = fmt.Sprintf("api call %s %s: status %d: %s", req.Method, req.URL, resp.Status, excerpt(resp.Body))
	}
	span.SetStatus(codes.Error, reason)
	if retryable(resp, sendErr) && int(item.Attempt) < e.cfg.OutboxMaxAttempts {
		e.recordCall(ctx, resultRetry, took)
		delay := e.backoff(item.Attempt)
		log.WarnContext(ctx, "correlated call failed; retrying", "attempt", item.Attempt, "retry_in", delay, "err", reason)
		n, err := e.q.OutboxRetryLater(ctx, e.pool, dbsqlc.OutboxRetryLaterParams{
			DelaySeconds: delay.Seconds(), LastError: reason, ID: item.ID, Attempt: item.Attempt,
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return errLeaseLost
		}
		return nil
	}
	e.recordCall(ctx, resultFailed, took)
	return e.callFailed(ctx, item, ws, cfg.APICall, fmt.Sprintf("%s (attempt %d of %d)", reason, item.Attempt, e.cfg.OutboxMaxAttempts))
}

func (e *Executor) deleteOutbox(ctx context.Context, item dbsqlc.Outbox) error {
	n, err := e.q.OutboxDeleteClaimed(ctx, e.pool, dbsqlc.OutboxDeleteClaimedParams{ID: item.ID, Attempt: item.Attempt})
	if err != nil {
		return err
	}
	if n == 0 {
		return errLeaseLost
	}
	return nil
}

// callFailed ends a call for good. A required call fails its wait, node and execution
// (unless the reply already arrived); an optional one is only logged.
func (e *Executor) callFailed(ctx context.Context, item dbsqlc.Outbox, ws dbsqlc.ExecutionWaitState, call *workflow.APICall, reason string) error {
	if !call.Required {
		e.logger.WarnContext(ctx, "optional correlated call failed; the wait goes on", "execution_id", item.ExecutionID,
			"node_id", item.NodeID, "correlation_id", ws.CorrelationID, "instance_id", e.cfg.InstanceID, "err", reason)
		return e.deleteOutbox(ctx, item)
	}
	return db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		st, err := e.loadState(ctx, tx, item.ExecutionID, true)
		if err != nil {
			return err
		}
		n, err := e.q.OutboxDeleteClaimed(ctx, tx, dbsqlc.OutboxDeleteClaimedParams{ID: item.ID, Attempt: item.Attempt})
		if err != nil {
			return err
		}
		if n == 0 {
			return errLeaseLost
		}
		failed, err := e.agg.FailCall(ctx, tx, ws.ID, reason)
		if err != nil || !failed || execFinished(st.exec.Status) {
			return err
		}
		e.logger.ErrorContext(ctx, "required correlated call failed; failing the node", "execution_id", item.ExecutionID,
			"node_id", item.NodeID, "correlation_id", ws.CorrelationID, "instance_id", e.cfg.InstanceID, "err", reason)
		return e.failNode(ctx, tx, st, item.NodeID, reason)
	})
}
