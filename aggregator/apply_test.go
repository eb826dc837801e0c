package aggregator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

func TestNewRequiresInstanceID(t *testing.T) {
	t.Parallel()
	_, err := aggregator.New(nil, aggregator.Config{})
	require.EqualError(t, err, "aggregator.instance_id: must not be empty")
}

const (
	R = aggregator.Recorded
	C = aggregator.Completed
	L = aggregator.Late
)

// TestStrategyArrivalOrders delivers both events, in both orders, to every strategy
// configuration and checks each outcome and everything the aggregator wrote.
func TestStrategyArrivalOrders(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		name     string
		strategy vocab.Strategy
		expected []aggregator.Expected
		custom   []string
		// Outcomes of the first and second delivery, per order.
		apiFirst   [2]aggregator.Outcome
		kafkaFirst [2]aggregator.Outcome
	}{
		{"all/both required", vocab.StrategyAll, expectBoth(true, true), nil, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{R, C}},
		{"all/kafka optional", vocab.StrategyAll, expectBoth(true, false), nil, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{R, C}},
		{"all/none required", vocab.StrategyAll, expectBoth(false, false), nil, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{R, C}},
		{"any/both required", vocab.StrategyAny, expectBoth(true, true), nil, [2]aggregator.Outcome{C, L}, [2]aggregator.Outcome{C, L}},
		{"any/kafka optional", vocab.StrategyAny, expectBoth(true, false), nil, [2]aggregator.Outcome{C, L}, [2]aggregator.Outcome{C, L}},
		{"required_only/kafka optional", vocab.StrategyRequiredOnly, expectBoth(true, false), nil, [2]aggregator.Outcome{C, L}, [2]aggregator.Outcome{R, C}},
		{"required_only/api optional", vocab.StrategyRequiredOnly, expectBoth(false, true), nil, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{C, L}},
		{"required_only/both required", vocab.StrategyRequiredOnly, expectBoth(true, true), nil, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{R, C}},
		{"custom/api", vocab.StrategyCustom, expectBoth(true, true), []string{api}, [2]aggregator.Outcome{C, L}, [2]aggregator.Outcome{R, C}},
		{"custom/api ignores flags", vocab.StrategyCustom, expectBoth(false, true), []string{api}, [2]aggregator.Outcome{C, L}, [2]aggregator.Outcome{R, C}},
		{"custom/kafka", vocab.StrategyCustom, expectBoth(true, false), []string{kafka}, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{C, L}},
		{"custom/both", vocab.StrategyCustom, expectBoth(false, false), []string{api, kafka}, [2]aggregator.Outcome{R, C}, [2]aggregator.Outcome{R, C}},
	}
	for _, tt := range tests {
		for _, order := range [][2]string{{api, kafka}, {kafka, api}} {
			want := tt.apiFirst
			if order[0] == kafka {
				want = tt.kafkaFirst
			}
			t.Run(fmt.Sprintf("%s/%s_then_%s", tt.name, order[0], order[1]), func(t *testing.T) {
				t.Parallel()
				w := f.newWait(t, registration(tt.strategy, tt.expected, tt.custom...))
				payloads := map[string]string{api: apiPayload, kafka: kafkaPayload}

				ws := f.waitState(t, w.ID)
				require.Equal(t, vocab.WaitWaiting, ws.Status)
				require.Equal(t, int64(1), ws.Version)
				require.JSONEq(t, `[]`, string(ws.ReceivedEvents))

				var applied []string
				for i, name := range order {
					res := f.apply(t, w.event(name, payloads[name]))
					require.Equal(t, want[i], res.Outcome, "delivery %d (%s)", i+1, name)
					require.Equal(t, w.ID, res.WaitStateID)
					require.Equal(t, w.NodeID, res.NodeID)
					require.Zero(t, res.Conflicts)
					if res.Outcome == R || res.Outcome == C {
						applied = append(applied, name)
					}
					require.Equal(t, int64(1+len(applied)), res.Version, "delivery %d (%s)", i+1, name)

					// Between deliveries, the wait is exactly as far as the outcomes say.
					ws := f.waitState(t, w.ID)
					require.Equal(t, int64(1+len(applied)), ws.Version)
					require.Equal(t, applied, receivedNames(t, ws))
					n := f.node(t, w)
					if res.Outcome == R {
						require.Equal(t, vocab.WaitWaiting, res.Status)
						require.Equal(t, vocab.WaitWaiting, ws.Status)
						require.Equal(t, vocab.NodeWaiting, n.Status)
						require.Nil(t, n.Output)
						require.Empty(t, f.runQueue(t, w))
					} else {
						require.Equal(t, vocab.WaitCompleted, res.Status)
						require.Equal(t, vocab.WaitCompleted, ws.Status)
						require.Equal(t, vocab.NodeCompleted, n.Status)
						require.Equal(t, []string{"resume"}, f.runQueue(t, w))
					}
				}

				// Final state.
				ws = f.waitState(t, w.ID)
				require.Equal(t, vocab.WaitCompleted, ws.Status)
				require.Equal(t, int64(1+len(applied)), ws.Version)
				require.Nil(t, ws.ResumedAt)
				require.Nil(t, ws.Error)
				received := receivedOf(t, ws)
				require.Len(t, received, len(applied))
				for i, r := range received {
					require.Equal(t, applied[i], r.Name)
					require.Equal(t, payloadKey(payloads[r.Name]), r.Key)
					require.False(t, r.ReceivedAt.IsZero())
					require.Equal(t, w.event(r.Name, "").Source, r.Source)
				}
				if len(received) == 2 {
					require.False(t, received[1].ReceivedAt.Before(received[0].ReceivedAt), "received_at goes forward")
				}

				// The event payloads are stored only for applied events.
				for name, data := range map[string][]byte{api: ws.ApiResponseData, kafka: ws.KafkaEventData} {
					if slices.Contains(applied, name) {
						require.JSONEq(t, payloads[name], string(data), name)
					} else {
						require.Nil(t, data, name)
					}
				}

				n := f.node(t, w)
				require.Equal(t, vocab.NodeCompleted, n.Status)
				require.NotNil(t, n.FinishedAt)
				require.Nil(t, n.Error)
				out, ok := decode(t, n.Output).(map[string]any)
				require.True(t, ok, "output is an object: %s", n.Output)
				wantOut := map[string]any{"apiResponse": nil, "kafkaEvent": nil, "orderId": nil, "shipment": nil}
				if slices.Contains(applied, api) {
					wantOut["apiResponse"] = decode(t, []byte(apiPayload))
					wantOut["orderId"] = "o-1"
				}
				if slices.Contains(applied, kafka) {
					wantOut["kafkaEvent"] = decode(t, []byte(kafkaPayload))
					wantOut["shipment"] = map[string]any{"carrier": "dhl"}
				}
				for key, v := range wantOut {
					require.Contains(t, out, key)
					require.Equal(t, v, out[key], key)
				}
				order := []any{}
				for _, a := range applied {
					order = append(order, a)
				}
				require.Equal(t, order, out["arrival_order"])
				require.Equal(t, false, out["timeout"])
				require.Equal(t, string(tt.strategy), out["strategy"])
				require.Equal(t, w.CorrelationID.String(), out["correlation_id"])
				events, ok := out["events"].([]any)
				require.True(t, ok)
				require.Len(t, events, len(applied))
				for i, e := range events {
					e := e.(map[string]any)
					require.Equal(t, applied[i], e["name"])
					require.Contains(t, e, "received_at")
					require.Equal(t, string(w.event(applied[i], "").Source.Kind), e["source"].(map[string]any)["kind"])
				}

				require.Equal(t, []string{"resume"}, f.runQueue(t, w), "exactly one continuation")
			})
		}
	}
}

