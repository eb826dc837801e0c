package aggregator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/clock"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// expiredLog collects what a sweeper reports through Config.OnExpired.
type expiredLog struct {
	mu   sync.Mutex
	list []aggregator.Expired
}

func (l *expiredLog) add(e []aggregator.Expired) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, e...)
}

func (l *expiredLog) all() []aggregator.Expired {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.list)
}

// sweeper returns another aggregator over the fixture's database — another pod — whose
// fired deadlines are collected.
func (f *fixture) sweeper(t testing.TB, instance string, configure ...func(*aggregator.Config)) (*aggregator.Aggregator, *expiredLog) {
	t.Helper()
	log := &expiredLog{}
	cfg := aggregator.Config{InstanceID: instance, Logger: slog.New(f.logs), OnExpired: log.add}
	for _, c := range configure {
		c(&cfg)
	}
	agg, err := aggregator.New(f.pool, cfg)
	require.NoError(t, err)
	return agg, log
}

func (f *fixture) sweep(t *testing.T, agg *aggregator.Aggregator, now time.Time) int {
	t.Helper()
	n, err := agg.Sweep(t.Context(), now)
	require.NoError(t, err)
	return n
}

func expectedOf(t *testing.T, ws dbsqlc.ExecutionWaitState) []aggregator.Expected {
	t.Helper()
	var expected []aggregator.Expected
	require.NoError(t, json.Unmarshal(ws.ExpectedEvents, &expected))
	return expected
}

// deadlineOf returns the own deadline stored for the expected event name.
func deadlineOf(t *testing.T, ws dbsqlc.ExecutionWaitState, name string) time.Time {
	t.Helper()
	for _, e := range expectedOf(t, ws) {
		if e.Name == name {
			require.NotNil(t, e.DeadlineAt, "%s has no deadline", name)
			return *e.DeadlineAt
		}
	}
	require.FailNow(t, "event not expected", name)
	return time.Time{}
}

func timedOutOf(t *testing.T, ws dbsqlc.ExecutionWaitState) []string {
	t.Helper()
	out := []string{}
	require.NoError(t, json.Unmarshal(ws.TimedOutEvents, &out))
	return out
}

// jsonList is a list of names as it reads back from JSON.
func jsonList(names []string) []any {
	out := []any{}
	for _, n := range names {
		out = append(out, n)
	}
	return out
}

// outputOf decodes the node's output, which must be an object.
func outputOf(t *testing.T, n dbsqlc.NodeExecution) map[string]any {
	t.Helper()
	require.NotNil(t, n.Output, "node has no output")
	out, ok := decode(t, n.Output).(map[string]any)
	require.True(t, ok, "output is an object: %s", n.Output)
	return out
}

// checkEvents checks the output's events against the wait's received_events: the
// arrived events, in order, with when and from where.
func checkEvents(t *testing.T, w wait, ws dbsqlc.ExecutionWaitState, out map[string]any, arrived []string) {
	t.Helper()
	if arrived == nil {
		arrived = []string{}
	}
	received := receivedOf(t, ws)
	require.Equal(t, arrived, receivedNames(t, ws))
	events, ok := out["events"].([]any)
	require.True(t, ok, "events is a list: %v", out["events"])
	require.Len(t, events, len(arrived))
	for i, e := range events {
		m := e.(map[string]any)
		require.Equal(t, arrived[i], m["name"])
		at, err := time.Parse(time.RFC3339Nano, m["received_at"].(string))
		require.NoError(t, err)
		require.True(t, at.Equal(received[i].ReceivedAt), "received_at %s, stored %s", at, received[i].ReceivedAt)
		source, err := json.Marshal(w.event(arrived[i], "").Source)
		require.NoError(t, err)
		require.Equal(t, decode(t, source), m["source"])
	}
	require.Equal(t, jsonList(arrived), out["arrival_order"])
}

// checkMapping checks the outputMapping entries of registration(): the payload of an
// event that arrived, null for one that did not.
func checkMapping(t *testing.T, out map[string]any, arrived []string) {
	t.Helper()
	want := map[string]any{"apiResponse": nil, "orderId": nil, "kafkaEvent": nil, "shipment": nil}
	if slices.Contains(arrived, api) {
		want["apiResponse"], want["orderId"] = decode(t, []byte(apiPayload)), "o-1"
	}
	if slices.Contains(arrived, kafka) {
		want["kafkaEvent"], want["shipment"] = decode(t, []byte(kafkaPayload)), map[string]any{"carrier": "dhl"}
	}
	for key, v := range want {
		require.Contains(t, out, key)
		require.Equal(t, v, out[key], key)
	}
}

