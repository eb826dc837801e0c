package aggregator_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

func (f *fixture) failCall(t *testing.T, id uuid.UUID, reason string) bool {
	t.Helper()
	var failed bool
	err := pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		var err error
		failed, err = f.agg.FailCall(t.Context(), tx, id, reason)
		return err
	})
	require.NoError(t, err)
	return failed
}

func TestFailCall(t *testing.T) {
	t.Parallel()
	f := setup(t)
	both := registration(vocab.StrategyAll, expectBoth(true, true))
	tests := []struct {
		name   string
		reg    aggregator.Registration
		before func(w wait) []aggregator.Event
		want   bool
	}{
		{name: "nothing received", reg: both, want: true},
		{name: "api-only wait", reg: registration(vocab.StrategyAll, expectAPIOnly()), want: true},
		{name: "only kafka_event received", reg: both,
			before: func(w wait) []aggregator.Event { return []aggregator.Event{w.event(kafka, kafkaPayload)} }, want: true},
		{name: "api_response already received", reg: both,
			before: func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, apiPayload)} }, want: false},
		{name: "completed by api_response", reg: registration(vocab.StrategyAny, expectBoth(true, true)),
			before: func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, apiPayload)} }, want: false},
		{name: "completed by kafka_event alone", reg: registration(vocab.StrategyRequiredOnly, expectBoth(false, true)),
			before: func(w wait) []aggregator.Event { return []aggregator.Event{w.event(kafka, kafkaPayload)} }, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := f.newWait(t, tt.reg)
			if tt.before != nil {
				for _, ev := range tt.before(w) {
					f.apply(t, ev)
				}
			}
			ws := f.waitState(t, w.ID)
			before := f.snapshot(t, w.ExecutionID)

			require.Equal(t, tt.want, f.failCall(t, w.ID, "call failed: 503 after 5 attempts"))
			if !tt.want {
				require.Equal(t, before, f.snapshot(t, w.ExecutionID), "nothing changed")
				return
			}
			after := f.waitState(t, w.ID)
			require.Equal(t, vocab.WaitFailed, after.Status)
			require.Equal(t, ws.Version+1, after.Version)
			require.NotNil(t, after.Error)
			require.Equal(t, "call failed: 503 after 5 attempts", *after.Error)
			require.Equal(t, ws.ReceivedEvents, after.ReceivedEvents)
			require.Equal(t, vocab.NodeWaiting, f.node(t, w).Status, "the caller fails the node")
			require.Empty(t, f.runQueue(t, w))

			// A failed wait takes no more events and cannot be failed again.
			failedSnap := f.snapshot(t, w.ExecutionID)
			require.False(t, f.failCall(t, w.ID, "again"))
			for _, ev := range []aggregator.Event{w.event(api, apiPayload), w.event(kafka, `{"status":"late"}`)} {
				if ev.Name == kafka && !after.KafkaEventEnabled {
					continue
				}
				res := f.apply(t, ev)
				require.Equal(t, aggregator.Late, res.Outcome, ev.Name)
				require.Equal(t, vocab.WaitFailed, res.Status)
			}
			require.Equal(t, failedSnap, f.snapshot(t, w.ExecutionID), "nothing changed")
		})
	}

	t.Run("unknown wait", func(t *testing.T) {
		t.Parallel()
		require.False(t, f.failCall(t, uuid.New(), "boom"))
	})

	t.Run("redelivered event of a failed wait is a duplicate", func(t *testing.T) {
		t.Parallel()
		w := f.newWait(t, both)
		require.Equal(t, aggregator.Recorded, f.apply(t, w.event(kafka, kafkaPayload)).Outcome)
		require.True(t, f.failCall(t, w.ID, "boom"))
		require.Equal(t, aggregator.Duplicate, f.apply(t, w.event(kafka, kafkaPayload)).Outcome)
	})

	t.Run("rolled back with its transaction", func(t *testing.T) {
		t.Parallel()
		w := f.newWait(t, both)
		before := f.snapshot(t, w.ExecutionID)
		tx, err := f.pool.Begin(t.Context())
		require.NoError(t, err)
		failed, err := f.agg.FailCall(t.Context(), tx, w.ID, "boom")
		require.NoError(t, err)
		require.True(t, failed)
		require.NoError(t, tx.Rollback(t.Context()))
		require.Equal(t, before, f.snapshot(t, w.ExecutionID))
	})
}

