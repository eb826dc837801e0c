package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
)

// TestRecordCommitsAndRollsBackWithTheChange: the row belongs to the change's
// transaction: a rolled-back change leaves none, a committed one its row; a context
// without an entry (a change the service makes on its own) writes nothing.
func TestRecordCommitsAndRollsBackWithTheChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	e := &audit.Entry{Principal: "token:ci", RemoteAddr: "127.0.0.1", Action: audit.ActionExecutionStart}
	actx := audit.NewContext(ctx, e)

	boom := errors.New("the change failed after its row was written")
	err := db.Tx(ctx, pool, func(tx pgx.Tx) error {
		require.NoError(t, audit.Record(actx, tx, "execution/1", audit.OutcomeOK, ""))
		return boom
	})
	require.ErrorIs(t, err, boom)
	page, err := readmodel.New(pool).Audit(ctx, readmodel.AuditFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Items, "rolled back with the change")

	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		return audit.Record(actx, tx, "execution/2", audit.OutcomeOK, "workflow orders v1")
	}))
	require.True(t, e.Written())
	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		return audit.Record(ctx, tx, "execution/3", audit.OutcomeOK, "")
	}))
	page, err = readmodel.New(pool).Audit(ctx, readmodel.AuditFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.NextCursor)
	require.Len(t, page.Items, 1)
	r := page.Items[0]
	require.Equal(t, []string{"token:ci", "127.0.0.1", "execution.start", "execution/2", "ok", "workflow orders v1"},
		[]string{r.Principal, r.RemoteAddr, r.Action, r.Target, r.Outcome, r.Detail})
}

// TestPurge deletes rows older than the cutoff, in batches, and keeps the others.
func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	e := &audit.Entry{Principal: "token:ci", RemoteAddr: "127.0.0.1", Action: audit.ActionWorkflowStore}
	for range 5 {
		require.NoError(t, audit.Refused(ctx, pool, e, "workflow/x", 422, "invalid"))
	}
	_, err := pool.Exec(ctx, "UPDATE audit_log SET at = now() - interval '10 days' WHERE id IN (SELECT id FROM audit_log ORDER BY id LIMIT 3)")
	require.NoError(t, err)
	n, err := audit.Purge(ctx, pool, time.Now().Add(-7*24*time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	page, err := readmodel.New(pool).Audit(ctx, readmodel.AuditFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Items, 2)
	require.Equal(t, "refused 422", page.Items[0].Outcome)
}

// TestRecordAllWritesARowPerRequest: changes recorded together get a row each, with
// their own request's principal, in the order given; a change without an entry (made by
// the service on its own) gets none; a rollback takes every row with it.
func TestRecordAllWritesARowPerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	alice := &audit.Entry{Principal: "oidc:alice", RemoteAddr: "10.0.0.1", Action: audit.ActionEventSend}
	ci := &audit.Entry{Principal: "token:ci", RemoteAddr: "10.0.0.2", Action: audit.ActionEventSend}
	changes := []audit.Change{
		{Ctx: audit.NewContext(ctx, alice), Target: "execution/a", Outcome: "delivered", Detail: "type t1"},
		{Ctx: ctx, Target: "execution/kafka", Outcome: "delivered"},
		{Ctx: audit.NewContext(ctx, ci), Target: "execution/b", Outcome: "buffered", Detail: "type t2"},
	}
	boom := errors.New("the group failed")
	require.ErrorIs(t, db.Tx(ctx, pool, func(tx pgx.Tx) error {
		require.NoError(t, audit.RecordAll(ctx, tx, changes))
		return boom
	}), boom)
	page, err := readmodel.New(pool).Audit(ctx, readmodel.AuditFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Items, "rolled back with the changes")

	require.NoError(t, db.Tx(ctx, pool, func(tx pgx.Tx) error { return audit.RecordAll(ctx, tx, changes) }))
	require.True(t, alice.Written())
	require.True(t, ci.Written())
	page, err = readmodel.New(pool).Audit(ctx, readmodel.AuditFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Items, 2)
	got := [][]string{}
	for _, r := range page.Items { // newest first
		got = append(got, []string{r.Principal, r.RemoteAddr, r.Action, r.Target, r.Outcome, r.Detail})
	}
	require.Equal(t, [][]string{
		{"token:ci", "10.0.0.2", "event.send", "execution/b", "buffered", "type t2"},
		{"oidc:alice", "10.0.0.1", "event.send", "execution/a", "delivered", "type t1"},
	}, got)
}
