// Package aggregator is the single place where events meet wait states. Every source
// (HTTP callbacks, the Kafka consumer) hands it the same Event; it correlates the event
// by execution_id and correlation_id, records it under an optimistic version fence,
// applies the wait's strategy, and — in the same transaction — completes the wait,
// writes the node's output and hands over the execution's continuation. Deadlines are
// decided here too (RunSweeper), behind the same fence, so an event and its deadline
// can never both win.
//
// It does not run workflows: that is the executor, which either continues the execution
// inside the deciding transaction (the Continuer the aggregator is built with) or picks
// the continuation up from the run queue. It knows nothing of HTTP or Kafka.
package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Names of the two events apiCall and kafkaEvent stand for.
const (
	EventAPIResponse = "api_response"
	EventKafka       = "kafka_event"
)

// Open reports whether a wait with this status can still end: an event wait waiting or
// a timer scheduled. The statuses and types of a wait are execstate's (vocab.WaitStatus,
// vocab.WaitType): the generated queries carry them, and they cannot import this package.
func Open(status vocab.WaitStatus) bool {
	return status == vocab.WaitWaiting || status == vocab.WaitScheduled
}

// ConflictRetriesDefault bounds how many times one event is decided (the first attempt
// included) when it keeps losing optimistic-lock races. Each loss means another writer committed, so progress is made
// globally; the bound only protects against a livelock bug.
const ConflictRetriesDefault = 50

// ErrUnstorablePayload matches every error for a payload PostgreSQL cannot store as jsonb
// (an *UnstorableError, see CheckStorable): a permanent property of the event, so sources
// reject it (HTTP 400, Kafka dead-letter) instead of retrying.
var ErrUnstorablePayload = errors.New("aggregator: payload cannot be stored as PostgreSQL jsonb")

// ErrConflictRetries is returned when an event lost the version race more often than the
// configured bound. The caller may retry the whole delivery.
var ErrConflictRetries = errors.New("aggregator: too many optimistic-lock conflicts")

// Transient reports whether err, the failure to record an event, may pass if the event
// is offered again: the database could not be reached (db.IsUnavailable), or the wait
// was too contended to decide (ErrConflictRetries). Nothing of the event was recorded.
func Transient(err error) bool {
	return db.IsUnavailable(err) || errors.Is(err, ErrConflictRetries)
}

