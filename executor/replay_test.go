package executor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// deadLetterIDs lists the ids of an execution's dead letters, oldest first.
func (p *pod) deadLetterIDs(t *testing.T, reason string) []int64 {
	t.Helper()
	rows, err := p.pool.Query(context.Background(), `SELECT id FROM event_dead_letters WHERE reason = $1 ORDER BY id`, reason)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// TestReplayDeadLetter: an event sent by type waits in the buffer for a node that is
// never reached — the gate before it times out and the execution fails, taking the
// buffered event to the dead letters. Replayed then, it does nothing and leaves no
// trace. Once the execution is redriven and reaches the node, the replay delivers it,
// once; a copy of the same event (same id) is a duplicate and changes nothing; a
// dismissed dead letter stays dismissed.
func TestReplayDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.workflow("replay-dl", []obj{
		node("gate", "wait_events", obj{"events": []any{sendEv("go", "go")}, "timeout": "2s"}),
		sendWait("w1", sendEv("item", "item")),
		sendWait("w2", sendEv("item", "item")),
	}, []obj{edge("gate", "w1", ""), edge("w1", "w2", "")}))
	h.run(t)
	id := h.start(t, name, nil)
	h.waitStatus(t, id, "waiting")
	require.Equal(t, aggregator.SendBuffered, h.send(t, id, "item", obj{"n": "1"}, "i-1").Outcome)
	h.waitStatus(t, id, "failed")
	dls := h.deadLetterIDs(t, "execution_finished")
	require.Len(t, dls, 1)
	dl := dls[0]

	unmatched := h.count(t, `SELECT count(*) FROM unmatched_events`)
	_, err := h.agg.ReplayDeadLetter(ctx, dl, nil)
	var notApplied *aggregator.NotAppliedError
	require.ErrorAs(t, err, &notApplied)
	require.Equal(t, "execution_finished", notApplied.Outcome)
	require.Equal(t, unmatched, h.count(t, `SELECT count(*) FROM unmatched_events`), "a replay that did nothing leaves no trace")
	require.Zero(t, h.count(t, `SELECT count(*) FROM event_dead_letters WHERE resolution IS NOT NULL`))

	_, err = h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	require.Equal(t, aggregator.SendDelivered, h.send(t, id, "go", obj{}, "").Outcome)
	eventually(t, func() bool { return h.waitsOf(t, id, "w1", vocab.WaitWaiting) == 1 })

	r, err := h.agg.ReplayDeadLetter(ctx, dl, nil)
	require.NoError(t, err)
	require.Equal(t, aggregator.Replayed{ID: dl, ExecutionID: id, Outcome: "delivered"}, r)
	eventually(t, func() bool { return h.waitsOf(t, id, "w2", vocab.WaitWaiting) == 1 })
	v := h.view(t, id)
	require.Equal(t, obj{"n": "1"}, output(t, nodeOf(t, v, "w1"))["item"])
	w1Version := h.waitRow(t, id, "w1").Version

	_, err = h.agg.ReplayDeadLetter(ctx, dl, nil)
	var resolved *aggregator.ResolvedError
	require.ErrorAs(t, err, &resolved)
	require.Equal(t, string(aggregator.ResolutionReplayed), resolved.Resolution)

	// A copy of the dead letter, same event id: the event is recorded, so the replay is
	// a duplicate — w2, which waits for an item, does not get it.
	var dup int64
	require.NoError(t, h.pool.QueryRow(ctx, `INSERT INTO event_dead_letters (execution_id, event_type, event_id, payload, source, reason, buffered_at)
		SELECT execution_id, event_type, event_id, payload, source, 'expired', buffered_at FROM event_dead_letters WHERE id = $1
		RETURNING id`, dl).Scan(&dup))
	r, err = h.agg.ReplayDeadLetter(ctx, dup, nil)
	require.NoError(t, err)
	require.Equal(t, "duplicate", r.Outcome)
	require.Equal(t, string(vocab.WaitWaiting), h.waitRow(t, id, "w2").Status)
	require.Empty(t, waitOf(t, h.view(t, id), "w2").ReceivedEvents)
	require.Equal(t, w1Version, h.waitRow(t, id, "w1").Version)

	page, err := readmodel.New(h.pool).DeadLetters(ctx, &id, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	list := page.Items
	require.Len(t, list, 2)
	require.Equal(t, string(aggregator.ResolutionReplayed), list[0].Resolution)
	require.Equal(t, "duplicate into execution "+id.String(), list[0].ResolutionDetail)
	require.Equal(t, "delivered into execution "+id.String(), list[1].ResolutionDetail)
	require.NotNil(t, list[1].ResolvedAt)

	var other int64
	require.NoError(t, h.pool.QueryRow(ctx, `INSERT INTO event_dead_letters (execution_id, event_type, payload, source, reason, buffered_at)
		VALUES ($1, 'item', '{"n": "2"}', '{"kind": "send"}', 'expired', now()) RETURNING id`, id).Scan(&other))
	require.ErrorContains(t, h.agg.DismissDeadLetter(ctx, other, ""), "reason: must not be empty")
	require.NoError(t, h.agg.DismissDeadLetter(ctx, other, "sent by mistake"))
	require.ErrorAs(t, h.agg.DismissDeadLetter(ctx, other, "again"), &resolved)
	require.Equal(t, string(aggregator.ResolutionDismissed), resolved.Resolution)
	_, err = h.agg.ReplayDeadLetter(ctx, other, nil)
	require.ErrorAs(t, err, &resolved)
	require.Empty(t, waitOf(t, h.view(t, id), "w2").ReceivedEvents)
	_, err = h.agg.ReplayDeadLetter(ctx, 1<<40, nil)
	require.ErrorIs(t, err, aggregator.ErrEventNotFound)
}