// TestDeadlineMatrix registers a wait for every strategy × onTimeout × what arrived
// before the overall deadline (api_response required, kafka_event optional), delivers
// the arrivals, then sweeps once past the deadline and checks everything written. The
// expected table is the rules of decideTimeout's doc comment, worked out by hand.
func TestDeadlineMatrix(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sw, expired := f.sweeper(t, "sweeper")

	const (
		fail    = vocab.OnTimeoutFail
		cont    = vocab.OnTimeoutContinue
		partial = vocab.OnTimeoutContinueWithPartial

		waiting   = vocab.WaitWaiting
		completed = vocab.WaitCompleted
		timeout   = vocab.WaitTimeout

		errBoth  = "timed out waiting for api_response, kafka_event"
		errAPI   = "timed out waiting for api_response"
		errKafka = "timed out waiting for kafka_event"
		needsAPI = " (onTimeout continue needs api_response, which did not arrive)"
	)
	var (
		none      = []string{}
		onlyKafka = []string{kafka}
		onlyAPI   = []string{api}
		both      = []string{api, kafka}
		rec       = []aggregator.Outcome{aggregator.Recorded}
		done      = []aggregator.Outcome{aggregator.Completed}
	)
	type cell struct {
		strategy  vocab.Strategy
		onTimeout vocab.OnTimeout
		arrive    []string             // delivered before the deadline
		outcomes  []aggregator.Outcome // of those deliveries
		status    vocab.WaitStatus     // wait status after the sweep
		node      vocab.NodeStatus     // node status after the sweep
		timedOut  []string             // timed_out_events of the wait and the output
		err       string               // error of the node and the wait ("" for none)
		version   int64
	}
	cells := []cell{
		// all: an event missing at the overall deadline ends the wait. continue needs the
		// required:true event (api_response).
		{vocab.StrategyAll, fail, none, nil, timeout, "failed", both, errBoth, 2},
		{vocab.StrategyAll, cont, none, nil, timeout, "failed", both, errBoth + needsAPI, 2},
		{vocab.StrategyAll, partial, none, nil, timeout, "completed", both, "", 2},
		{vocab.StrategyAll, fail, onlyKafka, rec, timeout, "failed", onlyAPI, errAPI, 3},
		{vocab.StrategyAll, cont, onlyKafka, rec, timeout, "failed", onlyAPI, errAPI + needsAPI, 3},
		{vocab.StrategyAll, partial, onlyKafka, rec, timeout, "completed", onlyAPI, "", 3},
		{vocab.StrategyAll, fail, onlyAPI, rec, timeout, "failed", onlyKafka, errKafka, 3},
		{vocab.StrategyAll, cont, onlyAPI, rec, timeout, "completed", onlyKafka, "", 3},
		{vocab.StrategyAll, partial, onlyAPI, rec, timeout, "completed", onlyKafka, "", 3},
		// any: one event completes it at once; with none, the deadline ends it.
		{vocab.StrategyAny, fail, none, nil, timeout, "failed", both, errBoth, 2},
		{vocab.StrategyAny, cont, none, nil, timeout, "failed", both, errBoth + needsAPI, 2},
		{vocab.StrategyAny, partial, none, nil, timeout, "completed", both, "", 2},
		{vocab.StrategyAny, fail, onlyKafka, done, completed, "completed", none, "", 2},
		{vocab.StrategyAny, cont, onlyKafka, done, completed, "completed", none, "", 2},
		{vocab.StrategyAny, partial, onlyKafka, done, completed, "completed", none, "", 2},
		{vocab.StrategyAny, fail, onlyAPI, done, completed, "completed", none, "", 2},
		{vocab.StrategyAny, cont, onlyAPI, done, completed, "completed", none, "", 2},
		{vocab.StrategyAny, partial, onlyAPI, done, completed, "completed", none, "", 2},
		// required_only: api_response completes it; continue goes on with the required
		// events that arrived (here none), its output naming the missing ones.
		{vocab.StrategyRequiredOnly, fail, none, nil, timeout, "failed", both, errBoth, 2},
		{vocab.StrategyRequiredOnly, cont, none, nil, timeout, "completed", both, "", 2},
		{vocab.StrategyRequiredOnly, partial, none, nil, timeout, "completed", both, "", 2},
		{vocab.StrategyRequiredOnly, fail, onlyKafka, rec, timeout, "failed", onlyAPI, errAPI, 3},
		{vocab.StrategyRequiredOnly, cont, onlyKafka, rec, timeout, "completed", onlyAPI, "", 3},
		{vocab.StrategyRequiredOnly, partial, onlyKafka, rec, timeout, "completed", onlyAPI, "", 3},
		{vocab.StrategyRequiredOnly, fail, onlyAPI, done, completed, "completed", none, "", 2},
		{vocab.StrategyRequiredOnly, cont, onlyAPI, done, completed, "completed", none, "", 2},
		{vocab.StrategyRequiredOnly, partial, onlyAPI, done, completed, "completed", none, "", 2},
		// custom [api_response]: as required_only, except that continue needs every event
		// of requiredEvents.
		{vocab.StrategyCustom, fail, none, nil, timeout, "failed", both, errBoth, 2},
		{vocab.StrategyCustom, cont, none, nil, timeout, "failed", both, errBoth + needsAPI, 2},
		{vocab.StrategyCustom, partial, none, nil, timeout, "completed", both, "", 2},
		{vocab.StrategyCustom, fail, onlyKafka, rec, timeout, "failed", onlyAPI, errAPI, 3},
		{vocab.StrategyCustom, cont, onlyKafka, rec, timeout, "failed", onlyAPI, errAPI + needsAPI, 3},
		{vocab.StrategyCustom, partial, onlyKafka, rec, timeout, "completed", onlyAPI, "", 3},
		{vocab.StrategyCustom, fail, onlyAPI, done, completed, "completed", none, "", 2},
		{vocab.StrategyCustom, cont, onlyAPI, done, completed, "completed", none, "", 2},
		{vocab.StrategyCustom, partial, onlyAPI, done, completed, "completed", none, "", 2},
	}
	require.Len(t, cells, 4*3*3)

	payloads := map[string]string{api: apiPayload, kafka: kafkaPayload}
	waits := make([]wait, len(cells))
	snapshots := make([]string, len(cells))
	registered := make([][2]time.Time, len(cells))
	fired := 0
	for i, c := range cells {
		var custom []string
		if c.strategy == vocab.StrategyCustom {
			custom = []string{api}
		}
		reg := registration(c.strategy, expectBoth(true, false), custom...)
		reg.OnTimeout = c.onTimeout
		registered[i][0] = time.Now()
		waits[i] = f.newWait(t, reg)
		registered[i][1] = time.Now()
		for j, name := range c.arrive {
			res := f.apply(t, waits[i].event(name, payloads[name]))
			require.Equal(t, c.outcomes[j], res.Outcome, "cell %d: delivery of %s", i, name)
		}
		ws := f.waitState(t, waits[i].ID)
		if c.status == completed {
			require.Equal(t, completed, ws.Status, "cell %d completed by its events", i)
			snapshots[i] = f.snapshot(t, waits[i].ExecutionID)
		} else {
			require.Equal(t, waiting, ws.Status, "cell %d", i)
			require.Equal(t, vocab.NodeWaiting, f.node(t, waits[i]).Status)
			fired++
		}
	}

	// Nothing is due before the overall deadline (5 minutes; no event has its own).
	require.Zero(t, f.sweep(t, sw, time.Now().Add(4*time.Minute)))
	for i, c := range cells {
		if c.status != completed {
			require.Equal(t, waiting, f.waitState(t, waits[i].ID).Status, "cell %d swept early", i)
		}
	}
	require.Empty(t, expired.all())

	sweepAt := time.Now().Add(6 * time.Minute)
	require.Equal(t, fired, f.sweep(t, sw, sweepAt), "every wait still waiting is claimed, and only those")
	require.Zero(t, f.sweep(t, sw, sweepAt.Add(time.Minute)), "nothing left to decide")

	reported := map[uuid.UUID]aggregator.Expired{}
	for _, e := range expired.all() {
		id := uuid.MustParse(e.WaitStateID)
		require.NotContains(t, reported, id, "reported twice")
		reported[id] = e
	}
	require.Len(t, reported, fired)

	for i, c := range cells {
		arrived := "none"
		if len(c.arrive) > 0 {
			arrived = strings.Join(c.arrive, "+")
		}
		w := waits[i]
		t.Run(fmt.Sprintf("%s/%s/%s", c.strategy, c.onTimeout, arrived), func(t *testing.T) {
			t.Parallel()
			ws := f.waitState(t, w.ID)
			require.Equal(t, c.status, ws.Status)
			require.Equal(t, c.version, ws.Version)
			require.Equal(t, c.arrive, receivedNames(t, ws), "received_events: what arrived, nothing else")
			require.Equal(t, c.timedOut, timedOutOf(t, ws))
			require.True(t, ws.NextDeadlineAt.Equal(ws.ExpiresAt), "next deadline %s, expires %s", ws.NextDeadlineAt, ws.ExpiresAt)
			require.WithinRange(t, ws.ExpiresAt, registered[i][0].Add(5*time.Minute-time.Millisecond), registered[i][1].Add(5*time.Minute))

			n := f.node(t, w)
			require.Equal(t, c.node, n.Status)
			require.NotNil(t, n.FinishedAt)
			if c.err == "" {
				require.Nil(t, n.Error)
				require.Nil(t, ws.Error)
			} else {
				require.NotNil(t, n.Error)
				require.Equal(t, c.err, *n.Error)
				require.NotNil(t, ws.Error)
				require.Equal(t, c.err, *ws.Error)
			}
			out := outputOf(t, n)
			require.Equal(t, c.status == timeout, out["timeout"])
			require.Equal(t, jsonList(c.timedOut), out["timed_out_events"])
			require.Equal(t, string(c.strategy), out["strategy"])
			require.Equal(t, w.CorrelationID.String(), out["correlation_id"])
			checkEvents(t, w, ws, out, c.arrive)
			checkMapping(t, out, c.arrive)
			// What continue needs and did not get: api_response (required: true, and
			// the required set of required_only and custom), when the deadline ended it.
			missing := []any{}
			if c.status == timeout && !slices.Contains(c.arrive, api) {
				missing = []any{api}
			}
			require.Equal(t, missing, out["missing_required_events"])
			if c.status == timeout && c.onTimeout == partial {
				require.NotNil(t, n.Warning, "continue_with_partial leaves a warning on the node")
				require.Equal(t, "timed out; continued with partial data, without "+strings.Join(c.timedOut, ", "), *n.Warning)
			} else {
				require.Nil(t, n.Warning)
			}

			require.Equal(t, []string{"resume"}, f.runQueue(t, w), "exactly one continuation")

			failLogs := f.logs.find(slog.LevelDebug, failingMsg, "correlation_id", w.CorrelationID)
			partialLogs := f.logs.find(slog.LevelWarn, "wait timed out; continuing with partial data", "correlation_id", w.CorrelationID)
			e, wasReported := reported[w.ID]
			if c.status == completed {
				require.Equal(t, snapshots[i], f.snapshot(t, w.ExecutionID), "the sweeper did not touch a completed wait")
				require.False(t, wasReported)
				require.Empty(t, failLogs)
				require.Empty(t, partialLogs)
				return
			}
			require.True(t, wasReported, "OnExpired reports the wait")
			require.Equal(t, w.NodeID, e.NodeID)
			require.Equal(t, c.node == "completed", e.Continue)
			require.True(t, e.Deadline.Equal(ws.ExpiresAt), "deadline %s, expires %s", e.Deadline, ws.ExpiresAt)
			if c.node == "failed" {
				require.Len(t, failLogs, 1)
				require.Equal(t, c.err, failLogs[0]["reason"])
			} else {
				require.Empty(t, failLogs)
			}
			if c.onTimeout == partial {
				require.Len(t, partialLogs, 1)
			} else {
				require.Empty(t, partialLogs)
			}

			// After the deadline, nothing counts any more.
			before := f.snapshot(t, w.ExecutionID)
			for _, name := range []string{api, kafka} {
				res := f.apply(t, w.event(name, `{"late":true}`))
				require.Equal(t, aggregator.Late, res.Outcome, name)
				require.Equal(t, timeout, res.Status)
			}
			require.Equal(t, before, f.snapshot(t, w.ExecutionID))
		})
	}
}

