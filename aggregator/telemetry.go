package aggregator

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// scope names the aggregator's tracer and meter.
const scope = "github.com/rendezvous-run/rendezvous/aggregator"

// instruments are the aggregator's spans and metrics. Everything is recorded after the
// transaction that decided it committed (Observe, the sweeper): a rolled-back decision
// did not happen.
type instruments struct {
	tracer      trace.Tracer
	applied     metric.Int64Counter
	notApplied  metric.Int64Counter
	firstEvent  metric.Int64Counter
	conflicts   metric.Int64Counter
	timeouts    metric.Int64Counter
	warnings    metric.Int64Counter
	timersFired metric.Int64Counter
	dbErrors    metric.Int64Counter
	unmatched   metric.Int64Counter
	admission   metric.Int64Counter
	buffered    metric.Int64Counter
	deadLetters metric.Int64Counter
	lookback    metric.Int64Counter
}

func (a *Aggregator) initTelemetry() error {
	tp, mp := a.cfg.TracerProvider, a.cfg.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter(scope)
	in := &a.ins
	in.tracer = tp.Tracer(scope)
	var err error
	for _, c := range []struct {
		dst  *metric.Int64Counter
		name string
		desc string
	}{
		{&in.applied, "rendezvous.events.applied", "Events recorded on a wait, by source and outcome (recorded, completed)."},
		{&in.notApplied, "rendezvous.events.not_applied", "Events not applied, by source and reason (duplicate, late, not_found, id_mismatch, filter, not_expected, already_recorded; poison, missing_id, invalid_id, invalid_signature from the sources)."},
		{&in.firstEvent, "rendezvous.wait.first_event", "Satisfied waits by the event that arrived first."},
		{&in.conflicts, "rendezvous.lock.conflicts", "Optimistic-lock races lost (the event was decided again)."},
		{&in.timeouts, "rendezvous.timeouts", "Waits ended by a deadline, by on_timeout and outcome (continue, partial, fail)."},
		{&in.warnings, "rendezvous.nodes.warnings", "Nodes that finished with a warning on their record, by reason (partial_data: a wait continued after events timed out)."},
		{&in.timersFired, "rendezvous.timers.fired", "Wait-node timers that resumed their node."},
		{&in.dbErrors, telemetry.DatabaseErrorsName, telemetry.DatabaseErrorsDescription},
		{&in.unmatched, "rendezvous.events.unmatched", "Events that matched nothing, by reason (as listed by GET /api/v1/events/unmatched)."},
		{&in.admission, "rendezvous.waits.rejected", "Waits refused at registration because their match type has --max-waiters-per-type open waiters, by type."},
		{&in.buffered, "rendezvous.events.buffered", "Events sent to an execution before a node waited for their type, by outcome (buffered, taken, superseded, expired, execution_finished)."},
		{&in.deadLetters, "rendezvous.events.dead_lettered", "Buffered events moved to event_dead_letters, by reason (expired, superseded)."},
		{&in.lookback, "rendezvous.events.lookback", "Kafka records matched by payload that reached no wait, by outcome: kept for a lookback, taken by a wait registering later, superseded (last_write_wins), expired untaken."},
	} {
		if *c.dst, err = m.Int64Counter(c.name, metric.WithDescription(c.desc)); err != nil {
			return err
		}
	}
	in.zeroSeries()
	return a.registerGauges(m)
}

// zeroSeries makes the series that alert rules divide by or compare exist from the
// start, at zero: a rate over a series that appears only with its first event is no rate
// at all.
func (in *instruments) zeroSeries() {
	ctx := context.Background()
	for _, source := range []workflow.Source{SourceCallback, SourceKafka} {
		for _, outcome := range []Outcome{Recorded, Completed} {
			in.applied.Add(ctx, 0, metric.WithAttributes(attribute.String("source", string(source)), attribute.String("outcome", string(outcome))))
		}
	}
	for _, onTimeout := range []vocab.OnTimeout{vocab.OnTimeoutFail, vocab.OnTimeoutContinue, vocab.OnTimeoutContinueWithPartial} {
		for _, outcome := range []string{"fail", "continue", "partial"} {
			in.timeouts.Add(ctx, 0, metric.WithAttributes(attribute.String("on_timeout", string(onTimeout)), attribute.String("outcome", outcome)))
		}
	}
	for _, outcome := range lookbackOutcomes {
		in.lookback.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", outcome)))
	}
	for _, reason := range UnmatchedReasons {
		in.unmatched.Add(ctx, 0, metric.WithAttributes(attribute.String("reason", string(reason))))
	}
	in.warnings.Add(ctx, 0, metric.WithAttributes(attribute.String("reason", WarningPartialData)))
	in.conflicts.Add(ctx, 0)
	in.timersFired.Add(ctx, 0)
	in.dbErrors.Add(ctx, 0, metric.WithAttributes(attribute.String("component", "aggregator")))
}

