package aggregator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Continuer is what the aggregator needs of whoever runs workflows (the executor): to
// continue, inside the transaction whose events completed waits, the executions those
// waits belong to — which saves each continuation a run-queue row, its claim, a second
// write of the wait and a second transaction — and to be told after a commit that
// continuations were queued instead. The aggregator is built with it (Config.Continuer)
// and never calls back the other way: it writes the waits, the Continuer advances the
// graphs.
type Continuer interface {
	// PrepareContinue starts the continuation of executions execIDs, whose waits the
	// caller is about to complete in its transaction. locked, when not nil, holds those
	// executions' rows as the caller read them under their locks earlier in the
	// transaction: the continuation takes them, and LockExecutions is not called.
	// nodes, when not nil, holds their nodes as read in that same round trip, before the
	// waits were written: LoadNodes is not called either, and Continue takes the node of
	// each ended wait as Ended.Outcome says the write leaves it.
	PrepareContinue(ctx context.Context, execIDs []uuid.UUID, locked []dbsqlc.Execution, nodes []dbsqlc.NodeExecution) Continuation
	// WakeRunQueue is called after a commit that queued continuations as resume rows,
	// so that they are picked up at once (here and, through a NOTIFY, elsewhere).
	WakeRunQueue()
}

// Continuation is one continuation in the making, in the order the aggregator drives it
// (continueEnded): LockExecutions and LoadNodes are pipeline calls sent in the round trip
// that writes the waits — the lock before the write (every writer of an execution takes
// its row before its waits, so none deadlocks with another), unless the executions were
// locked already; the load beside it — then Continue queues the graphs' changes. The
// load reads the nodes as stored, which the write does not change: the outcome it gives
// the nodes of the waits it ended is in their Ended.Outcome.
type Continuation interface {
	// LockExecutions locks the executions' rows, in id order.
	LockExecutions(d dbsqlc.DBTX) error
	// LoadNodes reads the executions' nodes, as stored: Continue gives each node of an
	// ended wait its Ended.Outcome, and reads any other node stored as waiting as
	// node_executions reads it.
	LoadNodes(d dbsqlc.DBTX) error
	// Continue advances the graphs of the executions of ended (waits that the write
	// completed and marked resumed) and queues the writes on p, which the aggregator
	// sends. committed is what to do once the transaction commits (end spans, wake
	// workers for the nodes it queued). An error leaves the aggregator to undo what it
	// did — to a savepoint, or the whole transaction, to decide again under one — and to
	// queue the continuations instead.
	Continue(ctx context.Context, tx pgx.Tx, p *db.Pipeline, ended []Ended) (committed func(), err error)
}

// Ended is a wait that ended — an event completed it, or its deadline timed it out or
// fired it — and is now marked resumed by whoever continues its execution. It is what
// crosses from the aggregator to the executor: the continuation's span, and how long the
// wait lasted.
type Ended struct {
	ExecutionID uuid.UUID
	NodeID      string
	WaitType    vocab.WaitType
	Strategy    vocab.Strategy
	Status      vocab.WaitStatus
	// CreatedAt is when the wait was registered, EndedAt when it ended.
	CreatedAt time.Time
	EndedAt   time.Time
	// TraceParent is the trace of the node run that registered the wait.
	TraceParent string
	// Outcome, when not nil, is what the write that ended the wait gives its node, for
	// a continuation that reads the node as stored rather than as node_executions reads
	// it once written: read before the write (PrepareContinue's nodes), or read from the
	// stored rows (LoadNodes).
	Outcome *NodeOutcome
}

// NodeOutcome is what the write that ends a wait gives the wait's node — as
// node_executions then reads it, if the node still waits for events.
type NodeOutcome struct {
	Status  vocab.NodeStatus
	Output  []byte
	Error   string // "" for none
	Warning string // "" for none
}

// MarkResumed is a pipeline call marking, as resumed by this instance, the ended waits
// of the given (execution, node) pairs whose continuation the run queue handed over, and
// reading them into out. A wait is resumed once: one already resumed is absent from out.
func (a *Aggregator) MarkResumed(ctx context.Context, execIDs []uuid.UUID, nodeIDs []string, out *[]Ended) func(dbsqlc.DBTX) error {
	return func(d dbsqlc.DBTX) error {
		rows, err := a.q.WaitStateMarkResumedMany(ctx, d, dbsqlc.WaitStateMarkResumedManyParams{
			InstanceID: a.cfg.InstanceID, ExecutionIds: execIDs, NodeIds: nodeIDs})
		if err != nil {
			return fmt.Errorf("mark resumed: %w", err)
		}
		*out = make([]Ended, len(rows))
		for i, r := range rows {
			(*out)[i] = Ended{ExecutionID: r.ExecutionID, NodeID: r.NodeID, WaitType: r.WaitType,
				Strategy: r.AggregationStrategy, Status: r.Status, CreatedAt: r.CreatedAt, EndedAt: r.UpdatedAt,
				TraceParent: deref(r.TraceParent)}
		}
		return nil
	}
}