// kafkaOwnTimeout is api_response (required, only the overall deadline) and
// kafka_event (optional) with an own timeout of a minute.
func kafkaOwnTimeout() []aggregator.Expected {
	return []aggregator.Expected{
		{Name: api, Source: "callback", Required: true},
		{Name: kafka, Source: "kafka", Topic: "orders", TimeoutMS: 60_000},
	}
}

// TestDeadlinePerEvent covers events' own deadlines, earlier than the overall one.
func TestDeadlinePerEvent(t *testing.T) {
	t.Parallel()

	t.Run("optional event times out alone", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		sw, expired := f.sweeper(t, "sweeper")
		before := time.Now()
		w := f.newWait(t, registration(vocab.StrategyRequiredOnly, kafkaOwnTimeout()))
		after := time.Now()

		ws := f.waitState(t, w.ID)
		expected := expectedOf(t, ws)
		require.Nil(t, expected[0].DeadlineAt, "api_response has no own deadline")
		kafkaAt := deadlineOf(t, ws, kafka)
		require.WithinRange(t, kafkaAt, before.Add(time.Minute-time.Millisecond), after.Add(time.Minute))
		require.True(t, ws.NextDeadlineAt.Equal(kafkaAt), "next deadline is kafka_event's")
		require.Equal(t, 4*time.Minute, ws.ExpiresAt.Sub(kafkaAt), "both deadlines are fixed at the same instant")

		require.Zero(t, f.sweep(t, sw, kafkaAt.Add(-time.Microsecond)), "not due yet")
		require.Equal(t, 1, f.sweep(t, sw, kafkaAt), "due at its deadline exactly")

		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitWaiting, ws.Status)
		require.Equal(t, []string{kafka}, timedOutOf(t, ws))
		require.True(t, ws.NextDeadlineAt.Equal(ws.ExpiresAt), "next deadline %s, expires %s", ws.NextDeadlineAt, ws.ExpiresAt)
		require.Equal(t, int64(2), ws.Version, "recording the timeout bumps the version")
		require.Nil(t, ws.Error)
		require.JSONEq(t, `[]`, string(ws.ReceivedEvents))
		n := f.node(t, w)
		require.Equal(t, vocab.NodeWaiting, n.Status)
		require.Nil(t, n.Output)
		require.Empty(t, f.runQueue(t, w))
		require.Empty(t, expired.all(), "nothing fired")
		require.Zero(t, f.sweep(t, sw, kafkaAt.Add(time.Minute)), "nothing due until the overall deadline")

		// kafka_event turning up now is late (its deadline is a minute away in real time:
		// it is the recorded timeout that rejects it), and changes nothing.
		snap := f.snapshot(t, w.ExecutionID)
		res := f.apply(t, w.event(kafka, kafkaPayload))
		require.Equal(t, aggregator.Late, res.Outcome)
		require.Equal(t, vocab.WaitWaiting, res.Status)
		require.Equal(t, int64(2), res.Version)
		require.Equal(t, snap, f.snapshot(t, w.ExecutionID))

		res = f.apply(t, w.event(api, apiPayload))
		require.Equal(t, aggregator.Completed, res.Outcome)
		require.Equal(t, int64(3), res.Version)
		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitCompleted, ws.Status)
		require.Equal(t, []string{kafka}, timedOutOf(t, ws))
		n = f.node(t, w)
		require.Equal(t, vocab.NodeCompleted, n.Status)
		require.Nil(t, n.Error)
		out := outputOf(t, n)
		require.Equal(t, false, out["timeout"])
		require.Equal(t, jsonList([]string{kafka}), out["timed_out_events"])
		checkEvents(t, w, ws, out, []string{api})
		checkMapping(t, out, []string{api})
		require.Equal(t, []string{"resume"}, f.runQueue(t, w))

		require.Zero(t, f.sweep(t, sw, ws.ExpiresAt.Add(time.Minute)), "a completed wait is never claimed")
		require.Empty(t, expired.all())
	})

	t.Run("all fires on an event's own deadline", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name      string
			onTimeout vocab.OnTimeout
			arrive    []string
			node      string
			version   int64
		}{
			// kafka_event is required:false, so continue goes on without it.
			{"api arrived, continue", vocab.OnTimeoutContinue, []string{api}, "completed", 3},
			{"nothing arrived, fail", vocab.OnTimeoutFail, nil, "failed", 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				f := setup(t)
				sw, expired := f.sweeper(t, "sweeper")
				reg := registration(vocab.StrategyAll, kafkaOwnTimeout())
				reg.OnTimeout = tc.onTimeout
				w := f.newWait(t, reg)
				for _, name := range tc.arrive {
					require.Equal(t, aggregator.Recorded, f.apply(t, w.event(name, apiPayload)).Outcome)
				}
				ws := f.waitState(t, w.ID)
				kafkaAt := deadlineOf(t, ws, kafka)
				require.True(t, kafkaAt.Before(ws.ExpiresAt))

				require.Zero(t, f.sweep(t, sw, kafkaAt.Add(-time.Microsecond)))
				require.Equal(t, 1, f.sweep(t, sw, kafkaAt.Add(time.Second)))

				ws = f.waitState(t, w.ID)
				require.Equal(t, vocab.WaitTimeout, ws.Status, "all can no longer be satisfied: it ends before the overall deadline")
				require.Equal(t, tc.version, ws.Version)
				require.Equal(t, []string{kafka}, timedOutOf(t, ws))
				n := f.node(t, w)
				require.Equal(t, tc.node, string(n.Status))
				require.NotNil(t, n.FinishedAt)
				if tc.node == "failed" {
					require.NotNil(t, n.Error)
					require.Contains(t, *n.Error, kafka)
				} else {
					require.Nil(t, n.Error)
				}
				out := outputOf(t, n)
				require.Equal(t, true, out["timeout"])
				require.Equal(t, jsonList([]string{kafka}), out["timed_out_events"])
				checkEvents(t, w, ws, out, tc.arrive)
				require.Equal(t, []string{"resume"}, f.runQueue(t, w))

				fired := expired.all()
				require.Len(t, fired, 1)
				require.Equal(t, w.ID.String(), fired[0].WaitStateID)
				require.True(t, fired[0].Deadline.Equal(kafkaAt), "the deadline that fired is kafka_event's")
				require.Equal(t, tc.node == "completed", fired[0].Continue)

				require.Zero(t, f.sweep(t, sw, ws.ExpiresAt.Add(time.Minute)), "decided once")
				require.Equal(t, aggregator.Late, f.apply(t, w.event(kafka, kafkaPayload)).Outcome)
			})
		}
	})

	t.Run("any fires when every event timed out", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		sw, expired := f.sweeper(t, "sweeper")
		reg := registration(vocab.StrategyAny, []aggregator.Expected{
			{Name: api, Source: "callback", Required: true, TimeoutMS: 60_000},
			{Name: kafka, Source: "kafka", Topic: "orders", TimeoutMS: 120_000},
		})
		reg.OnTimeout = vocab.OnTimeoutContinueWithPartial
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		apiAt, kafkaAt := deadlineOf(t, ws, api), deadlineOf(t, ws, kafka)
		require.True(t, ws.NextDeadlineAt.Equal(apiAt))

		require.Equal(t, 1, f.sweep(t, sw, apiAt))
		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitWaiting, ws.Status, "kafka_event may still come")
		require.Equal(t, []string{api}, timedOutOf(t, ws))
		require.True(t, ws.NextDeadlineAt.Equal(kafkaAt), "next deadline is kafka_event's")
		require.Equal(t, int64(2), ws.Version)
		require.Empty(t, expired.all())
		require.Equal(t, aggregator.Late, f.apply(t, w.event(api, apiPayload)).Outcome)

		require.Equal(t, 1, f.sweep(t, sw, kafkaAt))
		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitTimeout, ws.Status)
		require.Equal(t, []string{api, kafka}, timedOutOf(t, ws))
		require.Equal(t, int64(3), ws.Version)
		n := f.node(t, w)
		require.Equal(t, vocab.NodeCompleted, n.Status, "continue_with_partial")
		out := outputOf(t, n)
		require.Equal(t, true, out["timeout"])
		require.Equal(t, jsonList([]string{api, kafka}), out["timed_out_events"])
		checkEvents(t, w, ws, out, nil)
		require.Equal(t, []string{"resume"}, f.runQueue(t, w))
		fired := expired.all()
		require.Len(t, fired, 1)
		require.True(t, fired[0].Deadline.Equal(kafkaAt))
		require.True(t, fired[0].Continue)
	})

	t.Run("deadline of an event that arrived only moves on", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		sw, expired := f.sweeper(t, "sweeper")
		w := f.newWait(t, registration(vocab.StrategyRequiredOnly, kafkaOwnTimeout()))
		require.Equal(t, aggregator.Recorded, f.apply(t, w.event(kafka, kafkaPayload)).Outcome)
		ws := f.waitState(t, w.ID)
		kafkaAt := deadlineOf(t, ws, kafka)
		require.True(t, ws.NextDeadlineAt.Equal(kafkaAt), "an arrival does not move the next deadline")
		require.Equal(t, int64(2), ws.Version)

		require.Equal(t, 1, f.sweep(t, sw, kafkaAt.Add(time.Second)))
		after := f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitWaiting, after.Status)
		require.Equal(t, int64(2), after.Version, "version unchanged")
		require.True(t, after.NextDeadlineAt.Equal(ws.ExpiresAt), "next deadline %s, expires %s", after.NextDeadlineAt, ws.ExpiresAt)
		require.Equal(t, []string{}, timedOutOf(t, after))
		require.Equal(t, []string{kafka}, receivedNames(t, after))
		require.Equal(t, vocab.NodeWaiting, f.node(t, w).Status)
		require.Empty(t, f.runQueue(t, w))
		require.Empty(t, expired.all())
		require.Zero(t, f.sweep(t, sw, kafkaAt.Add(time.Minute)))

		res := f.apply(t, w.event(api, apiPayload))
		require.Equal(t, aggregator.Completed, res.Outcome)
		require.Equal(t, int64(3), res.Version)
		ws = f.waitState(t, w.ID)
		out := outputOf(t, f.node(t, w))
		require.Equal(t, false, out["timeout"])
		require.Equal(t, []any{}, out["timed_out_events"])
		checkEvents(t, w, ws, out, []string{kafka, api})
	})
}

