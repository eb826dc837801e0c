package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Events sent to an execution by type (an engine's "send event" step). A sent event goes to every
// open wait of the execution that expects its type; when none does yet, it is buffered
// and taken by the first wait for its type the execution reaches. Sending and
// registering a wait both hold the execution's row lock, so an event is either seen by
// the registration or delivered to the wait it registered — never neither.

// Sent is an event sent to an execution by type.
type Sent struct {
	ExecutionID uuid.UUID
	Type        string
	Payload     json.RawMessage
	// ID, when set, deduplicates: the same id sent to one execution twice is applied once.
	ID     string
	Source Source
	Link   trace.SpanContext
}

// SendOutcome says what a sent event did.
type SendOutcome string

const (
	// SendDelivered: applied to at least one waiting node.
	SendDelivered SendOutcome = "delivered"
	// SendBuffered: no node waits for the type yet; held until one does or it expires.
	SendBuffered SendOutcome = "buffered"
	// SendDuplicate: an event with this id was already sent to the execution.
	SendDuplicate SendOutcome = "duplicate"
	// SendNoExecution: no such execution.
	SendNoExecution SendOutcome = "no_execution"
	// SendExecutionFinished: the execution has finished; nothing can take the event.
	SendExecutionFinished SendOutcome = "execution_finished"
)

// SendResult reports what SendTx did.
type SendResult struct {
	Outcome SendOutcome
	// Deliveries are the results at each wait the event was applied or offered to.
	Deliveries []Result
	// BufferID identifies the buffered event (SendBuffered).
	BufferID int64
	// ExpiresAt is when a buffered event expires.
	ExpiresAt time.Time
	// ExecutionStatus is the execution's status when the event arrived.
	ExecutionStatus vocab.ExecutionStatus
	// Unmatched is the reason recorded in unmatched_events when no wait took the event
	// (buffered ones included); empty when delivered.
	Unmatched UnmatchedReason
}

// Queued reports whether a delivery completed a wait, or ended one by writing its passed
// deadline, and its continuation was queued: the workers are woken after the commit.
func (r SendResult) Queued() bool { return Queued(r.Deliveries) }

// Send delivers a sent event (SendTx), with its audit row, in a transaction shared with
// concurrent Send calls: as Apply groups callbacks, calls that arrive while
// Config.ApplyGroups transactions of sends are in flight are decided together in the
// next one, each getting its own result and its own audit row (one statement writes the
// group's rows). A group holds one event per execution: a second send to an execution
// waits for the next group, so each send sees what the one before it did, as it would
// alone.
func (a *Aggregator) Send(ctx context.Context, s Sent) (SendResult, error) {
	if err := CheckStorable(s.Payload); err != nil {
		return SendResult{}, err
	}
	return a.sends.run(ctx, s, a.cfg.ApplyGroups, takeSends, a.commitSends)
}

// takeSends takes the next group of sends from the queue: in order, up to
// MaxGroupDefault of them, one per execution; the others stay queued, in order.
func takeSends(queue []*member[Sent, SendResult]) (group, rest []*member[Sent, SendResult]) {
	seen := make(map[uuid.UUID]bool, min(len(queue), MaxGroupDefault))
	for _, m := range queue {
		if len(group) < MaxGroupDefault && !seen[m.in.ExecutionID] {
			seen[m.in.ExecutionID] = true
			group = append(group, m)
			continue
		}
		rest = append(rest, m)
	}
	return group, rest
}

// commitSends decides a group of sends in one transaction, retried when it hits a
// deadlock or serialization failure. A group that fails otherwise, while the database is
// reachable, may fail because of one of its sends (a value the database refuses, a wait
// that cannot be decoded): each send is then decided again alone, so that one bad send
// fails only its own request.
func (a *Aggregator) commitSends(group []*member[Sent, SendResult]) {
	sends := make([]Sent, len(group))
	for i, m := range group {
		sends[i] = m.in
	}
	ctx, cancel := groupContext(group)
	defer cancel()
	var results []SendResult
	err := a.groupTx(ctx, func(tx pgx.Tx, last, atCommit *db.Pipeline) error {
		var err error
		if results, err = a.sendTxs(ctx, tx, sends, atCommit); err != nil {
			return err
		}
		changes := make([]audit.Change, len(group))
		for i, m := range group {
			changes[i] = audit.Change{Ctx: m.ctx, Target: "execution/" + m.in.ExecutionID.String(),
				Outcome: string(results[i].Outcome), Detail: "type " + m.in.Type}
			db.AfterCommit(tx, func() { a.observeSent(m.ctx, m.in, results[i]) })
		}
		if Queued(sentDeliveries(results)) {
			db.AfterCommit(tx, a.wakeContinuations)
		}
		if audit.Any(changes) {
			// Sent with the COMMIT: if the rows cannot be written, nothing commits.
			last.Queue(func(d dbsqlc.DBTX) error { return audit.RecordAll(ctx, d, changes) })
		}
		return nil
	})
	if err != nil && len(group) > 1 && !db.IsUnavailable(err) && ctx.Err() == nil {
		a.logger.WarnContext(ctx, "a group of sent events failed; deciding them one by one", "err", err,
			"events", len(group), "instance_id", a.cfg.InstanceID)
		for _, m := range group {
			a.commitSends([]*member[Sent, SendResult]{m})
		}
		return
	}
	if db.IsUnavailable(err) {
		a.DatabaseError(ctx)
	}
	for i, m := range group {
		if err != nil {
			m.err = err
			continue
		}
		m.out = results[i]
	}
}

// sentDeliveries gathers the deliveries of several sends.
func sentDeliveries(results []SendResult) []Result {
	var all []Result
	for _, r := range results {
		all = append(all, r.Deliveries...)
	}
	return all
}

// SendTx delivers a sent event inside the caller's transaction; what follows the commit
// (observeSent, waking the workers for a queued continuation) is registered on tx with
// db.AfterCommit. With a Continuer (Config.Continuer), the execution whose wait the event
// completes is continued in tx, as a batch of callbacks or records continues its
// executions: SendTx locks the execution's row before its waits, so the continuation's
// locks keep the order every writer takes — as long as a caller sending several events
// in one transaction sends them in execution id order (the consumer does).
func (a *Aggregator) SendTx(ctx context.Context, tx pgx.Tx, s Sent) (SendResult, error) {
	results, err := a.sendTxs(ctx, tx, []Sent{s}, nil)
	if err != nil {
		return SendResult{}, err
	}
	res := results[0]
	db.AfterCommit(tx, func() {
		a.observeSent(ctx, s, res)
		if res.Queued() {
			a.wakeContinuations()
		}
	})
	return res, nil
}

// sendTxs decides sent events, each to a different execution, inside tx, without what
// follows the commit; results are in input order. In a constant number of round trips
// for the group (more for events buffered or carrying ids): the executions are locked,
// in id order, in the round trip that reads their open waits; the events for waits are
// decided from those rows and written together (applyBatch), the executions of the waits they complete
// continued in tx; the others are buffered; the unmatched rows of all are written with
// one statement. atCommit, when not nil, is the pipeline sent with tx's COMMIT, where the
// continuations' writes go (continueEnded).
func (a *Aggregator) sendTxs(ctx context.Context, tx pgx.Tx, in []Sent, atCommit *db.Pipeline) ([]SendResult, error) {
	sends, ids, err := normalizeSends(in)
	if err != nil {
		return nil, err
	}
	read, err := a.readForSends(ctx, tx, ids, atCommit)
	if err != nil {
		return nil, err
	}
	b := &sendBatch{sends: sends, results: make([]SendResult, len(sends)), byID: make(map[uuid.UUID]dbsqlc.Execution, len(read.execs))}
	for _, e := range read.execs {
		b.byID[e.ID] = e
	}
	live, err := a.screenSends(ctx, tx, b)
	if err != nil {
		return nil, err
	}
	events, owner, err := b.eventsForWaits(live, read.waits, a.now().UTC())
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		// The waits were read after their executions were locked, in this transaction:
		// applyBatch decides from them, and continues from the rows locked, rather than
		// reading either again.
		deliveries, err := a.applyBatch(ctx, tx, events, true, read, atCommit)
		if err != nil {
			return nil, err
		}
		for k, d := range deliveries {
			d.Event = events[k].Name
			b.results[owner[k]].Deliveries = append(b.results[owner[k]].Deliveries, d)
		}
	}
	for _, i := range live {
		res := &b.results[i]
		if slices.ContainsFunc(res.Deliveries, func(r Result) bool { return r.Outcome == Recorded || r.Outcome == Completed }) {
			res.Outcome = SendDelivered
			continue
		}
		u, err := a.buffer(ctx, tx, b.sends[i], b.byID[b.sends[i].ExecutionID], res)
		if err != nil {
			return nil, err
		}
		b.unm = append(b.unm, u)
	}
	if err := a.recordUnmatched(ctx, tx, b.unm); err != nil {
		return nil, err
	}
	return b.results, nil
}

