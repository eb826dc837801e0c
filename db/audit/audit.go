// Package audit owns the audit log: one row per change made through the API, written in
// the transaction of the change so that a change is never without its row, and the
// reads and the retention of those rows. A request that may change something carries an
// *Entry in its context (the service puts it there, knowing the principal and the
// action); the code that makes the change calls Record inside its transaction. Changes
// the service makes on its own (timeouts, resumes, Kafka events) carry no entry and
// record nothing. It does not decide who may do what; package auth does.
package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// Action is what a change did.
type Action string

// The audited actions.
const (
	ActionWorkflowStore   Action = "workflow.store"
	ActionExecutionStart  Action = "execution.start"
	ActionExecutionCancel Action = "execution.cancel"
	ActionWaitCancel      Action = "wait.cancel"
	ActionEventSend       Action = "event.send"
	ActionTokenCreate     Action = "token.create"
	ActionTokenRevoke     Action = "token.revoke"
	// The recovery actions: redriving a failed execution (one, or every one a filter
	// selects), restarting one, replaying or dismissing a dead letter or an unmatched
	// event, dismissing every dead letter a filter selects.
	ActionExecutionRedrive      Action = "execution.redrive"
	ActionExecutionRedriveMany  Action = "execution.redrive_many"
	ActionExecutionRestart      Action = "execution.restart"
	ActionDeadLetterReplay      Action = "dead_letter.replay"
	ActionDeadLetterDismiss     Action = "dead_letter.dismiss"
	ActionDeadLetterDismissMany Action = "dead_letter.dismiss_many"
	ActionUnmatchedReplay       Action = "unmatched_event.replay"
	ActionUnmatchedDismiss      Action = "unmatched_event.dismiss"
)

// Outcome values of a row. A change that committed is OutcomeOK (or what the change
// says of itself, "unchanged"); a request refused or failed records its status, as
// "refused 409" or "failed 500".
const (
	OutcomeOK        = "ok"
	OutcomeUnchanged = "unchanged"
)

// Entry is the audit record of one request, filled as the request goes.
type Entry struct {
	// Principal names who made the request ("token:ci", "oidc:alice").
	Principal string
	// RemoteAddr is the client's address as the service saw it.
	RemoteAddr string
	Action     Action
	// written is set once a row for this request is in a transaction.
	written bool
}

type ctxKey struct{}

// NewContext returns ctx carrying e.
func NewContext(ctx context.Context, e *Entry) context.Context {
	return context.WithValue(ctx, ctxKey{}, e)
}

// FromContext returns the entry of ctx, or nil.
func FromContext(ctx context.Context) *Entry {
	e, _ := ctx.Value(ctxKey{}).(*Entry)
	return e
}

// Written reports whether a row was written for e (in a transaction that may yet roll
// back; the caller looks at it once the change has returned).
func (e *Entry) Written() bool { return e.written }

var q = dbsqlc.New()

// Record writes the row of the change tx makes to target, when ctx carries an entry
// (a request through the API), and does nothing otherwise. It belongs inside the
// transaction of the change: the row commits or rolls back with it.
func Record(ctx context.Context, tx dbsqlc.DBTX, target, outcome, detail string) error {
	e := FromContext(ctx)
	if e == nil {
		return nil
	}
	if err := q.AuditLogInsert(ctx, tx, dbsqlc.AuditLogInsertParams{
		Principal: e.Principal, RemoteAddr: e.RemoteAddr, Action: string(e.Action),
		Target: target, Outcome: outcome, Detail: detail,
	}); err != nil {
		return fmt.Errorf("write audit row: %w", err)
	}
	e.written = true
	return nil
}

// Change is one change among several made in one transaction on behalf of different
// requests (RecordAll): Ctx is the context of the request that asked for it.
type Change struct {
	Ctx                     context.Context
	Target, Outcome, Detail string
}

// RecordAll writes, with one statement, the row of each change whose context carries an
// entry, as Record would one by one: requests served together in one transaction (sent
// events decided as a group) still get a row each, and that row commits or rolls back
// with the transaction.
//
// It makes one statement when Any(changes), none otherwise: as a call of a db.Pipeline,
// which must make exactly one, it is queued only when Any(changes).
func RecordAll(ctx context.Context, tx dbsqlc.DBTX, changes []Change) error {
	var p dbsqlc.AuditLogInsertManyParams
	var entries []*Entry
	for _, c := range changes {
		e := FromContext(c.Ctx)
		if e == nil {
			continue
		}
		entries = append(entries, e)
		p.Principals, p.RemoteAddrs, p.Actions = append(p.Principals, e.Principal), append(p.RemoteAddrs, e.RemoteAddr), append(p.Actions, string(e.Action))
		p.Targets, p.Outcomes, p.Details = append(p.Targets, c.Target), append(p.Outcomes, c.Outcome), append(p.Details, c.Detail)
	}
	if len(entries) == 0 {
		return nil
	}
	if err := q.AuditLogInsertMany(ctx, tx, p); err != nil {
		return fmt.Errorf("write audit rows: %w", err)
	}
	for _, e := range entries {
		e.written = true
	}
	return nil
}

// Any reports whether a row is written for any of changes: whether one of them was made
// through a request that carries an audit entry.
func Any(changes []Change) bool {
	for _, c := range changes {
		if FromContext(c.Ctx) != nil {
			return true
		}
	}
	return false
}

// Refused writes, in a transaction of its own, the row of a request that changed
// nothing because it was refused or failed: status is its HTTP status.
func Refused(ctx context.Context, pool *pgxpool.Pool, e *Entry, target string, status int, detail string) error {
	outcome := fmt.Sprintf("refused %d", status)
	if status >= 500 {
		outcome = fmt.Sprintf("failed %d", status)
	}
	return q.AuditLogInsert(ctx, pool, dbsqlc.AuditLogInsertParams{
		Principal: e.Principal, RemoteAddr: e.RemoteAddr, Action: string(e.Action),
		Target: target, Outcome: outcome, Detail: detail,
	})
}

// Purge deletes rows older than cutoff, batch rows per transaction, and returns how many.
func Purge(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time, batch int32) (int64, error) {
	var total int64
	for {
		n, err := q.AuditLogDeleteBefore(ctx, pool, dbsqlc.AuditLogDeleteBeforeParams{Cutoff: cutoff, Max: batch})
		total += n
		if err != nil {
			return total, fmt.Errorf("purge audit log: %w", db.Interpret(err))
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// Unchanged writes, in a transaction of its own, the row of a request that succeeded
// without changing anything (an unchanged definition, a cancelled execution cancelled
// again).
func Unchanged(ctx context.Context, pool *pgxpool.Pool, e *Entry, target string) error {
	return q.AuditLogInsert(ctx, pool, dbsqlc.AuditLogInsertParams{
		Principal: e.Principal, RemoteAddr: e.RemoteAddr, Action: string(e.Action),
		Target: target, Outcome: OutcomeUnchanged,
	})
}
