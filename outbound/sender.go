package outbound

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/internal/testsignal"
	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// ErrLeaseLost means another replica claimed the call after this one's lease ran out;
// what this one would have recorded is left to it.
var ErrLeaseLost = errors.New("outbox lease lost")

// Waits is what a call needs of the aggregator, which owns the call's wait.
type Waits interface {
	// FailCall gives the wait up on its call's reply, in tx, and reports whether that
	// failed the wait (aggregator.FailCall: the wait's strategy decides).
	FailCall(ctx context.Context, tx pgx.Tx, waitStateID uuid.UUID, reason string) (bool, error)
}

// Executions is what a call needs of the executor, which runs the call's execution.
type Executions interface {
	// CallOf returns the correlated call of a node and the scope its templates render
	// in; a nil call when the node has none.
	CallOf(ctx context.Context, executionID uuid.UUID, nodeID string) (*workflow.APICall, template.Scope, error)
	// FailNode runs decide in tx under the execution's row lock and, when it returns
	// true and the execution has not finished, fails the node and the execution.
	FailNode(ctx context.Context, tx pgx.Tx, executionID uuid.UUID, nodeID, reason string, decide func() (bool, error)) error
}

// Attempt is one attempt of a correlated call, as its test signal reports it.
type Attempt struct {
	ExecutionID uuid.UUID
	NodeID      string
	Attempt     int32
	// Err is what kept the attempt from writing its outcome (nil when it did).
	Err error
}

// Config configures a Sender. Every field is required but the telemetry providers and
// Attempted.
type Config struct {
	// Attempted: one attempt of a call is over and its outcome (sent, retry later, given
	// up) is written; a step tests wait for, inert in production.
	Attempted  testsignal.Signal[Attempt]
	InstanceID string
	// Lease is how long a claimed call stays invisible to other replicas.
	Lease time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
	// MaxAttempts bounds the attempts of a call.
	MaxAttempts int
	// BackoffMin and BackoffMax bound the exponential backoff between attempts.
	BackoffMin, BackoffMax time.Duration
	// Client sends the calls under the egress policy.
	Client     *Client
	Logger     *slog.Logger
	Waits      Waits
	Executions Executions
	// OnDatabaseError counts a failed database operation (optional).
	OnDatabaseError func(context.Context)
	TracerProvider  trace.TracerProvider
	MeterProvider   metric.MeterProvider
}

// callResult is how an attempt of a correlated call ended, the result label of
// rendezvous.outbound.calls (not a wait's or a node's status).
type callResult string

const (
	resultOK     callResult = "ok"
	resultRetry  callResult = "retry"
	resultFailed callResult = "failed"
	// resultHeld: the host's circuit is open; the call waits for it without spending an
	// attempt.
	resultHeld callResult = "held"
)

// scope names the package's tracer and meter.
const scope = "github.com/rendezvous-run/rendezvous/outbound"

// Sender sends the queued correlated calls: the executor's loop claims rows (Claim) and
// hands each to Process.
type Sender struct {
	cfg   Config
	pool  *pgxpool.Pool
	q     *dbsqlc.Queries
	trace trace.Tracer
	calls metric.Int64Counter
	took  metric.Float64Histogram
}

// NewSender returns a Sender of the calls queued in pool's database.
func NewSender(pool *pgxpool.Pool, cfg Config) (*Sender, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	s := &Sender{cfg: cfg, pool: pool, q: dbsqlc.New(), trace: tp.Tracer(scope)}
	m := mp.Meter(scope)
	var err error
	if s.calls, err = m.Int64Counter("rendezvous.outbound.calls",
		metric.WithDescription("Correlated API call attempts by result (ok; retry: sent again later; failed: permanent or attempts exhausted; held: the host's circuit is open, no attempt spent).")); err != nil {
		return nil, err
	}
	// An attempt is bounded by Config.Timeout.
	if s.took, err = m.Float64Histogram("rendezvous.outbound.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one correlated API call attempt, by result."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return nil, err
	}
	return s, nil
}

// Claim claims up to n queued calls as this instance, with its lease.
func (s *Sender) Claim(ctx context.Context, n int) ([]dbsqlc.Outbox, error) {
	return s.q.OutboxClaim(ctx, s.pool, dbsqlc.OutboxClaimParams{
		InstanceID: s.cfg.InstanceID, LeaseSeconds: s.cfg.Lease.Seconds(), Max: int32(n),
	})
}