// TestReplayUnmatched: the reply to a wait arrives after the wait timed out and is kept
// as unmatched (late). After a redrive, eight operators replay it at once: it is applied
// once, completing the wait, and the others are told it was replayed already. A callback
// whose payload was kept only as an excerpt cannot be replayed.
func TestReplayUnmatched(t *testing.T) {
	t.Parallel()
	const operators = 8
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.redriveDef("replay-unmatched", 2))
	h.run(t)
	id := h.start(t, name, obj{"order": 1})
	corr := waitOf(t, h.waitStatus(t, id, "waiting"), "wait").CorrelationID
	require.Equal(t, aggregator.Recorded, h.apply(t, id, corr, aggregator.EventKafka, obj{"sku": "k-1"}))
	h.waitStatus(t, id, "failed")
	require.Equal(t, aggregator.Late, h.apply(t, id, corr, aggregator.EventAPIResponse, obj{"ok": "late"}))
	var late int64
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT id FROM unmatched_events WHERE reason = 'late'`).Scan(&late))

	_, err := h.ex.Redrive(ctx, id)
	require.NoError(t, err)
	version := h.waitRow(t, id, "wait").Version

	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range operators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := h.agg.ReplayUnmatched(ctx, late, nil)
			var resolved *aggregator.ResolvedError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				outcomes[r.Outcome]++
			case errors.As(err, &resolved):
				outcomes["already "+resolved.Resolution]++
			default:
				assertNoError(t, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Equal(t, map[string]int{"completed": 1, "already replayed": operators - 1}, outcomes)
	v := h.waitStatus(t, id, "completed")
	require.Equal(t, version+1, h.waitRow(t, id, "wait").Version, "the reply recorded once")
	require.Equal(t, obj{"ok": "late"}, output(t, nodeOf(t, v, "wait"))["apiResponse"])
	h.requireQueuesEmpty(t, id)

	big := obj{"ok": strings.Repeat("x", 600)}
	require.Equal(t, aggregator.Late, h.apply(t, id, corr, aggregator.EventAPIResponse, big))
	var truncated int64
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT max(id) FROM unmatched_events`).Scan(&truncated))
	_, err = h.agg.ReplayUnmatched(ctx, truncated, nil)
	var notReplayable *aggregator.NotReplayableError
	require.ErrorAs(t, err, &notReplayable)
	require.NoError(t, h.agg.DismissUnmatched(ctx, truncated, "the order was re-sent"))
	page, err := readmodel.New(h.pool).Unmatched(ctx, readmodel.UnmatchedFilter{}, readmodel.Paging{Limit: 10})
	require.NoError(t, err)
	list := page.Items
	require.Equal(t, string(aggregator.ResolutionDismissed), list[0].Resolution)
	require.Equal(t, "the order was re-sent", list[0].ResolutionDetail)
}

// waitsOf counts the waits of a node in a status (none before the node registers one).
func (p *pod) waitsOf(t *testing.T, execID uuid.UUID, nodeID string, status vocab.WaitStatus) int {
	t.Helper()
	return p.count(t, `SELECT count(*) FROM execution_wait_states WHERE execution_id = $1 AND node_id = $2 AND status = $3`,
		execID, nodeID, status)
}

// TestDismissDeadLettersInBulk: dead letters selected by workflow and event type are
// counted, then dismissed in batches up to a limit; a second call dismisses the rest,
// and what the filter leaves out is not touched.
func TestDismissDeadLettersInBulk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := setup(t)
	name := h.put(t, h.redriveDef("bulk-dl", 600))
	id := h.start(t, name, obj{"order": 1})
	h.exec(t, `INSERT INTO event_dead_letters (execution_id, event_type, payload, source, reason, buffered_at)
		SELECT $1, CASE WHEN g <= 7 THEN 'item' ELSE 'other' END, jsonb_build_object('n', g), '{"kind": "send"}', 'expired', now()
		FROM generate_series(1, 9) AS g`, id)

	f := aggregator.DeadLetterFilter{Workflow: name, EventType: "item"}
	r, err := h.agg.DismissDeadLetters(ctx, f, "", true, 100, 10)
	require.NoError(t, err)
	require.Equal(t, aggregator.DismissedMany{Matched: 7, DryRun: true}, r)
	_, err = h.agg.DismissDeadLetters(ctx, f, "", false, 100, 10)
	require.ErrorContains(t, err, "reason: must not be empty")
	r, err = h.agg.DismissDeadLetters(ctx, f, "items are re-sent by the shop", false, 5, 2)
	require.NoError(t, err)
	require.Equal(t, aggregator.DismissedMany{Matched: 7, Dismissed: 5, Batches: 3, More: true}, r)
	r, err = h.agg.DismissDeadLetters(ctx, f, "items are re-sent by the shop", false, 5, 2)
	require.NoError(t, err)
	require.Equal(t, aggregator.DismissedMany{Matched: 2, Dismissed: 2, Batches: 1}, r)
	require.Equal(t, 7, h.count(t, `SELECT count(*) FROM event_dead_letters WHERE resolution = 'dismissed'
		AND resolution_detail = 'items are re-sent by the shop' AND event_type = 'item'`))
	require.Equal(t, 2, h.count(t, `SELECT count(*) FROM event_dead_letters WHERE resolution IS NULL AND event_type = 'other'`))
	r, err = h.agg.DismissDeadLetters(ctx, aggregator.DeadLetterFilter{Workflow: "nope"}, "x", false, 100, 10)
	require.NoError(t, err)
	require.Zero(t, r.Matched)
}
