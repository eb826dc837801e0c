package db_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// TestTxLast: statements queued on last are sent with the COMMIT and commit with what fn
// wrote, and what follows the commit runs; when one of them fails, nothing fn wrote
// commits, nothing registered for after the commit runs, and the connection goes back
// to the pool outside any transaction; when fn fails, last is not sent.
func TestTxLast(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM workflows`).Scan(&n))
		return n
	}
	insert := func(name string) func(dbsqlc.DBTX) error {
		return func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `INSERT INTO workflows (name, version, definition) VALUES ($1, 1, '{}')`, name)
			return err
		}
	}

	ran := false
	require.NoError(t, db.TxLast(ctx, pool, func(tx pgx.Tx, last *db.Pipeline) error {
		if err := insert("a")(tx); err != nil {
			return err
		}
		last.Queue(insert("b"))
		db.AfterCommit(tx, func() { ran = true })
		return nil
	}))
	require.True(t, ran, "what follows the commit ran")
	require.Equal(t, 2, count(), "fn's row and last's row committed")

	ran = false
	err := db.TxLast(ctx, pool, func(tx pgx.Tx, last *db.Pipeline) error {
		if err := insert("c")(tx); err != nil {
			return err
		}
		last.Queue(insert("a")) // a duplicate key: fails
		db.AfterCommit(tx, func() { ran = true })
		return nil
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code, "the duplicate key of last's insert")
	require.False(t, ran, "nothing follows a commit that did not happen")
	require.Equal(t, 2, count(), "fn's row rolled back with the failed last statement")

	boom := errors.New("boom")
	err = db.TxLast(ctx, pool, func(tx pgx.Tx, last *db.Pipeline) error {
		if err := insert("d")(tx); err != nil {
			return err
		}
		last.Queue(insert("e"))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 2, count(), "neither fn's row nor last's")

	// Every connection went back to the pool idle: a statement on each of them runs
	// outside any transaction.
	for range pool.Stat().TotalConns() {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, byte('I'), c.Conn().PgConn().TxStatus())
		defer c.Release()
	}
}
