package readmodel_test

// The operator's list queries must stay cheap on large tables: each page is read along
// an index in the page's order, never by scanning and sorting every matching row. This
// test asks PostgreSQL for the plans of the queries as db/queries/operator.sql writes
// them, on tables large enough for the planner to prefer a scan if an index were missing.
// The sweeper's claim of due waits is checked the same way, in the generic plan pools use,
// on the same large tables.

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

func TestOperatorListPlans(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, schema.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })

	// 50 workflows of 3 versions; 30,000 executions, one wait each, one in twenty still
	// waiting, spread over the past 10 days.
	_, err = conn.Exec(ctx, `
INSERT INTO workflows (name, version, definition)
SELECT 'wf' || w, v, '{}' FROM generate_series(1, 50) w, generate_series(1, 3) v;
INSERT INTO executions (id, workflow_name, workflow_version, status, created_at, updated_at)
SELECT gen_random_uuid(), 'wf' || (1 + i % 50), 1, CASE WHEN i % 20 = 0 THEN 'waiting' ELSE 'completed' END,
       now() - make_interval(secs => i * 30), now()
FROM generate_series(1, 30000) i;
INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy, status,
       expires_at, next_deadline_at, created_at, updated_at)
SELECT gen_random_uuid(), id, 'wait', gen_random_uuid(), 'all', CASE WHEN status = 'waiting' THEN 'waiting' ELSE 'completed' END,
       created_at + interval '1 day', created_at + interval '1 day', created_at, updated_at
FROM executions;
ANALYZE workflows; ANALYZE executions; ANALYZE execution_wait_states;`)
	require.NoError(t, err)

	queries := dbtest.Queries(t, "operator.sql")
	cursor := map[string]string{
		"after_created_at": "(now() - interval '5 days')", "after_id": "'00000000-0000-0000-0000-000000000000'",
		"before_created_at": "(now() - interval '5 days')", "before_id": "'ffffffff-ffff-ffff-ffff-ffffffffffff'",
	}
	with := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	tests := []struct {
		name, query string
		args        map[string]string
		// oneRow: the filter names one row by a unique key, so sorting it costs nothing.
		oneRow bool
	}{
		{"wait states, first page", "WaitStateList", map[string]string{"max": "51"}, false},
		{"wait states, a later page", "WaitStateList", with(cursor, "max", "51"), false},
		{"waiting wait states, a later page", "WaitStateList", with(cursor, "max", "51", "status", "'waiting'"), false},
		{"completed wait states, a later page", "WaitStateList", with(cursor, "max", "51", "status", "'completed'"), false},
		{"executions, first page", "ExecutionList", map[string]string{"max": "51"}, false},
		{"executions, a later page", "ExecutionList", with(cursor, "max", "51"), false},
		{"waiting executions", "ExecutionList", with(cursor, "max", "51", "status", "'waiting'"), false},
		{"executions of a workflow", "ExecutionList", with(cursor, "max", "51", "workflow", "'wf7'"), false},
		{"executions by correlation id", "ExecutionList", map[string]string{"max": "51", "correlation_id": "'00000000-0000-0000-0000-000000000001'"}, true},
		{"executions created in a window", "ExecutionList", map[string]string{"max": "51",
			"created_from": "(now() - interval '2 days')", "created_to": "(now() - interval '1 day')"}, false},
		{"workflows, a later page", "WorkflowList", map[string]string{"max": "11", "after_name": "'wf20'"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, ok := queries[tt.query]
			require.True(t, ok, "no query %s in operator.sql", tt.query)
			nodes := dbtest.Explain(t, conn, dbtest.Bind(q, tt.args))
			require.Equal(t, "Limit", nodes[0], "%v", nodes)
			usesIndex := false
			for _, n := range nodes {
				require.NotContains(t, n, "Seq Scan", "a page must not scan a table: %v", nodes)
				if !tt.oneRow {
					require.NotContains(t, n, "Sort", "a page must come in index order: %v", nodes)
				}
				usesIndex = usesIndex || strings.Contains(n, " using ")
			}
			require.True(t, usesIndex, "%v", nodes)
		})
	}

	// The sweeper's claim runs in the generic plan pools use (db.Connect sets
	// plan_cache_mode), which cannot see the time it is given: it must still walk the
	// partial deadline index, not scan the waits.
	t.Run("sweeper claim, generic plan", func(t *testing.T) {
		_, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		claim := dbtest.Bind(dbtest.Queries(t, "wait_states.sql")["WaitStateClaimDue"], map[string]string{"now": "$1", "max": "$2"})
		_, err = conn.Exec(ctx, "PREPARE claim_due (timestamptz, integer) AS "+claim)
		require.NoError(t, err)
		nodes := dbtest.Explain(t, conn, "EXECUTE claim_due (now(), 2000)")
		require.Contains(t, nodes, "Index Scan on execution_wait_states using idx_execution_wait_states_next_deadline", "%v", nodes)
		for _, n := range nodes {
			require.NotContains(t, n, "Seq Scan", "%v", nodes)
			require.NotContains(t, n, "Sort", "%v", nodes)
		}
	})
}
