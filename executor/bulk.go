package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// Bounds of a bulk redrive.
const (
	// BulkLimitDefault is how many executions one RedriveMany call redrives at most.
	BulkLimitDefault = 1000
	// BulkLimitMax bounds BulkOptions.Limit.
	BulkLimitMax = 10_000
	// BulkBatchDefault is how many executions one transaction redrives.
	BulkBatchDefault = 100
	// BulkBatchMax bounds BulkOptions.Batch: a batch holds its executions' rows until it
	// commits.
	BulkBatchMax = 500
)

// RedriveFilter selects failed executions for RedriveMany; zero fields do not filter.
type RedriveFilter struct {
	Workflow string `json:"workflow,omitempty"`
	// Node selects executions whose node of this id failed.
	Node string `json:"node,omitempty"`
	// ErrorContains selects executions whose error contains this text, in any case.
	ErrorContains string `json:"error_contains,omitempty"`
	// FailedAfter and FailedBefore bound when the execution failed; FailedBefore
	// defaults to the start of the call.
	FailedAfter  time.Time `json:"failed_after,omitzero"`
	FailedBefore time.Time `json:"failed_before,omitzero"`
}

// BulkOptions bound a bulk action.
type BulkOptions struct {
	// DryRun counts what the action would take and changes nothing.
	DryRun bool
	// Limit is how many rows one call acts on at most: BulkLimitDefault when zero, at
	// most BulkLimitMax. A call that stops at it reports More; calling again with the
	// same filter goes on with the rest.
	Limit int
	// Batch is how many rows one transaction acts on: BulkBatchDefault when zero, at
	// most BulkBatchMax.
	Batch int
}

func (o BulkOptions) withDefaults() (BulkOptions, error) {
	if o.Limit == 0 {
		o.Limit = BulkLimitDefault
	}
	if o.Batch == 0 {
		o.Batch = BulkBatchDefault
	}
	if o.Limit < 0 || o.Limit > BulkLimitMax {
		return o, &OptionError{Option: "limit", Reason: fmt.Sprintf("must be 1..%d", BulkLimitMax)}
	}
	if o.Batch < 0 || o.Batch > BulkBatchMax {
		return o, &OptionError{Option: "batch", Reason: fmt.Sprintf("must be 1..%d", BulkBatchMax)}
	}
	return o, nil
}

// OptionError is a bulk option out of its bounds: the caller's mistake, not a failure.
type OptionError struct {
	Option string
	Reason string
}

func (e *OptionError) Error() string { return e.Option + ": " + e.Reason }

// BulkRedrive reports a RedriveMany call.
type BulkRedrive struct {
	// Matched is how many failed executions matched the filter when the call began.
	Matched int64 `json:"matched"`
	// Redriven is how many this call redrove; Batches how many transactions it took.
	Redriven int  `json:"redriven"`
	Batches  int  `json:"batches"`
	DryRun   bool `json:"dry_run"`
	// More is set when the call stopped at its limit with matching executions left.
	More bool `json:"more"`
}

// RedriveMany redrives the failed executions a filter selects, each exactly as Redrive
// does, in bounded batches: one transaction claims up to Batch of them in the order
// they failed (FOR NO KEY UPDATE SKIP LOCKED, so it never waits on a row someone else
// holds) and redrives each. Only executions that failed before the call began are
// taken, so one that fails again at once is not taken twice. It stops after Limit; a
// redriven execution no longer matches, so calling again with the same filter resumes
// where it stopped, and a call cut short by a crash loses at most its open batch.
func (e *Executor) RedriveMany(ctx context.Context, f RedriveFilter, opts BulkOptions) (BulkRedrive, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return BulkRedrive{}, err
	}
	if f.FailedBefore.IsZero() {
		f.FailedBefore = e.cfg.Clock.Now()
	}
	count := dbsqlc.ExecutionCountFailedParams{FailedBefore: f.FailedBefore, Workflow: nonEmpty(f.Workflow),
		ErrorContains: nonEmpty(f.ErrorContains), Node: nonEmpty(f.Node)}
	if !f.FailedAfter.IsZero() {
		count.FailedAfter = &f.FailedAfter
	}
	out := BulkRedrive{DryRun: opts.DryRun}
	if out.Matched, err = e.q.ExecutionCountFailed(ctx, e.pool, count); err != nil {
		return out, fmt.Errorf("count failed executions: %w", err)
	}
	if opts.DryRun || out.Matched == 0 {
		return out, nil
	}
	claim := dbsqlc.ExecutionClaimFailedParams{FailedBefore: count.FailedBefore, FailedAfter: count.FailedAfter,
		Workflow: count.Workflow, ErrorContains: count.ErrorContains, Node: count.Node,
		AfterFinishedAt: time.Time{}, AfterID: uuid.Nil}
	started := time.Now()
	for out.Redriven < opts.Limit {
		claim.Max = int32(min(opts.Batch, opts.Limit-out.Redriven))
		var done []redriveOutcome
		var claimed int
		err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
			done = done[:0]
			rows, err := e.q.ExecutionClaimFailed(ctx, tx, claim)
			if err != nil {
				return fmt.Errorf("claim failed executions: %w", err)
			}
			claimed = len(rows)
			for _, r := range rows {
				o, err := e.redriveTx(ctx, tx, r.ID)
				if err != nil {
					return fmt.Errorf("redrive %s: %w", r.ID, err)
				}
				done = append(done, o)
			}
			if claimed > 0 {
				last := rows[claimed-1]
				claim.AfterFinishedAt, claim.AfterID = *last.FinishedAt, last.ID
			}
			return nil
		})
		if err != nil {
			return out, err
		}
		if claimed == 0 {
			break
		}
		out.Batches++
		out.Redriven += len(done)
		var enqueued, resent bool
		for _, o := range done {
			enqueued, resent = enqueued || o.enqueued, resent || o.resent
		}
		if enqueued {
			e.WakeRunQueue()
		}
		if resent {
			e.wakeOutboxQueue()
		}
		if claimed < int(claim.Max) {
			break
		}
	}
	out.More = out.Redriven >= opts.Limit && int64(out.Redriven) < out.Matched
	e.logger.InfoContext(ctx, "executions redriven in bulk", "instance_id", e.cfg.InstanceID, "matched", out.Matched,
		"redriven", out.Redriven, "batches", out.Batches, "more", out.More, "took", time.Since(started),
		"workflow", f.Workflow, "node", f.Node, "error_contains", f.ErrorContains)
	return out, nil
}

// nonEmpty is s, or nil for the empty string.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	// A copy made here, not a pointer to s: s would be moved to the heap on entry, and
	// the empty string, which most calls pass, would allocate too.
	p := new(string)
	*p = s
	return p
}
