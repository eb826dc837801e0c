package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// burst serialises the tests that fill their whole pool (20 connections) with concurrent
// deliveries, so that this package never holds more than one such pool open at a time:
// the test server's connection limit is shared with every other package's tests.
var burst = make(chan struct{}, 1)

// exclusive holds burst until the test and all its cleanups (closing its pool) are done.
// Call it before setup, so that its cleanup runs after the pool's.
func exclusive(t *testing.T) {
	t.Helper()
	select {
	case burst <- struct{}{}:
	case <-t.Context().Done():
		t.Fatal("cancelled waiting for another concurrency test")
	}
	t.Cleanup(func() { <-burst })
}

// fire delivers every event from its own goroutine, all released at the same instant.
func (f *fixture) fire(t *testing.T, evs []aggregator.Event) []aggregator.Result {
	t.Helper()
	ctx := t.Context()
	start := make(chan struct{})
	results := make([]aggregator.Result, len(evs))
	errs := make([]error, len(evs))
	var wg sync.WaitGroup
	for i, ev := range evs {
		wg.Go(func() {
			<-start
			results[i], errs[i] = f.agg.Apply(ctx, ev)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "delivery %d (%s)", i, evs[i].Name)
	}
	return results
}

// waitRow is what the race tests check of one wait, read in one query.
type waitRow struct {
	ID          uuid.UUID
	Status      string
	Version     int64
	Received    []aggregator.Received
	Resumes     int
	RunQueue    int
	NodeStatus  string
	OutputOrder []string
}

func (f *fixture) waitRows(t *testing.T, waits []wait) map[uuid.UUID]waitRow {
	t.Helper()
	ids := make([]string, len(waits))
	for i, w := range waits {
		ids[i] = w.ID.String()
	}
	rows, err := f.pool.Query(t.Context(), `
		SELECT w.id, w.status, w.version, w.received_events,
			(SELECT count(*) FROM run_queue r WHERE r.execution_id = w.execution_id AND r.node_id = w.node_id AND r.kind = 'resume'),
			(SELECT count(*) FROM run_queue r WHERE r.execution_id = w.execution_id),
			n.status, coalesce(n.output->'arrival_order', '[]')
		FROM execution_wait_states w
		JOIN node_executions n ON n.execution_id = w.execution_id AND n.node_id = w.node_id
		WHERE w.id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	out := map[uuid.UUID]waitRow{}
	for rows.Next() {
		var r waitRow
		var received, order []byte
		require.NoError(t, rows.Scan(&r.ID, &r.Status, &r.Version, &received, &r.Resumes, &r.RunQueue, &r.NodeStatus, &order))
		require.NoError(t, json.Unmarshal(received, &r.Received))
		require.NoError(t, json.Unmarshal(order, &r.OutputOrder))
		out[r.ID] = r
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, len(waits))
	return out
}

func names(received []aggregator.Received) []string {
	out := make([]string, len(received))
	for i, r := range received {
		out[i] = r.Name
	}
	return out
}

// TestConcurrentComplementaryEvents races api_response against kafka_event for many
// "all" waits at once: whichever order the database serialises them in, each wait
// completes exactly once, holds both events, and enqueues exactly one continuation.
func TestConcurrentComplementaryEvents(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	const waitsPerRound, rounds = 20, 5
	conflicts, completedByAPI := 0, 0
	for round := range rounds {
		waits := f.newWaits(t, waitsPerRound, registration(vocab.StrategyAll, expectBoth(true, true)))
		var evs []aggregator.Event
		for _, w := range waits {
			evs = append(evs, w.event(api, apiPayload), w.event(kafka, kafkaPayload))
		}
		results := f.fire(t, evs)
		rows := f.waitRows(t, waits)
		for i, w := range waits {
			rAPI, rKafka := results[2*i], results[2*i+1]
			conflicts += rAPI.Conflicts + rKafka.Conflicts
			outcomes := []aggregator.Outcome{rAPI.Outcome, rKafka.Outcome}
			require.ElementsMatch(t, []aggregator.Outcome{aggregator.Recorded, aggregator.Completed}, outcomes, "round %d wait %d", round, i)
			first, second := rAPI, rKafka
			if rAPI.Outcome == aggregator.Completed {
				first, second = rKafka, rAPI
				completedByAPI++
			}
			require.Equal(t, int64(2), first.Version)
			require.Equal(t, vocab.WaitWaiting, first.Status)
			require.Equal(t, int64(3), second.Version)
			require.Equal(t, vocab.WaitCompleted, second.Status)

			row := rows[w.ID]
			require.Equal(t, string(vocab.WaitCompleted), row.Status)
			require.Equal(t, int64(3), row.Version)
			require.Len(t, row.Received, 2)
			require.ElementsMatch(t, []string{api, kafka}, names(row.Received))
			require.Equal(t, 1, row.Resumes, "exactly one continuation")
			require.Equal(t, 1, row.RunQueue)
			require.Equal(t, "completed", row.NodeStatus)
			require.Equal(t, names(row.Received), row.OutputOrder, "output order is the recorded order")
			// The event that completed the wait is the one recorded last.
			if rAPI.Outcome == aggregator.Completed {
				require.Equal(t, api, row.Received[1].Name)
			} else {
				require.Equal(t, kafka, row.Received[1].Name)
			}
		}
	}
	total := waitsPerRound * rounds
	var completed, resumes int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM execution_wait_states WHERE status = 'completed' AND version = 3 AND json_array_length(received_events) = 2`).Scan(&completed))
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM run_queue WHERE kind = 'resume'`).Scan(&resumes))
	require.Equal(t, total, completed)
	require.Equal(t, total, resumes)
	t.Logf("%d waits: %d optimistic-lock conflicts lost and re-decided; api_response completed %d, kafka_event %d",
		total, conflicts, completedByAPI, total-completedByAPI)
}

// TestConcurrentSameEvent delivers one event from many goroutines at once (a redelivery
// storm): exactly one records it, every other one is a duplicate.
func TestConcurrentSameEvent(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	const goroutines, rounds = 16, 6
	conflicts := 0
	for round := range rounds {
		w := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
		ev := w.event(api, apiPayload)
		if round%2 == 1 {
			// Redeliveries by webhook id, with bodies that differ (re-rendered timestamps).
			ev.IdempotencyKey = "wh-" + w.ID.String()
		}
		evs := make([]aggregator.Event, goroutines)
		for i := range evs {
			evs[i] = ev
			if round%2 == 1 {
				evs[i].Payload = json.RawMessage(fmt.Sprintf(`{"order":{"id":"o-1"},"attempt":%d}`, i))
			}
		}
		results := f.fire(t, evs)
		counts := map[aggregator.Outcome]int{}
		winner := -1
		for i, r := range results {
			counts[r.Outcome]++
			conflicts += r.Conflicts
			require.Equal(t, w.ID, r.WaitStateID)
			require.Equal(t, int64(2), r.Version)
			if r.Outcome == aggregator.Recorded {
				winner = i
			}
		}
		require.Equal(t, map[aggregator.Outcome]int{aggregator.Recorded: 1, aggregator.Duplicate: goroutines - 1}, counts, "round %d", round)

		ws := f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitWaiting, ws.Status)
		require.Equal(t, int64(2), ws.Version)
		require.Equal(t, []string{api}, receivedNames(t, ws))
		require.JSONEq(t, string(evs[winner].Payload), string(ws.ApiResponseData), "the winner's payload is stored")
		require.Empty(t, f.runQueue(t, w))
		require.Equal(t, vocab.NodeWaiting, f.node(t, w).Status)

		// The wait still completes normally afterwards.
		require.Equal(t, aggregator.Completed, f.apply(t, w.event(kafka, kafkaPayload)).Outcome)
		require.Equal(t, []string{"resume"}, f.runQueue(t, w))
	}
	t.Logf("%d rounds of %d identical deliveries: %d conflicts", rounds, goroutines, conflicts)
}

// TestConcurrentAnyWait lets many goroutines deliver both events to one "any" wait: the
// first committed completes it, the rest are duplicates of it or late.
func TestConcurrentAnyWait(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	const goroutines, rounds = 16, 6
	conflicts := 0
	for round := range rounds {
		w := f.newWait(t, registration(vocab.StrategyAny, expectBoth(true, true)))
		evs := make([]aggregator.Event, goroutines)
		for i := range evs {
			if i%2 == 0 {
				evs[i] = w.event(api, apiPayload)
			} else {
				evs[i] = w.event(kafka, kafkaPayload)
			}
		}
		results := f.fire(t, evs)
		winner := ""
		for i, r := range results {
			conflicts += r.Conflicts
			if r.Outcome == aggregator.Completed {
				require.Empty(t, winner, "round %d: a second completion", round)
				winner = evs[i].Name
			}
		}
		require.NotEmpty(t, winner, "round %d: no completion", round)
		for i, r := range results {
			switch {
			case r.Outcome == aggregator.Completed:
			case evs[i].Name == winner:
				require.Equal(t, aggregator.Duplicate, r.Outcome, "round %d delivery %d", round, i)
			default:
				require.Equal(t, aggregator.Late, r.Outcome, "round %d delivery %d", round, i)
			}
			require.Equal(t, vocab.WaitCompleted, r.Status)
			require.Equal(t, int64(2), r.Version)
		}

		row := f.waitRows(t, []wait{w})[w.ID]
		require.Equal(t, string(vocab.WaitCompleted), row.Status)
		require.Equal(t, int64(2), row.Version)
		require.Equal(t, []string{winner}, names(row.Received))
		require.Equal(t, 1, row.Resumes)
		require.Equal(t, 1, row.RunQueue)
		require.Equal(t, "completed", row.NodeStatus)
		require.Equal(t, []string{winner}, row.OutputOrder)
	}
	t.Logf("%d rounds of %d mixed deliveries: %d conflicts", rounds, goroutines, conflicts)
}

// TestConcurrentFailCallAndReply races the outbox giving up on a call against the call's
// reply: either the wait fails and the reply is late, or the reply completes the wait and
// the failure is refused. Never both, never neither.
func TestConcurrentFailCallAndReply(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	ctx := t.Context()
	const waitsPerRound, rounds = 10, 4
	failedWins := 0
	for range rounds {
		waits := f.newWaits(t, waitsPerRound, registration(vocab.StrategyAll, expectAPIOnly()))
		start := make(chan struct{})
		failed := make([]bool, len(waits))
		results := make([]aggregator.Result, len(waits))
		errs := make([]error, 2*len(waits))
		var wg sync.WaitGroup
		for i, w := range waits {
			wg.Go(func() {
				<-start
				errs[2*i] = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
					var err error
					failed[i], err = f.agg.FailCall(ctx, tx, w.ID, "call failed: 503")
					return err
				})
			})
			wg.Go(func() {
				<-start
				results[i], errs[2*i+1] = f.agg.Apply(ctx, w.event(api, apiPayload))
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		rows := f.waitRows(t, waits)
		for i, w := range waits {
			row := rows[w.ID]
			require.Equal(t, int64(2), row.Version)
			if failed[i] {
				failedWins++
				require.Equal(t, aggregator.Late, results[i].Outcome)
				require.Equal(t, string(vocab.WaitFailed), row.Status)
				require.Empty(t, row.Received)
				require.Zero(t, row.RunQueue)
				require.Equal(t, "waiting_for_events", row.NodeStatus, "FailCall leaves the node to its caller")
			} else {
				require.Equal(t, aggregator.Completed, results[i].Outcome)
				require.Equal(t, string(vocab.WaitCompleted), row.Status)
				require.Equal(t, []string{api}, names(row.Received))
				require.Equal(t, 1, row.Resumes)
				require.Equal(t, "completed", row.NodeStatus)
			}
		}
	}
	t.Logf("%d races: FailCall won %d", waitsPerRound*rounds, failedWins)
}

// TestVersionFence makes the fenced UPDATE match zero rows deterministically: a rival
// transaction changes the wait after Apply read it and before Apply's UPDATE may run.
// Apply must then reload the wait and decide again, on what the rival committed.
func TestVersionFence(t *testing.T) {
	t.Parallel()
	f := setup(t)
	bump := func(ctx context.Context, tx pgx.Tx, w wait) error {
		_, err := tx.Exec(ctx, `UPDATE execution_wait_states SET version = version + 1, updated_at = now() WHERE id = $1`, w.ID)
		return err
	}
	rivalApply := func(ev func(w wait) aggregator.Event, want aggregator.Outcome) func(ctx context.Context, tx pgx.Tx, w wait) error {
		return func(ctx context.Context, tx pgx.Tx, w wait) error {
			res, err := f.agg.ApplyTx(ctx, tx, ev(w))
			if err == nil && res.Outcome != want {
				err = fmt.Errorf("rival: outcome %s, want %s", res.Outcome, want)
			}
			return err
		}
	}
	tests := []struct {
		name         string
		reg          aggregator.Registration
		rival        func(ctx context.Context, tx pgx.Tx, w wait) error
		wantOutcome  aggregator.Outcome
		wantStatus   vocab.WaitStatus
		wantVersion  int64
		wantReceived []string
		wantResumes  int
	}{
		{
			name: "version bumped", reg: registration(vocab.StrategyAll, expectBoth(true, true)), rival: bump,
			wantOutcome: aggregator.Recorded, wantStatus: vocab.WaitWaiting, wantVersion: 3, wantReceived: []string{api},
		},
		{
			name: "rival recorded the other event", reg: registration(vocab.StrategyAll, expectBoth(true, true)),
			rival:       rivalApply(func(w wait) aggregator.Event { return w.event(kafka, kafkaPayload) }, aggregator.Recorded),
			wantOutcome: aggregator.Completed, wantStatus: vocab.WaitCompleted, wantVersion: 3, wantReceived: []string{kafka, api}, wantResumes: 1,
		},
		{
			name: "rival recorded the same event", reg: registration(vocab.StrategyAll, expectBoth(true, true)),
			rival:       rivalApply(func(w wait) aggregator.Event { return w.event(api, apiPayload) }, aggregator.Recorded),
			wantOutcome: aggregator.Duplicate, wantStatus: vocab.WaitWaiting, wantVersion: 2, wantReceived: []string{api},
		},
		{
			name: "rival recorded another event of that name", reg: registration(vocab.StrategyAll, expectBoth(true, true)),
			rival:       rivalApply(func(w wait) aggregator.Event { return w.event(api, `{"order":{"id":"o-2"}}`) }, aggregator.Recorded),
			wantOutcome: aggregator.AlreadyRecorded, wantStatus: vocab.WaitWaiting, wantVersion: 2, wantReceived: []string{api},
		},
		{
			name: "rival completed an any wait", reg: registration(vocab.StrategyAny, expectBoth(true, true)),
			rival:       rivalApply(func(w wait) aggregator.Event { return w.event(kafka, kafkaPayload) }, aggregator.Completed),
			wantOutcome: aggregator.Late, wantStatus: vocab.WaitCompleted, wantVersion: 2, wantReceived: []string{kafka}, wantResumes: 1,
		},
		{
			name: "rival failed the call", reg: registration(vocab.StrategyAll, expectBoth(true, true)),
			rival: func(ctx context.Context, tx pgx.Tx, w wait) error {
				failed, err := f.agg.FailCall(ctx, tx, w.ID, "boom")
				if err == nil && !failed {
					err = fmt.Errorf("rival: FailCall refused")
				}
				return err
			},
			wantOutcome: aggregator.Late, wantStatus: vocab.WaitFailed, wantVersion: 2, wantReceived: []string{},
		},
		{
			name: "rival cancelled the execution", reg: registration(vocab.StrategyAll, expectBoth(true, true)),
			rival: func(ctx context.Context, tx pgx.Tx, w wait) error {
				_, err := f.q.WaitStateCancelOpenForExecution(ctx, tx, dbsqlc.WaitStateCancelOpenForExecutionParams{ExecutionID: w.ExecutionID, Error: "cancelled"})
				return err
			},
			wantOutcome: aggregator.Late, wantStatus: vocab.WaitCancelled, wantVersion: 2, wantReceived: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := f.newWait(t, tt.reg)
			var res aggregator.Result
			err := f.interleave(t,
				func(ctx context.Context, tx pgx.Tx) error { return tt.rival(ctx, tx, w) },
				func(ctx context.Context, tx pgx.Tx) error {
					var err error
					res, err = f.agg.ApplyTx(ctx, tx, w.event(api, apiPayload))
					return err
				})
			require.NoError(t, err)
			require.Equal(t, 1, res.Conflicts, "exactly one lost race")
			require.Equal(t, tt.wantOutcome, res.Outcome)
			require.Equal(t, tt.wantStatus, res.Status)
			require.Equal(t, tt.wantVersion, res.Version)

			ws := f.waitState(t, w.ID)
			require.Equal(t, tt.wantStatus, ws.Status)
			require.Equal(t, tt.wantVersion, ws.Version)
			require.Equal(t, tt.wantReceived, receivedNames(t, ws))
			require.Len(t, f.runQueue(t, w), tt.wantResumes)
		})
	}

	t.Run("bounded retries", func(t *testing.T) {
		t.Parallel()
		agg, err := aggregator.New(f.pool, aggregator.Config{InstanceID: "test", ConflictRetries: 1, Logger: slog.New(f.logs)})
		require.NoError(t, err)
		w := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
		err = f.interleave(t,
			func(ctx context.Context, tx pgx.Tx) error { return bump(ctx, tx, w) },
			func(ctx context.Context, tx pgx.Tx) error {
				_, err := agg.ApplyTx(ctx, tx, w.event(api, apiPayload))
				return err
			})
		require.ErrorIs(t, err, aggregator.ErrConflictRetries)
		ws := f.waitState(t, w.ID)
		require.Equal(t, int64(2), ws.Version, "only the rival's change")
		require.JSONEq(t, `[]`, string(ws.ReceivedEvents))

		// Delivered again, it goes through.
		res, err := agg.Apply(t.Context(), w.event(api, apiPayload))
		require.NoError(t, err)
		require.Equal(t, aggregator.Recorded, res.Outcome)
		require.Equal(t, int64(3), res.Version)
	})
}

// TestApplyGroupsHandOff: waves of concurrent Apply calls through two group transactions
// at a time. Every call returns its own result, each wait is decided once, and the lead
// is always handed on or given up: a leaked lead would leave a later wave without a
// leader, and the test would hang.
func TestApplyGroupsHandOff(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	agg, err := aggregator.New(f.pool, aggregator.Config{InstanceID: "test", ApplyGroups: 2, Logger: slog.New(f.logs)})
	require.NoError(t, err)
	f.agg = agg
	for wave := range 4 {
		waits := f.newWaits(t, 50, registration(vocab.StrategyAll, expectBoth(true, true)))
		var evs []aggregator.Event
		for _, w := range waits {
			evs = append(evs, w.event(api, apiPayload), w.event(kafka, kafkaPayload), w.event(kafka, kafkaPayload))
		}
		rand.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		counts := map[aggregator.Outcome]int{}
		for i, r := range f.fire(t, evs) {
			require.Equal(t, evs[i].CorrelationID, waits[slices.IndexFunc(waits, func(w wait) bool { return w.ID == r.WaitStateID })].CorrelationID)
			counts[r.Outcome]++
		}
		require.Equal(t, map[aggregator.Outcome]int{aggregator.Recorded: 50, aggregator.Completed: 50, aggregator.Duplicate: 50}, counts, "wave %d", wave)
	}
}

// TestDefaultApplyGroups: one group transaction per CPU the process may use, between 2
// and 4.
func TestDefaultApplyGroups(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(procs)
	for _, c := range []struct{ procs, groups int }{{1, 2}, {2, 2}, {3, 3}, {4, 4}, {16, 4}} {
		runtime.GOMAXPROCS(c.procs)
		require.Equal(t, c.groups, aggregator.DefaultApplyGroups(), "GOMAXPROCS %d", c.procs)
	}
}