// TestDeadlinePassedBeforeSweep delivers events after their deadline by the aggregator's
// clock (a stub, moved past it), before any sweeper got to the wait: they are late all
// the same.
func TestDeadlinePassedBeforeSweep(t *testing.T) {
	t.Parallel()

	t.Run("overall deadline", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		sw, expired := f.sweeper(t, "sweeper", withClock(stub))
		reg := registration(vocab.StrategyAny, expectAPIOnly())
		reg.Timeout = 100 * time.Millisecond
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(ws.ExpiresAt.Add(20 * time.Millisecond))

		// The late event writes the passed deadline itself, exactly as the sweeper would
		// have: answering late from a row still showing the wait open could contradict
		// a replica committing the same event decided just before the deadline.
		res := f.apply(t, w.event(api, apiPayload))
		require.Equal(t, aggregator.Late, res.Outcome)
		require.Equal(t, vocab.WaitTimeout, res.Status)
		require.Equal(t, int64(2), res.Version, "registration and the timeout")
		require.NotNil(t, res.Expired)
		require.Equal(t, w.ID.String(), res.Expired.WaitStateID)
		require.False(t, res.Expired.Continue)
		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitTimeout, ws.Status)
		require.Equal(t, int64(2), ws.Version)
		require.JSONEq(t, `[]`, string(ws.ReceivedEvents))
		require.Equal(t, []string{api}, timedOutOf(t, ws))
		require.Equal(t, vocab.NodeFailed, f.node(t, w).Status)
		require.Equal(t, []string{"resume"}, f.runQueue(t, w))

		require.Zero(t, f.sweep(t, sw, stub.Now()), "nothing left for the sweeper")
		require.Empty(t, expired.all())
	})

	t.Run("own deadline of an optional event", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		reg := registration(vocab.StrategyRequiredOnly, []aggregator.Expected{
			{Name: api, Source: "callback", Required: true},
			{Name: kafka, Source: "kafka", Topic: "orders", TimeoutMS: 100},
		})
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(deadlineOf(t, ws, kafka).Add(20 * time.Millisecond))

		res := f.apply(t, w.event(kafka, kafkaPayload))
		require.Equal(t, aggregator.Late, res.Outcome)
		// The late record wrote kafka_event's timeout, as the sweeper would have; the
		// wait goes on, its next deadline the overall one.
		require.Equal(t, vocab.WaitWaiting, res.Status)
		require.Equal(t, int64(2), res.Version)
		require.Nil(t, res.Expired, "the wait did not end")
		ws = f.waitState(t, w.ID)
		require.Equal(t, []string{kafka}, timedOutOf(t, ws))
		require.Equal(t, ws.ExpiresAt, ws.NextDeadlineAt)
		require.Nil(t, ws.KafkaEventData)

		res = f.apply(t, w.event(api, apiPayload))
		require.Equal(t, aggregator.Completed, res.Outcome)
		require.Equal(t, int64(3), res.Version)
		ws = f.waitState(t, w.ID)
		require.Equal(t, []string{api}, receivedNames(t, ws))
		require.Nil(t, ws.KafkaEventData)
		require.Equal(t, []string{kafka}, timedOutOf(t, ws))
		out := decode(t, f.node(t, w).Output).(map[string]any)
		require.Equal(t, []any{kafka}, out["timed_out_events"])
		require.Equal(t, false, out["timeout"])
	})

	t.Run("a record fitting an optional event past its deadline and one still awaited", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		// Both Kafka events fit any record of the topic; the first, optional, has a
		// short deadline of its own.
		reg := registration(vocab.StrategyRequiredOnly, []aggregator.Expected{
			{Name: "early", Source: "kafka", Topic: "orders", TimeoutMS: 100},
			{Name: "final", Source: "kafka", Topic: "orders", Required: true},
		})
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(deadlineOf(t, ws, "early").Add(20 * time.Millisecond))

		ev := w.event(kafka, kafkaPayload)
		ev.Name = "" // correlated by ids: the wait decides which of its Kafka events it is
		res := f.apply(t, ev)
		require.Equal(t, aggregator.Completed, res.Outcome, "counted as the event still awaited, not as the one timed out")
		require.Equal(t, "final", res.Event)
		ws = f.waitState(t, w.ID)
		require.Equal(t, []string{"final"}, receivedNames(t, ws))
		require.Equal(t, []string{"early"}, timedOutOf(t, ws))
	})

	t.Run("a sent event fitting an optional event past its deadline and one still awaited", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		// Both send events take the type; the first, optional, has a short deadline of
		// its own. The send path picks among them as the Kafka path does.
		reg := registration(vocab.StrategyRequiredOnly, []aggregator.Expected{
			{Name: "early", Source: aggregator.SourceSend, Type: "approved", TimeoutMS: 100},
			{Name: "final", Source: aggregator.SourceSend, Type: "approved", Required: true},
		})
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(deadlineOf(t, ws, "early").Add(20 * time.Millisecond))

		res, err := f.agg.Send(t.Context(), aggregator.Sent{ExecutionID: w.ExecutionID, Type: "approved",
			Payload: []byte(`{"ok": true}`), Source: aggregator.Source{Kind: aggregator.SourceSend}})
		require.NoError(t, err)
		require.Equal(t, aggregator.SendDelivered, res.Outcome)
		require.Len(t, res.Deliveries, 1)
		require.Equal(t, aggregator.Completed, res.Deliveries[0].Outcome, "counted as the event still awaited, not as the one timed out")
		require.Equal(t, "final", res.Deliveries[0].Event)
		ws = f.waitState(t, w.ID)
		require.Equal(t, []string{"final"}, receivedNames(t, ws))
		require.Equal(t, []string{"early"}, timedOutOf(t, ws))
	})

	t.Run("a sent event past the overall deadline", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		sw, _ := f.sweeper(t, "sweeper", withClock(stub))
		reg := registration(vocab.StrategyAll, []aggregator.Expected{
			{Name: "approval", Source: aggregator.SourceSend, Type: "approved", Required: true},
		})
		reg.Timeout = 100 * time.Millisecond
		w := f.newWait(t, reg)
		stub.Set(f.waitState(t, w.ID).ExpiresAt.Add(20 * time.Millisecond))

		// Offered to the wait, the event is late: it writes the deadline first, and,
		// taken by no wait, is buffered for a later one.
		res, err := f.agg.Send(t.Context(), aggregator.Sent{ExecutionID: w.ExecutionID, Type: "approved",
			Payload: []byte(`{"ok": true}`), Source: aggregator.Source{Kind: aggregator.SourceSend}})
		require.NoError(t, err)
		require.Equal(t, aggregator.SendBuffered, res.Outcome)
		require.Len(t, res.Deliveries, 1)
		require.Equal(t, aggregator.Late, res.Deliveries[0].Outcome)
		require.NotNil(t, res.Deliveries[0].Expired)
		require.True(t, res.Queued(), "the timeout's continuation is announced")
		require.Zero(t, f.sweep(t, sw, stub.Now()), "nothing left for the sweeper")
		ws := f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitTimeout, ws.Status)
		require.Equal(t, []string{"approval"}, timedOutOf(t, ws))
		require.Equal(t, vocab.NodeFailed, f.node(t, w).Status)
		require.Equal(t, []string{"resume"}, f.runQueue(t, w))
	})

	t.Run("own deadline under all", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		sw, _ := f.sweeper(t, "sweeper", withClock(stub))
		reg := registration(vocab.StrategyAll, []aggregator.Expected{
			{Name: api, Source: "callback", Required: true},
			{Name: kafka, Source: "kafka", Topic: "orders", TimeoutMS: 100},
		})
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(deadlineOf(t, ws, kafka).Add(20 * time.Millisecond))

		// kafka_event timing out ended the wait (all needs every event), so api_response
		// is late although its own deadline is ahead and no sweeper has run: what is
		// recorded must not depend on when the sweeper gets to the wait. The late event
		// writes that ending itself.
		res := f.apply(t, w.event(api, apiPayload))
		require.Equal(t, aggregator.Late, res.Outcome)
		require.Equal(t, vocab.WaitTimeout, res.Status)
		require.NotNil(t, res.Expired)
		require.Zero(t, f.sweep(t, sw, stub.Now()), "nothing left for the sweeper")
		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitTimeout, ws.Status)
		require.Equal(t, int64(2), ws.Version, "registration and the timeout")
		require.Empty(t, receivedNames(t, ws))
		require.Nil(t, ws.ApiResponseData)
		require.Equal(t, []string{kafka}, timedOutOf(t, ws))
		require.Equal(t, vocab.NodeFailed, f.node(t, w).Status)

		// Once the row shows the wait ended, a late arrival changes nothing.
		snap := f.snapshot(t, w.ExecutionID)
		res = f.apply(t, w.event(kafka, kafkaPayload))
		require.Equal(t, aggregator.Late, res.Outcome)
		require.Nil(t, res.Expired)
		require.Equal(t, snap, f.snapshot(t, w.ExecutionID), "nothing changed")
	})

	t.Run("required event's own deadline under required_only", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		sw, _ := f.sweeper(t, "sweeper", withClock(stub))
		reg := registration(vocab.StrategyRequiredOnly, []aggregator.Expected{
			{Name: api, Source: "callback"},
			{Name: kafka, Source: "kafka", Topic: "orders", Required: true, TimeoutMS: 100},
		})
		reg.OnTimeout = vocab.OnTimeoutContinueWithPartial
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(deadlineOf(t, ws, kafka).Add(20 * time.Millisecond))

		// The optional api_response arrives after the required event's deadline ended
		// the wait: late, so the partial output holds only what arrived in time.
		res := f.apply(t, w.event(api, apiPayload))
		require.Equal(t, aggregator.Late, res.Outcome)
		require.NotNil(t, res.Expired)
		require.True(t, res.Expired.Continue)
		require.True(t, res.Expired.Partial)
		require.Zero(t, f.sweep(t, sw, stub.Now()), "nothing left for the sweeper")
		ws = f.waitState(t, w.ID)
		require.Equal(t, vocab.WaitTimeout, ws.Status)
		require.Empty(t, receivedNames(t, ws))
		require.Equal(t, int64(2), ws.Version, "registration and the timeout")
		out := outputOf(t, f.node(t, w))
		require.Equal(t, true, out["timeout"])
		require.Nil(t, out["apiResponse"])
	})

	t.Run("optional event's own deadline does not end required_only", func(t *testing.T) {
		t.Parallel()
		stub := clock.NewStub(time.Now())
		f := setup(t, withClock(stub))
		reg := registration(vocab.StrategyRequiredOnly, []aggregator.Expected{
			{Name: api, Source: "callback", Required: true, TimeoutMS: 10_000},
			{Name: kafka, Source: "kafka", Topic: "orders", TimeoutMS: 100},
		})
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		stub.Set(deadlineOf(t, ws, kafka).Add(20 * time.Millisecond))
		// A passed deadline that does not end the wait leaves the others counting.
		require.Equal(t, aggregator.Completed, f.apply(t, w.event(api, apiPayload)).Outcome)
		// No sweeper ran and nothing arrived late, yet kafka_event's passed deadline is
		// recorded at completion: the output does not depend on when (or whether) the
		// sweeper ran.
		ws = f.waitState(t, w.ID)
		require.Equal(t, []string{kafka}, timedOutOf(t, ws))
		require.Equal(t, int64(2), ws.Version, "registration and the completing event")
		out := outputOf(t, f.node(t, w))
		require.Equal(t, []any{kafka}, out["timed_out_events"])
		require.Equal(t, false, out["timeout"])
	})
}

