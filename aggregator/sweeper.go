package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Sweeper defaults.
const (
	SweepBatchDefault    = 2000
	SweepWorkersDefault  = 2
	SweepMaxSleepDefault = 5 * time.Second
)

// sweepRecheck is how soon the sweeper looks again at due waits that others hold locked.
const sweepRecheck = 25 * time.Millisecond

// Expired reports one wait that a deadline ended.
type Expired struct {
	WaitStateID   string
	ExecutionID   uuid.UUID
	CorrelationID uuid.UUID
	NodeID        string
	// Deadline is the deadline that fired; Lateness how long after it the decision
	// committed.
	Deadline time.Time
	Lateness time.Duration
	Continue bool
	// Partial: continued with events missing (continue_with_partial); Warning is what
	// the node's record says about it.
	Partial bool
	Warning string
	// Timer: a wait node's timer resumed; otherwise an event wait timed out under
	// OnTimeout.
	Timer     bool
	OnTimeout vocab.OnTimeout
	// Reason names the events that did not arrive when the node failed (not Continue).
	Reason      string
	TraceParent string
}

// RunSweeper decides passed deadlines until ctx ends. Every pod runs one: due waits are
// claimed with FOR UPDATE SKIP LOCKED, so each is decided by exactly one sweeper, and the
// decision is written behind the same version fence as events — an event racing its
// deadline either completed the wait first (the sweeper no longer sees it waiting) or
// finds it timed out and is reported late.
//
// Between deadlines it sleeps until the next one (at most SweepMaxSleep, the bound on
// noticing a wait registered by another pod that died before its deadline), and is woken
// early by a registration in this process with an earlier deadline.
func (a *Aggregator) RunSweeper(ctx context.Context) {
	timer := a.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if err := a.drainDue(ctx); err != nil && ctx.Err() == nil {
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			a.logger.WarnContext(ctx, "deadline sweep failed", "instance_id", a.cfg.InstanceID, "err", err, "retry_in", backoff)
			a.DatabaseError(ctx)
		} else {
			backoff = 0
		}
		now := a.now()
		target := now.Add(a.cfg.SweepMaxSleep)
		if backoff > 0 {
			target = now.Add(backoff)
		} else if next, err := a.q.WaitStateNextDeadline(ctx, a.pool); err == nil && !next.IsZero() && next.Before(target) {
			// A next deadline already past belongs to waits another transaction holds
			// (another pod's sweep, an event, a cancel): look again shortly, not at once.
			target = next
			if recheck := now.Add(sweepRecheck); target.Before(recheck) {
				target = recheck
			}
		}
		a.cfg.TestSignals.SweepRoundDone.Signal(target)
		for {
			if hint, ok := a.takeDeadlineHint(); ok && hint.Before(target) {
				target = hint
			}
			timer.Reset(target.Sub(a.now()))
			select {
			case <-ctx.Done():
			case <-timer.C():
			case <-a.deadlineWake:
				timer.Stop()
				continue // an earlier deadline may have been registered
			}
			break
		}
	}
}

// deadlineRegistered tells this process's sweeper about a new deadline, once the
// registering transaction committed (db.AfterCommit; in a transaction begun elsewhere,
// at once). It is a hint: the sweeper still claims only what it finds due.
func (a *Aggregator) deadlineRegistered(at time.Time) {
	a.hintMu.Lock()
	if a.hint.IsZero() || at.Before(a.hint) {
		a.hint = at
	}
	a.hintMu.Unlock()
	select {
	case a.deadlineWake <- struct{}{}:
	default:
	}
}

func (a *Aggregator) takeDeadlineHint() (time.Time, bool) {
	a.hintMu.Lock()
	defer a.hintMu.Unlock()
	h := a.hint
	a.hint = time.Time{}
	return h, !h.IsZero()
}

