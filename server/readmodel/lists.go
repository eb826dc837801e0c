// Package lists is the read model of the operator's lists: workflows, executions, wait
// states, unmatched events, dead letters, tokens and the audit log, each read a page at
// a time. It owns what every list shares — the page (Page), its size (LimitDefault,
// LimitMax), the one opaque cursor scheme, and the refusal of a bad argument
// (QueryError) — and each list's filters and query. The API serves these pages as they
// are; no other package encodes or decodes a cursor.
//
// Every list pages by keyset, never by offset: a page starts strictly after the sort key
// of the previous page's last item, so a page costs the same however deep it is, and an
// item that exists throughout is never listed twice or skipped.
package readmodel

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// Page sizes of the lists.
const (
	LimitDefault = 50
	LimitMax     = 500
)

// Page is one page of a list. NextCursor, empty on the last page, continues the list
// after the page's last item.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// Paging asks for one page.
type Paging struct {
	// Limit is the page size, 1..LimitMax; 0 means LimitDefault.
	Limit int
	// Cursor is a previous page's NextCursor of the same list; empty starts at the
	// beginning.
	Cursor string
}

// QueryError is a list or lookup argument that is refused; Param names it as the API
// does (status, limit, cursor, …).
type QueryError struct {
	Param  string
	Reason string
}

func (e *QueryError) Error() string { return e.Param + ": " + e.Reason }

// Reader reads the lists from a pool.
type Reader struct {
	pool *pgxpool.Pool
	q    *dbsqlc.Queries
	// displays are the workflows' display templates, for the executions' summaries.
	displays displays
}

// New returns a Reader of the lists stored in pool.
func New(pool *pgxpool.Pool) *Reader {
	return &Reader{pool: pool, q: dbsqlc.New()}
}

// Snapshot runs fn in a read-only snapshot in which the operator queries are planned for
// their arguments (see OperatorForceCustomPlans): a generic plan cannot know which
// optional filters are NULL and would not walk the index a page needs.
func Snapshot(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := dbsqlc.New().OperatorForceCustomPlans(ctx, tx); err != nil {
			return fmt.Errorf("set plan cache mode: %w", err)
		}
		return fn(tx)
	})
}

// read runs a list query in a Snapshot and returns its rows.
func read[R any](ctx context.Context, r *Reader, what string, query func(pgx.Tx) ([]R, error)) ([]R, error) {
	var rows []R
	err := Snapshot(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		rows, err = query(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", what, err)
	}
	return rows, nil
}

// pageOf turns rows read with a limit of limit+1 into a page: a row beyond limit only
// tells that there is more, and the cursor then points after the last row shown.
func pageOf[R, T any](rows []R, limit int, item func(R) (T, error), cursor func(R) string) (Page[T], error) {
	page := Page[T]{Items: make([]T, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			page.NextCursor = cursor(rows[limit-1])
			break
		}
		it, err := item(r)
		if err != nil {
			return Page[T]{}, err
		}
		page.Items = append(page.Items, it)
	}
	return page, nil
}

func errLimit() error {
	return &QueryError{Param: "limit", Reason: fmt.Sprintf("must be an integer from 1 to %d", LimitMax)}
}

// ParseLimit reads the limit query parameter: empty is 0 (the default), anything else
// must be an integer from 1 to LimitMax.
func ParseLimit(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, errLimit()
	}
	return limitOf(n)
}

// limitOf is the page size Paging.Limit asks for.
func limitOf(n int) (int, error) {
	switch {
	case n == 0:
		return LimitDefault, nil
	case n < 1 || n > LimitMax:
		return 0, errLimit()
	}
	return n, nil
}

// oneOf returns nil for an empty value (no filter) and the value when it is one of
// allowed, the values of a named type (a filter's parameter is text in its statement).
func oneOf[T ~string](param, v string, allowed []T) (*string, error) {
	if v == "" {
		return nil, nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if v == string(a) {
			return &v, nil
		}
		names[i] = string(a)
	}
	return nil, &QueryError{Param: param, Reason: fmt.Sprintf("%q is not one of %s", v, strings.Join(names, ", "))}
}

// Text returns nil for an empty value (no filter) and the value when PostgreSQL can take
// it as text: a NUL or invalid UTF-8 would fail the statement, which is the caller's
// mistake and not a server error.
func Text(param, v string) (*string, error) {
	if v == "" {
		return nil, nil
	}
	if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
		return nil, &QueryError{Param: param, Reason: "must be UTF-8 text without NUL characters"}
	}
	return &v, nil
}

func ptr[T any](v T) *T { return &v }
