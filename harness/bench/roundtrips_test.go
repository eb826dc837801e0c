package bench

import (
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// TestRoundTripCounterCountsWaits: a statement is one round trip, a pipelined batch of
// three is one, and a transaction's BEGIN and COMMIT are one each; the statements run
// are counted one by one, in a batch or not.
func TestRoundTripCounterCountsWaits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	server := dbtest.ServerURL(t)
	u, err := url.Parse(server)
	require.NoError(t, err)
	c, err := newRoundTripCounter(u.Host)
	require.NoError(t, err)
	defer c.close()
	counted, err := c.url(server)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, counted)
	require.NoError(t, err)
	defer conn.Close(ctx)

	const stmt = "SELECT $1::int"
	_, err = conn.Exec(ctx, stmt, 1) // prepared and cached: later uses are one trip
	require.NoError(t, err)
	counts := func(do func()) [2]int64 {
		trips, statements := c.count(), c.statementCount()
		do()
		return [2]int64{c.count() - trips, c.statementCount() - statements}
	}
	require.Equal(t, [2]int64{1, 1}, counts(func() {
		_, err := conn.Exec(ctx, stmt, 2)
		require.NoError(t, err)
	}), "round trips, statements")
	require.Equal(t, [2]int64{1, 3}, counts(func() {
		b := &pgx.Batch{}
		for i := range 3 {
			b.Queue(stmt, i)
		}
		require.NoError(t, conn.SendBatch(ctx, b).Close())
	}), "round trips, statements")
	require.Equal(t, [2]int64{3, 3}, counts(func() {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, stmt, 3)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}), "round trips, statements")
}
