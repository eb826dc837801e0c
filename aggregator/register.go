package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// DefaultTimeout is the overall timeout of a wait that names none (300 seconds, as
// docs/definitions.md says): no wait can be left without a deadline.
const DefaultTimeout = 300 * time.Second

// Registration describes a wait to create.
type Registration struct {
	ExecutionID   uuid.UUID
	NodeID        string
	CorrelationID uuid.UUID
	Strategy      vocab.Strategy
	Expected      []Expected
	// RequiredEvents is the custom strategy's list.
	RequiredEvents []string
	// Timeout is the overall deadline, relative to now; DefaultTimeout when zero.
	Timeout       time.Duration
	OnTimeout     vocab.OnTimeout
	OutputMapping map[string]string
	// APICall: an outbound correlated call is queued in the same transaction.
	APICall bool
	// Timer, when set, makes this a time-based wait; the event fields are unused.
	Timer *Timer
	// TraceParent is the W3C traceparent of the span that registered the wait: the
	// wait's call, events, deadline and continuation join that trace. Optional.
	TraceParent string
}

// Register creates the wait state (and its outbox row) inside the caller's transaction.
// The row is committed before any call leaves, so a reply can never beat its row. The
// caller wakes the outbox after its commit.
func (a *Aggregator) Register(ctx context.Context, tx pgx.Tx, r Registration) (dbsqlc.ExecutionWaitState, error) {
	if r.Timer != nil {
		return a.registerTimer(ctx, tx, r)
	}
	arg, err := a.eventWait(ctx, tx, r)
	if err != nil {
		return dbsqlc.ExecutionWaitState{}, err
	}
	ws, err := a.q.WaitStateInsert(ctx, tx, arg)
	if err != nil {
		return dbsqlc.ExecutionWaitState{}, fmt.Errorf("insert wait state: %w", db.Interpret(err))
	}
	// The sweeper is told once the wait can be seen: told earlier, it could wake, find
	// nothing, and sleep past the deadline.
	db.AfterCommit(tx, func() { a.deadlineRegistered(arg.NextDeadlineAt) })
	if r.APICall {
		if err := outbound.Queue(ctx, tx, ws); err != nil {
			return dbsqlc.ExecutionWaitState{}, err
		}
	}
	return ws, nil
}

// Queueable reports whether QueueRegister can register r: an event wait without a
// correlated call (whose outbox row needs the inserted wait) and without payload-match
// types (whose admission check counts the open waits of each type, so a wait of the
// same type still queued beside it would not be counted). Others go through Register.
func Queueable(r Registration) bool {
	if r.Timer != nil || r.APICall {
		return false
	}
	_, typeKeys := registrationKeys(r.Expected)
	return len(typeKeys) == 0
}

// QueueRegister is Register for a Queueable registration, with the wait's insert queued
// on p instead of run, so that it travels with the statements around it (the start of
// an execution inserts the execution, its waits and its nodes in one round trip). What
// must precede the insert (the admission check of payload-match types) runs on tx now.
// It returns the row as it will be inserted, without what the database fills in
// (version, timestamps); once p is sent, *inserted holds the row the insert returned.
func (a *Aggregator) QueueRegister(ctx context.Context, tx pgx.Tx, p *db.Pipeline, r Registration,
	inserted *dbsqlc.ExecutionWaitState,
) (dbsqlc.ExecutionWaitState, error) {
	if !Queueable(r) {
		return dbsqlc.ExecutionWaitState{}, errors.New("QueueRegister: a timer or a wait with a correlated call is registered with Register")
	}
	arg, err := a.eventWait(ctx, tx, r)
	if err != nil {
		return dbsqlc.ExecutionWaitState{}, err
	}
	p.Queue(func(d dbsqlc.DBTX) error {
		ws, err := a.q.WaitStateInsert(ctx, d, arg)
		if err != nil {
			return fmt.Errorf("insert wait state: %w", db.Interpret(err))
		}
		*inserted = ws
		return nil
	})
	db.AfterCommit(tx, func() { a.deadlineRegistered(arg.NextDeadlineAt) })
	return dbsqlc.ExecutionWaitState{
		ID: arg.ID, ExecutionID: arg.ExecutionID, NodeID: arg.NodeID, CorrelationID: arg.CorrelationID,
		AggregationStrategy: vocab.Strategy(arg.AggregationStrategy), RequiredEvents: arg.RequiredEvents, EnabledEvents: arg.EnabledEvents,
		ExpectedEvents: arg.ExpectedEvents, ApiCallEnabled: arg.ApiCallEnabled, KafkaEventEnabled: arg.KafkaEventEnabled,
		OnTimeout: vocab.OnTimeout(arg.OnTimeout), OutputMapping: arg.OutputMapping, Status: vocab.WaitStatus(arg.Status), ExpiresAt: arg.ExpiresAt,
		NextDeadlineAt: arg.NextDeadlineAt, WaitType: vocab.WaitType(arg.WaitType), TraceParent: arg.TraceParent, MatchKeys: arg.MatchKeys,
		RegisteredBy: &arg.RegisteredBy,
	}, nil
}