// continueEnded writes a batch of decided waits (writeWaits) — those it ends marked
// resumed by this instance (continueHere) — and has the Continuer continue their
// executions (execIDs, those of the waits about to end) in tx; locked, when not nil,
// holds rows of executions the caller locked in tx already (readBefore). It returns the
// waits written (their fences held) and whether those that ended were continued here.
//
// atCommit, when not nil, is the pipeline sent with tx's COMMIT (db.TxLast), and the
// caller decides its events again with atCommit nil if the continuation fails
// (groupTx): one round trip locks the executions (unless locked holds them), writes the
// waits and loads the nodes, and the continuation's writes are queued on atCommit,
// costing no round trip of their own; nothing after them in tx touches the executions
// they continue. A continuation that fails — in memory, or on a write — fails the whole
// transaction, with an error continuedWithoutSavepoint recognises, and nothing is left
// to undo.
//
// With atCommit nil, the round trip also opens a savepoint before the write, and the
// continuation's writes take a round trip of their own with the savepoint's release. If
// the continuation fails, tx goes back to the savepoint and the waits are written again,
// their continuations queued (queueResume) by the same statement, behind the same
// fences: a continuation that cannot run never holds up the events.
func (a *Aggregator) continueEnded(ctx context.Context, tx pgx.Tx, execIDs []uuid.UUID, locked []dbsqlc.Execution,
	ws []waitWrite, atCommit *db.Pipeline,
) (out []written, continued bool, err error) {
	locked = lockedOf(locked, execIDs)
	c := a.cfg.Continuer.PrepareContinue(ctx, execIDs, locked, nil)
	var p db.Pipeline
	if locked == nil {
		p.Queue(c.LockExecutions)
	}
	savepoint := atCommit == nil
	if savepoint {
		p.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, "SAVEPOINT continuation")
			return err
		})
	}
	p.Queue(a.writeWaits(ctx, ws, &out))
	p.Queue(c.LoadNodes)
	if err := p.Send(ctx, tx); err != nil {
		return nil, false, err
	}
	ended := endedHere(out)
	if len(ended) == 0 {
		return out, false, nil // every fence missed
	}
	committed, err := c.Continue(ctx, tx, &p, ended)
	if !savepoint {
		if err != nil {
			return nil, false, noSavepointError{err}
		}
		if len(out) < len(ws) {
			// A fence missed: its events are decided again one by one after this, and must
			// find the continuation's writes done (see applyBatch).
			if err := p.Send(ctx, tx); err != nil {
				return nil, false, noSavepointError{err}
			}
		} else {
			p.MoveTo(atCommit, func(err error) error { return noSavepointError{err} })
		}
		db.AfterCommit(tx, committed)
		return out, true, nil
	}
	if err == nil {
		p.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, "RELEASE SAVEPOINT continuation")
			return err
		})
		if err = p.Send(ctx, tx); err == nil {
			db.AfterCommit(tx, committed)
			return out, true, nil
		}
	}
	p = db.Pipeline{}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT continuation"); rerr != nil {
		return nil, false, fmt.Errorf("continue: %w (and rolling back to the savepoint: %v)", err, rerr)
	}
	a.logger.WarnContext(ctx, "continuation failed in the deciding transaction; queued instead",
		"waits", len(ended), "instance_id", a.cfg.InstanceID, "err", err)
	// The rollback undid the write and released its row locks, so a fence may miss now
	// that held before: out is what this second write wrote, and the caller decides the
	// events of the others again, as after any missed fence.
	for i := range ws {
		if ws[i].end != nil {
			ws[i].end.then = queueResume
		}
	}
	if err := a.writeWaitsNow(ctx, tx, ws, &out); err != nil {
		return nil, false, err
	}
	return out, false, nil
}

