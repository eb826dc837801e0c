package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/executor"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow/waittime"
)

// timerFlow is a wait node followed by a call to the fake service, whose requests count
// how often each execution continued.
func (h *harness) timerFlow(name string, wait obj) obj {
	return h.workflow(name, []obj{
		node("pause", "wait", wait),
		node("done", "http", obj{"url": "@{_vars.svc}/done", "method": "POST", "body": obj{
			"execution_id": "@{_execution.id}", "resumed_at": "@{nodes.pause.output.resumed_at}",
		}}),
	}, []obj{edge("pause", "done", "")})
}

// TestTimerThreeReplicas: timers registered by one replica that then stops fire after
// the restart, each exactly once, with three replicas racing for them, and within 1 s of
// their time.
func TestTimerThreeReplicas(t *testing.T) {
	t.Parallel()
	const n = 30
	schema := dbtest.NewSchema(t)
	fake := newFakeService(t)
	newReplica := func(instance string) *pod {
		pool, err := db.Connect(context.Background(), schema.URL, 8)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		cfg := config(t, instance)
		cfg.Workers = 4
		return newPod(t, pool, cfg)
	}
	first := newReplica("first")
	h := &harness{pod: first, fake: fake}
	name := h.put(t, h.timerFlow("timer", obj{"for": "2s"}))

	stopFirst := first.run(t)
	started := time.Now()
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = first.start(t, name, nil)
	}
	eventually(t, func() bool {
		return h.count(t, `SELECT count(*) FROM execution_wait_states WHERE status = 'scheduled' AND wait_type = 'timer'`) == n
	}, "every execution scheduled its timer")
	// The replica that scheduled the timers goes away before any is due.
	stopFirst()
	require.Less(t, time.Since(started), 2*time.Second, "scheduling took too long for this test to mean anything")

	replicas := []*pod{newReplica("a"), newReplica("b"), newReplica("c")}
	for _, p := range replicas {
		p.run(t)
	}
	for _, id := range ids {
		replicas[0].waitStatus(t, id, "completed")
	}

	perExec := fake.countBy("/done", "execution_id")
	require.Len(t, perExec, n, "every execution continued")
	for _, id := range ids {
		require.Equal(t, 1, perExec[id.String()], "execution %s continued %d times", id, perExec[id.String()])
	}
	// Exactly one fire per wait, counted in the database: resumed once, one version bump,
	// resumed by one of the three replicas, never before its time.
	require.Equal(t, n, h.count(t, `SELECT count(*) FROM execution_wait_states
		WHERE status = 'resumed' AND version = 2 AND resumed_at IS NOT NULL AND resumed_by IN ('a', 'b', 'c')`))
	rows, err := h.pool.Query(context.Background(), `SELECT n.output FROM node_executions n WHERE n.node_id = 'pause'`)
	require.NoError(t, err)
	var late []time.Duration
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var out struct {
			For          string    `json:"for"`
			WaitType     string    `json:"wait_type"`
			ScheduledFor time.Time `json:"scheduled_for"`
			ResumedAt    time.Time `json:"resumed_at"`
		}
		require.NoError(t, json.Unmarshal(raw, &out))
		require.Equal(t, "2s", out.For)
		require.Equal(t, "timer", out.WaitType)
		require.False(t, out.ResumedAt.Before(out.ScheduledFor), "fired early: %s", raw)
		late = append(late, out.ResumedAt.Sub(out.ScheduledFor))
	}
	require.NoError(t, rows.Err())
	require.Len(t, late, n)
	for _, l := range late {
		// The sweeper sleeps until the deadline; 1 s is the promise, on a loaded machine
		// with the race detector.
		require.Less(t, l, time.Second, "timer fired %s late", l)
	}
}

