package executor_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/executor"
)

// failWaits starts n executions of name and fails each by cancelling its wait with
// reason.
func failWaits(t *testing.T, h *harness, name string, n int, reason string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = h.start(t, name, obj{"order": i})
	}
	for _, id := range ids {
		h.waitStatus(t, id, "waiting")
		require.NoError(t, h.ex.CancelWait(context.Background(), id, "wait", executor.ThenFail, reason))
	}
	return ids
}

// TestRedriveMany: a bulk redrive counts first (the dry run changes nothing), selects by
// workflow, failed node, error text and time, works in batches up to its limit, and a
// second call resumes where the first stopped. Two bulk runs racing over the same
// executions redrive each once.
func TestRedriveMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	a := h.put(t, h.redriveDef("bulk-a", 600))
	b := h.put(t, h.redriveDef("bulk-b", 600))
	h.run(t)
	failWaits(t, h, a, 25, "Service Down")
	failWaits(t, h, b, 12, "bad request")

	redriven := func() int { return h.count(t, `SELECT count(*) FROM executions WHERE redrive_count > 0`) }
	r, err := h.ex.RedriveMany(ctx, executor.RedriveFilter{Workflow: a}, executor.BulkOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, executor.BulkRedrive{Matched: 25, DryRun: true}, r)
	require.Zero(t, redriven(), "a dry run changes nothing")
	// One more of b fails now: the time bound leaves it out.
	lateStart := h.view(t, failWaits(t, h, b, 1, "late")[0]).CreatedAt
	for _, c := range []struct {
		f    executor.RedriveFilter
		want int64
	}{
		{executor.RedriveFilter{ErrorContains: "service down"}, 25},
		{executor.RedriveFilter{Node: "wait"}, 38},
		{executor.RedriveFilter{Node: "after"}, 0},
		{executor.RedriveFilter{Workflow: b, ErrorContains: "service"}, 0},
		{executor.RedriveFilter{FailedBefore: lateStart}, 37},
		{executor.RedriveFilter{FailedAfter: lateStart}, 1},
	} {
		r, err := h.ex.RedriveMany(ctx, c.f, executor.BulkOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, c.want, r.Matched, "%+v", c.f)
	}

	r, err = h.ex.RedriveMany(ctx, executor.RedriveFilter{Workflow: a}, executor.BulkOptions{Limit: 20, Batch: 7})
	require.NoError(t, err)
	require.Equal(t, executor.BulkRedrive{Matched: 25, Redriven: 20, Batches: 3, More: true}, r)
	require.Equal(t, 20, redriven())
	r, err = h.ex.RedriveMany(ctx, executor.RedriveFilter{Workflow: a}, executor.BulkOptions{Limit: 20, Batch: 7})
	require.NoError(t, err)
	require.Equal(t, executor.BulkRedrive{Matched: 5, Redriven: 5, Batches: 1}, r)
	require.Equal(t, 25, h.count(t, `SELECT count(*) FROM executions WHERE workflow_name = $1 AND status = 'waiting' AND redrive_count = 1`, a))

	// Two runs over b at once: SKIP LOCKED splits the executions between them.
	var wg sync.WaitGroup
	results := make([]executor.BulkRedrive, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[i], err = h.ex.RedriveMany(ctx, executor.RedriveFilter{Workflow: b}, executor.BulkOptions{Batch: 2})
			assertNoError(t, err)
		}()
	}
	wg.Wait()
	require.Equal(t, 13, results[0].Redriven+results[1].Redriven, "%+v", results)
	require.Equal(t, 13, h.count(t, `SELECT count(*) FROM executions WHERE workflow_name = $1 AND status = 'waiting' AND redrive_count = 1`, b))
	require.Zero(t, h.count(t, `SELECT count(*) FROM executions WHERE redrive_count > 1`))

	_, err = h.ex.RedriveMany(ctx, executor.RedriveFilter{}, executor.BulkOptions{Limit: executor.BulkLimitMax + 1})
	var qerr *executor.OptionError
	require.ErrorAs(t, err, &qerr)
	require.Equal(t, "limit", qerr.Option)
}