// continueAhead is continueEnded in one round trip less, for a caller that read the
// executions' rows under their locks (locked, which must hold every one of execIDs) and
// their nodes in the round trip that read the waits: the continuation is made before
// the write, as if every fence held (ahead holds the waits written as the write would
// return them), and the write, a check that every wait holds what the write gave it
// (WaitStateCheckWritten), and the continuation's writes all go with the COMMIT
// (atCommit). A fence that missed fails the check (waitsChangedAhead), and so the whole
// transaction, with the error continuedWithoutSavepoint recognises: the group is decided
// again under a savepoint (continueEnded), from what the waits hold then.
//
// A continuation that issues statements of its own at once (failing an execution, which
// cancels its open waits) issues them before the write: one that changes a wait being
// written makes its fence miss, and fails the check the same way — the check compares
// what the rows hold, since a change made by this transaction has its row version too.
func (a *Aggregator) continueAhead(ctx context.Context, tx pgx.Tx, execIDs []uuid.UUID, locked []dbsqlc.Execution,
	nodes []dbsqlc.NodeExecution, ws []waitWrite, ahead []written, atCommit *db.Pipeline,
) error {
	c := a.cfg.Continuer.PrepareContinue(ctx, execIDs, locked, nodes)
	check := dbsqlc.WaitStateCheckWrittenParams{Ids: make([]uuid.UUID, len(ws)), Versions: make([]int64, len(ws)),
		Statuses: make([]string, len(ws))}
	for i, w := range ws {
		check.Ids[i], check.Versions[i], check.Statuses[i] = w.id, w.version+w.bump, string(w.status)
	}
	var p db.Pipeline
	var got []written // the write's own account: ahead, once the check has passed
	p.Queue(a.writeWaits(ctx, ws, &got))
	p.Queue(func(d dbsqlc.DBTX) error {
		if err := a.q.WaitStateCheckWritten(ctx, d, check); err != nil {
			return waitsChangedAhead{err}
		}
		return nil
	})
	committed, err := c.Continue(ctx, tx, &p, endedHere(ahead))
	if err != nil {
		return noSavepointError{err}
	}
	p.MoveTo(atCommit, func(err error) error { return noSavepointError{err} })
	db.AfterCommit(tx, committed)
	return nil
}

// lockedOf returns the rows of locked that belong to execIDs, or nil unless every one of
// execIDs has its row there: a continuation either takes all its executions' rows from
// the caller or locks them all itself.
func lockedOf(locked []dbsqlc.Execution, execIDs []uuid.UUID) []dbsqlc.Execution {
	if locked == nil {
		return nil
	}
	want := make(map[uuid.UUID]bool, len(execIDs))
	for _, id := range execIDs {
		want[id] = true
	}
	var rows []dbsqlc.Execution
	for _, e := range locked {
		if want[e.ID] {
			rows = append(rows, e)
			delete(want, e.ID)
		}
	}
	if len(want) > 0 {
		return nil
	}
	return rows
}

// noSavepointError is the failure of a continuation run without a savepoint: in
// memory, or on a write sent with the COMMIT or before it.
type noSavepointError struct{ err error }

func (e noSavepointError) Error() string { return "continuation without a savepoint: " + e.err.Error() }
func (e noSavepointError) Unwrap() error { return e.err }

// waitsChangedAhead is the failure of the check behind a write made ahead of its
// continuation (continueAhead): a wait changed between its read and its write.
type waitsChangedAhead struct{ err error }

func (e waitsChangedAhead) Error() string { return "check the waits written: " + e.err.Error() }
func (e waitsChangedAhead) Unwrap() error { return e.err }

// changedAhead reports whether err is a transaction's failure on that check.
func changedAhead(err error) bool {
	var c waitsChangedAhead
	return errors.As(err, &c)
}

// continuedWithoutSavepoint reports whether err is a transaction's failure on a
// continuation run without a savepoint (see continueEnded): the transaction rolled back
// whole, and deciding its events again with atCommit nil, under a savepoint, queues the
// continuations if they fail again, instead of failing the events.
func continuedWithoutSavepoint(err error) bool {
	var c noSavepointError
	return errors.As(err, &c)
}

// wakeContinuations announces continuations queued by a committed transaction. It runs
// after the commit (db.AfterCommit), never inside: a NOTIFY would serialise every commit
// on PostgreSQL's notification lock.
func (a *Aggregator) wakeContinuations() {
	if a.cfg.Continuer != nil {
		a.cfg.Continuer.WakeRunQueue()
	}
}