func TestTimerUntilPastCompletesAtOnce(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.timerFlow("past", obj{"until": "2020-02-29T12:00:00+01:00"}))
	id := h.start(t, name, nil)
	v := h.waitStatus(t, id, "completed")
	out := output(t, nodeOf(t, v, "pause"))
	require.Equal(t, "2020-02-29T12:00:00+01:00", out["until"])
	require.Equal(t, "2020-02-29T11:00:00Z", out["scheduled_for"])
	require.NotEmpty(t, out["resumed_at"])
	require.Empty(t, v.Waits, "a wait already due is not stored")
	require.Equal(t, 1, h.fake.count("/done"))
}

// TestTimerTimeOfDayCancelled: a time-of-day wait in a zone taken from the input is
// scheduled at the next occurrence; events cannot touch it; cancelling it with then:
// continue moves the workflow on at once, and the sweeper never fires it.
func TestTimerTimeOfDayCancelled(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.timerFlow("tod", obj{"untilTime": "@{_trigger.at}", "timezone": "@{_trigger.tz}", "days": []any{"@{_trigger.day}"}}))
	before := time.Now()
	id := h.start(t, name, obj{"at": "06:15", "tz": "Australia/Sydney", "day": "sat"})
	eventually(t, func() bool { return len(h.view(t, id).Waits) == 1 })
	v := h.view(t, id)
	w := waitOf(t, v, "pause")
	require.Equal(t, vocab.WaitScheduled, w.Status)
	require.Equal(t, vocab.WaitTypeTimer, w.WaitType)
	require.Empty(t, w.Strategy)
	require.JSONEq(t, `{"untilTime": "06:15", "timezone": "Australia/Sydney", "days": ["sat"]}`, string(w.Timer))
	loc, err := waittime.LoadLocation("Australia/Sydney")
	require.NoError(t, err)
	days, err := waittime.ParseDays([]string{"sat"})
	require.NoError(t, err)
	tod := waittime.TimeOfDay{Hour: 6, Minute: 15}
	// The node computed it between before and now; both bounds give the same answer
	// unless the test straddles the very moment, which a week-long period makes moot.
	lo, hi := waittime.NextTimeOfDay(before, tod, loc, days), waittime.NextTimeOfDay(time.Now(), tod, loc, days)
	require.True(t, !w.ExpiresAt.Before(lo) && !w.ExpiresAt.After(hi), "scheduled for %s, want %s", w.ExpiresAt, lo)
	require.Equal(t, time.Saturday, w.ExpiresAt.In(loc).Weekday())
	require.Equal(t, vocab.NodeWaiting, nodeOf(t, v, "pause").Status)

	// An event with the timer's ids is not something it waits for.
	require.Equal(t, aggregator.NotExpected, h.apply(t, id, w.CorrelationID, aggregator.EventAPIResponse, obj{}))

	require.NoError(t, h.ex.CancelWait(context.Background(), id, "pause", executor.ThenContinue, "operator skipped the wait"))
	v = h.waitStatus(t, id, "completed")
	out := output(t, nodeOf(t, v, "pause"))
	require.Equal(t, true, out["cancelled"])
	require.Equal(t, "Australia/Sydney", out["timezone"])
	require.Equal(t, vocab.WaitCancelled, waitOf(t, v, "pause").Status)
	require.Equal(t, 1, h.fake.count("/done"))
}

// TestTimerCancelExecution: a cancelled execution's timer never fires.
func TestTimerCancelExecution(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.timerFlow("cancel", obj{"for": "PT0.5S"}))
	id := h.start(t, name, nil)
	eventually(t, func() bool { return len(h.view(t, id).Waits) == 1 })
	_, err := h.ex.CancelExecution(context.Background(), id, "no longer needed")
	require.NoError(t, err)
	stays(t, 1500*time.Millisecond, func() bool {
		v := h.view(t, id)
		return v.Status == "cancelled" && waitOf(t, v, "pause").Status == "cancelled"
	})
	require.Equal(t, 0, h.fake.count("/done"))
}