// deadlineRow is what TestDeadlineRacesEvents checks of one wait, read in one query.
type deadlineRow struct {
	Status         vocab.WaitStatus
	Version        int64
	Received       []string
	TimedOut       []string
	Resumes        int
	RunQueue       int
	NodeStatus     vocab.NodeStatus
	NodeFinished   bool
	NodeError      *string
	OutputTimeout  *bool
	OutputTimedOut []string
}

func (f *fixture) deadlineRows(t *testing.T, waits []wait) map[uuid.UUID]deadlineRow {
	t.Helper()
	ids := make([]uuid.UUID, len(waits))
	for i, w := range waits {
		ids[i] = w.ID
	}
	rows, err := f.pool.Query(t.Context(), `
		SELECT w.id, w.status, w.version,
			coalesce((SELECT json_agg(e->'name') FROM json_array_elements(w.received_events) e), '[]'),
			w.timed_out_events,
			(SELECT count(*) FROM run_queue r WHERE r.execution_id = w.execution_id AND r.node_id = w.node_id AND r.kind = 'resume'),
			(SELECT count(*) FROM run_queue r WHERE r.execution_id = w.execution_id),
			n.status, n.finished_at IS NOT NULL, n.error, (n.output->>'timeout')::boolean,
			coalesce(n.output->'timed_out_events', '[]')
		FROM execution_wait_states w
		JOIN node_executions n ON n.execution_id = w.execution_id AND n.node_id = w.node_id
		WHERE w.id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	out := map[uuid.UUID]deadlineRow{}
	for rows.Next() {
		var id uuid.UUID
		var r deadlineRow
		var received, timedOut, outTimedOut []byte
		require.NoError(t, rows.Scan(&id, &r.Status, &r.Version, &received, &timedOut, &r.Resumes, &r.RunQueue,
			&r.NodeStatus, &r.NodeFinished, &r.NodeError, &r.OutputTimeout, &outTimedOut))
		require.NoError(t, json.Unmarshal(received, &r.Received))
		require.NoError(t, json.Unmarshal(timedOut, &r.TimedOut))
		require.NoError(t, json.Unmarshal(outTimedOut, &r.OutputTimedOut))
		out[id] = r
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, len(waits))
	return out
}

// racingSweepers runs the sweepers of two pods, each looking at least every 20 ms, until
// stop (idempotent) returns.
func (f *fixture) racingSweepers(t *testing.T) (pods [2]*aggregator.Aggregator, logs [2]*expiredLog, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var sweepers sync.WaitGroup
	for i := range pods {
		pods[i], logs[i] = f.sweeper(t, fmt.Sprintf("pod-%d", i), func(c *aggregator.Config) { c.SweepMaxSleep = 20 * time.Millisecond })
		sweepers.Go(func() { pods[i].RunSweeper(ctx) })
	}
	return pods, logs, sync.OnceFunc(func() { cancel(); sweepers.Wait() })
}

// awaitDecided waits until no wait is open and the sweepers have reported every timeout.
// Waits whose event was late may still be waiting for a sweeper to notice; and a sweeper
// reports an expiry only once its commit is acknowledged, which can come after the rows
// are visible here — stopping it earlier would lose the report.
func (f *fixture) awaitDecided(t *testing.T, logs [2]*expiredLog) {
	t.Helper()
	require.Eventually(t, func() bool {
		var open, timedOut int
		err := f.pool.QueryRow(t.Context(), `SELECT count(*) FILTER (WHERE status = 'waiting'), count(*) FILTER (WHERE status = 'timeout')
			FROM execution_wait_states`).Scan(&open, &timedOut)
		return err == nil && open == 0 && len(logs[0].all())+len(logs[1].all()) >= timedOut
	}, 5*time.Second, 10*time.Millisecond, "every wait ends and every expiry is reported")
}

// TestDeadlineRacesEvents delivers each wait's only event around its deadline (±50 ms)
// while two pods run their sweepers: each wait ends exactly once, either completed by
// its event or timed out with the event reported late — never both, never neither.
func TestDeadlineRacesEvents(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	ctx := t.Context()
	const waitCount = 200
	reg := registration(vocab.StrategyAny, expectAPIOnly())
	reg.Timeout = 1500 * time.Millisecond

	pods, logs, stop := f.racingSweepers(t)
	defer stop()

	waits := f.newWaits(t, waitCount, reg)
	expires := map[uuid.UUID]time.Time{}
	for _, w := range waits {
		expires[w.ID] = f.waitState(t, w.ID).ExpiresAt
	}

	type delivery struct {
		at, start, end time.Time
		res            aggregator.Result
		err            error
	}
	deliveries := make([]delivery, len(waits))
	var wg sync.WaitGroup
	for i, w := range waits {
		d := &deliveries[i]
		d.at = expires[w.ID].Add(time.Duration(rand.IntN(101)-50) * time.Millisecond)
		pod := pods[i%2]
		wg.Go(func() {
			time.Sleep(time.Until(d.at))
			d.start = time.Now()
			d.res, d.err = pod.Apply(ctx, w.event(api, apiPayload))
			d.end = time.Now()
		})
	}
	wg.Wait()

	f.awaitDecided(t, logs)
	stop()

	reported := map[string]int{}
	byPod := [2]int{}
	for i, l := range logs {
		for _, e := range l.all() {
			reported[e.WaitStateID]++
			byPod[i]++
			require.False(t, e.Continue, "onTimeout fail")
		}
	}
	rows := f.deadlineRows(t, waits)
	completed, timedOut, endedByEvent, lateAfterDeadline := 0, 0, 0, 0
	for i, w := range waits {
		d, row := deliveries[i], rows[w.ID]
		require.NoError(t, d.err, "wait %d", i)
		require.Equal(t, 1, row.Resumes, "wait %d: exactly one continuation", i)
		require.Equal(t, 1, row.RunQueue, "wait %d", i)
		require.Equal(t, int64(2), row.Version, "wait %d: one change, by one party", i)
		require.True(t, row.NodeFinished, "wait %d", i)
		require.NotNil(t, row.OutputTimeout, "wait %d: node output written", i)
		switch row.Status {
		case vocab.WaitCompleted:
			completed++
			require.Equal(t, aggregator.Completed, d.res.Outcome, "wait %d", i)
			require.Equal(t, vocab.WaitCompleted, d.res.Status, "wait %d", i)
			require.Equal(t, []string{api}, row.Received, "wait %d", i)
			require.Empty(t, row.TimedOut, "wait %d", i)
			require.Equal(t, vocab.NodeCompleted, row.NodeStatus, "wait %d", i)
			require.Nil(t, row.NodeError, "wait %d", i)
			require.False(t, *row.OutputTimeout, "wait %d", i)
			require.Empty(t, row.OutputTimedOut, "wait %d", i)
			require.Zero(t, reported[w.ID.String()], "wait %d: a completed wait is not reported expired", i)
			require.True(t, d.start.Before(expires[w.ID]), "wait %d: an event decided at or after the deadline counted", i)
		case vocab.WaitTimeout:
			timedOut++
			require.Equal(t, aggregator.Late, d.res.Outcome, "wait %d", i)
			require.Empty(t, row.Received, "wait %d", i)
			require.Equal(t, []string{api}, row.TimedOut, "wait %d", i)
			require.Equal(t, vocab.NodeFailed, row.NodeStatus, "wait %d", i)
			require.NotNil(t, row.NodeError, "wait %d", i)
			require.Equal(t, "timed out waiting for api_response", *row.NodeError, "wait %d", i)
			require.True(t, *row.OutputTimeout, "wait %d", i)
			require.Equal(t, []string{api}, row.OutputTimedOut, "wait %d", i)
			require.Equal(t, 1, reported[w.ID.String()], "wait %d: reported expired exactly once", i)
			require.False(t, d.end.Before(expires[w.ID]), "wait %d: an event that returned before the deadline was late", i)
			require.Equal(t, vocab.WaitTimeout, d.res.Status, "wait %d: a late answer stands on the deadline written", i)
			if d.res.Expired != nil {
				endedByEvent++ // the late event found the deadline unwritten and wrote it
			}
			if !d.start.Before(expires[w.ID]) {
				lateAfterDeadline++
			}
		default:
			require.FailNow(t, "wait neither completed nor timed out", "wait %d: status %s", i, row.Status)
		}
	}
	require.Equal(t, waitCount, completed+timedOut)
	require.Len(t, reported, timedOut)
	t.Logf("%d waits raced their deadline: %d completed, %d timed out (%d of those ended by the late event before a sweeper got to them; %d delivered after the deadline); pods fired %d and %d",
		waitCount, completed, timedOut, endedByEvent, lateAfterDeadline, byPod[0], byPod[1])
}

// TestSweepersDecideOnce runs sweepers of two pods over many due waits at once: SKIP
// LOCKED hands each wait to exactly one of them.
func TestSweepersDecideOnce(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	ctx := t.Context()
	const waitCount = 400
	waits := f.newWaits(t, waitCount, registration(vocab.StrategyAll, expectBoth(true, true)))

	var pods [2]*aggregator.Aggregator
	var logs [2]*expiredLog
	for i := range pods {
		pods[i], logs[i] = f.sweeper(t, fmt.Sprintf("pod-%d", i), func(c *aggregator.Config) { c.SweepBatch = 16 })
	}
	at := time.Now().Add(10 * time.Minute)
	// Two loops per pod, as SweepWorkers runs them.
	const loops = 2
	claimed := make([]int, len(pods)*loops)
	errs := make([]error, len(claimed))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range claimed {
		pod := pods[i%len(pods)]
		wg.Go(func() {
			<-start
			for {
				n, err := pod.Sweep(ctx, at)
				if err != nil {
					errs[i] = err
					return
				}
				if n == 0 {
					return
				}
				claimed[i] += n
			}
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	total := 0
	for _, n := range claimed {
		total += n
	}
	require.Equal(t, waitCount, total, "claimed: each wait once")
	reported := map[string]int{}
	perPod := [2]int{}
	for i, l := range logs {
		for _, e := range l.all() {
			reported[e.WaitStateID]++
			perPod[i]++
		}
	}
	require.Len(t, reported, waitCount)
	for _, w := range waits {
		require.Equal(t, 1, reported[w.ID.String()], "wait %s reported %d times", w.ID, reported[w.ID.String()])
	}
	require.Equal(t, claimed[0]+claimed[2], perPod[0])
	require.Equal(t, claimed[1]+claimed[3], perPod[1])

	var timedOut, resumes, failed int
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states WHERE status = 'timeout' AND version = 2`).Scan(&timedOut))
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM run_queue WHERE kind = 'resume'`).Scan(&resumes))
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM node_executions WHERE status = 'failed' AND error = 'timed out waiting for api_response, kafka_event'`).Scan(&failed))
	require.Equal(t, waitCount, timedOut)
	require.Equal(t, waitCount, resumes)
	require.Equal(t, waitCount, failed)
	t.Logf("%d due waits: pod-0 decided %d, pod-1 %d (loops claimed %v)", waitCount, perPod[0], perPod[1], claimed)
}