// eventWait checks an event wait's registration, passes its admission control, and
// returns the row to insert.
func (a *Aggregator) eventWait(ctx context.Context, tx pgx.Tx, r Registration) (dbsqlc.WaitStateInsertParams, error) {
	required, err := RequiredSet(r.Strategy, r.Expected, r.RequiredEvents)
	if err != nil {
		return dbsqlc.WaitStateInsertParams{}, err
	}
	enabled := make([]string, len(r.Expected))
	for i, e := range r.Expected {
		enabled[i] = e.Name
	}
	mapping := r.OutputMapping
	if mapping == nil {
		mapping = map[string]string{}
	}
	// Every wait has a deadline: the overall one (a default applies when the node gives
	// none), and each event's own when it has one. All are fixed now, on this clock.
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	// Microseconds: PostgreSQL's precision, so the stored next deadline and the deadlines
	// in expected_events compare exactly.
	now := a.now().UTC().Truncate(time.Microsecond)
	expires := now.Add(timeout)
	next := expires
	expected := slices.Clone(r.Expected)
	for i := range expected {
		if expected[i].TimeoutMS <= 0 {
			continue
		}
		at := now.Add(time.Duration(expected[i].TimeoutMS) * time.Millisecond)
		expected[i].DeadlineAt = &at
		if at.Before(next) {
			next = at
		}
	}
	keys, typeKeys := registrationKeys(expected)
	if err := a.admit(ctx, tx, typeKeys); err != nil {
		return dbsqlc.WaitStateInsertParams{}, err
	}
	var js [4][]byte
	for i, v := range []any{required, enabled, expected, mapping} {
		if js[i], err = json.Marshal(v); err != nil {
			return dbsqlc.WaitStateInsertParams{}, err
		}
	}
	return dbsqlc.WaitStateInsertParams{
		ID:                  db.NewID(),
		ExecutionID:         r.ExecutionID,
		NodeID:              r.NodeID,
		CorrelationID:       r.CorrelationID,
		AggregationStrategy: string(r.Strategy),
		RequiredEvents:      js[0],
		EnabledEvents:       js[1],
		ExpectedEvents:      js[2],
		ApiCallEnabled:      slices.Contains(enabled, EventAPIResponse),
		KafkaEventEnabled:   slices.Contains(enabled, EventKafka),
		OnTimeout:           string(r.OnTimeout),
		OutputMapping:       js[3],
		ExpiresAt:           expires,
		NextDeadlineAt:      next,
		WaitType:            string(vocab.WaitTypeEvents),
		RegisteredBy:        a.cfg.InstanceID,
		Status:              string(vocab.WaitWaiting),
		TraceParent:         nonEmpty(r.TraceParent),
		MatchKeys:           append(keys, typeKeys...),
	}, nil
}

// TooManyWaitersError refuses a wait whose match type already has the configured number
// of open waiters (admission control): the lookup of one incoming record stays bounded.
// The executor fails the node with it.
type TooManyWaitersError struct {
	Topic, Type string
	Max         int
}

func (e *TooManyWaitersError) Error() string {
	t := "topic " + strconv.Quote(e.Topic)
	if e.Type != "" {
		t += " type " + strconv.Quote(e.Type)
	}
	return fmt.Sprintf("too many waiters: %s already has %d open waits matched by payload (--max-waiters-per-type)", t, e.Max)
}

