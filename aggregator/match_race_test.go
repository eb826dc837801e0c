package aggregator_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestMatchRacesDeadlineAndRedelivery is TestDeadlineRacesEvents for records correlated
// by payload, with two more ways to meet: each value is awaited by two waits (one record
// reaches both), and each record is delivered twice at once, through each pod (a
// redelivery racing the original), around its waits' deadline (±50 ms) while both pods
// run their sweepers. Every wait ends exactly once — completed with the record recorded
// once, or timed out without it — never both, never neither, and a delivery that
// returned before a wait's deadline completed it.
func TestMatchRacesDeadlineAndRedelivery(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	ctx := t.Context()
	const pairs = 60
	const event = "payment"
	specs := []aggregator.MatchSpec{{Left: "order.id"}}

	pods, logs, stop := f.racingSweepers(t)
	defer stop()

	waits := make([]wait, 0, 2*pairs)
	for p := range pairs {
		value, _ := aggregator.MatchValue(fmt.Sprintf("o-%d", p))
		reg := aggregator.Registration{
			Strategy: vocab.StrategyAll, Timeout: 1500 * time.Millisecond, OnTimeout: vocab.OnTimeoutFail,
			Expected: []aggregator.Expected{{Name: event, Source: "kafka", Topic: "payments", Required: true,
				Match: &aggregator.ExpectedMatch{Left: "order.id", Value: value}}},
		}
		waits = append(waits, f.newWait(t, reg), f.newWait(t, reg))
	}
	expires := map[uuid.UUID]time.Time{}
	for _, w := range waits {
		expires[w.ID] = f.waitState(t, w.ID).ExpiresAt
	}

	type delivery struct {
		start, end time.Time
		err        error
	}
	deliveries := make([][2]delivery, pairs)
	var wg sync.WaitGroup
	for p := range pairs {
		payload := fmt.Sprintf(`{"order":{"id":"o-%d"},"amount":%d}`, p, p)
		var decoded any
		require.NoError(t, json.Unmarshal([]byte(payload), &decoded))
		partition, offset := int32(0), int64(p)
		ev := aggregator.Event{MatchKeys: aggregator.MatchKeys("payments", decoded, specs), Payload: json.RawMessage(payload),
			Source: aggregator.Source{Kind: "kafka", Topic: "payments", Partition: &partition, Offset: &offset}}
		require.NotEmpty(t, ev.MatchKeys)
		at := expires[waits[2*p].ID].Add(time.Duration(rand.IntN(101)-50) * time.Millisecond)
		for i, pod := range pods {
			d := &deliveries[p][i]
			wg.Go(func() {
				time.Sleep(time.Until(at))
				d.start = time.Now()
				_, d.err = pod.Apply(ctx, ev)
				d.end = time.Now()
			})
		}
	}
	wg.Wait()

	f.awaitDecided(t, logs)
	stop()

	reported := map[string]int{}
	for _, l := range logs {
		for _, e := range l.all() {
			reported[e.WaitStateID]++
		}
	}
	rows := f.deadlineRows(t, waits)
	completed, timedOut, split := 0, 0, 0
	for i, w := range waits {
		p := i / 2
		ds, row := deliveries[p], rows[w.ID]
		for _, d := range ds {
			require.NoError(t, d.err, "wait %d", i)
		}
		require.Equal(t, 1, row.Resumes, "wait %d: exactly one continuation", i)
		require.Equal(t, 1, row.RunQueue, "wait %d", i)
		require.Equal(t, int64(2), row.Version, "wait %d: one change, by one party; the redelivery changed nothing", i)
		require.True(t, row.NodeFinished, "wait %d", i)
		switch row.Status {
		case vocab.WaitCompleted:
			completed++
			require.Equal(t, []string{event}, row.Received, "wait %d: the record recorded once", i)
			require.Empty(t, row.TimedOut, "wait %d", i)
			require.Equal(t, vocab.NodeCompleted, row.NodeStatus, "wait %d", i)
			require.False(t, *row.OutputTimeout, "wait %d", i)
			require.Zero(t, reported[w.ID.String()], "wait %d: a completed wait is not reported expired", i)
			require.True(t, ds[0].start.Before(expires[w.ID]) || ds[1].start.Before(expires[w.ID]),
				"wait %d: a record decided at or after the deadline counted", i)
		case vocab.WaitTimeout:
			timedOut++
			require.Empty(t, row.Received, "wait %d", i)
			require.Equal(t, []string{event}, row.TimedOut, "wait %d", i)
			require.Equal(t, vocab.NodeFailed, row.NodeStatus, "wait %d", i)
			require.Equal(t, "timed out waiting for "+event, *row.NodeError, "wait %d", i)
			require.Equal(t, 1, reported[w.ID.String()], "wait %d: reported expired exactly once", i)
			for _, d := range ds {
				require.False(t, d.end.Before(expires[w.ID]), "wait %d: a delivery that returned before the deadline did not count", i)
			}
		default:
			require.FailNow(t, "wait neither completed nor timed out", "wait %d: status %s", i, row.Status)
		}
		if i%2 == 1 && rows[waits[i-1].ID].Status != row.Status {
			split++
		}
	}
	require.Equal(t, 2*pairs, completed+timedOut)
	require.Len(t, reported, timedOut)
	t.Logf("%d records, each delivered twice at once to the two waits of its value around their deadline: %d waits completed, %d timed out (%d pairs split by the deadline)",
		pairs, completed, timedOut, split)
}
