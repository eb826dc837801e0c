package db_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/dbtest"
)

// TestPipeline: sqlc calls of every shape (:exec, :many, :one) queued on a pipeline run
// in order in the transaction and each reads its own answer; an error fails the calls
// after it and reaches the caller; a call that makes no statement, or two, is refused
// before anything is sent.
func TestPipeline(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	q := dbsqlc.New()

	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var p db.Pipeline
		var before, after int
		var names []string
		p.Queue(func(d dbsqlc.DBTX) error { return d.QueryRow(ctx, `SELECT count(*) FROM workflows`).Scan(&before) })
		p.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `INSERT INTO workflows (name, version, definition) VALUES ('a', 1, '{}'), ('b', 1, '{}')`)
			return err
		})
		p.Queue(func(d dbsqlc.DBTX) error { return d.QueryRow(ctx, `SELECT count(*) FROM workflows`).Scan(&after) })
		p.Queue(func(d dbsqlc.DBTX) (err error) {
			rows, err := d.Query(ctx, `SELECT name FROM workflows ORDER BY name`)
			if err != nil {
				return err
			}
			names, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		require.Equal(t, 4, p.Len())
		require.NoError(t, p.Send(ctx, tx))
		require.Zero(t, p.Len(), "a sent pipeline is empty")
		require.Equal(t, 0, before)
		require.Equal(t, 2, after)
		require.Equal(t, []string{"a", "b"}, names)
		return nil
	}))

	err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var p db.Pipeline
		var reached bool
		p.Queue(func(d dbsqlc.DBTX) error {
			return q.RunQueueInsertMany(ctx, d, dbsqlc.RunQueueInsertManyParams{Kind: "run"})
		})
		p.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `SELECT 1/0`)
			return err
		})
		p.Queue(func(d dbsqlc.DBTX) error {
			var one int
			err := d.QueryRow(ctx, `SELECT 1`).Scan(&one)
			reached = err == nil
			return err
		})
		err := p.Send(ctx, tx)
		require.False(t, reached, "a statement after a failed one does not run")
		return err
	})
	require.ErrorContains(t, err, "division by zero")

	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var p db.Pipeline
		p.Queue(func(dbsqlc.DBTX) error { return nil })
		require.ErrorContains(t, p.Send(ctx, tx), "did not queue a statement")
		p.Queue(func(d dbsqlc.DBTX) error {
			_, _ = d.Exec(ctx, `SELECT 1`)
			_, err := d.Exec(ctx, `SELECT 2`)
			return err
		})
		require.ErrorContains(t, p.Send(ctx, tx), "queued 2 statements")
		return nil
	}))
}

// TestPipelineMoveTo: calls moved to another pipeline run there, after its own, each
// reading its own answer; only their errors go through the mark, and the moved-from
// pipeline is empty.
func TestPipelineMoveTo(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()
	marked := errors.New("moved")
	mark := func(err error) error { return fmt.Errorf("%w: %w", marked, err) }

	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var src, dst db.Pipeline
		var order []int
		dst.Queue(func(d dbsqlc.DBTX) error {
			var n int
			err := d.QueryRow(ctx, `SELECT 1`).Scan(&n)
			order = append(order, n)
			return err
		})
		src.Queue(func(d dbsqlc.DBTX) error {
			var n int
			err := d.QueryRow(ctx, `SELECT 2`).Scan(&n)
			order = append(order, n)
			return err
		})
		src.MoveTo(&dst, mark)
		require.Zero(t, src.Len())
		require.Equal(t, 2, dst.Len())
		require.NoError(t, dst.Send(ctx, tx))
		// Each call is made once to queue and once to read: the answers are 1 then 2.
		require.Equal(t, []int{0, 0, 1, 2}, order)
		return nil
	}))

	err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var src, dst db.Pipeline
		dst.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `SELECT 1/0`)
			return err
		})
		src.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `SELECT 1`)
			return err
		})
		src.MoveTo(&dst, mark)
		return dst.Send(ctx, tx)
	})
	require.ErrorContains(t, err, "division by zero")
	require.NotErrorIs(t, err, marked, "the failure is the pipeline's own call's")

	err = db.Tx(ctx, pool, func(tx pgx.Tx) error {
		var src, dst db.Pipeline
		dst.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `SELECT 1`)
			return err
		})
		src.Queue(func(d dbsqlc.DBTX) error {
			_, err := d.Exec(ctx, `SELECT 1/0`)
			return err
		})
		src.MoveTo(&dst, mark)
		return dst.Send(ctx, tx)
	})
	require.ErrorContains(t, err, "division by zero")
	require.ErrorIs(t, err, marked, "the moved call's failure is marked")
}