// drainDue sweeps until nothing is due. One sweep looks first; as soon as its claim
// comes back full, before it has decided and written its batch, the other SweepWorkers-1
// start, and all of them share the burst of deadlines (100 000 waits registered
// together) out by SKIP LOCKED until a sweep claims less than a full batch.
func (a *Aggregator) drainDue(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, a.cfg.SweepWorkers)
	drain := func(i int) {
		for ctx.Err() == nil {
			n, err := a.Sweep(ctx, a.now())
			if err != nil {
				errs[i] = err
				return
			}
			if n < a.cfg.SweepBatch {
				return
			}
		}
	}
	n, err := a.sweep(ctx, a.now(), func() {
		for i := 1; i < a.cfg.SweepWorkers; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); drain(i) }()
		}
	})
	errs[0] = err
	if err == nil && n >= a.cfg.SweepBatch {
		drain(0)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Sweep decides up to SweepBatch waits whose next deadline is at or before now, in one
// transaction, and returns how many it claimed.
func (a *Aggregator) Sweep(ctx context.Context, now time.Time) (int, error) {
	return a.sweep(ctx, now, nil)
}

// sweep is Sweep, calling full (when not nil) as soon as its claim comes back full.
func (a *Aggregator) sweep(ctx context.Context, now time.Time, full func()) (int, error) {
	var claimed int
	var fired []Expired
	err := db.Tx(ctx, a.pool, func(tx pgx.Tx) error {
		claimed, fired = 0, nil
		rows, err := a.q.WaitStateClaimDue(ctx, tx, dbsqlc.WaitStateClaimDueParams{Now: now, Max: int32(a.cfg.SweepBatch)})
		if err != nil {
			return fmt.Errorf("claim due waits: %w", err)
		}
		claimed = len(rows)
		if claimed == 0 {
			return nil
		}
		if claimed >= a.cfg.SweepBatch && full != nil {
			full()
			full = nil
		}
		ws := make([]waitWrite, 0, len(rows))
		for _, row := range rows {
			var d dueWrite
			var err error
			if row.WaitType == vocab.WaitTypeTimer {
				d, err = timerDue(row, now)
			} else {
				d, err = a.eventDue(ctx, row, now)
			}
			if err != nil {
				return err
			}
			if d.fired != nil {
				fired = append(fired, *d.fired)
			}
			ws = append(ws, d.write(row))
		}
		var out []written
		if err := a.writeWaitsNow(ctx, tx, ws, &out); err != nil {
			return fmt.Errorf("write deadline decisions: %w", err)
		}
		if len(out) != len(rows) {
			// The rows are locked, so the fence cannot miss; if it did, something else
			// writes wait states without the lock. Roll back rather than guess.
			return fmt.Errorf("deadline fence missed for %d of %d locked waits", len(rows)-len(out), len(rows))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(fired) == 0 {
		return claimed, nil
	}
	a.logger.InfoContext(ctx, "deadlines fired", "count", len(fired), "instance_id", a.cfg.InstanceID)
	a.announceExpired(ctx, fired)
	a.wakeContinuations()
	return claimed, nil
}

// announceExpired reports waits whose deadline ended them, once their decision has
// committed — by a sweeper, or by an event that found its wait past the deadline
// (ApplyTx): lateness, the partial-data warning, metrics and spans, OnExpired.
func (a *Aggregator) announceExpired(ctx context.Context, fired []Expired) {
	if len(fired) == 0 {
		return
	}
	// On the clock the deadline was set by.
	committed := a.now()
	// A burst fires thousands of waits: the failing ones' line is not built unless kept.
	debug := a.logger.Enabled(ctx, slog.LevelDebug)
	for i := range fired {
		fired[i].Lateness = committed.Sub(fired[i].Deadline)
		switch e := fired[i]; {
		case e.Partial:
			a.logger.WarnContext(ctx, "wait timed out; continuing with partial data", "execution_id", e.ExecutionID,
				"correlation_id", e.CorrelationID, "node_id", e.NodeID, "instance_id", a.cfg.InstanceID, "warning", e.Warning)
		case !e.Continue && !e.Timer && debug:
			a.logger.DebugContext(ctx, "wait timed out; failing the node", "execution_id", e.ExecutionID,
				"correlation_id", e.CorrelationID, "node_id", e.NodeID, "instance_id", a.cfg.InstanceID, "reason", e.Reason)
		}
	}
	a.observeExpired(ctx, fired)
	if a.cfg.OnExpired != nil {
		a.cfg.OnExpired(fired)
	}
}

// expireNow writes the deadlines passed at now of one event wait, as the sweeper would,
// behind the version fence of the row as loaded. ApplyTx calls it before answering an
// event late by the clock: the version moves, so a replica committing the same event
// decided before the deadline and this answer cannot both stand — whichever writes second
// misses its fence and decides again against the other's row. won is false when the
// fence missed.
func (a *Aggregator) expireNow(ctx context.Context, tx pgx.Tx, row dbsqlc.ExecutionWaitState, now time.Time) (d dueWrite, won bool, err error) {
	if d, err = a.eventDue(ctx, row, now); err != nil {
		return d, false, err
	}
	var out []written
	if err := a.writeWaits(ctx, []waitWrite{d.write(row)}, &out)(tx); err != nil {
		return d, false, fmt.Errorf("write deadline decision: %w", err)
	}
	return d, len(out) == 1, nil
}

// dueWrite is the sweeper's decision for one due wait.
type dueWrite struct {
	bump       int64
	status     vocab.WaitStatus
	timedOut   []byte
	next       time.Time
	reason     string
	nodeStatus vocab.NodeStatus
	output     []byte
	warning    string
	// fired is set when the wait ended.
	fired *Expired
}

// write is the decision for row as writeWaits writes it: the wait's deadline columns,
// and when it ended its node's outcome, its continuation queued.
func (d dueWrite) write(row dbsqlc.ExecutionWaitState) waitWrite {
	ww := waitWrite{id: row.ID, version: row.Version, bump: d.bump, status: d.status, timedOut: d.timedOut,
		next: d.next, reason: d.reason}
	if d.nodeStatus != "" {
		ww.end = &waitEnd{nodeStatus: d.nodeStatus, output: d.output, nodeError: d.reason, warning: d.warning, then: queueResume}
	}
	return ww
}

// timerDue resumes a due timer: node completed with its output, continuation enqueued.
func timerDue(row dbsqlc.ExecutionWaitState, now time.Time) (dueWrite, error) {
	output, err := timerDecision(row, now)
	if err != nil {
		return dueWrite{}, err
	}
	return dueWrite{
		bump: 1, status: vocab.WaitResumed, timedOut: []byte("[]"), next: row.NextDeadlineAt, nodeStatus: vocab.NodeCompleted, output: output,
		fired: &Expired{WaitStateID: row.ID.String(), ExecutionID: row.ExecutionID, CorrelationID: row.CorrelationID,
			NodeID: row.NodeID, Deadline: row.NextDeadlineAt, Continue: true, Timer: true, TraceParent: deref(row.TraceParent)},
	}, nil
}

// eventDue applies the passed deadlines of an event wait (decideTimeout): it times out,
// or records the events that timed out and moves its next deadline on.
func (a *Aggregator) eventDue(ctx context.Context, row dbsqlc.ExecutionWaitState, now time.Time) (dueWrite, error) {
	w, err := decodeWait(row)
	if err != nil {
		return dueWrite{}, err
	}
	if err := w.decodeExpected(); err != nil {
		return dueWrite{}, err
	}
	d := decideTimeout(row.AggregationStrategy, row.OnTimeout, w.expected, w.required, w.receivedNames(), w.timedOut, row.ExpiresAt, now)
	timedOut, err := json.Marshal(d.TimedOut)
	if err != nil {
		return dueWrite{}, err
	}
	out := dueWrite{bump: 1, status: vocab.WaitWaiting, timedOut: timedOut, next: d.Next, reason: d.Reason}
	switch {
	case d.Fire:
		out.status, out.nodeStatus = vocab.WaitTimeout, vocab.NodeFailed
		if d.Continue {
			out.nodeStatus = vocab.NodeCompleted
			out.warning = d.Warning
		}
		if out.output, err = Output(row, w.received, d.TimedOut, true, d.Missing); err != nil {
			return dueWrite{}, err
		}
		out.fired = &Expired{WaitStateID: row.ID.String(), ExecutionID: row.ExecutionID, CorrelationID: row.CorrelationID,
			NodeID: row.NodeID, Deadline: row.NextDeadlineAt, Continue: d.Continue, Partial: d.Continue && d.Partial,
			Warning:   out.warning,
			OnTimeout: row.OnTimeout, Reason: d.Reason, TraceParent: deref(row.TraceParent)}
		// Decided, not yet written: the warning waits for the commit (announceExpired),
		// since a fence missed or a rollback leaves the wait as it was. A burst decides
		// thousands: the line's arguments are not boxed unless it is kept.
		if a.logger.Enabled(ctx, slog.LevelDebug) {
			a.logger.DebugContext(ctx, "wait deadline decided", "execution_id", row.ExecutionID,
				"correlation_id", row.CorrelationID, "node_id", row.NodeID, "instance_id", a.cfg.InstanceID, "continue", d.Continue)
		}
	case len(d.TimedOut) == len(w.timedOut):
		out.bump = 0 // the due deadline was an event's that arrived: only move on
	}
	return out, nil
}
