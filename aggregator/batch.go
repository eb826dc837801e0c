package aggregator

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// ApplyBatch decides many events inside the caller's transaction in a constant number of
// round trips: one query loads every wait the batch names, each event is decided in
// memory in input order (events of one wait see each other), and one statement writes
// every changed wait — its node output and continuation included — behind the version
// fence of what was loaded. Waits whose fence missed, waits an event found past a
// deadline their row does not show yet, and events whose ids do not match a wait, go
// through ApplyTx one by one. Results are in input order. What follows the commit
// (metrics, spans, waking the workers for queued continuations) is registered on tx with
// db.AfterCommit: the caller only commits.
//
// With a Continuer (Config.Continuer), the executions of the waits the batch completes
// are continued in this transaction, and locked by it: tx must not hold rows of other
// executions or waits already.
//
// Events correlated by payload match (MatchKeys) are first expanded into one event per
// wait they reach, and folded back into one Result each. Events that applied nowhere are
// recorded in unmatched_events, with why, in the same transaction.
func (a *Aggregator) ApplyBatch(ctx context.Context, tx pgx.Tx, events []Event) ([]Result, error) {
	return a.applyEvents(ctx, tx, events, nil)
}

// CommitBatch is ApplyBatch in a transaction of its own, which it commits, again when it
// hits a deadlock or serialization failure (groupTx): the continuations of the executions
// the batch completes run without a savepoint, their writes sent with the COMMIT, which
// saves a round trip, a savepoint and its release per batch. A continuation that fails
// has the batch decided again under a savepoint, as ApplyBatch decides it.
func (a *Aggregator) CommitBatch(ctx context.Context, events []Event) ([]Result, error) {
	var results []Result
	err := a.groupTx(ctx, func(tx pgx.Tx, _, atCommit *db.Pipeline) error {
		var err error
		results, err = a.applyEvents(ctx, tx, events, atCommit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// applyEvents is ApplyBatch; atCommit, when not nil, is the pipeline sent with tx's
// COMMIT, where the continuations' writes go (continueEnded).
func (a *Aggregator) applyEvents(ctx context.Context, tx pgx.Tx, events []Event, atCommit *db.Pipeline) ([]Result, error) {
	for _, ev := range events {
		if err := CheckStorable(ev.Payload); err != nil {
			return nil, err
		}
	}
	expanded, origin, err := a.expandMatches(ctx, tx, events)
	if err != nil {
		return nil, err
	}
	var results []Result
	if len(expanded) > 0 {
		if results, err = a.applyBatch(ctx, tx, expanded, true, readBefore{}, atCommit); err != nil {
			return nil, err
		}
	}
	results = foldMatches(events, origin, results)
	if err := a.keepEarly(ctx, tx, events, results); err != nil {
		return nil, err
	}
	if err := a.recordUnmatched(ctx, tx, unmatchedOf(events, results)); err != nil {
		return nil, err
	}
	a.afterCommit(ctx, tx, events, results)
	return results, nil
}

// readBefore is what a caller read in its transaction before deciding a batch (sendTxs):
// the waits its events name, read after their executions were locked, and those
// executions' rows. The batch is decided from the waits rather than reading them again,
// and its continuation takes the rows rather than locking the executions again: a
// statement less each. The zero value says nothing was read.
type readBefore struct {
	// waits holds every event's wait.
	waits []dbsqlc.ExecutionWaitState
	// execs holds the rows of every event's execution, locked.
	execs []dbsqlc.Execution
	// nodes, when not nil, holds the nodes of every event's execution, read with execs:
	// the executions of the waits the batch completes are then continued without
	// reading their nodes after the write (continueAhead), when the continuation's
	// writes can go with the COMMIT.
	nodes []dbsqlc.NodeExecution
}

// applyBatch decides events addressed by their ids; callers checked their payloads and
// register what follows the commit. continuing says the executions of the waits the
// batch completes may be continued in tx (continueEnded), when there is a Continuer.
// before is what the caller already read in tx, if anything (readBefore). Each write is
// fenced by the version read, so a wait changed since is decided again one event at a
// time, as after any missed fence. atCommit, when not nil, is the pipeline sent with
// tx's COMMIT, where the continuations' writes go (continueEnded).
func (a *Aggregator) applyBatch(ctx context.Context, tx pgx.Tx, events []Event, continuing bool, before readBefore, atCommit *db.Pipeline) ([]Result, error) {
	results := make([]Result, len(events))
	rows := before.waits
	if rows == nil {
		var err error
		if rows, err = a.loadBatchWaits(ctx, tx, events); err != nil {
			return nil, err
		}
	}
	waits, loaded, err := decodeBatchWaits(rows)
	if err != nil {
		return nil, err
	}

	var slow []int
	touched := map[*wait][]int{}
	now := a.now().UTC()
	for i, ev := range events {
		w := waits[ev.CorrelationID]
		if w == nil || w.row.ExecutionID != ev.ExecutionID {
			slow = append(slow, i) // not found or id mismatch: classified (and logged) there
			continue
		}
		outcome, name, err := w.decide(ev, ev.key(), now)
		if err != nil {
			return nil, err
		}
		touched[w] = append(touched[w], i)
		results[i] = Result{Outcome: outcome, Event: name, WaitStateID: w.row.ID, NodeID: w.row.NodeID, Status: w.row.Status,
			Version: loaded[w] + int64(w.applied), TraceParent: deref(w.row.TraceParent), FirstEvent: w.firstEvent(outcome)}
	}

	var dirty []*wait
	for w, idx := range touched {
		if w.due {
			// An event found the wait past a deadline its row does not show yet: its
			// answer needs that deadline written first (ApplyTx does), so every event of
			// this wait is decided there instead, in order, and nothing of it here.
			for _, i := range idx {
				results[i] = Result{}
			}
			slow = append(slow, idx...)
			continue
		}
		if w.applied > 0 {
			dirty = append(dirty, w)
		}
	}
	// Rows are locked in id order, so concurrent batches cannot deadlock each other.
	slices.SortFunc(dirty, func(x, y *wait) int { return slices.Compare(x.row.ID[:], y.row.ID[:]) })
	if len(slow) > 0 {
		// Events decided one by one after the write may touch the executions it continues:
		// the continuation's writes must reach the server before them, not with the COMMIT.
		atCommit = nil
	}
	if len(dirty) > 0 {
		fused := continuing && a.cfg.Continuer != nil
		if slow, err = a.writeBatch(ctx, tx, dirty, loaded, touched, results, slow, fused, before, atCommit); err != nil {
			return nil, err
		}
	}
	if err := a.decideOneByOne(ctx, tx, events, slow, results); err != nil {
		return nil, err
	}
	return results, nil
}

// loadBatchWaits loads, with one query, the waits a batch's events name, by correlation
// id.
func (a *Aggregator) loadBatchWaits(ctx context.Context, tx pgx.Tx, events []Event) ([]dbsqlc.ExecutionWaitState, error) {
	ids := make([]uuid.UUID, 0, len(events))
	for _, ev := range events {
		ids = append(ids, ev.CorrelationID)
	}
	rows, err := a.q.WaitStateListByCorrelationIDs(ctx, tx, ids)
	if err != nil {
		return nil, fmt.Errorf("load wait states: %w", err)
	}
	return rows, nil
}

// decodeBatchWaits decodes a batch's waits, by correlation id, with the version each was
// read at (the fence of its write).
func decodeBatchWaits(rows []dbsqlc.ExecutionWaitState) (map[uuid.UUID]*wait, map[*wait]int64, error) {
	waits := make(map[uuid.UUID]*wait, len(rows))
	loaded := make(map[*wait]int64, len(rows))
	for _, row := range rows {
		w, err := decodeWait(row)
		if err != nil {
			return nil, nil, err
		}
		waits[row.CorrelationID] = w
		loaded[w] = row.Version
	}
	return waits, loaded, nil
}

// decideOneByOne decides the events at indexes slow again, in input order, each through
// applyTx: events whose wait was not found or not theirs, found past a deadline, or lost
// its fence. A result that had a wait counts the lost race.
func (a *Aggregator) decideOneByOne(ctx context.Context, tx pgx.Tx, events []Event, slow []int, results []Result) error {
	slices.Sort(slow)
	for _, i := range slow {
		conflicted := results[i].WaitStateID != uuid.Nil
		res, err := a.applyTx(ctx, tx, events[i])
		if err != nil {
			return err
		}
		if conflicted {
			res.Conflicts++
		}
		results[i] = res
	}
	return nil
}

// writeBatch writes a batch's decided waits (dirty, in id order) with one statement
// behind the fences of what was loaded. With fused, the executions of the waits it
// completes are continued in tx (continueEnded) and their results say Continued;
// otherwise their continuations are queued. The events of waits whose fence missed are
// appended to slow, to be decided again one by one.
func (a *Aggregator) writeBatch(ctx context.Context, tx pgx.Tx, dirty []*wait, loaded map[*wait]int64, touched map[*wait][]int,
	results []Result, slow []int, fused bool, before readBefore, atCommit *db.Pipeline,
) ([]int, error) {
	ws := make([]waitWrite, 0, len(dirty))
	var completing []uuid.UUID
	then := queueResume
	if fused {
		then = continueHere
	}
	for _, w := range dirty {
		ww, err := w.eventWrite(loaded[w], then)
		if err != nil {
			return nil, err
		}
		if ww.end != nil {
			completing = append(completing, w.row.ExecutionID)
		}
		ws = append(ws, ww)
	}
	var out []written
	var err error
	locked := lockedOf(before.execs, completing)
	switch {
	case fused && len(completing) > 0 && atCommit != nil && before.nodes != nil && locked != nil:
		out = writtenAhead(dirty, ws, a.now().UTC())
		err = a.continueAhead(ctx, tx, completing, locked, before.nodes, ws, out, atCommit)
	case fused && len(completing) > 0:
		out, fused, err = a.continueEnded(ctx, tx, completing, before.execs, ws, atCommit)
	default:
		fused = false
		err = a.writeWaitsNow(ctx, tx, ws, &out)
	}
	if err != nil {
		return nil, err
	}
	// A batch writes up to a thousand waits: searching out for each would be quadratic.
	held := make(map[uuid.UUID]bool, len(out))
	for _, o := range out {
		held[o.id] = true
	}
	for _, w := range dirty {
		if !held[w.row.ID] {
			// Lost a race: every event of this wait is decided again, in order.
			slow = append(slow, touched[w]...)
			a.logger.DebugContext(ctx, "optimistic lock conflict in batch, deciding again",
				"execution_id", w.row.ExecutionID, "correlation_id", w.row.CorrelationID, "node_id", w.row.NodeID,
				"instance_id", a.cfg.InstanceID, "version", loaded[w])
			continue
		}
		if fused {
			for _, i := range touched[w] {
				results[i].Continued = results[i].Outcome == Completed
			}
		}
	}
	return slow, nil
}