// TestDuplicatesAndLate covers redeliveries and events that come too late: none of them
// changes a single row.
func TestDuplicatesAndLate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	all := registration(vocab.StrategyAll, expectBoth(true, true))
	anyReg := registration(vocab.StrategyAny, expectBoth(true, true))
	withKey := func(ev aggregator.Event, key string) aggregator.Event {
		ev.IdempotencyKey = key
		return ev
	}
	tests := []struct {
		name string
		reg  aggregator.Registration
		// before are applied first, each with its outcome; then probe must have want and
		// change nothing.
		before     func(w wait) []aggregator.Event
		beforeWant []aggregator.Outcome
		probe      func(w wait) aggregator.Event
		want       aggregator.Outcome
		wantStatus vocab.WaitStatus
	}{
		{
			name:       "same payload twice",
			reg:        all,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, apiPayload)} },
			beforeWant: []aggregator.Outcome{R},
			probe:      func(w wait) aggregator.Event { return w.event(api, apiPayload) },
			want:       aggregator.Duplicate, wantStatus: vocab.WaitWaiting,
		},
		{
			name:       "same payload from another source",
			reg:        all,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{w.event(kafka, kafkaPayload)} },
			beforeWant: []aggregator.Outcome{R},
			probe: func(w wait) aggregator.Event {
				ev := w.event(kafka, kafkaPayload)
				offset := int64(43)
				ev.Source.Offset = &offset // redelivered after a rebalance
				return ev
			},
			want: aggregator.Duplicate, wantStatus: vocab.WaitWaiting,
		},
		{
			name:       "same webhook id, different payload",
			reg:        all,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{withKey(w.event(api, apiPayload), "wh-1")} },
			beforeWant: []aggregator.Outcome{R},
			probe:      func(w wait) aggregator.Event { return withKey(w.event(api, `{"order":{"id":"o-2"}}`), "wh-1") },
			want:       aggregator.Duplicate, wantStatus: vocab.WaitWaiting,
		},
		{
			name:       "different webhook id, same payload",
			reg:        all,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{withKey(w.event(api, apiPayload), "wh-1")} },
			beforeWant: []aggregator.Outcome{R},
			probe:      func(w wait) aggregator.Event { return withKey(w.event(api, apiPayload), "wh-2") },
			want:       aggregator.AlreadyRecorded, wantStatus: vocab.WaitWaiting,
		},
		{
			name:       "different payload while waiting",
			reg:        all,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, apiPayload)} },
			beforeWant: []aggregator.Outcome{R},
			probe:      func(w wait) aggregator.Event { return w.event(api, `{"order":{"id":"o-2"}}`) },
			want:       aggregator.AlreadyRecorded, wantStatus: vocab.WaitWaiting,
		},
		{
			name: "duplicate after completion",
			reg:  all,
			before: func(w wait) []aggregator.Event {
				return []aggregator.Event{w.event(api, apiPayload), w.event(kafka, kafkaPayload)}
			},
			beforeWant: []aggregator.Outcome{R, C},
			probe:      func(w wait) aggregator.Event { return w.event(api, apiPayload) },
			want:       aggregator.Duplicate, wantStatus: vocab.WaitCompleted,
		},
		{
			name: "duplicate of the completing event",
			reg:  all,
			before: func(w wait) []aggregator.Event {
				return []aggregator.Event{w.event(api, apiPayload), w.event(kafka, kafkaPayload)}
			},
			beforeWant: []aggregator.Outcome{R, C},
			probe:      func(w wait) aggregator.Event { return w.event(kafka, kafkaPayload) },
			want:       aggregator.Duplicate, wantStatus: vocab.WaitCompleted,
		},
		{
			name: "webhook-id duplicate after completion",
			reg:  anyReg,
			before: func(w wait) []aggregator.Event {
				return []aggregator.Event{withKey(w.event(api, apiPayload), "wh-9")}
			},
			beforeWant: []aggregator.Outcome{C},
			probe:      func(w wait) aggregator.Event { return withKey(w.event(api, `{"retry":true}`), "wh-9") },
			want:       aggregator.Duplicate, wantStatus: vocab.WaitCompleted,
		},
		{
			name: "different event of a recorded name after completion",
			reg:  all,
			before: func(w wait) []aggregator.Event {
				return []aggregator.Event{w.event(api, apiPayload), w.event(kafka, kafkaPayload)}
			},
			beforeWant: []aggregator.Outcome{R, C},
			probe:      func(w wait) aggregator.Event { return w.event(kafka, `{"status":"returned"}`) },
			want:       aggregator.Late, wantStatus: vocab.WaitCompleted,
		},
		{
			name:       "new event after any completed",
			reg:        anyReg,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, apiPayload)} },
			beforeWant: []aggregator.Outcome{C},
			probe:      func(w wait) aggregator.Event { return w.event(kafka, kafkaPayload) },
			want:       aggregator.Late, wantStatus: vocab.WaitCompleted,
		},
		{
			name:       "new event after required_only completed",
			reg:        registration(vocab.StrategyRequiredOnly, expectBoth(true, false)),
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, apiPayload)} },
			beforeWant: []aggregator.Outcome{C},
			probe:      func(w wait) aggregator.Event { return w.event(kafka, kafkaPayload) },
			want:       aggregator.Late, wantStatus: vocab.WaitCompleted,
		},
		{
			name:       "empty payload twice",
			reg:        all,
			before:     func(w wait) []aggregator.Event { return []aggregator.Event{w.event(api, "")} },
			beforeWant: []aggregator.Outcome{R},
			probe:      func(w wait) aggregator.Event { return w.event(api, "") },
			want:       aggregator.Duplicate, wantStatus: vocab.WaitWaiting,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := f.newWait(t, tt.reg)
			for i, ev := range tt.before(w) {
				require.Equal(t, tt.beforeWant[i], f.apply(t, ev).Outcome, "before[%d]", i)
			}
			ws := f.waitState(t, w.ID)
			before := f.snapshot(t, w.ExecutionID)

			res := f.apply(t, tt.probe(w))
			require.Equal(t, tt.want, res.Outcome)
			require.Equal(t, w.ID, res.WaitStateID)
			require.Equal(t, w.NodeID, res.NodeID)
			require.Equal(t, tt.wantStatus, res.Status)
			require.Equal(t, ws.Version, res.Version, "version unchanged")
			require.Equal(t, before, f.snapshot(t, w.ExecutionID), "nothing changed")

			// And once more: the outcome does not drift.
			require.Equal(t, tt.want, f.apply(t, tt.probe(w)).Outcome)
			require.Equal(t, before, f.snapshot(t, w.ExecutionID))
		})
	}
}