// registerGauges registers the gauges read from the database, all in one callback that
// reads one cached snapshot.
func (a *Aggregator) registerGauges(m metric.Meter) error {
	waits, err := m.Int64ObservableGauge("rendezvous.wait_states",
		metric.WithDescription("Open waits by status (waiting, scheduled), counted in the database."))
	if err != nil {
		return err
	}
	lag, err := m.Float64ObservableGauge("rendezvous.sweeper.lag", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due deadline has been waiting for the sweeper (0 when none is due)."))
	if err != nil {
		return err
	}
	byReplica, err := m.Int64ObservableGauge("rendezvous.wait_states.by_replica",
		metric.WithDescription("Open waits by status and by the replica that registered them (replica: its instance id; unknown for waits from before this was recorded), counted in the database. Any replica may decide any wait: this says where waits started."))
	if err != nil {
		return err
	}
	stale, err := m.Int64ObservableGauge("rendezvous.wait_states.stale",
		metric.WithDescription("Open event waits older than --stale-wait-after (1 h by default) that have recorded no event yet, counted in the database."))
	if err != nil {
		return err
	}
	heartbeat, err := m.Float64ObservableGauge("rendezvous.replica.heartbeat_age", metric.WithUnit("s"),
		metric.WithDescription("Age of each replica's last heartbeat, by replica (instance id), as the database holds it: every live replica exports every replica's, so one that died is seen by the others until its row is pruned after an hour. A replica that stops in order removes its row."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		snap, err := a.gauges.Get(ctx, a.dbSnapshot)
		if err != nil {
			return err
		}
		for _, status := range []vocab.WaitStatus{vocab.WaitWaiting, vocab.WaitScheduled} {
			o.ObserveInt64(waits, snap.open[status], metric.WithAttributes(attribute.String("status", string(status))))
		}
		for k, n := range snap.byReplica {
			o.ObserveInt64(byReplica, n, metric.WithAttributes(attribute.String("status", string(k.status)), attribute.String("replica", k.replica)))
		}
		o.ObserveInt64(stale, snap.stale)
		for _, hb := range snap.heartbeats {
			o.ObserveFloat64(heartbeat, max(0, snap.at.Sub(hb.BeatAt).Seconds()), metric.WithAttributes(attribute.String("replica", hb.InstanceID)))
		}
		o.ObserveFloat64(lag, snap.lag.Seconds())
		return nil
	}, waits, lag, byReplica, stale, heartbeat)
	return err
}

type replicaStatus struct {
	status  vocab.WaitStatus
	replica string
}

type dbSnapshot struct {
	at         time.Time
	open       map[vocab.WaitStatus]int64
	byReplica  map[replicaStatus]int64
	stale      int64
	heartbeats []dbsqlc.ReplicaHeartbeatListRow
	lag        time.Duration
}

// dbSnapshot reads the gauges' figures: open waits through the sweeper's partial index,
// and the oldest due deadline through the same index.
func (a *Aggregator) dbSnapshot(ctx context.Context) (dbSnapshot, error) {
	now := a.now()
	rows, err := a.q.WaitStateCountOpen(ctx, a.pool, now.Add(-a.cfg.StaleWaitAfter).UTC())
	if err != nil {
		a.DatabaseError(ctx)
		return dbSnapshot{}, err
	}
	snap := dbSnapshot{at: now, open: map[vocab.WaitStatus]int64{}, byReplica: map[replicaStatus]int64{}}
	for _, r := range rows {
		snap.open[r.Status] += r.Count
		replica := r.RegisteredBy
		if replica == "" {
			replica = "unknown"
		}
		snap.byReplica[replicaStatus{r.Status, replica}] += r.Count
		snap.stale += r.Stale
	}
	if snap.heartbeats, err = a.q.ReplicaHeartbeatList(ctx, a.pool); err != nil {
		a.DatabaseError(ctx)
		return dbSnapshot{}, err
	}
	next, err := a.q.WaitStateNextDeadline(ctx, a.pool)
	switch {
	case errors.Is(db.Interpret(err), db.ErrNotFound):
		// Nothing open, nothing late.
	case err != nil:
		a.DatabaseError(ctx)
		return dbSnapshot{}, err
	case next.Before(now):
		snap.lag = now.Sub(next)
	}
	return snap, nil
}

// DatabaseError counts a failed database operation of the aggregator (alerting on
// rendezvous_database_errors_total).
func (a *Aggregator) DatabaseError(ctx context.Context) {
	a.ins.dbErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("component", "aggregator")))
}

