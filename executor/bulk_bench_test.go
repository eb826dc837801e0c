package executor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// BenchmarkRedriveMany measures a bulk redrive of REDRIVE_BENCH_N (default 10 000)
// failed executions, each a wait that timed out with one of its two events recorded, in
// batches of REDRIVE_BENCH_BATCH (default BulkBatchDefault). Every iteration builds the
// failed executions (one failed through the executor, cloned in SQL), then times one
// RedriveMany over all of them and checks each was redriven once. Reported:
// executions/s. Run it once:
//
//	go test -run '^$' -bench BenchmarkRedriveMany -benchtime 1x ./executor/
func BenchmarkRedriveMany(b *testing.B) {
	n := envInt(b, "REDRIVE_BENCH_N", 10_000)
	batch := envInt(b, "REDRIVE_BENCH_BATCH", executor.BulkBatchDefault)
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ex, err := executor.New(pool, aggregator.Config{}, executor.Config{InstanceID: "bench", Logger: logger, PollInterval: 20 * time.Millisecond})
	require.NoError(b, err)
	def, err := json.Marshal(obj{"name": "bulk", "nodes": []obj{
		node("wait", "wait_events", obj{"apiCall": obj{"url": "http://127.0.0.1:9/process"}, "kafkaEvent": obj{"topic": "orders"}, "timeout": 1}),
		node("after", "wait_events", obj{}),
	}, "edges": []obj{edge("wait", "after", "")}})
	require.NoError(b, err)
	_, err = ex.PutWorkflow(ctx, "bulk", def)
	require.NoError(b, err)

	for b.Loop() {
		b.StopTimer()
		_, err := pool.Exec(ctx, `TRUNCATE executions CASCADE`)
		require.NoError(b, err)
		template := failedTemplate(b, ctx, pool, ex, ex.Aggregator())
		cloneExecution(b, ctx, pool, template, n-1)
		b.StartTimer()

		started := time.Now()
		res, err := ex.RedriveMany(ctx, executor.RedriveFilter{Workflow: "bulk"}, executor.BulkOptions{Limit: executor.BulkLimitMax, Batch: batch})
		took := time.Since(started)
		require.NoError(b, err)
		b.StopTimer()
		require.Equal(b, n, res.Redriven)
		var once int
		require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM executions WHERE status = 'waiting' AND redrive_count = 1`).Scan(&once))
		require.Equal(b, n, once)
		b.ReportMetric(float64(n)/took.Seconds(), "executions/s")
		b.Logf("redrove %d executions in %d batches of %d in %s: %.0f executions/s", n, res.Batches, batch, took, float64(n)/took.Seconds())
		b.StartTimer()
	}
}

// failedTemplate runs one execution until its wait times out and it fails.
func failedTemplate(b *testing.B, ctx context.Context, pool *pgxpool.Pool, ex *executor.Executor, agg *aggregator.Aggregator) uuid.UUID {
	st, err := ex.StartExecution(ctx, "bulk", nil)
	require.NoError(b, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = ex.Run(runCtx); done <- struct{}{} }()
	go func() { agg.RunSweeper(runCtx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()
	deadline := time.Now().Add(30 * time.Second)
	recorded := false
	for {
		v, err := readmodel.New(pool).Execution(ctx, st.ID)
		require.NoError(b, err)
		if !recorded && len(v.Waits) == 1 && v.Waits[0].Status == vocab.WaitWaiting {
			_, err := agg.Apply(ctx, aggregator.Event{ExecutionID: st.ID, CorrelationID: v.Waits[0].CorrelationID,
				Name: aggregator.EventKafka, Payload: []byte(`{"sku": 1}`), Source: aggregator.Source{Kind: "kafka", Topic: "orders"}})
			require.NoError(b, err)
			recorded = true
		}
		if v.Status == "failed" {
			return st.ID
		}
		require.True(b, time.Now().Before(deadline), "the template execution did not fail: %s", v.Status)
		time.Sleep(20 * time.Millisecond)
	}
}

// cloneExecution copies an execution n times in SQL — its row, nodes and waits, under
// new ids and correlation ids — each failing a millisecond after the one before.
func cloneExecution(b *testing.B, ctx context.Context, pool *pgxpool.Pool, id uuid.UUID, n int) {
	tx, err := pool.Begin(ctx)
	require.NoError(b, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `CREATE TEMP TABLE clone_ids ON COMMIT DROP AS
		SELECT gen_random_uuid() AS id, g AS n FROM generate_series(1, $1::integer) AS g`, n)
	require.NoError(b, err)
	for _, sql := range []string{
		`INSERT INTO executions
		 SELECT (jsonb_populate_record(NULL::executions, to_jsonb(e) || jsonb_build_object(
		     'id', c.id, 'finished_at', e.finished_at - make_interval(secs => c.n / 1000.0)))).*
		 FROM executions AS e, clone_ids AS c WHERE e.id = $1`,
		`INSERT INTO node_execution_rows
		 SELECT (jsonb_populate_record(NULL::node_execution_rows, to_jsonb(x) || jsonb_build_object('execution_id', c.id))).*
		 FROM node_execution_rows AS x, clone_ids AS c WHERE x.execution_id = $1`,
		`INSERT INTO execution_wait_states
		 SELECT (jsonb_populate_record(NULL::execution_wait_states, to_jsonb(w) || jsonb_build_object(
		     'id', gen_random_uuid(), 'execution_id', c.id, 'correlation_id', gen_random_uuid()))).*
		 FROM execution_wait_states AS w, clone_ids AS c WHERE w.execution_id = $1`,
	} {
		_, err := tx.Exec(ctx, sql, id)
		require.NoError(b, err)
	}
	require.NoError(b, tx.Commit(ctx))
	_, err = pool.Exec(ctx, `ANALYZE executions, node_execution_rows, execution_wait_states`)
	require.NoError(b, err)
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	return n
}