// TestTimerBadSettingFailsNode: a zone that only turns out invalid when rendered fails
// the node naming the value, and the wait is kept in status error.
func TestTimerBadSettingFailsNode(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.timerFlow("bad", obj{"untilTime": "09:00", "timezone": "@{_trigger.tz}"}))
	id := h.start(t, name, obj{"tz": "Europe/Atlantis"})
	v := h.waitStatus(t, id, "failed")
	n := nodeOf(t, v, "pause")
	require.Equal(t, vocab.NodeFailed, n.Status)
	require.Contains(t, errText(n.Error), `"Europe/Atlantis"`)
	w := waitOf(t, v, "pause")
	require.Equal(t, vocab.WaitError, w.Status)
	require.Contains(t, errText(w.Error), `"Europe/Atlantis"`)
	require.Equal(t, 0, h.fake.count("/done"))
}

// TestTimerZoneCandidates: a time-of-day wait resolves its zone as contact → account →
// UTC. The first candidate that renders to a valid zone is used and the timer's settings
// (shown as the node output) say which and why the ones before it were skipped, with the
// dates to skip as rendered; a list that yields no zone fails the node naming each.
func TestTimerZoneCandidates(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.run(t)
	name := h.put(t, h.timerFlow("zones", obj{
		"untilTime": "09:00",
		"timezone":  []any{"@{_trigger.contact.timezone}", "@{_trigger.account.timezone}", "UTC"},
		"days":      []any{"mon", "tue", "wed", "thu", "fri"},
		"skipDates": []any{"@{_trigger.holidays}"},
	}))

	id := h.start(t, name, obj{"contact": obj{"timezone": nil}, "account": obj{"timezone": "Europe/Berlin"}, "holidays": []any{"2026-12-25"}})
	eventually(t, func() bool { return len(h.view(t, id).Waits) == 1 })
	w := waitOf(t, h.view(t, id), "pause")
	require.Equal(t, vocab.WaitScheduled, w.Status)
	require.JSONEq(t, `{"untilTime": "09:00", "timezone": "Europe/Berlin", "timezone_candidate": 1,
		"timezone_skipped": [{"index": 0, "candidate": "@{_trigger.contact.timezone}", "reason": "is null"}],
		"days": ["mon", "tue", "wed", "thu", "fri"], "skipDates": ["2026-12-25"]}`, string(w.Timer))
	berlin, err := waittime.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	local := w.ExpiresAt.In(berlin)
	require.Equal(t, 9, local.Hour())
	require.NotContains(t, []time.Weekday{time.Saturday, time.Sunday}, local.Weekday())

	// Neither the contact's nor the account's zone is usable; UTC is.
	id = h.start(t, name, obj{"contact": obj{"timezone": "Mars/Olympus"}, "account": obj{}, "holidays": []any{}})
	eventually(t, func() bool { return len(h.view(t, id).Waits) == 1 })
	out := map[string]any{}
	require.NoError(t, json.Unmarshal(waitOf(t, h.view(t, id), "pause").Timer, &out))
	require.Equal(t, "UTC", out["timezone"])
	require.EqualValues(t, 2, out["timezone_candidate"])
	require.Len(t, out["timezone_skipped"], 2)

	strict := h.put(t, h.timerFlow("nozone", obj{
		"untilTime": "09:00", "timezone": []any{"@{_trigger.contact.timezone}", "@{_trigger.account.timezone}"},
	}))
	id = h.start(t, strict, obj{"contact": obj{"timezone": "Mars/Olympus"}})
	v := h.waitStatus(t, id, "failed")
	n := nodeOf(t, v, "pause")
	require.Equal(t, vocab.NodeFailed, n.Status)
	require.Equal(t, `timezone: no candidate is a valid IANA zone: [0] @{_trigger.contact.timezone}: invalid timezone "Mars/Olympus"; `+
		`[1] @{_trigger.account.timezone}: @{_trigger.account.timezone}: _trigger has no field "account"`, errText(n.Error))
	require.Equal(t, vocab.WaitError, waitOf(t, v, "pause").Status)
	require.Equal(t, 0, h.fake.count("/done"))
}
