// Package db owns everything SQL: the embedded migrations, the sqlc-generated queries
// (package dbsqlc), the connection pool, and the interpretation of driver errors into the
// few errors the rest of rendezvous decides on (ErrNotFound, ErrDuplicate, Unavailable).
//
// It holds no business rules: which rows change, and when, is decided by the packages
// that run transactions (aggregator, executor).
package db

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

var (
	// ErrNotFound is returned for a lookup that matched no row.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate is returned when an insert collides with a unique constraint.
	ErrDuplicate = errors.New("duplicate")
)

// Notification channels. A NOTIFY is only a hint that work is ready; every consumer also
// polls, so a notification lost to a reconnect delays work but never loses it.
const (
	ChannelRunQueue = "rendezvous_run_queue"
	ChannelOutbox   = "rendezvous_outbox"
)

// Interpret maps driver errors onto this package's errors (wrapping the original), so
// that no caller needs to know pgx's error types.
func Interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %s: %w", ErrDuplicate, pgErr.ConstraintName, err)
	}
	return err
}

// IsUnavailable reports whether err means the database could not be reached or is
// shutting down, as opposed to a statement being wrong. Callers answer such errors with
// "try again later" (HTTP 503, a Kafka partition paused) instead of failing the work.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	// A closed pool (pgxpool returns puddle's error as is) means this process is shutting
	// down: another replica can take the work, so it is not the statement's fault.
	if errors.Is(err, puddle.ErrClosedPool) {
		return true
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"57": // operator intervention: admin shutdown, crash shutdown, cannot connect now
			return true
		}
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	// A connection dropped mid-statement surfaces as a plain error from the wire layer.
	msg := strings.ToLower(err.Error())
	for _, s := range []string{"conn closed", "connection reset", "broken pipe", "unexpected eof", "connection refused"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// IsRetryable reports whether a transaction failed only because of concurrent ones (a
// deadlock or a serialization failure) and can simply be run again.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}

// IsRefusedData reports whether a statement failed because of the values it was given:
// SQLSTATE class 22 (data exception, such as text that is not valid in the server's
// encoding) or 54 (a limit exceeded, such as an index row too large). Running it again
// with the same values fails again, so a caller holding many events' values finds the
// one that carries them instead of retrying.
func IsRefusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54"))
}

// Reason is PostgreSQL's message for err with its SQLSTATE, or err's text when it did
// not come from the server.
func Reason(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return fmt.Sprintf("%s (SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return err.Error()
}

// Connect opens a pool. A URL without an explicit pool size gets maxConns (when > 0).
func Connect(ctx context.Context, url string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	// Every statement here reads or writes a few rows through an index. JIT compilation
	// only ever costs them time, and PostgreSQL turns it on by estimated cost: a payload
	// match over a million open waits, estimated with default selectivities, was compiled
	// on every batch and ran several times slower (rendezvous-bench part m, the large
	// run). A URL may still say jit=on.
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	// Statements are prepared once per connection (pgx's statement cache). Left to
	// choose, PostgreSQL kept planning the batch statements afresh on every call: their
	// arrays estimate 10 elements in a generic plan and fewer in a custom one, so custom
	// always looked cheaper, and planning took as long as executing. Their plans do not
	// depend on the values (ids through unique indexes, partial-index predicates written
	// as literals), so one generic plan per connection serves them all. The operator's
	// lists, whose best plan does depend on which filters are set, ask for custom plans
	// themselves (OperatorForceCustomPlans).
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		RegisterTypes(conn.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
}

// Tx runs fn in a transaction, committing when fn returns nil and rolling back otherwise.
// Functions fn registers with AfterCommit run once the commit has succeeded. The
// transaction's BEGIN goes with its first statements (beginWithFirst).
func Tx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) (err error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// Released after the rollback below: a connection left inside a transaction is
	// closed by the pool rather than reused.
	defer c.Release()
	tx := &beginWithFirst{conn: c.Conn()}
	// Also when fn panics; after a commit, pgx's Rollback only answers ErrTxClosed.
	defer rollback(ctx, tx, &err)
	h := &hookTx{Tx: tx}
	if err := fn(h); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	h.committed()
	return nil
}

// rollback rolls tx back, reporting a failure to do so in *err when nothing failed
// before. A transaction already committed or rolled back answers pgx.ErrTxClosed, which
// is no failure.
func rollback(ctx context.Context, tx pgx.Tx, err *error) {
	if rerr := tx.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) && *err == nil {
		*err = rerr
	}
}

// hookTx is the transaction Tx hands to its function: it remembers what to do after the
// commit.
type hookTx struct {
	pgx.Tx
	after []func()
}

// committed runs what was registered to follow the commit, in order.
func (h *hookTx) committed() {
	for _, f := range h.after {
		f()
	}
}

// AfterCommit has f run after tx commits, and never if it rolls back, when tx is the
// transaction of a Tx call. Code deep inside a transaction uses it for what must not be
// seen before the commit: ended spans, metrics, wake-ups of workers that would look for
// the transaction's rows. A transaction begun elsewhere runs f at once, which only makes
// those early.
func AfterCommit(tx pgx.Tx, f func()) {
	if h, ok := tx.(*hookTx); ok {
		h.after = append(h.after, f)
		return
	}
	f()
}

// NewID returns the id of a new row (an execution, a wait state, a correlation id): a
// version 7 UUID, whose first 48 bits are the time in milliseconds. Rows created
// together are neighbours in every index keyed by their ids, so the indexes of a table
// holding a million older waits take new rows, and the lookups of their events, in a
// few hot pages at their right edge instead of all over; with random (version 4) ids
// the bench's Kafka rate with a million other waits fell to 0.73–0.85 of its rate on an
// empty table, with these to 0.83–0.95. The remaining 74 random bits keep ids
// unguessable.
func NewID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

// TxLast is Tx for a transaction whose last statements are known only at its end (an
// audit row that says what the transaction decided): fn queues them on last, and they
// are sent with the COMMIT in one round trip rather than one round trip before it. If
// one of them fails, the COMMIT is not run (the server skips the rest of a failed
// pipeline) and the transaction is rolled back, as when fn fails.
func TxLast(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx, last *Pipeline) error) (err error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// Released after the rollback below: a connection left inside a transaction is
	// closed by the pool rather than reused.
	defer c.Release()
	tx := &beginWithFirst{conn: c.Conn()}
	committed := false
	defer func() {
		// The transaction is the pgx Tx's until its COMMIT is sent; a rollback after
		// a COMMIT that failed only draws a warning from the server.
		if !committed {
			rollback(ctx, tx, &err)
		}
	}()
	h := &hookTx{Tx: tx}
	var last Pipeline
	if err := fn(h, &last); err != nil {
		return err
	}
	if tx.tx == nil && last.Len() == 0 {
		// Nothing was sent, so there is nothing to commit: what was to follow the commit
		// follows at once.
		committed = true
		h.committed()
		return nil
	}
	var tag pgconn.CommandTag
	last.Queue(func(d dbsqlc.DBTX) error {
		var err error
		tag, err = d.Exec(ctx, "commit")
		return err
	})
	if err := last.Send(ctx, tx); err != nil {
		return err
	}
	committed = true
	if tag.String() == "ROLLBACK" {
		// The transaction had failed already; the server rolled it back.
		return pgx.ErrTxCommitRollback
	}
	h.committed()
	return nil
}
