package readmodel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server/auth"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
)

// walk reads a list page by page, limit items at a time, and returns every item and
// the size of each page.
func walk[T any](t *testing.T, limit int, read func(readmodel.Paging) (readmodel.Page[T], error)) ([]T, []int) {
	t.Helper()
	var items []T
	var sizes []int
	pg := readmodel.Paging{Limit: limit}
	for range 100 {
		page, err := read(pg)
		require.NoError(t, err)
		items = append(items, page.Items...)
		sizes = append(sizes, len(page.Items))
		if page.NextCursor == "" {
			return items, sizes
		}
		pg.Cursor = page.NextCursor
	}
	t.Fatal("the list does not end")
	return nil, nil
}

// TestTokensAndAuditPage: the two lists of access control page by their keys — tokens
// by name, the audit log newest first — and neither takes the other's cursor.
func TestTokensAndAuditPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	store := auth.NewStore(pool)
	for _, name := range []string{"delta", "alpha", "echo", "charlie", "bravo"} {
		_, err := store.Create(ctx, auth.NewToken{Name: name, Role: auth.RoleViewer})
		require.NoError(t, err)
	}
	e := &audit.Entry{Principal: "token:ci", RemoteAddr: "127.0.0.1", Action: audit.ActionWorkflowStore}
	for i := range 5 {
		require.NoError(t, audit.Refused(ctx, pool, e, fmt.Sprintf("workflow/w%d", i), 422, ""))
	}
	r := readmodel.New(pool)

	tokens, sizes := walk(t, 2, func(pg readmodel.Paging) (readmodel.Page[auth.Token], error) { return r.Tokens(ctx, store, pg) })
	require.Equal(t, []int{2, 2, 1}, sizes)
	var names []string
	for _, tok := range tokens {
		names = append(names, tok.Name)
	}
	require.Equal(t, []string{"alpha", "bravo", "charlie", "delta", "echo"}, names)

	rows, sizes := walk(t, 2, func(pg readmodel.Paging) (readmodel.Page[readmodel.AuditRow], error) {
		return r.Audit(ctx, readmodel.AuditFilter{Action: string(audit.ActionWorkflowStore)}, pg)
	})
	require.Equal(t, []int{2, 2, 1}, sizes)
	var targets []string
	for _, row := range rows {
		targets = append(targets, row.Target)
	}
	require.Equal(t, []string{"workflow/w4", "workflow/w3", "workflow/w2", "workflow/w1", "workflow/w0"}, targets)

	first, err := r.Tokens(ctx, store, readmodel.Paging{Limit: 1})
	require.NoError(t, err)
	_, err = r.Audit(ctx, readmodel.AuditFilter{}, readmodel.Paging{Cursor: first.NextCursor})
	var qe *readmodel.QueryError
	require.True(t, errors.As(err, &qe), "%v", err)
	require.Equal(t, "cursor", qe.Param)
	require.Contains(t, qe.Reason, "a cursor of tokens, not of the audit log")

	_, err = r.Tokens(ctx, store, readmodel.Paging{Limit: readmodel.LimitMax + 1})
	require.True(t, errors.As(err, &qe), "%v", err)
	require.Equal(t, "limit", qe.Param)
}
