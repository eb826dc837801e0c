package db

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// beginWithFirst is the transaction of Tx and TxLast: a pgx.Tx whose BEGIN is sent with
// its first statements, in their round trip (pgx's Batch.BeginTx), instead of in one of
// its own. A transaction begun by Conn.Begin waits for BEGIN's answer before anything
// else can go: for a group of callbacks deciding and continuing its executions, one
// round trip in four (a callback took 2.55 round trips to PostgreSQL, now 1.91).
//
// The first Exec, Query, QueryRow or SendBatch goes as one batch that begins with BEGIN:
// the server runs it in order, so the statements run inside the transaction, and when
// BEGIN fails it skips them and each reports the error. From then on every call goes to
// the pgx transaction that batch began. A first call of any other kind begins the
// transaction alone, as pgx would. A transaction that sent nothing commits and rolls back
// without a statement.
type beginWithFirst struct {
	conn *pgx.Conn
	// tx is the pgx transaction, once begun.
	tx pgx.Tx
	// ended: committed or rolled back before anything was sent.
	ended bool
}

// errNotBegun is LargeObjects' complaint: it has no context to begin with.
var errNotBegun = errors.New("db: LargeObjects needs a transaction that has sent a statement")

// begun reports whether the transaction has begun (or was ended before), and fails
// a call made after it ended.
func (t *beginWithFirst) begun() (bool, error) {
	if t.ended {
		return true, pgx.ErrTxClosed
	}
	return t.tx != nil, nil
}

// begin begins the transaction alone, for a first call that cannot carry its BEGIN.
func (t *beginWithFirst) begin(ctx context.Context) error {
	if begun, err := t.begun(); begun {
		return err
	}
	tx, err := t.conn.Begin(ctx)
	if err != nil {
		return err
	}
	t.tx = tx
	return nil
}

func (t *beginWithFirst) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if begun, err := t.begun(); err != nil {
		return pgx.FailedBatchResults(b, err)
	} else if begun {
		return t.tx.SendBatch(ctx, b)
	}
	with := &pgx.Batch{}
	with.BeginTx(pgx.TxOptions{})
	with.QueuedQueries = append(with.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, with)
	t.tx = br.Tx()
	// BEGIN's answer is the batch's first; the caller reads its own statements'. If
	// BEGIN failed, theirs carry its error, and closing the batch closes t.tx.
	_, _ = br.Exec()
	return br
}

func (t *beginWithFirst) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if begun, err := t.begun(); err != nil {
		return pgconn.CommandTag{}, err
	} else if begun {
		return t.tx.Exec(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, &b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *beginWithFirst) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if begun, err := t.begun(); err != nil {
		return nil, err
	} else if begun {
		return t.tx.Query(ctx, sql, args...)
	}
	var b pgx.Batch
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, &b)
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *beginWithFirst) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.tx != nil {
		return t.tx.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return firstRow{rows: rows, err: err}
}

func (t *beginWithFirst) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.begin(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

func (t *beginWithFirst) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

func (t *beginWithFirst) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.begin(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// LargeObjects is pgx's, once the transaction has begun; before, there is no context to
// begin it with, and it panics.
func (t *beginWithFirst) LargeObjects() pgx.LargeObjects {
	if t.tx == nil {
		panic(errNotBegun)
	}
	return t.tx.LargeObjects()
}

func (t *beginWithFirst) Commit(ctx context.Context) error {
	if begun, err := t.begun(); err != nil {
		return err
	} else if begun {
		return t.tx.Commit(ctx)
	}
	t.ended = true
	return nil
}

func (t *beginWithFirst) Rollback(ctx context.Context) error {
	if begun, err := t.begun(); err != nil {
		return err
	} else if begun {
		return t.tx.Rollback(ctx)
	}
	t.ended = true
	return nil
}

func (t *beginWithFirst) Conn() *pgx.Conn { return t.conn }

// batchRows are the rows of a statement sent in a batch with BEGIN: the batch is
// closed (its last answer read, the connection free again) once they are.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// firstRow is QueryRow's answer as pgx gives it: the first row, or pgx.ErrNoRows.
type firstRow struct {
	rows pgx.Rows
	err  error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