// Config configures an Aggregator.
type Config struct {
	// InstanceID names this process in logs and in resumed_by. Required.
	InstanceID string
	// ConflictRetries bounds the attempts to decide one event (the first included) when
	// it keeps losing optimistic-lock races. Default ConflictRetriesDefault.
	ConflictRetries int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Continuer continues, inside the transaction of a batch of events (ApplyBatch, an
	// event sent by type), the executions of the waits the batch completes, and is woken
	// after commits that queued continuations instead. The executor builds its
	// aggregator with itself here. Optional: without it every continuation is queued,
	// and nobody is woken.
	Continuer Continuer

	// SweepBatch bounds the due waits one sweeper transaction decides. Default
	// SweepBatchDefault.
	SweepBatch int
	// ApplyGroups is how many group transactions of Apply, and as many of Send, run at
	// once. One at a time batches best, but a caller then waits for the group in flight
	// before its own starts, which the callback latency shows (rendezvous-bench part d).
	// More groups than the replica has cores only split the same work into smaller
	// groups that contend for those cores, which the callbacks rate shows (part c).
	// Default DefaultApplyGroups().
	ApplyGroups int
	// SweepWorkers is how many sweeper transactions run at once when many deadlines are
	// due together. Default SweepWorkersDefault.
	SweepWorkers int
	// SweepMaxSleep bounds how long the sweeper sleeps without looking for due waits.
	// Default SweepMaxSleepDefault.
	SweepMaxSleep time.Duration
	// OnExpired is called after each sweeper commit with the waits whose deadline ended
	// them (metrics, benchmarks). Optional.
	OnExpired func([]Expired)
	// TestSignals: steps tests wait for; inert in production.
	TestSignals TestSignals
	// Clock is the time deadlines, buffer lifetimes, lookback windows and the
	// janitor's cut-offs are set and judged by, and the sweeper sleeps by. Default
	// clock.Real; a test's stub moves them without waiting.
	Clock clock.Clock

	// MaxWaitersPerType bounds the open waits of one payload-match type (topic and
	// type): registering one more fails the node. Default MaxWaitersPerTypeDefault.
	MaxWaitersPerType int
	// UnmatchedRetention is how many unmatched events are kept. Default
	// UnmatchedRetentionDefault.
	UnmatchedRetention int
	// UnmatchedMaxAge is the age beyond which unmatched events and dead letters are
	// purged. Default 7 days.
	UnmatchedMaxAge time.Duration
	// JanitorInterval is how often RunJanitor expires buffered events and prunes
	// unmatched ones. Default JanitorIntervalDefault.
	JanitorInterval time.Duration
	// MaxLookback bounds the lookback of a payload match (how long a record that
	// reached no wait is kept for one registering later): definitions asking for more
	// are refused where they are stored, and one stored under a larger bound is held to
	// this one. Default MaxLookbackDefault.
	MaxLookback time.Duration

	// HeartbeatInterval is how often this replica writes its heartbeat row (the
	// rendezvous_replica_heartbeat_age_seconds gauge every replica exports). Default
	// HeartbeatIntervalDefault.
	HeartbeatInterval time.Duration
	// StaleWaitAfter is the age beyond which an open event wait that has recorded no
	// event yet counts as stale (rendezvous_wait_states_stale). Default
	// StaleWaitAfterDefault.
	StaleWaitAfter time.Duration

	// TracerProvider and MeterProvider receive the aggregator's spans and metrics;
	// no-ops when nil.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

func (c Config) withDefaults() Config {
	if c.ConflictRetries <= 0 {
		c.ConflictRetries = ConflictRetriesDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SweepBatch <= 0 {
		c.SweepBatch = SweepBatchDefault
	}
	if c.SweepWorkers <= 0 {
		c.SweepWorkers = SweepWorkersDefault
	}
	if c.ApplyGroups <= 0 {
		c.ApplyGroups = DefaultApplyGroups()
	}
	if c.SweepMaxSleep <= 0 {
		c.SweepMaxSleep = SweepMaxSleepDefault
	}
	if c.MaxWaitersPerType <= 0 {
		c.MaxWaitersPerType = MaxWaitersPerTypeDefault
	}
	if c.UnmatchedRetention <= 0 {
		c.UnmatchedRetention = UnmatchedRetentionDefault
	}
	if c.UnmatchedMaxAge <= 0 {
		c.UnmatchedMaxAge = 7 * 24 * time.Hour
	}
	if c.JanitorInterval <= 0 {
		c.JanitorInterval = JanitorIntervalDefault
	}
	if c.MaxLookback <= 0 {
		c.MaxLookback = MaxLookbackDefault
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = HeartbeatIntervalDefault
	}
	if c.StaleWaitAfter <= 0 {
		c.StaleWaitAfter = StaleWaitAfterDefault
	}
	c.Clock = clock.Or(c.Clock)
	return c
}

// now is the time on the aggregator's clock (Config.Clock).
func (a *Aggregator) now() time.Time { return a.cfg.Clock.Now() }

func (c Config) validate() error {
	if c.InstanceID == "" {
		return errors.New("aggregator.instance_id: must not be empty")
	}
	return nil
}

// Aggregator applies events to wait states.
type Aggregator struct {
	cfg    Config
	pool   *pgxpool.Pool
	q      *dbsqlc.Queries
	logger *slog.Logger

	// The group commits of Apply and Send: callers queue; up to Config.ApplyGroups of
	// them lead a transaction each for what is queued, then hand the lead on.
	applies grouper[Event, Result]
	sends   grouper[Sent, SendResult]

	// The earliest deadline registered here since the sweeper last looked, and its bell.
	hintMu       sync.Mutex
	hint         time.Time
	deadlineWake chan struct{}

	// ttls caches each definition version's eventBufferTtl.
	ttls sync.Map

	ins    instruments
	gauges telemetry.Cached[dbSnapshot]
}

// MaxWaitersPerTypeDefault is the default admission limit of one payload-match type.
const MaxWaitersPerTypeDefault = 10_000

// DefaultApplyGroups is the default of Config.ApplyGroups: one group transaction per
// CPU the process may use (GOMAXPROCS), at least 2, so that a caller rarely waits behind
// a group in flight, and at most 4, so that the group commits of Apply and Send together
// hold at most 8 connections of the pool the other workers share.
func DefaultApplyGroups() int { return min(max(runtime.GOMAXPROCS(0), 2), 4) }

// MaxGroupDefault bounds the events one group commit decides.
const MaxGroupDefault = 128

// New returns an Aggregator over pool.
func New(pool *pgxpool.Pool, cfg Config) (*Aggregator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := &Aggregator{cfg: cfg, pool: pool, q: dbsqlc.New(), logger: cfg.Logger, deadlineWake: make(chan struct{}, 1)}
	if err := a.initTelemetry(); err != nil {
		return nil, fmt.Errorf("aggregator telemetry: %w", err)
	}
	return a, nil
}

// Apply decides one event in a transaction of its own — shared with concurrent Apply
// calls: callers that arrive while Config.ApplyGroups transactions are in flight are
// decided together in the next one (ApplyBatch), each getting its own Result. Under load
// this turns N commits into a few; alone, a call costs what a single transaction costs.
func (a *Aggregator) Apply(ctx context.Context, ev Event) (Result, error) {
	if err := CheckStorable(ev.Payload); err != nil {
		return Result{}, err
	}
	return a.applies.run(ctx, ev, a.cfg.ApplyGroups, takeEvents, a.commitGroup)
}

// takeEvents takes the next group of events from the queue: the oldest, up to
// MaxGroupDefault of them (ApplyBatch decides several events for one wait in order).
func takeEvents(queue []*member[Event, Result]) (group, rest []*member[Event, Result]) {
	n := min(len(queue), MaxGroupDefault)
	return queue[:n:n], queue[n:]
}

// commitGroup decides a group of events in one transaction (groupTx). A group the
// database refuses data of is decided again one event at a time.
func (a *Aggregator) commitGroup(group []*member[Event, Result]) {
	events := make([]Event, len(group))
	for i, m := range group {
		events[i] = m.in
	}
	ctx, cancel := groupContext(group)
	defer cancel()
	results, err := a.CommitBatch(ctx, events)
	if len(group) > 1 && db.IsRefusedData(err) {
		// The database refused a value that CheckStorable let through (or one past a
		// limit of its own). It belongs to one caller, and should fail only that one:
		// each is decided again alone. The one refused gets the error as it is (a 500 to
		// a callback's sender, who retries): nothing tells a value apart from a fault of
		// ours that every statement would meet, so it is not called permanent.
		a.logger.WarnContext(ctx, "the database refused a group's data; deciding its events one by one", "err", err,
			"events", len(group), "instance_id", a.cfg.InstanceID)
		for _, m := range group {
			a.commitGroup([]*member[Event, Result]{m})
		}
		return
	}
	if db.IsUnavailable(err) {
		a.DatabaseError(ctx)
	}
	for i, m := range group {
		if err != nil {
			m.err = err
		} else {
			m.out = results[i]
			a.logResult(m.ctx, m.in, m.out)
		}
	}
}

// ApplyTx decides one event inside the caller's transaction, so a source can batch
// several events into one commit. Nothing it did is visible until the caller commits;
// what follows the commit (metrics, spans, the deadline warning of an event that found
// its wait past it, waking the workers for a queued continuation) is registered with
// db.AfterCommit. Its continuation is always queued: the caller's transaction may hold
// other executions' rows, where continuing would lock executions out of order.
func (a *Aggregator) ApplyTx(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	if err := CheckStorable(ev.Payload); err != nil {
		return Result{}, err
	}
	res, err := a.applyTx(ctx, tx, ev)
	if err != nil {
		return res, err
	}
	a.afterCommit(ctx, tx, []Event{ev}, []Result{res})
	return res, nil
}

// afterCommit registers, on tx, what follows the commit of decided events: they are
// observed (observeCommitted), and the workers woken when a continuation was queued.
// Every path that decides events calls it, so that no caller has to remember to.
func (a *Aggregator) afterCommit(ctx context.Context, tx pgx.Tx, events []Event, results []Result) {
	db.AfterCommit(tx, func() {
		a.observeCommitted(ctx, events, results)
		if Queued(results) {
			a.wakeContinuations()
		}
	})
}

// applyTx is ApplyTx without what follows the commit: its callers register that for
// their whole batch. Payloads are checked by the caller.
func (a *Aggregator) applyTx(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	key := ev.key()
	for attempt := 0; ; attempt++ {
		row, err := a.q.WaitStateGetByIDs(ctx, tx, dbsqlc.WaitStateGetByIDsParams{ExecutionID: ev.ExecutionID, CorrelationID: ev.CorrelationID})
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return a.classifyMissing(ctx, tx, ev)
			}
			return Result{}, fmt.Errorf("load wait state: %w", err)
		}
		w, err := decodeWait(row)
		if err != nil {
			return Result{}, err
		}
		loaded := row.Version
		now := a.now().UTC()
		outcome, name, err := w.decide(ev, key, now)
		if err != nil {
			return Result{}, err
		}
		res := Result{Outcome: outcome, Event: name, WaitStateID: row.ID, NodeID: row.NodeID, Status: w.row.Status, Version: loaded,
			Conflicts: attempt, TraceParent: deref(row.TraceParent), FirstEvent: w.firstEvent(outcome)}
		var won bool
		switch {
		case outcome == Late && w.due:
			// Late by the clock only: the deadline is written first, as the sweeper would
			// have, so this answer holds against a replica committing the same event
			// decided just before the deadline — one of the two writes misses its fence.
			// The deadline always changes the row here (the event, not received, times
			// out, or the wait ends), so the version moves.
			var d dueWrite
			if d, won, err = a.expireNow(ctx, tx, row, now); err != nil {
				return Result{}, err
			}
			res.Status, res.Version, res.Expired = d.status, loaded+d.bump, d.fired
		case outcome == Recorded || outcome == Completed:
			if won, err = a.write(ctx, tx, w, loaded); err != nil {
				return Result{}, err
			}
			res.Version = loaded + int64(w.applied)
		default:
			return res, nil
		}
		if !won {
			// Lost the race: someone changed the row since we read it.
			if attempt+1 >= a.cfg.ConflictRetries {
				return Result{}, fmt.Errorf("%w (wait %s)", ErrConflictRetries, row.ID)
			}
			a.logger.DebugContext(ctx, "optimistic lock conflict, deciding again",
				"execution_id", ev.ExecutionID, "correlation_id", ev.CorrelationID, "node_id", row.NodeID,
				"instance_id", a.cfg.InstanceID, "version", loaded)
			continue
		}
		return res, nil
	}
}

// write persists one decided wait behind its version fence, its continuation queued if
// it completed; false means the fence missed.
func (a *Aggregator) write(ctx context.Context, tx pgx.Tx, w *wait, loaded int64) (bool, error) {
	ww, err := w.eventWrite(loaded, queueResume)
	if err != nil {
		return false, err
	}
	var out []written
	if err := a.writeWaits(ctx, []waitWrite{ww}, &out)(tx); err != nil {
		return false, err
	}
	return len(out) == 1, nil
}

// eventWrite is the write of a wait that events were decided against (loaded: the
// version they were decided on): what it received, and — when they completed it — its
// node's output, its continuation left to then.
func (w *wait) eventWrite(loaded int64, then continuation) (waitWrite, error) {
	received, err := receivedJSON(w.received)
	if err != nil {
		return waitWrite{}, err
	}
	ww := waitWrite{id: w.row.ID, version: loaded, bump: int64(w.applied), status: w.row.Status,
		received: received, timedOut: w.timedOutJSON(), apiResponse: w.row.ApiResponseData, kafkaEvent: w.row.KafkaEventData,
		eventData: w.eventData(), next: w.row.NextDeadlineAt}
	if w.row.Status == vocab.WaitCompleted {
		output, err := w.output()
		if err != nil {
			return waitWrite{}, err
		}
		ww.end = &waitEnd{nodeStatus: vocab.NodeCompleted, output: output, then: then}
	}
	return ww, nil
}

// accepts checks an arrival against what the expected event requires of it, as stored
// with the wait so every replica decides alike: a Kafka record its topic and type; every
// source its filter.
func (e *Expected) accepts(ev Event) bool {
	if e.Source == SourceKafka && ev.Source.Kind == SourceKafka {
		if e.Topic != "" && ev.Source.Topic != e.Topic {
			return false
		}
	}
	if len(e.Filter) == 0 && (e.Type == "" || e.Source != SourceKafka) {
		return true
	}
	payload, err := jsonnum.Decode(ev.Payload)
	if err != nil {
		return false
	}
	typ := ""
	if e.Source == SourceKafka {
		typ = e.Type
	}
	return HoldsTypeAndFilter(payload, typ, e.Filter)
}

// HoldsTypeAndFilter reports whether a decoded payload (numbers as json.Number) carries
// the top-level type field typ (when not empty) and every scalar of filter at its dot
// path, numbers compared by exact value: what a Kafka record must hold to be an expected
// event, or to start an execution through a trigger.
func HoldsTypeAndFilter(payload any, typ string, filter map[string]any) bool {
	if typ != "" {
		if got, ok := dotpath.Get(payload, "type"); !ok || got != typ {
			return false
		}
	}
	for path, want := range filter {
		got, ok := dotpath.Get(payload, path)
		if !ok || !jsonnum.Equal(got, want) {
			return false
		}
	}
	return true
}

func (a *Aggregator) classifyMissing(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	other, err := a.q.WaitStateGetByCorrelationID(ctx, tx, ev.CorrelationID)
	if err == nil {
		a.logger.ErrorContext(ctx, "event rejected: correlation id belongs to another execution",
			"execution_id", ev.ExecutionID, "correlation_id", ev.CorrelationID,
			"owner_execution_id", other.ExecutionID, "node_id", other.NodeID, "event", ev.Name,
			"instance_id", a.cfg.InstanceID)
		return Result{Outcome: IDMismatch}, nil
	}
	if !errors.Is(db.Interpret(err), db.ErrNotFound) {
		return Result{}, fmt.Errorf("look up correlation id: %w", err)
	}
	exists, err := a.q.WaitStateExistsForExecution(ctx, tx, ev.ExecutionID)
	if err != nil {
		return Result{}, fmt.Errorf("look up execution waits: %w", err)
	}
	if exists {
		a.logger.ErrorContext(ctx, "event rejected: execution has no wait with this correlation id",
			"execution_id", ev.ExecutionID, "correlation_id", ev.CorrelationID, "event", ev.Name,
			"instance_id", a.cfg.InstanceID)
		return Result{Outcome: IDMismatch}, nil
	}
	return Result{Outcome: NotFound}, nil
}

// logResult logs a decided event's line. Most are routine, at debug: their attributes
// are built only when debug is on.
func (a *Aggregator) logResult(ctx context.Context, ev Event, res Result) {
	level, msg := slog.LevelDebug, ""
	switch res.Outcome {
	case Completed:
		msg = "wait satisfied"
	case Recorded:
		msg = "event recorded"
	case Duplicate:
		msg = "duplicate event ignored"
	case Late, AlreadyRecorded, NotExpected:
		level, msg = slog.LevelWarn, "event not applied"
	case NotFound, FilterMismatch:
		msg = "event not applied"
	default:
		return
	}
	if !a.logger.Enabled(ctx, level) {
		return
	}
	a.logger.Log(ctx, level, msg, "execution_id", ev.ExecutionID, "correlation_id", ev.CorrelationID, "node_id", res.NodeID,
		"instance_id", a.cfg.InstanceID, "event", ev.Name, "outcome", res.Outcome, "version", res.Version)
}