// An empty body is stored as JSON null, not as a missing payload.
func TestEmptyPayload(t *testing.T) {
	t.Parallel()
	f := setup(t)
	w := f.newWait(t, registration(vocab.StrategyAll, expectAPIOnly()))
	res := f.apply(t, w.event(api, ""))
	require.Equal(t, aggregator.Completed, res.Outcome)
	ws := f.waitState(t, w.ID)
	require.JSONEq(t, `null`, string(ws.ApiResponseData))
	require.Equal(t, payloadKey(""), receivedOf(t, ws)[0].Key)
	out := decode(t, f.node(t, w).Output).(map[string]any)
	require.Nil(t, out["apiResponse"])
	require.Nil(t, out["orderId"])
	require.Equal(t, []any{api}, out["arrival_order"])
}

func TestIdempotencyKeyStored(t *testing.T) {
	t.Parallel()
	f := setup(t)
	w := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
	ev := w.event(api, apiPayload)
	ev.IdempotencyKey = "wh-123"
	require.Equal(t, aggregator.Recorded, f.apply(t, ev).Outcome)
	require.Equal(t, "id:wh-123", receivedOf(t, f.waitState(t, w.ID))[0].Key)
}

// TestRejections covers events that never touch a wait: not expected, not found, and
// ids that do not belong together.
func TestRejections(t *testing.T) {
	t.Parallel()
	f := setup(t)
	apiOnly := f.newWait(t, registration(vocab.StrategyAll, expectAPIOnly()))
	a := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
	b := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
	noWait := f.newExecutionWithoutWait(t)
	// b already holds an event, so a rejected event must not disturb a wait in progress.
	require.Equal(t, aggregator.Recorded, f.apply(t, b.event(api, apiPayload)).Outcome)
	all := []uuid.UUID{apiOnly.ExecutionID, a.ExecutionID, b.ExecutionID, noWait}

	ev := func(exec, corr uuid.UUID, name string) aggregator.Event {
		return aggregator.Event{ExecutionID: exec, CorrelationID: corr, Name: name, Payload: json.RawMessage(`{"x":1}`)}
	}
	tests := []struct {
		name  string
		event aggregator.Event
		want  aggregator.Outcome
		// wait is the wait the event correlated with, if any.
		wait *wait
		// logged is the error message logged for an id mismatch.
		logged string
	}{
		{name: "kafka_event to an api-only wait", event: apiOnly.event(kafka, kafkaPayload), want: aggregator.NotExpected, wait: &apiOnly},
		{name: "unknown event name", event: a.event("sms_reply", `{}`), want: aggregator.NotExpected, wait: &a},
		{name: "random ids", event: ev(uuid.New(), uuid.New(), api), want: aggregator.NotFound},
		{name: "execution without waits", event: ev(noWait, uuid.New(), api), want: aggregator.NotFound},
		{name: "random execution, valid correlation id", event: ev(uuid.New(), a.CorrelationID, api), want: aggregator.IDMismatch,
			logged: "event rejected: correlation id belongs to another execution"},
		{name: "another execution's correlation id", event: ev(b.ExecutionID, a.CorrelationID, api), want: aggregator.IDMismatch,
			logged: "event rejected: correlation id belongs to another execution"},
		{name: "execution without waits, valid correlation id", event: ev(noWait, a.CorrelationID, kafka), want: aggregator.IDMismatch,
			logged: "event rejected: correlation id belongs to another execution"},
		{name: "valid execution, wrong correlation id", event: ev(a.ExecutionID, uuid.New(), api), want: aggregator.IDMismatch,
			logged: "event rejected: execution has no wait with this correlation id"},
		{name: "valid execution, nil correlation id", event: ev(b.ExecutionID, uuid.Nil, kafka), want: aggregator.IDMismatch,
			logged: "event rejected: execution has no wait with this correlation id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: each case asserts that no row of any execution changed.
			before := f.snapshot(t, all...)
			res := f.apply(t, tt.event)
			require.Equal(t, tt.want, res.Outcome)
			require.Zero(t, res.Conflicts)
			if tt.wait != nil {
				require.Equal(t, tt.wait.ID, res.WaitStateID)
				require.Equal(t, tt.wait.NodeID, res.NodeID)
				require.Equal(t, vocab.WaitWaiting, res.Status)
				require.Equal(t, int64(1), res.Version)
			} else {
				require.Equal(t, aggregator.Result{Outcome: tt.want}, res, "nothing is reported about another execution's wait")
			}
			require.Equal(t, before, f.snapshot(t, all...), "nothing changed")
			if tt.logged != "" {
				logged := f.logs.find(slog.LevelError, tt.logged, "correlation_id", tt.event.CorrelationID)
				require.NotEmpty(t, logged, "an id mismatch is logged at error")
				require.Equal(t, tt.event.ExecutionID, logged[len(logged)-1]["execution_id"])
			}
		})
	}
}

