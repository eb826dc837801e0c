package executor

import (
	"context"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/outbound"
)

// Hooks into the unexported queue machinery for the black-box tests in package
// executor_test, which play a pod step by step (claim, lose the lease, finish).

// ErrLeaseLost is errLeaseLost.
var ErrLeaseLost = errLeaseLost

// ErrOutboxLeaseLost is what a call's attempt returns when its claim was lost.
var ErrOutboxLeaseLost = outbound.ErrLeaseLost

// ClaimRun claims up to n run-queue rows of both kinds as this instance, with its lease.
func (e *Executor) ClaimRun(ctx context.Context, n int) ([]dbsqlc.RunQueue, error) {
	units, err := e.claimWork(ctx, n)
	var out []dbsqlc.RunQueue
	for _, u := range units {
		out = append(out, u...)
	}
	return out, err
}

// ClaimUnits is claimWork: up to n units, each a run job or a batch of continuations.
func (e *Executor) ClaimUnits(ctx context.Context, n int) ([][]dbsqlc.RunQueue, error) {
	return e.claimWork(ctx, n)
}

// ResumeBatch is resumeBatch.
func (e *Executor) ResumeBatch(ctx context.Context, jobs []dbsqlc.RunQueue) error {
	_, err := e.resumeBatch(ctx, jobs)
	return err
}

// RunJob does the work of one claimed run-queue row and returns its error, which
// processRun would only log.
func (e *Executor) RunJob(ctx context.Context, job dbsqlc.RunQueue) error {
	if job.Kind == "resume" {
		return e.resume(ctx, job)
	}
	return e.runNode(ctx, job)
}

// ClaimOutbox claims up to n outbox rows as this instance, with its lease.
func (e *Executor) ClaimOutbox(ctx context.Context, n int) ([]dbsqlc.Outbox, error) {
	return e.calls.Claim(ctx, n)
}

// SendOutbox sends one claimed outbox row and returns its error.
func (e *Executor) SendOutbox(ctx context.Context, item dbsqlc.Outbox) error {
	return e.calls.Send(ctx, item)
}

// ExpireQueueSnapshot makes the next scrape read the run-queue depth from the database.
func (e *Executor) ExpireQueueSnapshot() {
	e.depthCache.Expire()
}

// SetContinueStart has f run as every continuation run in an aggregator's transaction
// starts.
func (e *Executor) SetContinueStart(f func()) { e.continueStart = f }

// SetContinueFault has every continuation run in an aggregator's transaction fail with
// what f returns (nil: succeed), after it has done its work.
func (e *Executor) SetContinueFault(f func() error) { e.continueFault = f }

// SetContinueWriteFault has every continuation run in an aggregator's transaction add to
// its writes one the server refuses (a division by zero), wherever they are sent.
func (e *Executor) SetContinueWriteFault(on bool) { e.continueWriteFault = on }
