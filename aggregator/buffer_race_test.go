package aggregator_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestBufferedEventTakenOrExpiredNotBoth: a wait takes a buffered event while a janitor
// (any pod's, whose clock says the event has expired) moves it to the dead letters. The
// janitor does not lock the execution, so the two meet only at the buffer's row: the
// janitor's move is held uncommitted while the wait takes the buffer, and committed once
// the take blocks on it. The event must end in exactly one place — here the dead letters,
// since the janitor got it first — never recorded by the wait and dead-lettered as well.
func TestBufferedEventTakenOrExpiredNotBoth(t *testing.T) {
	t.Parallel()
	f := setup(t)
	reg := registration(vocab.StrategyAll, []aggregator.Expected{{Name: "approval", Source: aggregator.SourceSend, Type: "approved", Required: true}})
	reg.Timeout = time.Hour
	w := f.newWait(t, reg)
	_, err := f.pool.Exec(t.Context(), `INSERT INTO event_buffer (execution_id, event_type, event_id, payload, source, expires_at)
		VALUES ($1, 'approved', 'ev-1', '{"ok": true}', '{"kind": "send"}', now() + interval '1 second')`, w.ExecutionID)
	require.NoError(t, err)
	ws := f.waitState(t, w.ID)

	var res aggregator.Result
	err = f.interleave(t,
		func(ctx context.Context, tx pgx.Tx) error {
			moved, err := f.q.EventBufferExpire(ctx, tx, dbsqlc.EventBufferExpireParams{Now: time.Now().Add(time.Minute), Max: 10})
			require.Len(t, moved, 1)
			return err
		},
		func(ctx context.Context, tx pgx.Tx) error {
			var err error
			res, err = f.agg.TakeBuffered(ctx, tx, ws)
			return err
		})
	require.NoError(t, err)

	var deadLetters, buffered int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM event_dead_letters WHERE event_id = 'ev-1'),
		(SELECT count(*) FROM event_buffer)`).Scan(&deadLetters, &buffered))
	require.Equal(t, 1, deadLetters)
	require.Zero(t, buffered)
	got := f.waitState(t, w.ID)
	require.Equal(t, vocab.WaitWaiting, got.Status, "the wait did not take the event the janitor moved (took it as %q)", res.Outcome)
	require.Equal(t, ws.Version, got.Version)
}
