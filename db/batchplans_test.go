package db_test

// The event paths' batch statements name their rows by id arrays. Pools plan them once
// per connection, generic (db.Connect), and PostgreSQL keeps that plan until the table's
// statistics change. On tables never analyzed (a new deployment's first minutes, or a
// server running without autovacuum) the planner guesses: the join with the id arrays
// looked cheaper as a scan of every execution, and a status test as a read of every open
// wait through the partial indexes on status. Each batch then costs time in proportion to
// the table, which on the sent-event path halved the rate within a few thousand
// executions. This test plans each statement as a pool would, on tables that were never
// analyzed and again once they are, and requires the rows to be reached through their
// keys.

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

func TestBatchStatementsReachRowsByKey(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, schema.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })

	// 6,000 executions, half still waiting on one wait node, half completed; a buffered
	// event for one in ten; a queued resume for each (a burst of deadlines). Large enough
	// for a scan to cost, small enough for the planner's guesses to favour one without
	// statistics.
	_, err = conn.Exec(ctx, `
INSERT INTO workflows (name, version, definition) VALUES ('wf', 1, '{}');
INSERT INTO executions (id, workflow_name, workflow_version, status)
SELECT gen_random_uuid(), 'wf', 1, CASE WHEN i % 2 = 0 THEN 'waiting' ELSE 'completed' END
FROM generate_series(1, 6000) i;
INSERT INTO node_execution_rows (execution_id, node_id, status)
SELECT id, 'wait', CASE WHEN status = 'waiting' THEN 'waiting_for_events' ELSE 'completed' END FROM executions;
INSERT INTO execution_wait_states (id, execution_id, node_id, correlation_id, aggregation_strategy, status,
       expires_at, next_deadline_at)
SELECT gen_random_uuid(), id, 'wait', gen_random_uuid(), 'all', status, now() + interval '1 hour', now() + interval '1 hour'
FROM executions;
INSERT INTO event_buffer (execution_id, event_type, payload, source, expires_at)
SELECT id, 'go', '{}', '{}', now() + interval '1 hour' FROM executions WHERE random() < 0.1;
INSERT INTO run_queue (execution_id, node_id, kind)
SELECT id, 'wait', 'resume' FROM executions;`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)

	statements := []struct{ file, name string }{
		{"wait_states.sql", "WaitStateWrite"},
		{"wait_states.sql", "WaitStateListOpenByExecutions"},
		{"wait_states.sql", "WaitStateMarkResumedMany"},
		{"wait_states.sql", "WaitStateCancelOpenForExecution"},
		{"wait_states.sql", "WaitStateListByCorrelationIDs"},
		{"executions.sql", "ExecutionSetStatus"},
		{"executions.sql", "ExecutionSetStatusMany"},
		{"executions.sql", "ExecutionListForUpdate"},
		{"node_executions.sql", "NodeExecutionSetStatusMany"},
		{"node_executions.sql", "NodeExecutionListByExecutions"},
		{"run_queue.sql", "RunQueueDeleteClaimedMany"},
	}
	// Indexes that answer "which waits are open", never "which waits are these".
	statusIndexes := []string{"execution_wait_states_open_created_at_id_idx", "idx_execution_wait_states_next_deadline"}
	seqScan := regexp.MustCompile(`Seq Scan on (executions|execution_wait_states|node_executions|run_queue|event_buffer)$`)

	for _, analyzed := range []bool{false, true} {
		if analyzed {
			_, err := conn.Exec(ctx, "ANALYZE")
			require.NoError(t, err)
		}
		for i, st := range statements {
			t.Run(fmt.Sprintf("%s, analyzed %v", st.name, analyzed), func(t *testing.T) {
				q, ok := dbtest.Queries(t, st.file)[st.name]
				require.True(t, ok, "no query %s in %s", st.name, st.file)
				prepared, params := dbtest.Positional(q)
				name := fmt.Sprintf("s%d_%v", i, analyzed)
				_, err := conn.Exec(ctx, "PREPARE "+name+" AS "+prepared)
				require.NoError(t, err)
				nulls := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
				nodes := dbtest.Explain(t, conn, "EXECUTE "+name+"("+nulls+")")
				for _, n := range nodes {
					require.False(t, seqScan.MatchString(n), "scans a whole table: %v", nodes)
					for _, idx := range statusIndexes {
						require.NotContains(t, n, idx, "reads every open wait: %v", nodes)
					}
				}
			})
		}
	}
}