// RecordRejected counts an event a source turned away before deciding it — a poison
// Kafka record, a callback whose body cannot be stored — next to the aggregator's own
// reasons.
func (a *Aggregator) RecordRejected(ctx context.Context, source workflow.Source, reason string) {
	a.ins.notApplied.Add(ctx, 1, metric.WithAttributes(attribute.String("source", string(source)), attribute.String("reason", reason)))
}

// observeCommitted records committed decisions: counters by outcome, the first event of
// each satisfied wait, lost races, and a span per event in its wait's trace, linked to
// the context the event arrived with. It runs after the commit (afterCommit), registered
// by the path that decided the events.
func (a *Aggregator) observeCommitted(ctx context.Context, events []Event, results []Result) {
	var t tally
	for i, res := range results {
		if len(res.Deliveries) == 0 {
			a.observe(ctx, &t, events[i], res, true)
			continue
		}
		// A record matched by payload: each wait it reached is a decision of its own; it
		// was unmatched only if it reached none (then Deliveries is empty).
		for _, d := range res.Deliveries {
			a.observe(ctx, &t, events[i], d, false)
		}
	}
	t.record(ctx, a)
	a.announceExpired(ctx, expiredOf(results))
}

// expiredOf collects the deadlines that late events wrote (Result.Expired).
func expiredOf(results []Result) []Expired {
	var fired []Expired
	for _, r := range results {
		if r.Expired != nil {
			fired = append(fired, *r.Expired)
		}
		fired = append(fired, expiredOf(r.Deliveries)...)
	}
	return fired
}

// tally counts a batch's decisions by the attributes of each counter, so that every
// counter is added to once per distinct attribute set rather than once per event (the
// attribute sets were a noticeable share of a batch's Go time).
type tally struct {
	applied, notApplied map[[2]string]int64       // by source and outcome (reason)
	unmatched           map[UnmatchedReason]int64 // by reason
	firstEvent          map[string]int64          // by event
	conflicts, kept     int64
}

func (t *tally) add(m *map[[2]string]int64, source workflow.Source, outcome Outcome) {
	if *m == nil {
		*m = map[[2]string]int64{}
	}
	(*m)[[2]string{string(source), string(outcome)}]++
}

func countKey[K comparable](m *map[K]int64, k K) {
	if *m == nil {
		*m = map[K]int64{}
	}
	(*m)[k]++
}

func (t *tally) record(ctx context.Context, a *Aggregator) {
	for k, n := range t.applied {
		a.ins.applied.Add(ctx, n, metric.WithAttributes(attribute.String("source", k[0]), attribute.String("outcome", k[1])))
	}
	for k, n := range t.notApplied {
		a.ins.notApplied.Add(ctx, n, metric.WithAttributes(attribute.String("source", k[0]), attribute.String("reason", k[1])))
	}
	if t.conflicts > 0 {
		a.ins.conflicts.Add(ctx, t.conflicts)
	}
	for reason, n := range t.unmatched {
		a.ins.unmatched.Add(ctx, n, metric.WithAttributes(attribute.String("reason", string(reason))))
	}
	if t.kept > 0 {
		a.ins.lookback.Add(ctx, t.kept, metric.WithAttributes(attribute.String("outcome", "kept")))
	}
	for ev, n := range t.firstEvent {
		a.ins.firstEvent.Add(ctx, n, metric.WithAttributes(attribute.String("event", ev)))
	}
}

