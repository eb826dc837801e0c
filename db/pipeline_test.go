package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
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

// TestPipelineReservesItsSendBuffer: a pipeline of large arrays is written to the
// connection's send buffer once, in room reserved for it, rather than into a buffer grown
// (and copied) again and again as pgx appends each statement. The estimate of that room is
// checked against the bytes the batch took on the wire; what sending it allocated,
// against the same batch sent by pgx alone. Four statements of 250 KB: pgx alone
// allocated 3.9 times what they sent, the pipeline 2.0 (their parameters encoded, then
// copied into the buffer); under the race detector, which allocates more of its own,
// 4.9 and 4.1. Not parallel: it counts the whole process's allocations, and the
// package's parallel tests wait until it is done.
func TestPipelineReservesItsSendBuffer(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dbtest.ServerURL(t))
	require.NoError(t, err)
	var sent atomic.Int64
	cfg.DialFunc = countingDial(cfg.DialFunc, new(atomic.Int64), &sent)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	db.RegisterTypes(conn.TypeMap())

	docs := make([]json.RawMessage, 4000)
	for i := range docs {
		docs[i] = json.RawMessage(fmt.Sprintf(`{"n":%d,"pad":"%040d"}`, i, i))
	}
	const query = `SELECT cardinality($1::json[])`
	// send sends the four statements through a pipeline, or through pgx alone, and
	// returns the bytes they took on the wire and what sending them allocated.
	send := func(alone bool) (wire, allocated int64) {
		counts := make([]int, 4)
		require.NoError(t, pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var p db.Pipeline
			var b pgx.Batch
			for i := range counts {
				p.Queue(func(d dbsqlc.DBTX) error { return d.QueryRow(ctx, query, docs).Scan(&counts[i]) })
				b.Queue(query, docs)
			}
			var before, after runtime.MemStats
			wireBefore := sent.Load()
			runtime.ReadMemStats(&before)
			if alone {
				br := tx.SendBatch(ctx, &b)
				for i := range counts {
					if err := br.QueryRow().Scan(&counts[i]); err != nil {
						return err
					}
				}
				err = br.Close()
			} else {
				err = p.Send(ctx, tx)
			}
			runtime.ReadMemStats(&after)
			wire, allocated = sent.Load()-wireBefore, int64(after.TotalAlloc-before.TotalAlloc)
			return err
		}))
		require.Equal(t, []int{4000, 4000, 4000, 4000}, counts)
		return wire, allocated
	}
	send(false) // prepares the statement: the measured batches send only Bind and Execute
	wire, allocated := send(false)
	aloneWire, aloneAllocated := send(true)
	require.Equal(t, aloneWire, wire, "the same messages")
	t.Logf("sent %d bytes; allocated %.2f× that through the pipeline, %.2f× by pgx alone",
		wire, float64(allocated)/float64(wire), float64(aloneAllocated)/float64(wire))

	var b pgx.Batch
	for range 4 {
		b.Queue(query, docs)
	}
	estimate := db.BatchBytes(&b)
	require.GreaterOrEqual(t, estimate, int(wire), "the room reserved holds the batch")
	require.Less(t, float64(estimate), 1.05*float64(wire), "and not much more")
	require.Less(t, float64(allocated), float64(aloneAllocated)-0.5*float64(wire),
		"the pipeline saves the copies of a buffer grown by appending")
}
