package db_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// countingPool is a one-connection pool on a fresh schema whose connection counts what
// the client sends: pgx writes the statements of one round trip in one write, so the
// writes are the round trips.
func countingPool(t *testing.T) (*pgxpool.Pool, *atomic.Int64) {
	t.Helper()
	s := dbtest.NewSchema(t)
	cfg, err := pgxpool.ParseConfig(s.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	var writes atomic.Int64
	cfg.ConnConfig.DialFunc = countingDial(cfg.ConnConfig.DialFunc, &writes, nil)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, &writes
}

// countingDial wraps dial so that its connections count their writes to the server
// and, when bytes is not nil, the bytes written.
func countingDial(dial pgconn.DialFunc, writes, bytes *atomic.Int64) pgconn.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: writes, bytes: bytes}, nil
	}
}

// countingConn counts the writes to the server and, when bytes is set, the bytes
// written.
type countingConn struct {
	net.Conn
	writes, bytes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	n, err := c.Conn.Write(b)
	if c.bytes != nil {
		c.bytes.Add(int64(n))
	}
	return n, err
}

// TestTxBeginsWithFirstStatement: a transaction's BEGIN goes in the round trip of its
// first statement, whichever way that statement is sent, and the statement runs inside
// the transaction — it commits and rolls back with the rest.
func TestTxBeginsWithFirstStatement(t *testing.T) {
	t.Parallel()
	pool, writes := countingPool(t)
	ctx := context.Background()
	insert := func(name string) func(dbsqlc.DBTX) error {
		return func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `INSERT INTO workflows (name, version, definition) VALUES ($1, 1, '{}')`, name)
			return err
		}
	}
	names := func() []string {
		rows, err := pool.Query(ctx, `SELECT name FROM workflows ORDER BY name`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return got
	}
	xact := `SELECT pg_current_xact_id()::text`
	// trips runs fn as a transaction twice — the first time prepares its statements on
	// the connection — and returns the round trips of the second.
	trips := func(fn func() error) int64 {
		require.NoError(t, fn())
		before := writes.Load()
		require.NoError(t, fn())
		return writes.Load() - before
	}

	// Exec first, then QueryRow, then COMMIT: three round trips, where pgx's own
	// transaction takes four.
	var first, second string
	require.Equal(t, int64(3), trips(func() error {
		return db.Tx(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('rendezvous.test', 'x', true)`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `SELECT current_setting('rendezvous.test')`).Scan(&first)
		})
	}))
	require.Equal(t, "x", first, "the first statement ran in the transaction (set_config is local to it)")
	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error { return insert("a")(tx) }))
	require.Equal(t, []string{"a"}, names())

	// Query first: the rows are read inside the transaction, and a later statement is
	// in the same one.
	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, xact)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		first = ids[0]
		return tx.QueryRow(ctx, xact).Scan(&second)
	}))
	require.Equal(t, first, second, "the first query ran in the transaction")

	// QueryRow first, with no row: pgx's ErrNoRows, and the transaction goes on.
	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var n int
		if err := tx.QueryRow(ctx, `SELECT 1 WHERE false`).Scan(&n); !errors.Is(err, pgx.ErrNoRows) {
			return errors.New("want ErrNoRows, got " + errorText(err))
		}
		return insert("b")(tx)
	}))
	require.Equal(t, []string{"a", "b"}, names())

	// A pipeline first, and the COMMIT with the last statements: two round trips.
	require.Equal(t, int64(2), trips(func() error {
		return db.TxLast(ctx, pool, func(tx pgx.Tx, last *db.Pipeline) error {
			var p db.Pipeline
			p.Queue(func(d dbsqlc.DBTX) error { return d.QueryRow(ctx, xact).Scan(&first) })
			p.Queue(func(d dbsqlc.DBTX) error { return d.QueryRow(ctx, xact).Scan(&second) })
			if err := p.Send(ctx, tx); err != nil {
				return err
			}
			last.Queue(func(d dbsqlc.DBTX) error { _, err := d.Exec(ctx, `SELECT 1`); return err })
			return nil
		})
	}))
	require.Equal(t, first, second)

	// Nothing sent, nothing to commit: no round trip, and what follows the commit runs.
	ran := 0
	require.Equal(t, int64(0), trips(func() error {
		return db.Tx(ctx, pool, func(tx pgx.Tx) error {
			db.AfterCommit(tx, func() { ran++ })
			return nil
		})
	}))
	require.Equal(t, 2, ran)
	require.Equal(t, int64(0), trips(func() error {
		return db.TxLast(ctx, pool, func(tx pgx.Tx, _ *db.Pipeline) error {
			db.AfterCommit(tx, func() { ran++ })
			return nil
		})
	}))
	require.Equal(t, 4, ran, "TxLast's too")

	// The first statement rolls back with the transaction: when fn fails after it, and
	// when it fails itself.
	boom := errors.New("boom")
	require.ErrorIs(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		if err := insert("c")(tx); err != nil {
			return err
		}
		return boom
	}), boom)
	err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
		if err := insert("a")(tx); err != nil { // a duplicate key
			return err
		}
		return insert("d")(tx)
	})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code)
	require.Equal(t, []string{"a", "b"}, names())

	// A savepoint (pgx's nested transaction) before anything was sent begins the
	// transaction first, and rolls back only its own part.
	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		nested, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := insert("e")(nested); err != nil {
			return err
		}
		if err := nested.Rollback(ctx); err != nil {
			return err
		}
		return insert("f")(tx)
	}))
	require.Equal(t, []string{"a", "b", "f"}, names())

	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	require.Equal(t, byte('I'), c.Conn().PgConn().TxStatus(), "the connection went back outside any transaction")
}

func errorText(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