// Process makes one attempt of a claimed call and logs what failed. A call whose
// attempt could not be recorded stays claimed until its lease runs out.
func (s *Sender) Process(ctx context.Context, item dbsqlc.Outbox) {
	log := s.cfg.Logger.With("execution_id", item.ExecutionID, "node_id", item.NodeID, "instance_id", s.cfg.InstanceID, "attempt", item.Attempt)
	ctx, err := s.send(ctx, item)
	s.cfg.Attempted.Signal(Attempt{ExecutionID: item.ExecutionID, NodeID: item.NodeID, Attempt: item.Attempt, Err: err})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			log.WarnContext(ctx, "outbox lease lost; another instance owns this call now")
			return
		}
		log.ErrorContext(ctx, "outbox item failed; will retry", "err", err)
		if ctx.Err() == nil && s.cfg.OnDatabaseError != nil {
			s.cfg.OnDatabaseError(ctx)
		}
	}
}

// Send makes one attempt of a claimed call and returns what Process would log.
func (s *Sender) Send(ctx context.Context, item dbsqlc.Outbox) error {
	_, err := s.send(ctx, item)
	return err
}

// send makes one attempt of a call, in a span of the wait's trace; it returns the span's
// context (ctx itself when it ended before starting one) for the caller's lines.
func (s *Sender) send(ctx context.Context, item dbsqlc.Outbox) (_ context.Context, err error) {
	target, err := s.q.OutboxTarget(ctx, s.pool, item.WaitStateID)
	if err != nil && !errors.Is(db.Interpret(err), db.ErrNotFound) {
		return ctx, err
	}
	if err != nil || !target.Waiting {
		// Finished or cancelled before the call left: it is no longer wanted.
		return ctx, s.delete(ctx, s.pool, item)
	}
	tp := ""
	if target.TraceParent != nil {
		tp = *target.TraceParent
	}
	ctx, span := s.trace.Start(telemetry.WithTraceParent(ctx, tp), "rendezvous.wait.call",
		trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("rendezvous.execution_id", item.ExecutionID.String()),
			attribute.String("rendezvous.node_id", item.NodeID),
			attribute.String("rendezvous.correlation_id", target.CorrelationID.String()),
			attribute.Int("rendezvous.attempt", int(item.Attempt)),
		))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	return ctx, s.call(ctx, span, item, target.CorrelationID)
}

// call renders and sends the request of a claimed call, then records the result: the
// row deleted, retried later, or the call given up.
func (s *Sender) call(ctx context.Context, span trace.Span, item dbsqlc.Outbox, correlationID uuid.UUID) error {
	cfg, scope, err := s.cfg.Executions.CallOf(ctx, item.ExecutionID, item.NodeID)
	if err != nil {
		return err
	}
	if cfg == nil {
		return s.delete(ctx, s.pool, item)
	}
	// The request is rendered from the database at each attempt, so it is the same on
	// every attempt and on every replica.
	scope.CorrelationID = correlationID.String()
	req, err := Build(cfg, scope, item.ExecutionID, correlationID)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return s.giveUp(ctx, item, correlationID, cfg, err.Error())
	}
	log := s.cfg.Logger.With("execution_id", item.ExecutionID, "node_id", item.NodeID, "correlation_id", correlationID, "instance_id", s.cfg.InstanceID)
	span.SetAttributes(callAttributes(req)...)
	// Do sends the span's traceparent: the service may continue the wait's trace.
	sent := time.Now()
	resp, sendErr := s.cfg.Client.Do(ctx, req, SendOptions{Timeout: s.cfg.Timeout, FollowRedirects: cfg.FollowRedirects})
	took := time.Since(sent)
	if resp != nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.Status))
	}
	if open := CircuitOpen(sendErr); open != nil {
		return s.hold(ctx, span, item, req, open, took)
	}
	if sendErr == nil && resp.Status >= 200 && resp.Status <= 299 {
		s.record(ctx, resultOK, took)
		log.DebugContext(ctx, "correlated call sent", "method", req.Method, "url", req.display(req.URL), "status", resp.Status, "attempt", item.Attempt)
		return s.delete(ctx, s.pool, item)
	}
	reason := ""
	if sendErr != nil {
		reason = fmt.Sprintf("api call %s: %v", req.Target(), sendErr)
	} else {
		reason = fmt.Sprintf("api call %s: status %d: %s", req.Target(), resp.Status, Excerpt(resp.Body))
	}
	span.SetStatus(codes.Error, reason)
	if retryable(resp, sendErr) && int(item.Attempt) < s.cfg.MaxAttempts {
		s.record(ctx, resultRetry, took)
		delay := Backoff(s.cfg.BackoffMin, s.cfg.BackoffMax, item.Attempt)
		log.WarnContext(ctx, "correlated call failed; retrying", "attempt", item.Attempt, "retry_in", delay, "err", reason)
		n, err := s.q.OutboxRetryLater(ctx, s.pool, dbsqlc.OutboxRetryLaterParams{
			DelaySeconds: delay.Seconds(), LastError: reason, ID: item.ID, Attempt: item.Attempt,
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrLeaseLost
		}
		return nil
	}
	s.record(ctx, resultFailed, took)
	return s.giveUp(ctx, item, correlationID, cfg, fmt.Sprintf("%s (attempt %d of %d)", reason, item.Attempt, s.cfg.MaxAttempts))
}