// admit checks the admission limit of each match type, under a per-type transaction
// lock so that concurrent registrations cannot pass it together. The locks are taken in
// one order whatever the node's order of events, so that two registrations of the same
// types cannot each hold one and wait for the other.
func (a *Aggregator) admit(ctx context.Context, tx pgx.Tx, typeKeys []string) error {
	for _, k := range slices.Sorted(slices.Values(typeKeys)) {
		if err := a.q.WaitStateLockMatchType(ctx, tx, k); err != nil {
			return fmt.Errorf("lock match type: %w", err)
		}
		n, err := a.q.WaitStateCountMatchWaiters(ctx, tx, dbsqlc.WaitStateCountMatchWaitersParams{Key: k, Max: int32(a.cfg.MaxWaitersPerType)})
		if err != nil {
			return fmt.Errorf("count match waiters: %w", err)
		}
		if n >= int64(a.cfg.MaxWaitersPerType) {
			parts := strings.SplitN(k, keySep, 3)
			e := &TooManyWaitersError{Topic: parts[1], Type: parts[2], Max: a.cfg.MaxWaitersPerType}
			a.ins.admission.Add(ctx, 1, metric.WithAttributes(attribute.String("topic", e.Topic), attribute.String("type", e.Type)))
			return e
		}
	}
	return nil
}

// FailCall ends the wait of a required outbound call that finally failed, unless the
// reply already arrived (a service may call back before answering the call itself) or
// the wait is no longer waiting. It reports whether the wait was failed; the caller then
// fails the node and the execution in the same transaction.
//
// The strategy decides, not the call alone: when the wait can still be satisfied without
// the call's reply — under any, another enabled event is still open; under custom, the
// reply is not among requiredEvents — the reply is given up instead, recorded among the
// timed-out events exactly like an event whose own deadline passed (a reply arriving
// after all is late), and the wait goes on. Under all and required_only the reply is
// part of what the strategy needs, so the wait fails.
func (a *Aggregator) FailCall(ctx context.Context, tx pgx.Tx, waitStateID uuid.UUID, reason string) (bool, error) {
	for attempt := 0; attempt < a.cfg.ConflictRetries; attempt++ {
		ws, err := a.q.WaitStateGetByID(ctx, tx, waitStateID)
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return false, nil
			}
			return false, fmt.Errorf("load wait state: %w", err)
		}
		if ws.Status != vocab.WaitWaiting {
			return false, nil
		}
		w, err := decodeWait(ws)
		if err != nil {
			return false, err
		}
		if slices.ContainsFunc(w.received, func(r Received) bool { return r.Name == EventAPIResponse }) {
			return false, nil
		}
		timedOut, goOn, err := w.withoutReply(a.now())
		if err != nil {
			return false, err
		}
		if goOn {
			_, err = a.q.WaitStateRecordEvent(ctx, tx, dbsqlc.WaitStateRecordEventParams{
				ReceivedEvents: ws.ReceivedEvents, TimedOutEvents: timedOut, EventData: w.eventData(),
				Status: string(vocab.WaitWaiting), Applied: 1, ID: ws.ID, Version: ws.Version,
			})
			if err == nil {
				a.logger.WarnContext(ctx, "required correlated call failed; the strategy can still be satisfied, the wait goes on without its reply",
					"execution_id", ws.ExecutionID, "correlation_id", ws.CorrelationID, "node_id", ws.NodeID,
					"instance_id", a.cfg.InstanceID, "strategy", ws.AggregationStrategy, "err", reason)
				return false, nil
			}
		} else {
			_, err = a.q.WaitStateFinish(ctx, tx, dbsqlc.WaitStateFinishParams{Status: string(vocab.WaitFailed), Error: &reason, ID: ws.ID, Version: ws.Version})
			if err == nil {
				return true, nil
			}
		}
		if !errors.Is(db.Interpret(err), db.ErrNotFound) {
			return false, fmt.Errorf("record failed call: %w", err)
		}
	}
	return false, fmt.Errorf("%w (wait %s)", ErrConflictRetries, waitStateID)
}

// withoutReply decides whether the wait can still be satisfied once the call's reply
// will never come: it can when, with api_response counted as timed out (and every other
// deadline passed at now applied, as the sweeper would), no deadline would end it. Then
// ok is true and timedOut is the timed_out_events to write.
func (w *wait) withoutReply(now time.Time) (timedOut []byte, ok bool, err error) {
	switch w.row.AggregationStrategy {
	case vocab.StrategyAny, vocab.StrategyCustom:
	default:
		return nil, false, nil
	}
	if err := w.decodeExpected(); err != nil {
		return nil, false, err
	}
	given := append(slices.Clone(w.timedOut), EventAPIResponse)
	d := decideTimeout(w.row.AggregationStrategy, w.row.OnTimeout, w.expected, w.required, w.receivedNames(), given, w.row.ExpiresAt, now)
	if d.Fire {
		return nil, false, nil
	}
	b, err := json.Marshal(d.TimedOut)
	return b, err == nil, err
}