// observe records one decision in t, and its span; unmatched says whether a decision
// that applied nothing counts as an unmatched event.
func (a *Aggregator) observe(ctx context.Context, t *tally, ev Event, res Result, unmatched bool) {
	if res.Event != "" {
		ev.Name = res.Event // what a Kafka record correlated by ids was decided as
	}
	switch res.Outcome {
	case Recorded, Completed:
		t.add(&t.applied, ev.Source.Kind, res.Outcome)
	default:
		t.add(&t.notApplied, ev.Source.Kind, res.Outcome)
	}
	t.conflicts += int64(res.Conflicts)
	if reason := reasonOf(res.Outcome); reason != "" && unmatched {
		countKey(&t.unmatched, reason)
	}
	if res.Outcome == Kept {
		t.kept++
	}
	if res.Outcome == Completed && res.FirstEvent != "" {
		countKey(&t.firstEvent, res.FirstEvent)
	}
	if res.TraceParent == "" {
		return // not found, or a foreign execution's wait: no trace of ours to join
	}
	var opts []trace.SpanStartOption
	if ev.Link.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: ev.Link}))
	}
	wctx := telemetry.WithTraceParent(context.Background(), res.TraceParent)
	_, span := a.ins.tracer.Start(wctx, "rendezvous.wait.event "+ev.Name, opts...)
	// Most spans are not recorded where no exporter is configured (see telemetry): their
	// attributes are built only for those that are. No sampler rendezvous configures
	// decides by attributes.
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("rendezvous.execution_id", ev.ExecutionID.String()),
			attribute.String("rendezvous.correlation_id", ev.CorrelationID.String()),
			attribute.String("rendezvous.node_id", res.NodeID),
			attribute.String("rendezvous.event", ev.Name),
			attribute.String("rendezvous.source", string(ev.Source.Kind)),
			attribute.String("rendezvous.outcome", string(res.Outcome)),
			attribute.Int64("rendezvous.version", res.Version),
		)
		if res.Outcome == Completed {
			// A moment, not a stretch of work: an event of the span of the event that
			// completed the wait, rather than a span of no length of its own.
			span.AddEvent("rendezvous.wait.satisfied", trace.WithAttributes(
				attribute.String("rendezvous.first_event", res.FirstEvent)))
		}
	}
	span.End()
}

// observeExpired records a sweeper commit: counters and a span per ended wait in its
// trace.
func (a *Aggregator) observeExpired(ctx context.Context, fired []Expired) {
	// A burst fires thousands of waits with a handful of attribute sets between them:
	// each set is built and added once, with its count, rather than once per wait.
	type timeoutKind struct{ onTimeout, outcome string }
	var timeouts map[timeoutKind]int64
	var timers, partial int64
	for _, e := range fired {
		name := "rendezvous.wait.timeout"
		if e.Timer {
			name = "rendezvous.wait.timer"
			timers++
		} else {
			outcome := "fail"
			switch {
			case e.Partial:
				outcome = "partial"
			case e.Continue:
				outcome = "continue"
			}
			if timeouts == nil {
				timeouts = map[timeoutKind]int64{}
			}
			timeouts[timeoutKind{string(e.OnTimeout), outcome}]++
			if e.Warning != "" {
				partial++
			}
		}
		if e.TraceParent == "" {
			continue
		}
		_, span := a.ins.tracer.Start(telemetry.WithTraceParent(context.Background(), e.TraceParent), name,
			trace.WithTimestamp(e.Deadline), trace.WithAttributes(
				attribute.String("rendezvous.wait_state_id", e.WaitStateID),
				attribute.String("rendezvous.node_id", e.NodeID),
				attribute.Bool("rendezvous.continue", e.Continue),
				attribute.Float64("rendezvous.lateness_seconds", e.Lateness.Seconds()),
			))
		if !e.Continue {
			span.SetStatus(codes.Error, "deadline failed the node")
		}
		span.End()
	}
	if timers > 0 {
		a.ins.timersFired.Add(ctx, timers)
	}
	for k, n := range timeouts {
		a.ins.timeouts.Add(ctx, n, metric.WithAttributes(attribute.String("on_timeout", k.onTimeout), attribute.String("outcome", k.outcome)))
	}
	if partial > 0 {
		a.ins.warnings.Add(ctx, partial, metric.WithAttributes(attribute.String("reason", WarningPartialData)))
	}
}