// TestCancelWaitRacesEvent races cancelling a wait against the event that completes it:
// either the cancel wins and the event is late, or the event wins and the cancel is
// refused with WaitFinishedError. Never both, never neither.
func TestCancelWaitRacesEvent(t *testing.T) {
	t.Parallel()
	exclusive(t)
	f := setup(t)
	ctx := t.Context()
	const waitsPerRound, rounds = 10, 4
	reg := registration(vocab.StrategyAll, expectAPIOnly())
	reg.APICall = true
	cancels := 0
	for round := range rounds {
		waits := f.newWaits(t, waitsPerRound, reg)
		start := make(chan struct{})
		outputs := make([]map[string]any, len(waits))
		raws := make([]json.RawMessage, len(waits))
		cancelErrs := make([]error, len(waits))
		results := make([]aggregator.Result, len(waits))
		applyErrs := make([]error, len(waits))
		var wg sync.WaitGroup
		for i, w := range waits {
			wg.Go(func() {
				<-start
				cancelErrs[i] = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
					var err error
					raws[i], err = f.agg.CancelWait(ctx, tx, w.ExecutionID, w.NodeID, "cancelled by operator", true)
					if err == nil {
						err = json.Unmarshal(raws[i], &outputs[i])
					}
					return err
				})
			})
			wg.Go(func() {
				<-start
				results[i], applyErrs[i] = f.agg.Apply(ctx, w.event(api, apiPayload))
			})
		}
		close(start)
		wg.Wait()

		for i, w := range waits {
			require.NoError(t, applyErrs[i])
			ws := f.waitState(t, w.ID)
			n := f.node(t, w)
			var outbox int
			require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE wait_state_id = $1`, w.ID).Scan(&outbox))
			require.Equal(t, int64(2), ws.Version, "round %d wait %d: one change, by one party", round, i)
			if cancelErrs[i] == nil {
				cancels++
				require.Equal(t, aggregator.Late, results[i].Outcome, "round %d wait %d", round, i)
				require.Equal(t, vocab.WaitCancelled, results[i].Status)
				require.Equal(t, vocab.WaitCancelled, ws.Status)
				require.NotNil(t, ws.Error)
				require.Equal(t, "cancelled by operator", *ws.Error)
				require.JSONEq(t, `[]`, string(ws.ReceivedEvents))
				require.Nil(t, ws.ApiResponseData)
				require.Empty(t, f.runQueue(t, w))
				require.Equal(t, vocab.NodeCompleted, n.Status, "CancelWait ends the node with the wait: completed, to continue")
				require.JSONEq(t, string(raws[i]), string(n.Output), "the node's output is the one handed on")
				require.Zero(t, outbox, "the unsent call is dropped")
				require.Equal(t, true, outputs[i]["cancelled"])
				require.Equal(t, false, outputs[i]["timeout"])
				require.Equal(t, []any{}, outputs[i]["arrival_order"], "decoded from the JSON handed on")
			} else {
				var finished *aggregator.WaitFinishedError
				require.ErrorAs(t, cancelErrs[i], &finished, "round %d wait %d", round, i)
				require.Equal(t, vocab.WaitCompleted, finished.Status)
				require.Nil(t, outputs[i])
				require.Equal(t, aggregator.Completed, results[i].Outcome, "round %d wait %d", round, i)
				require.Equal(t, vocab.WaitCompleted, ws.Status)
				require.Nil(t, ws.Error)
				require.Equal(t, []string{api}, receivedNames(t, ws))
				require.Equal(t, []string{"resume"}, f.runQueue(t, w))
				require.Equal(t, vocab.NodeCompleted, n.Status)
				require.Equal(t, 1, outbox, "the call stays with its completed wait")
			}
		}
	}
	total := waitsPerRound * rounds
	t.Logf("%d races: CancelWait won %d, the event %d", total, cancels, total-cancels)

	// CancelWait refuses a wait that is not waiting for another reason too.
	w := f.newWait(t, registration(vocab.StrategyAll, expectAPIOnly()))
	sw, _ := f.sweeper(t, "sweeper")
	require.Equal(t, 1, f.sweep(t, sw, time.Now().Add(10*time.Minute)))
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.agg.CancelWait(ctx, tx, w.ExecutionID, w.NodeID, "too late", false)
		return err
	})
	var finished *aggregator.WaitFinishedError
	require.True(t, errors.As(err, &finished), "error: %v", err)
	require.Equal(t, vocab.WaitTimeout, finished.Status)
}

// gate is a slog.Handler that holds the first record with message msg until released:
// the sweeper logs a failing decision inside its transaction, after claiming the wait
// and before writing, so the gate pauses it there with the wait locked.
type gate struct {
	msg     string
	once    sync.Once
	paused  chan struct{}
	release chan struct{}
}

func newGate(msg string) *gate {
	return &gate{msg: msg, paused: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) Enabled(context.Context, slog.Level) bool { return true }

func (g *gate) Handle(_ context.Context, r slog.Record) error {
	if r.Message != g.msg {
		return nil
	}
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.paused)
		<-g.release
	}
	return nil
}

func (g *gate) WithAttrs([]slog.Attr) slog.Handler { return g }
func (g *gate) WithGroup(string) slog.Handler      { return g }

// TestDeadlineFence interleaves a sweeper and an event deterministically, in both orders.
func TestDeadlineFence(t *testing.T) {
	t.Parallel()
	applyTx := func(f *fixture) func(ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error) {
		return func(ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error) {
			return f.agg.ApplyTx(ctx, tx, ev)
		}
	}
	applyBatch := func(f *fixture) func(ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error) {
		return func(ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error) {
			res, err := f.agg.ApplyBatch(ctx, tx, []aggregator.Event{ev})
			if err != nil {
				return aggregator.Result{}, err
			}
			return res[0], nil
		}
	}
	paths := []struct {
		name  string
		apply func(f *fixture) func(ctx context.Context, tx pgx.Tx, ev aggregator.Event) (aggregator.Result, error)
	}{{"ApplyTx", applyTx}, {"ApplyBatch", applyBatch}}

	// The sweeper has claimed the wait (it is locked) and decided to fire it; an event
	// read the wait as waiting, before its deadline in real time, and decided to complete
	// it. The event's write waits for the sweeper's commit, misses the version fence, and
	// decided again it is late.
	for _, path := range paths {
		t.Run("sweeper first/"+path.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			ctx := t.Context()
			g := newGate("wait deadline decided")
			var releaseOnce sync.Once
			release := func() { releaseOnce.Do(func() { close(g.release) }) }
			defer release()
			sw, expired := f.sweeper(t, "sweeper", func(c *aggregator.Config) { c.Logger = slog.New(g) })
			w := f.newWait(t, registration(vocab.StrategyAny, expectAPIOnly()))

			type sweepResult struct {
				n   int
				err error
			}
			swept := make(chan sweepResult, 1)
			go func() {
				n, err := sw.Sweep(ctx, time.Now().Add(10*time.Minute))
				swept <- sweepResult{n, err}
			}()
			select {
			case <-g.paused:
			case r := <-swept:
				require.FailNow(t, "the sweeper finished without deciding to fail the wait", "%+v", r)
			case <-time.After(10 * time.Second):
				require.FailNow(t, "the sweeper never paused")
			}

			pid := make(chan int32, 1)
			var res aggregator.Result
			applied := make(chan error, 1)
			go func() {
				applied <- pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
					var p int32
					if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
						return err
					}
					pid <- p
					var err error
					res, err = path.apply(f)(ctx, tx, w.event(api, apiPayload))
					return err
				})
			}()
			var applier int32
			select {
			case applier = <-pid:
			case err := <-applied:
				require.FailNow(t, "event transaction failed early", "%v", err)
			}
			waitUntil := time.Now().Add(10 * time.Second)
			for {
				var blocked bool
				require.NoError(t, f.pool.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, applier).Scan(&blocked))
				if blocked {
					break
				}
				select {
				case err := <-applied:
					require.FailNow(t, "the event was decided without waiting for the sweeper's lock", "err %v, result %+v", err, res)
				default:
				}
				require.True(t, time.Now().Before(waitUntil), "the event's write never blocked on the sweeper")
				time.Sleep(2 * time.Millisecond)
			}
			release()

			r := <-swept
			require.NoError(t, r.err)
			require.Equal(t, 1, r.n)
			require.NoError(t, <-applied)
			require.Equal(t, aggregator.Late, res.Outcome)
			require.Equal(t, vocab.WaitTimeout, res.Status)
			require.Equal(t, 1, res.Conflicts, "the event lost the fence once")

			row := f.deadlineRows(t, []wait{w})[w.ID]
			require.Equal(t, vocab.WaitTimeout, row.Status)
			require.Equal(t, int64(2), row.Version)
			require.Empty(t, row.Received)
			require.Equal(t, []string{api}, row.TimedOut)
			require.Equal(t, vocab.NodeFailed, row.NodeStatus)
			require.Equal(t, 1, row.Resumes)
			require.Equal(t, 1, row.RunQueue)
			require.Len(t, expired.all(), 1)
		})
	}

	// An event's transaction holds the wait (it completed it, not yet committed) when the
	// deadline is swept: the sweeper skips the wait without waiting, and never decides it
	// once the event commits; had the event rolled back, the next sweep fires it.
	for _, commit := range []bool{true, false} {
		for _, path := range paths {
			name := "event first, committed/" + path.name
			if !commit {
				name = "event first, rolled back/" + path.name
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				f := setup(t)
				ctx := t.Context()
				sw, expired := f.sweeper(t, "sweeper")
				w := f.newWait(t, registration(vocab.StrategyAny, expectAPIOnly()))
				tx, err := f.pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(context.Background()) }()
				res, err := path.apply(f)(ctx, tx, w.event(api, apiPayload))
				require.NoError(t, err)
				require.Equal(t, aggregator.Completed, res.Outcome)

				at := time.Now().Add(10 * time.Minute)
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				n, err := sw.Sweep(sctx, at)
				cancel()
				require.NoError(t, err, "the sweeper must skip a locked wait, not wait for it")
				require.Zero(t, n)

				if commit {
					require.NoError(t, tx.Commit(ctx))
					require.Zero(t, f.sweep(t, sw, at))
					row := f.deadlineRows(t, []wait{w})[w.ID]
					require.Equal(t, vocab.WaitCompleted, row.Status)
					require.Equal(t, []string{api}, row.Received)
					require.Empty(t, row.TimedOut)
					require.Equal(t, vocab.NodeCompleted, row.NodeStatus)
					require.Equal(t, 1, row.Resumes)
					require.Empty(t, expired.all())
					return
				}
				require.NoError(t, tx.Rollback(ctx))
				require.Equal(t, 1, f.sweep(t, sw, at))
				row := f.deadlineRows(t, []wait{w})[w.ID]
				require.Equal(t, vocab.WaitTimeout, row.Status)
				require.Empty(t, row.Received)
				require.Equal(t, vocab.NodeFailed, row.NodeStatus)
				require.Equal(t, 1, row.Resumes)
				require.Len(t, expired.all(), 1)
			})
		}
	}
}
