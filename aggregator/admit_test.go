package aggregator_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestAdmissionLocksInOneOrder: registrations of waits matched by payload lock each
// match type (topic and type) while they count its waiters. Transaction 1 holds type A's
// lock; transaction 2 registers a wait expecting types B then A; transaction 1 then
// registers one expecting B. Locking in the node's order, 2 would hold B and wait for A
// while 1 waits for B: a deadlock, and one node run failed. Locked in one order, 2 waits
// for A holding nothing, and both commit.
func TestAdmissionLocksInOneOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	expect := func(types ...string) aggregator.Registration {
		value, _ := aggregator.MatchValue("o-1")
		reg := aggregator.Registration{Strategy: vocab.StrategyAll, Timeout: time.Hour, OnTimeout: vocab.OnTimeoutFail}
		for _, typ := range types {
			reg.Expected = append(reg.Expected, aggregator.Expected{Name: "e_" + typ, Source: "kafka", Topic: "orders", Type: typ,
				Required: true, Match: &aggregator.ExpectedMatch{Left: "order.id", Value: value}})
		}
		return reg
	}
	register := func(tx pgx.Tx, reg aggregator.Registration) error {
		reg.ExecutionID, reg.CorrelationID, reg.NodeID = uuid.New(), uuid.New(), waitNode
		if _, err := tx.Exec(ctx, `INSERT INTO executions (id, workflow_name, workflow_version, status, input) VALUES ($1, 'orders', 1, 'waiting', '{}')`, reg.ExecutionID); err != nil {
			return err
		}
		_, err := f.agg.Register(ctx, tx, reg)
		return err
	}

	tx1, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx1.Rollback(context.Background()) }()
	require.NoError(t, register(tx1, expect("A")))
	var holder int32
	require.NoError(t, tx1.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder))

	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return register(tx, expect("B", "A")) })
	}()
	require.Eventually(t, func() bool {
		var blocked int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, holder).Scan(&blocked))
		return blocked > 0
	}, 15*time.Second, 5*time.Millisecond, "the second registration never waited for the first")

	require.NoError(t, register(tx1, expect("B")), "the first transaction takes B's lock")
	require.NoError(t, tx1.Commit(ctx))
	select {
	case err := <-second:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the second registration did not finish after the first committed")
	}
	var waits int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states`).Scan(&waits))
	require.Equal(t, 3, waits)
}
