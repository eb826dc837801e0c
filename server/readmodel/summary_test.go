package readmodel_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
)

// TestSummaries: the executions list, the waits list and an execution's view name each
// execution by its business key — the display template of the version it runs, else its
// input's first scalar fields — and a later version's template does not rename the
// executions of an earlier one.
func TestSummaries(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, schema.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	withDisplay, plain, v2 := uuid.New(), uuid.New(), uuid.New()
	_, err = pool.Exec(ctx, `
INSERT INTO workflows (name, version, definition) VALUES
  ('orders', 1, '{"name": "orders", "display": "@{_trigger.order} · @{_trigger.amount} EUR", "nodes": []}'),
  ('orders', 2, '{"name": "orders", "display": "order @{_trigger.order}", "nodes": []}'),
  ('plain', 1, '{"name": "plain", "nodes": []}')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
INSERT INTO executions (id, workflow_name, workflow_version, status, input, created_at, updated_at) VALUES
  ($1, 'orders', 1, 'waiting', '{"amount": 120, "order": "A-1001"}', now() - interval '2 minutes', now()),
  ($2, 'plain', 1, 'waiting', '{"customer": "ada", "lines": [1], "total": 9.5}', now() - interval '1 minute', now()),
  ($3, 'orders', 2, 'waiting', '{"amount": 5, "order": "B-7"}', now(), now())`, withDisplay, plain, v2)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy, status,
       expires_at, next_deadline_at, created_at, updated_at)
SELECT gen_random_uuid(), id, 'wait', gen_random_uuid(), 'all', 'waiting', now() + interval '1 day', now() + interval '1 day', created_at, now()
FROM executions`)
	require.NoError(t, err)

	r := readmodel.New(pool)
	want := map[uuid.UUID]string{withDisplay: "A-1001 · 120 EUR", plain: "customer: ada · total: 9.5", v2: "order B-7"}
	execs, err := r.Executions(ctx, readmodel.ExecutionFilter{}, readmodel.Paging{})
	require.NoError(t, err)
	require.Len(t, execs.Items, 3)
	for _, e := range execs.Items {
		require.Equal(t, want[e.ID], e.Summary, "execution %s of %s v%d", e.ID, e.Workflow, e.WorkflowVersion)
	}
	waits, err := r.WaitStates(ctx, readmodel.WaitStateFilter{}, readmodel.Paging{})
	require.NoError(t, err)
	require.Len(t, waits.Items, 3)
	for _, w := range waits.Items {
		require.Equal(t, want[w.ExecutionID], w.Summary, "wait of execution %s", w.ExecutionID)
	}
	v, err := r.Execution(ctx, withDisplay)
	require.NoError(t, err)
	require.Equal(t, "A-1001 · 120 EUR", v.Summary)
}
