package aggregator_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestApplyBatchDecidesLikeApplyTx feeds the same random event sequences (duplicates,
// late and foreign events, unknown and mismatched ids included) to twin sets of waits:
// one set through ApplyBatch in a few transactions, the other event by event through
// ApplyTx. Every outcome and every final row must agree.
func TestApplyBatchDecidesLikeApplyTx(t *testing.T) {
	t.Parallel()
	f := setup(t)
	both := []aggregator.Expected{
		{Name: api, Source: "callback", Required: true},
		{Name: kafka, Source: "kafka", Topic: "orders", Required: false},
	}
	regs := []aggregator.Registration{
		registration(vocab.StrategyAll, both),
		registration(vocab.StrategyAny, both),
		registration(vocab.StrategyRequiredOnly, both),
		registration(vocab.StrategyCustom, both, kafka),
	}
	const perStrategy = 6
	var batchWaits, twinWaits []wait
	for _, reg := range regs {
		batchWaits = append(batchWaits, f.newWaits(t, perStrategy, reg)...)
		twinWaits = append(twinWaits, f.newWaits(t, perStrategy, reg)...)
	}

	rng := rand.New(rand.NewPCG(7, 11))
	payloads := []string{`{"n":1}`, `{"n":2}`, kafkaPayload, apiPayload}
	type step struct {
		idx     int // index into the wait lists; -1: unknown ids, -2: mismatched ids
		name    string
		payload string
	}
	var steps []step
	for range 400 {
		s := step{idx: rng.IntN(len(batchWaits)), name: []string{api, kafka}[rng.IntN(2)], payload: payloads[rng.IntN(len(payloads))]}
		switch rng.IntN(20) {
		case 0:
			s.idx = -1
		case 1:
			s.idx = -2
		}
		steps = append(steps, s)
	}
	eventFor := func(ws []wait, s step) aggregator.Event {
		switch s.idx {
		case -1:
			return wait{ExecutionID: uuid.New(), CorrelationID: uuid.New()}.event(s.name, s.payload)
		case -2: // a real correlation id with another execution's id
			w := ws[0]
			w.ExecutionID = ws[1].ExecutionID
			return w.event(s.name, s.payload)
		}
		return ws[s.idx].event(s.name, s.payload)
	}

	ctx := t.Context()
	var batchResults []aggregator.Result
	for start := 0; start < len(steps); start += 37 { // uneven batches
		var evs []aggregator.Event
		for _, s := range steps[start:min(start+37, len(steps))] {
			evs = append(evs, eventFor(batchWaits, s))
		}
		require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			res, err := f.agg.ApplyBatch(ctx, tx, evs)
			batchResults = append(batchResults, res...)
			return err
		}))
	}
	for i, s := range steps {
		var res aggregator.Result
		require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			var err error
			res, err = f.agg.ApplyTx(ctx, tx, eventFor(twinWaits, s))
			return err
		}))
		b := batchResults[i]
		require.Equal(t, res.Outcome, b.Outcome, "step %d", i)
		require.Equal(t, res.Status, b.Status, "step %d", i)
		require.Equal(t, res.Version, b.Version, "step %d", i)
	}
	for i := range batchWaits {
		bw, tw := f.waitState(t, batchWaits[i].ID), f.waitState(t, twinWaits[i].ID)
		require.Equal(t, tw.Status, bw.Status, "wait %d", i)
		require.Equal(t, tw.Version, bw.Version, "wait %d", i)
		require.Equal(t, receivedNames(t, tw), receivedNames(t, bw), "wait %d", i)
		require.JSONEq(t, string(orNull(tw.ApiResponseData)), string(orNull(bw.ApiResponseData)), "wait %d", i)
		require.JSONEq(t, string(orNull(tw.KafkaEventData)), string(orNull(bw.KafkaEventData)), "wait %d", i)
		require.Equal(t, f.runQueue(t, twinWaits[i]), f.runQueue(t, batchWaits[i]), "wait %d", i)
		require.Equal(t, f.node(t, twinWaits[i]).Status, f.node(t, batchWaits[i]).Status, "wait %d", i)
	}
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// TestApplyBatchConflictFallsBack makes one wait of a batch lose its version fence: the
// batch's single write skips it, and its events are decided again, one by one, against
// what the rival committed.
func TestApplyBatchConflictFallsBack(t *testing.T) {
	t.Parallel()
	f := setup(t)
	both := []aggregator.Expected{
		{Name: api, Source: "callback", Required: true},
		{Name: kafka, Source: "kafka", Topic: "orders", Required: true},
	}
	ws := f.newWaits(t, 3, registration(vocab.StrategyAll, both))
	contested := ws[1]
	var results []aggregator.Result
	err := f.interleave(t,
		func(ctx context.Context, tx pgx.Tx) error { // the rival records the api_response first
			_, err := f.agg.ApplyTx(ctx, tx, contested.event(api, apiPayload))
			return err
		},
		func(ctx context.Context, tx pgx.Tx) error {
			var err error
			results, err = f.agg.ApplyBatch(ctx, tx, []aggregator.Event{
				ws[0].event(kafka, kafkaPayload),
				contested.event(api, apiPayload),     // the very event the rival recorded: duplicate
				contested.event(kafka, kafkaPayload), // completes the wait on top of the rival's
				ws[2].event(api, apiPayload),
			})
			return err
		})
	require.NoError(t, err)
	require.Equal(t, []aggregator.Outcome{aggregator.Recorded, aggregator.Duplicate, aggregator.Completed, aggregator.Recorded},
		[]aggregator.Outcome{results[0].Outcome, results[1].Outcome, results[2].Outcome, results[3].Outcome})
	require.GreaterOrEqual(t, results[2].Conflicts, 1)
	row := f.waitState(t, contested.ID)
	require.Equal(t, vocab.WaitCompleted, row.Status)
	require.Equal(t, int64(3), row.Version, "two applied events on top of version 1")
	require.Equal(t, []string{api, kafka}, receivedNames(t, row))
	require.Equal(t, []string{"resume"}, f.runQueue(t, contested))
}

// TestApplyBatchFromStaleRowsKeepsTheFence hands applyBatch a wait as it was read before
// a rival recorded an event on it (as sendTxs hands over the waits it read): the write is
// fenced by the version of that read, misses, and the event is decided again against
// what the rival committed, so nothing the rival recorded is lost.
func TestApplyBatchFromStaleRowsKeepsTheFence(t *testing.T) {
	t.Parallel()
	f := setup(t)
	both := []aggregator.Expected{
		{Name: api, Source: "callback", Required: true},
		{Name: kafka, Source: "kafka", Topic: "orders", Required: true},
	}
	w := f.newWait(t, registration(vocab.StrategyAll, both))
	stale := f.waitState(t, w.ID)
	require.Equal(t, aggregator.Recorded, f.apply(t, w.event(api, apiPayload)).Outcome)

	var results []aggregator.Result
	err := pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		var err error
		results, err = f.agg.ApplyBatchFrom(t.Context(), tx, []aggregator.Event{w.event(kafka, kafkaPayload)},
			[]dbsqlc.ExecutionWaitState{stale})
		return err
	})
	require.NoError(t, err)
	require.Equal(t, aggregator.Completed, results[0].Outcome, "decided again on top of the rival's event")
	require.Equal(t, 1, results[0].Conflicts, "the write behind the stale version missed its fence once")
	row := f.waitState(t, w.ID)
	require.Equal(t, vocab.WaitCompleted, row.Status)
	require.Equal(t, int64(3), row.Version, "two applied events on top of version 1")
	require.Equal(t, []string{api, kafka}, receivedNames(t, row))
}