// normalizeSends checks and completes the sent events decided together (a payload
// PostgreSQL can store, null for none, the send source by default, one event per
// execution), and returns them with their executions' ids.
func normalizeSends(in []Sent) ([]Sent, []uuid.UUID, error) {
	sends := slices.Clone(in)
	ids := make([]uuid.UUID, len(sends))
	for i := range sends {
		s := &sends[i]
		if err := CheckStorable(s.Payload); err != nil {
			return nil, nil, err
		}
		if len(s.Payload) == 0 {
			s.Payload = json.RawMessage("null")
		}
		if s.Source.Kind == "" {
			s.Source.Kind = SourceSend
		}
		if slices.Contains(ids[:i], s.ExecutionID) {
			return nil, nil, fmt.Errorf("sent events decided together must go to different executions: %s twice", s.ExecutionID)
		}
		ids[i] = s.ExecutionID
	}
	return sends, ids, nil
}

// readForSends locks the executions in id order, in the round trip that reads their open
// waits, and, when the continuation is to go with the COMMIT, their nodes.
func (a *Aggregator) readForSends(ctx context.Context, tx pgx.Tx, ids []uuid.UUID, atCommit *db.Pipeline) (readBefore, error) {
	var read readBefore
	var p db.Pipeline
	p.Queue(func(d dbsqlc.DBTX) error {
		var err error
		if read.execs, err = a.q.ExecutionListForUpdate(ctx, d, ids); err != nil {
			return fmt.Errorf("lock executions: %w", err)
		}
		return nil
	})
	p.Queue(func(d dbsqlc.DBTX) error {
		var err error
		if read.waits, err = a.q.WaitStateListOpenByExecutions(ctx, d, ids); err != nil {
			return fmt.Errorf("load open waits: %w", err)
		}
		return nil
	})
	if atCommit != nil && a.cfg.Continuer != nil {
		// Read now, with the rows locked, the nodes the continuation of the waits these
		// events complete would read after writing them: the write then goes with the
		// COMMIT, a round trip less (continueAhead).
		p.Queue(func(d dbsqlc.DBTX) error {
			var err error
			if read.nodes, err = a.q.NodeExecutionListByExecutions(ctx, d, ids); err != nil {
				return fmt.Errorf("load nodes: %w", err)
			}
			return nil
		})
	}
	if err := p.Send(ctx, tx); err != nil {
		return readBefore{}, err
	}
	return read, nil
}

