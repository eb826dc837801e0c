package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// Pipeline sends several statements to the server in one round trip (a pgx batch),
// where each would otherwise wait for the answer to the one before. The statements run
// in order, in the transaction the pipeline is sent on, and an error in one fails the
// rest.
//
// A call is an ordinary sqlc call made on the DBTX it is given, and must make exactly one
// statement. Each call is made twice: first to learn its statement and arguments (the
// DBTX queues them and answers with an error the call passes back), then, once the batch
// has been answered, to read its result (the DBTX hands it the statement's answer). So a
// call must not act on its result before its query returns without error, which sqlc's
// generated functions never do.
type Pipeline struct {
	calls []func(dbsqlc.DBTX) error
}

// Queue adds call to the pipeline.
func (p *Pipeline) Queue(call func(dbsqlc.DBTX) error) {
	p.calls = append(p.calls, call)
}

// Len is the number of calls queued.
func (p *Pipeline) Len() int { return len(p.calls) }

// MoveTo moves p's calls to the end of dst, to be sent with dst's, and empties p. An
// error one of them meets there is passed through mark, so that whoever sends dst can
// tell which of its calls failed.
func (p *Pipeline) MoveTo(dst *Pipeline, mark func(error) error) {
	for _, call := range p.calls {
		dst.Queue(func(d dbsqlc.DBTX) error {
			err := call(d)
			if err == nil || errors.Is(err, errQueued) {
				return err
			}
			return mark(err)
		})
	}
	p.calls = nil
}

// errQueued is what a call sees on its first pass: its statement was queued.
var errQueued = errors.New("statement queued in a pipeline")

// Send sends the queued calls on tx in one batch and hands each its result. It returns
// the first call's error, and empties the pipeline.
func (p *Pipeline) Send(ctx context.Context, tx pgx.Tx) error {
	calls := p.calls
	p.calls = nil
	if len(calls) == 0 {
		return nil
	}
	q := &queueDB{}
	for i, call := range calls {
		if err := call(q); !errors.Is(err, errQueued) {
			return fmt.Errorf("pipeline call %d did not queue a statement: %v", i, err)
		}
		if q.batch.Len() != i+1 {
			return fmt.Errorf("pipeline call %d queued %d statements, not one", i, q.batch.Len()-i)
		}
	}
	reserveSendBuffer(tx.Conn(), &q.batch)
	br := tx.SendBatch(ctx, &q.batch)
	var first error
	for _, call := range calls {
		if err := call(answerDB{br}); err != nil && first == nil {
			first = err
		}
	}
	if err := br.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// queueDB queues each statement instead of running it.
type queueDB struct{ batch pgx.Batch }

func (q *queueDB) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	q.batch.Queue(sql, args...)
	return pgconn.CommandTag{}, errQueued
}

func (q *queueDB) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.batch.Queue(sql, args...)
	return nil, errQueued
}

func (q *queueDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	q.batch.Queue(sql, args...)
	return queuedRow{}
}

type queuedRow struct{}

func (queuedRow) Scan(...any) error { return errQueued }

// answerDB answers each statement, in order, from the batch's results.
type answerDB struct{ br pgx.BatchResults }

func (a answerDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return a.br.Exec()
}

func (a answerDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return a.br.Query()
}

func (a answerDB) QueryRow(context.Context, string, ...any) pgx.Row {
	return a.br.QueryRow()
}

// reserveSendBuffer makes room in conn's send buffer for the messages of b before pgx
// writes them there. pgx starts that buffer at 1 KB after every flush and grows it by
// appending each statement's parameters, so a batch of a thousand events' arrays (a few
// hundred kilobytes) was copied again at every growth, a share of the CPU and of the
// allocations per record of the Kafka path (rendezvous-bench part b). The room is an
// estimate (batchBytes); too little only means one growth more.
func reserveSendBuffer(conn *pgx.Conn, b *pgx.Batch) {
	if conn == nil {
		return
	}
	if n := batchBytes(b); n > minReserve {
		conn.PgConn().Frontend().Send(sendRoom(n))
	}
}

// minReserve is the send buffer pgx keeps between flushes: a smaller batch fits as it is.
const minReserve = 1024

// sendRoom is a message of no bytes whose encoding grows the buffer it is written to by
// its size: how a caller of pgproto3.Frontend.Send, which appends each message's encoding
// to the connection's send buffer, reserves room in that buffer.
type sendRoom int

func (n sendRoom) Encode(dst []byte) ([]byte, error) { return slices.Grow(dst, int(n)), nil }
func (sendRoom) Decode([]byte) error                 { return errors.New("db: sendRoom is never received") }
func (sendRoom) Frontend()                           {}

// batchBytes estimates the size of b's messages: each statement's Bind, Describe and
// Execute (about statementBytes) and its parameters in the binary format, as pgx encodes
// the types the queries here pass (arrays of uuids, documents, text, numbers and times).
func batchBytes(b *pgx.Batch) int {
	n := 0
	for _, q := range b.QueuedQueries {
		n += statementBytes
		for _, a := range q.Arguments {
			n += 4 + argBytes(a) // each parameter is led by its length
		}
	}
	return n
}

// statementBytes is what a statement's messages take besides its parameters: the
// Bind's header, statement name and format codes, the Describe and the Execute.
const statementBytes = 96

// argBytes is an estimate of a's binary encoding: exact for the types the queries pass
// most (arrays of uuids, documents and text), 16 bytes a value for anything else.
func argBytes(a any) int {
	switch v := a.(type) {
	case nil:
		return 0
	case []byte:
		return len(v)
	case json.RawMessage:
		return len(v) + 1
	case string:
		return len(v)
	case []uuid.UUID:
		return uuidArrayBytes(len(v))
	case []json.RawMessage:
		n, _ := docArrayBytes(v, 1) // as jsonb, the larger of the two
		return n
	case []string:
		return textArrayBytes(v)
	}
	if rv := reflect.ValueOf(a); rv.Kind() == reflect.Slice {
		return arrayHeaderLen + rv.Len()*16
	}
	return 16
}