// hold puts a call whose host's circuit is open back in the queue until the circuit may
// let a probe through, giving back the attempt its claim counted: a service that is down
// holds its calls, however many, instead of spending their attempts one failure each. The
// wait's deadline still runs.
func (s *Sender) hold(ctx context.Context, span trace.Span, item dbsqlc.Outbox, req *Request, open *CircuitOpenError, took time.Duration) error {
	s.record(ctx, resultHeld, took)
	reason := fmt.Sprintf("api call %s: %v", req.Target(), open)
	span.SetStatus(codes.Error, reason)
	// Jitter spreads the calls a circuit held over its probe's window.
	delay := open.RetryIn + rand.N(open.RetryIn/4+time.Millisecond)
	s.cfg.Logger.DebugContext(ctx, "correlated call held: its host's circuit is open", "execution_id", item.ExecutionID,
		"node_id", item.NodeID, "instance_id", s.cfg.InstanceID, "host", open.Host, "retry_in", delay)
	n, err := s.q.OutboxPostpone(ctx, s.pool, dbsqlc.OutboxPostponeParams{
		DelaySeconds: delay.Seconds(), LastError: reason, ID: item.ID, Attempt: item.Attempt,
	})
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// retryable reports whether a send that ended this way may succeed later: not one the
// egress policy refused, nor one whose secret is not set.
func retryable(resp *Response, err error) bool {
	if err != nil {
		var missing *MissingSecretError
		return Refused(err) == nil && !errors.As(err, &missing)
	}
	return resp.Status >= 500 || resp.Status == http.StatusTooManyRequests || resp.Status == http.StatusRequestTimeout
}

// delete removes a claimed call's row; zero rows means the lease was lost.
func (s *Sender) delete(ctx context.Context, q dbsqlc.DBTX, item dbsqlc.Outbox) error {
	n, err := s.q.OutboxDeleteClaimed(ctx, q, dbsqlc.OutboxDeleteClaimedParams{ID: item.ID, Attempt: item.Attempt})
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrLeaseLost
	}
	return nil
}

// giveUp ends a call for good. A required call fails its wait, node and execution
// (unless the reply already arrived, or the wait's strategy can do without it); an
// optional one is only logged.
func (s *Sender) giveUp(ctx context.Context, item dbsqlc.Outbox, correlationID uuid.UUID, call *workflow.APICall, reason string) error {
	if !call.Required {
		s.cfg.Logger.WarnContext(ctx, "optional correlated call failed; the wait goes on", "execution_id", item.ExecutionID,
			"node_id", item.NodeID, "correlation_id", correlationID, "instance_id", s.cfg.InstanceID, "err", reason)
		return s.delete(ctx, s.pool, item)
	}
	return db.Tx(ctx, s.pool, func(tx pgx.Tx) error {
		return s.cfg.Executions.FailNode(ctx, tx, item.ExecutionID, item.NodeID, reason, func() (bool, error) {
			if err := s.delete(ctx, tx, item); err != nil {
				return false, err
			}
			failed, err := s.cfg.Waits.FailCall(ctx, tx, item.WaitStateID, reason)
			if failed {
				s.cfg.Logger.ErrorContext(ctx, "required correlated call failed; failing the node", "execution_id", item.ExecutionID,
					"node_id", item.NodeID, "correlation_id", correlationID, "instance_id", s.cfg.InstanceID, "err", reason)
			}
			return failed, err
		})
	})
}

// record counts one call attempt and its duration.
func (s *Sender) record(ctx context.Context, result callResult, took time.Duration) {
	attrs := metric.WithAttributes(attribute.String("result", string(result)))
	s.calls.Add(ctx, 1, attrs)
	s.took.Record(ctx, took.Seconds(), attrs)
}

// callAttributes describe an outbound call on its span. Only the host of the URL: its
// path and query may carry tokens.
func callAttributes(req *Request) []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(req.Method)}
	u, err := url.Parse(req.URL)
	if err != nil {
		return attrs
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host = u.Host
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}