// sendBatch is the state of one sendTxs call: the events, their results in input order,
// the unmatched rows to write, and the executions locked.
type sendBatch struct {
	sends   []Sent
	results []SendResult
	unm     []unmatched
	byID    map[uuid.UUID]dbsqlc.Execution
}

// reject records that the i-th event reached no wait, and why.
func (b *sendBatch) reject(i int, outcome SendOutcome, reason UnmatchedReason, detail string) {
	s := b.sends[i]
	b.unm = append(b.unm, unmatched{reason: reason, source: s.Source, typ: s.Type, executionID: s.ExecutionID, detail: detail, payload: s.Payload})
	b.results[i].Outcome, b.results[i].Unmatched = outcome, reason
}

func (b *sendBatch) duplicate(i int) {
	b.reject(i, SendDuplicate, UnmatchedDuplicate, "an event with id "+b.sends[i].ID+" was already sent to this execution")
}

// screenSends rejects the events of no execution, of a finished one, and those whose id
// was already sent to their execution (recording the new ids), and returns the indexes
// of the rest.
func (a *Aggregator) screenSends(ctx context.Context, tx pgx.Tx, b *sendBatch) (live []int, err error) {
	var withID []int
	for i, s := range b.sends {
		exec, ok := b.byID[s.ExecutionID]
		if !ok {
			b.reject(i, SendNoExecution, UnmatchedNoExecution, "no execution has this id")
			continue
		}
		b.results[i].ExecutionStatus = exec.Status
		if vocab.ExecFinished(exec.Status) {
			// A retry of an event that was applied (and perhaps finished the execution) is
			// a duplicate, not a conflict: sending stays idempotent.
			if s.ID != "" {
				seen, err := a.q.ExecutionEventIDExists(ctx, tx, dbsqlc.ExecutionEventIDExistsParams{ExecutionID: s.ExecutionID, EventID: s.ID})
				if err != nil {
					return nil, fmt.Errorf("look up event id: %w", err)
				}
				if seen {
					b.duplicate(i)
					continue
				}
			}
			b.reject(i, SendExecutionFinished, UnmatchedExecutionFinished, "the execution is "+string(exec.Status))
			continue
		}
		if s.ID != "" {
			withID = append(withID, i)
		}
		live = append(live, i)
	}
	if len(withID) == 0 {
		return live, nil
	}
	arg := dbsqlc.ExecutionEventIDInsertManyParams{}
	for _, i := range withID {
		arg.ExecutionIds, arg.EventIds = append(arg.ExecutionIds, b.sends[i].ExecutionID), append(arg.EventIds, b.sends[i].ID)
	}
	inserted, err := a.q.ExecutionEventIDInsertMany(ctx, tx, arg)
	if err != nil {
		return nil, fmt.Errorf("record event ids: %w", err)
	}
	live = slices.DeleteFunc(live, func(i int) bool {
		if b.sends[i].ID == "" || slices.Contains(inserted, b.sends[i].ExecutionID) {
			return false
		}
		b.duplicate(i)
		return true
	})
	return live, nil
}

