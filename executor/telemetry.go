package executor

import (
	"context"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// scope names the executor's tracer and meter.
const scope = "github.com/rendezvous-run/rendezvous/executor"

// instruments are the executor's spans and metrics. Whatever depends on a transaction
// (a wait resumed) is recorded after it committed: a rolled-back batch did not happen.
type instruments struct {
	tracer       trace.Tracer
	waitDuration metric.Float64Histogram
	claimLatency metric.Float64Histogram
	dbErrors     metric.Int64Counter
}

// Bucket boundaries, in seconds. A wait lasts from milliseconds (a fast callback) to days (a timer, an approval); a claim
// normally follows its enqueue within a poll interval and lags when pods are saturated.
var (
	waitBuckets  = []float64{0.1, 0.5, 1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400}
	claimBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
)

func (e *Executor) initTelemetry() error {
	tp, mp := e.cfg.TracerProvider, e.cfg.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(scope)
	in := &e.ins
	in.tracer = tp.Tracer(scope)
	var err error
	if in.dbErrors, err = m.Int64Counter(telemetry.DatabaseErrorsName, metric.WithDescription(telemetry.DatabaseErrorsDescription)); err != nil {
		return err
	}
	for _, h := range []struct {
		dst     *metric.Float64Histogram
		name    string
		desc    string
		buckets []float64
	}{
		{&in.waitDuration, "rendezvous.wait.duration", "How long waits lasted, from registration to satisfied, timed out or fired; by workflow, strategy (timer for wait nodes) and outcome.", waitBuckets},
		{&in.claimLatency, "rendezvous.run_queue.claim_latency", "How long run-queue work waited to be claimed the first time, by kind (run, resume).", claimBuckets},
	} {
		if *h.dst, err = m.Float64Histogram(h.name, metric.WithUnit("s"), metric.WithDescription(h.desc),
			metric.WithExplicitBucketBoundaries(h.buckets...)); err != nil {
			return err
		}
	}
	depth, err := m.Int64ObservableGauge("rendezvous.run_queue.depth",
		metric.WithDescription("Run-queue rows by kind (run, resume), claimed ones included, counted in the database."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		counts, err := e.depthCache.Get(ctx, e.queueDepth)
		if err != nil {
			return err
		}
		for _, kind := range []string{"run", "resume"} {
			o.ObserveInt64(depth, counts[kind], metric.WithAttributes(attribute.String("kind", kind)))
		}
		return nil
	}, depth)
	return err
}

// queueDepth reads the run-queue depth by kind.
func (e *Executor) queueDepth(ctx context.Context) (map[string]int64, error) {
	rows, err := e.q.RunQueueDepth(ctx, e.pool)
	if err != nil {
		e.databaseError(ctx)
		return nil, err
	}
	depth := map[string]int64{}
	for _, r := range rows {
		depth[string(r.Kind)] = r.Count
	}
	return depth, nil
}

// databaseError counts a failed database operation of the executor (alerting on
// rendezvous_database_errors_total).
func (e *Executor) databaseError(ctx context.Context) {
	e.ins.dbErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("component", "executor")))
}

// startNodeRun starts the span of one run of a node; runNode adds what it learns.
// Its attributes are built only for a span that is recorded (see Aggregator.observe).
func (e *Executor) startNodeRun(ctx context.Context, execID uuid.UUID, nodeID string, attempt int32) (context.Context, trace.Span) {
	ctx, span := e.ins.tracer.Start(ctx, "rendezvous.node.run")
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("rendezvous.execution_id", execID.String()),
			attribute.String("rendezvous.node_id", nodeID),
			attribute.Int("rendezvous.attempt", int(attempt)),
		)
	}
	return ctx, span
}

// endSpan marks span failed when err is set, and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// observeClaims records how long first attempts waited to be claimed; a retried row's
// created_at is its first enqueue, so it would count its backoff. Both ends come from
// the database's clock — the claim set visible_at to its now() plus the lease — so the
// pod's clock skew does not enter.
func (e *Executor) observeClaims(ctx context.Context, kind string, rows []dbsqlc.RunQueue) {
	attrs := metric.WithAttributes(attribute.String("kind", kind))
	for _, r := range rows {
		if r.Attempt != 1 {
			continue
		}
		claimed := r.VisibleAt.Add(-e.cfg.Lease)
		e.ins.claimLatency.Record(ctx, max(claimed.Sub(r.CreatedAt), 0).Seconds(), attrs)
	}
}

// resumedWait is a wait continued by a resume batch, observed once the batch commits.
type resumedWait struct {
	wait     aggregator.Ended
	workflow string
	span     trace.Span
}

// startResume starts the span of a wait's continuation in the wait's trace.
// Its attributes are built only for a span that is recorded.
func (e *Executor) startResume(ctx context.Context, r aggregator.Ended) (context.Context, trace.Span) {
	ctx, span := e.ins.tracer.Start(telemetry.WithTraceParent(ctx, r.TraceParent), "rendezvous.wait.resume")
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("rendezvous.execution_id", r.ExecutionID.String()),
			attribute.String("rendezvous.node_id", r.NodeID),
			attribute.String("rendezvous.outcome", string(r.Status)),
		)
	}
	return ctx, span
}

// observeResumed ends the spans of a committed resume batch and records how long each
// wait lasted. A batch that rolled back never gets here: its spans are never ended, and
// spans that are not ended are not exported.
func (e *Executor) observeResumed(ctx context.Context, waits []resumedWait) {
	// The waits of a batch mostly share their attributes; a set is built (sorted and
	// hashed) only when they change from one wait to the next, not once per wait.
	type attrKey struct{ workflow, strategy, outcome string }
	var last attrKey
	var attrs metric.RecordOption
	for _, w := range waits {
		// A timer has no strategy: its waits are counted under its type.
		strategy := string(w.wait.Strategy)
		if w.wait.WaitType == vocab.WaitTypeTimer {
			strategy = string(vocab.WaitTypeTimer)
		}
		if key := (attrKey{w.workflow, strategy, string(w.wait.Status)}); attrs == nil || key != last {
			last, attrs = key, metric.WithAttributes(
				attribute.String("workflow", key.workflow),
				attribute.String("strategy", key.strategy),
				attribute.String("outcome", key.outcome),
			)
		}
		e.ins.waitDuration.Record(ctx, max(w.wait.EndedAt.Sub(w.wait.CreatedAt), 0).Seconds(), attrs)
		w.span.End()
	}
}