// FailCall is fenced like events: it re-decides after losing the version race.
func TestFailCallVersionFence(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name        string
		rival       func(ctx context.Context, tx pgx.Tx, w wait) error
		want        bool
		wantStatus  vocab.WaitStatus
		wantVersion int64
	}{
		{
			name: "version bumped",
			rival: func(ctx context.Context, tx pgx.Tx, w wait) error {
				_, err := tx.Exec(ctx, `UPDATE execution_wait_states SET version = version + 1 WHERE id = $1`, w.ID)
				return err
			},
			want: true, wantStatus: vocab.WaitFailed, wantVersion: 3,
		},
		{
			name: "kafka_event arrived",
			rival: func(ctx context.Context, tx pgx.Tx, w wait) error {
				_, err := f.agg.ApplyTx(ctx, tx, w.event(kafka, kafkaPayload))
				return err
			},
			want: true, wantStatus: vocab.WaitFailed, wantVersion: 3,
		},
		{
			name: "api_response arrived",
			rival: func(ctx context.Context, tx pgx.Tx, w wait) error {
				_, err := f.agg.ApplyTx(ctx, tx, w.event(api, apiPayload))
				return err
			},
			want: false, wantStatus: vocab.WaitWaiting, wantVersion: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
			var failed bool
			err := f.interleave(t,
				func(ctx context.Context, tx pgx.Tx) error { return tt.rival(ctx, tx, w) },
				func(ctx context.Context, tx pgx.Tx) error {
					var err error
					failed, err = f.agg.FailCall(ctx, tx, w.ID, "boom")
					return err
				})
			require.NoError(t, err)
			require.Equal(t, tt.want, failed)
			ws := f.waitState(t, w.ID)
			require.Equal(t, tt.wantStatus, ws.Status)
			require.Equal(t, tt.wantVersion, ws.Version)
		})
	}

	t.Run("bounded retries", func(t *testing.T) {
		t.Parallel()
		agg, err := aggregator.New(f.pool, aggregator.Config{InstanceID: "test", ConflictRetries: 1, Logger: slog.New(f.logs)})
		require.NoError(t, err)
		w := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
		err = f.interleave(t,
			func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `UPDATE execution_wait_states SET version = version + 1 WHERE id = $1`, w.ID)
				return err
			},
			func(ctx context.Context, tx pgx.Tx) error {
				_, err := agg.FailCall(ctx, tx, w.ID, "boom")
				return err
			})
		require.ErrorIs(t, err, aggregator.ErrConflictRetries)
		require.Equal(t, vocab.WaitWaiting, f.waitState(t, w.ID).Status)
	})
}

// TestFailCallByStrategy: a required call that failed ends its wait only when the
// strategy cannot be satisfied without the reply. Otherwise the reply is given up —
// recorded as timed out, so that one arriving after all is late — and the wait goes on
// for the events that can still satisfy it.
func TestFailCallByStrategy(t *testing.T) {
	t.Parallel()
	f := setup(t)
	kafkaShort := []aggregator.Expected{
		{Name: api, Source: "callback", Required: true},
		{Name: kafka, Source: "kafka", Topic: "orders", Required: true, TimeoutMS: 60_000},
	}
	tests := []struct {
		name string
		reg  aggregator.Registration
		// kafkaLate passes kafka_event's own deadline before the call fails.
		kafkaLate bool
		fail      bool
	}{
		{name: "any: kafka_event can still come", reg: registration(vocab.StrategyAny, expectBoth(true, true))},
		{name: "any: kafka_event's own deadline passed", reg: registration(vocab.StrategyAny, kafkaShort), kafkaLate: true, fail: true},
		{name: "custom without api_response", reg: registration(vocab.StrategyCustom, expectBoth(true, true), kafka)},
		{name: "custom with api_response", reg: registration(vocab.StrategyCustom, expectBoth(true, true), api), fail: true},
		{name: "required_only", reg: registration(vocab.StrategyRequiredOnly, expectBoth(true, false)), fail: true},
		{name: "all", reg: registration(vocab.StrategyAll, expectBoth(true, false)), fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := f.newWait(t, tt.reg)
			if tt.kafkaLate {
				_, err := f.pool.Exec(t.Context(), `UPDATE execution_wait_states
					SET expected_events = jsonb_set(expected_events::jsonb, '{1,deadline_at}', to_jsonb(now() - interval '1 second'))::json
					WHERE id = $1`, w.ID)
				require.NoError(t, err)
			}
			before := f.waitState(t, w.ID)
			require.Equal(t, tt.fail, f.failCall(t, w.ID, "call failed: 503 after 5 attempts"))
			ws := f.waitState(t, w.ID)
			require.Equal(t, before.Version+1, ws.Version)
			if tt.fail {
				require.Equal(t, vocab.WaitFailed, ws.Status)
				return
			}
			require.Equal(t, vocab.WaitWaiting, ws.Status)
			require.Nil(t, ws.Error)
			require.Equal(t, []string{api}, timedOutOf(t, ws), "the reply is given up like an event past its deadline")
			require.Len(t, f.logs.find(slog.LevelWarn,
				"required correlated call failed; the strategy can still be satisfied, the wait goes on without its reply",
				"correlation_id", w.CorrelationID), 1)

			res := f.apply(t, w.event(api, apiPayload))
			require.Equal(t, aggregator.Late, res.Outcome, "a reply after the call was given up")
			res = f.apply(t, w.event(kafka, kafkaPayload))
			require.Equal(t, aggregator.Completed, res.Outcome)
			out := outputOf(t, f.node(t, w))
			require.Equal(t, []any{api}, out["timed_out_events"])
			require.Equal(t, []any{kafka}, out["arrival_order"])
			require.False(t, f.failCall(t, w.ID, "again"), "a completed wait is not failed")
		})
	}
}
