package aggregator_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// failingMsg is the line of a wait that timed out and failed its node (at debug: the
// execution's failure that follows is the warning).
const failingMsg = "wait timed out; failing the node"

// TestLateAnswerFence interleaves two deliveries of one event around its deadline, the
// first decided before it and committing after it, in both paths: the late answer never
// contradicts what the database records (the chaos run found the callback path answering
// one body 202 and 409).
func TestLateAnswerFence(t *testing.T) {
	t.Parallel()
	paths := map[string]func(f *fixture, ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error){
		"ApplyTx": func(f *fixture, ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error) {
			return f.agg.ApplyTx(ctx, tx, ev)
		},
		"ApplyBatch": func(f *fixture, ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error) {
			res, err := f.agg.ApplyBatch(ctx, tx, []aggregator.Event{ev})
			if err != nil {
				return aggregator.Result{}, err
			}
			return res[0], nil
		},
	}

	// A delivery completed the wait before its deadline, and its transaction is still
	// open when the deadline passes. A copy of the body arriving then reads the wait as
	// still waiting: judged late on that snapshot alone, it would be answered 409 while
	// the first is answered 202 and recorded. Instead it writes the deadline, waits for
	// the first's lock, misses its fence and finds itself a duplicate.
	for name, apply := range paths {
		t.Run("recorded in flight, then a copy past the deadline/"+name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			reg := registration(vocab.StrategyAny, expectAPIOnly())
			reg.Timeout = time.Second
			w := f.newWait(t, reg)
			expires := f.waitState(t, w.ID).ExpiresAt
			ev := w.event(api, apiPayload)

			var first, copied aggregator.Result
			err := f.interleave(t, func(ctx context.Context, tx pgx.Tx) error {
				var err error
				if first, err = apply(f, ctx, tx, ev); err != nil {
					return err
				}
				require.Equal(t, aggregator.Completed, first.Outcome, "decided before the deadline")
				time.Sleep(time.Until(expires.Add(20 * time.Millisecond)))
				return nil
			}, func(ctx context.Context, tx pgx.Tx) error {
				var err error
				copied, err = apply(f, ctx, tx, ev)
				return err
			})
			require.NoError(t, err)
			require.Equal(t, aggregator.Duplicate, copied.Outcome)
			require.Equal(t, 1, copied.Conflicts, "the deadline write missed its fence once")
			require.Nil(t, copied.Expired)
			// The copy decided to fail the node, but its write missed the fence: nothing
			// timed out, so nothing may say so, before or after the commit (both have
			// committed here, and run what they registered for after it).
			require.Empty(t, f.logs.find(slog.LevelDebug, failingMsg, "correlation_id", w.CorrelationID))

			row := f.deadlineRows(t, []wait{w})[w.ID]
			require.Equal(t, vocab.WaitCompleted, row.Status)
			require.Equal(t, int64(2), row.Version)
			require.Equal(t, []string{api}, row.Received)
			require.Empty(t, row.TimedOut)
			require.Equal(t, vocab.NodeCompleted, row.NodeStatus)
			require.Equal(t, 1, row.RunQueue)
		})
	}

	// Two deliveries past the deadline, neither seeing the deadline written: the first
	// writes it; the second waits for the first's lock, misses its fence and reads the
	// wait ended. The deadline is written, and announced, once.
	for name, apply := range paths {
		t.Run("two late deliveries/"+name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			reg := registration(vocab.StrategyAny, expectAPIOnly())
			reg.Timeout = 100 * time.Millisecond
			w := f.newWait(t, reg)
			time.Sleep(time.Until(f.waitState(t, w.ID).ExpiresAt.Add(20 * time.Millisecond)))
			ev := w.event(api, apiPayload)

			var first, second aggregator.Result
			err := f.interleave(t, func(ctx context.Context, tx pgx.Tx) error {
				var err error
				first, err = apply(f, ctx, tx, ev)
				require.Empty(t, f.logs.find(slog.LevelDebug, failingMsg, "correlation_id", w.CorrelationID), "logged before any commit")
				return err
			}, func(ctx context.Context, tx pgx.Tx) error {
				var err error
				second, err = apply(f, ctx, tx, ev)
				return err
			})
			require.NoError(t, err)
			require.Equal(t, aggregator.Late, first.Outcome)
			require.NotNil(t, first.Expired)
			require.Equal(t, aggregator.Late, second.Outcome)
			require.Equal(t, vocab.WaitTimeout, second.Status)
			require.Equal(t, 1, second.Conflicts)
			require.Nil(t, second.Expired, "the deadline is the first's")
			require.Len(t, f.logs.find(slog.LevelDebug, failingMsg, "correlation_id", w.CorrelationID), 1, "logged once, by the write that stood")

			row := f.deadlineRows(t, []wait{w})[w.ID]
			require.Equal(t, vocab.WaitTimeout, row.Status)
			require.Equal(t, int64(2), row.Version)
			require.Equal(t, []string{api}, row.TimedOut)
			require.Equal(t, vocab.NodeFailed, row.NodeStatus)
			require.Equal(t, 1, row.RunQueue)
		})
	}
}