// eventsForWaits makes one event per wait that expects a live event's type: to the first
// of the wait's events of the type still open. owner[k] is the index of events[k]'s send.
func (b *sendBatch) eventsForWaits(live []int, open []dbsqlc.ExecutionWaitState, now time.Time) (events []Event, owner []int, err error) {
	for _, i := range live {
		s := b.sends[i]
		for _, row := range open {
			if row.ExecutionID != s.ExecutionID {
				continue
			}
			w, err := decodeWait(row)
			if err != nil {
				return nil, nil, err
			}
			if err := w.decodeExpected(); err != nil {
				return nil, nil, err
			}
			var names []string
			for _, e := range w.expected {
				if e.Source == SourceSend && e.Type == s.Type {
					names = append(names, e.Name)
				}
			}
			if name, ok := w.firstOpen(names, now); ok {
				events = append(events, Event{ExecutionID: s.ExecutionID, CorrelationID: row.CorrelationID, Name: name,
					Payload: s.Payload, Source: s.Source, IdempotencyKey: s.ID, Link: s.Link})
				owner = append(owner, i)
			}
		}
	}
	return events, owner, nil
}

// observeSent records a committed send: the unmatched reason it left, the buffer
// counter, and the deliveries that applied, like any decided events.
func (a *Aggregator) observeSent(ctx context.Context, s Sent, res SendResult) {
	if res.Unmatched != "" {
		a.countUnmatched(ctx, res.Unmatched)
	}
	if res.Outcome == SendBuffered {
		a.ins.buffered.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", "buffered")))
	}
	var evs []Event
	var applied []Result
	for _, d := range res.Deliveries {
		if d.Outcome == Recorded || d.Outcome == Completed {
			evs = append(evs, Event{ExecutionID: s.ExecutionID, Name: d.Event, Source: s.Source, Link: s.Link})
			applied = append(applied, d)
		}
	}
	a.observeCommitted(ctx, evs, applied)
	a.announceExpired(ctx, expiredOf(res.Deliveries))
}