// ApplyTx lets a source batch events into one transaction; nothing is visible before the
// commit and nothing survives a rollback.
func TestApplyTxBatchAndRollback(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()
	w := f.newWait(t, registration(vocab.StrategyAll, expectBoth(true, true)))
	before := f.snapshot(t, w.ExecutionID)

	errRollback := errors.New("rollback")
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		res, err := f.agg.ApplyTx(ctx, tx, w.event(api, apiPayload))
		require.NoError(t, err)
		require.Equal(t, aggregator.Recorded, res.Outcome)
		res, err = f.agg.ApplyTx(ctx, tx, w.event(kafka, kafkaPayload))
		require.NoError(t, err)
		require.Equal(t, aggregator.Completed, res.Outcome)
		require.Equal(t, int64(3), res.Version)
		// Not visible outside the transaction.
		require.Equal(t, before, f.snapshot(t, w.ExecutionID))
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)
	require.Equal(t, before, f.snapshot(t, w.ExecutionID), "rolled back")

	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		for _, ev := range []aggregator.Event{w.event(kafka, kafkaPayload), w.event(kafka, kafkaPayload), w.event(api, apiPayload), w.event(api, `{}`)} {
			if _, err := f.agg.ApplyTx(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	ws := f.waitState(t, w.ID)
	require.Equal(t, vocab.WaitCompleted, ws.Status)
	require.Equal(t, int64(3), ws.Version)
	require.Equal(t, []string{kafka, api}, receivedNames(t, ws))
	require.Equal(t, []string{"resume"}, f.runQueue(t, w))
	require.Equal(t, vocab.NodeCompleted, f.node(t, w).Status)
}

func TestRegister(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := t.Context()

	t.Run("stores the registration", func(t *testing.T) {
		reg := registration(vocab.StrategyCustom, expectBoth(false, true), api)
		reg.APICall = true
		w := f.newWait(t, reg)
		ws := f.waitState(t, w.ID)
		require.Equal(t, vocab.StrategyCustom, ws.AggregationStrategy)
		require.JSONEq(t, `["api_response"]`, string(ws.RequiredEvents))
		require.JSONEq(t, `["api_response","kafka_event"]`, string(ws.EnabledEvents))
		require.True(t, ws.ApiCallEnabled)
		require.True(t, ws.KafkaEventEnabled)
		require.Equal(t, vocab.WaitWaiting, ws.Status)
		require.Equal(t, int64(1), ws.Version)
		var expected []aggregator.Expected
		require.NoError(t, json.Unmarshal(ws.ExpectedEvents, &expected))
		require.Equal(t, reg.Expected, expected)
		var outbox int
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE wait_state_id = $1`, w.ID).Scan(&outbox))
		require.Equal(t, 1, outbox, "the api call is queued with the wait")
	})

	t.Run("kafka only, no api call", func(t *testing.T) {
		w := f.newWait(t, registration(vocab.StrategyAny, []aggregator.Expected{{Name: kafka, Source: "kafka", Topic: "orders"}}))
		ws := f.waitState(t, w.ID)
		require.False(t, ws.ApiCallEnabled)
		require.True(t, ws.KafkaEventEnabled)
		require.JSONEq(t, `[]`, string(ws.RequiredEvents))
		require.JSONEq(t, `{"apiResponse":"api_response","kafkaEvent":"kafka_event","orderId":"api_response.order.id","shipment":"kafka_event.shipment"}`, string(ws.OutputMapping))
	})

	t.Run("rejects custom naming a disabled event", func(t *testing.T) {
		exec := f.newExecutionWithoutWait(t)
		reg := registration(vocab.StrategyCustom, expectAPIOnly(), kafka)
		reg.ExecutionID, reg.NodeID, reg.CorrelationID = exec, waitNode, uuid.New()
		err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			_, err := f.agg.Register(ctx, tx, reg)
			return err
		})
		require.ErrorContains(t, err, `custom strategy requires "kafka_event", which is not an enabled event`)
		exists, err := f.q.WaitStateExistsForExecution(ctx, f.pool, exec)
		require.NoError(t, err)
		require.False(t, exists)
	})

	t.Run("correlation id is unique", func(t *testing.T) {
		w := f.newWait(t, registration(vocab.StrategyAll, expectAPIOnly()))
		exec := f.newExecutionWithoutWait(t)
		reg := registration(vocab.StrategyAll, expectAPIOnly())
		reg.ExecutionID, reg.NodeID, reg.CorrelationID = exec, waitNode, w.CorrelationID
		err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			_, err := f.agg.Register(ctx, tx, reg)
			return err
		})
		require.ErrorIs(t, err, db.ErrDuplicate)
	})
}

// Output is exported for the deadline sweeper: check the timed-out shape directly.
func TestOutputTimeout(t *testing.T) {
	t.Parallel()
	corr := uuid.New()
	ws := dbsqlc.ExecutionWaitState{
		CorrelationID:       corr,
		AggregationStrategy: vocab.StrategyAll,
		KafkaEventData:      json.RawMessage(kafkaPayload),
		OutputMapping:       json.RawMessage(`{"kafkaEvent":"kafka_event","orderId":"api_response.order.id","carrier":"kafka_event.shipment.carrier","missing":"kafka_event.nope"}`),
	}
	raw, err := aggregator.Output(ws, []aggregator.Received{{Name: kafka, Source: aggregator.Source{Kind: "kafka"}}}, []string{api}, true, []string{api})
	require.NoError(t, err)
	out := decode(t, raw).(map[string]any)
	require.Equal(t, true, out["timeout"])
	require.Equal(t, []any{api}, out["timed_out_events"])
	require.Equal(t, []any{api}, out["missing_required_events"])
	require.Equal(t, []any{kafka}, out["arrival_order"])
	require.Equal(t, corr.String(), out["correlation_id"])
	require.Nil(t, out["orderId"])
	require.Contains(t, out, "orderId")
	require.Equal(t, "dhl", out["carrier"])
	require.Nil(t, out["missing"])
	require.Contains(t, out, "missing")
	require.Equal(t, decode(t, []byte(kafkaPayload)), out["kafkaEvent"])
}
