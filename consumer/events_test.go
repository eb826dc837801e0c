package consumer_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rendezvous-run/rendezvous/consumer"
)

// eventsTopic is where the tests send events to executions by type.
const eventsTopic = consumer.EventsTopicDefault

// events is a wait_events node's data waiting for the named events of the list.
func events(list ...obj) obj {
	return obj{"events": list, "timeout": 600}
}

// sent is the value of an events-topic record.
func sent(execID, typ string, payload any, extra obj) obj {
	out := obj{"execution_id": execID, "type": typ, "payload": payload}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// requireCount waits until the consumer counted want records of outcome.
func requireCount(t *testing.T, s *svc, outcome string, want int64) {
	t.Helper()
	if !assert.Eventually(t, func() bool { return s.Consumer.Counts()[outcome] == want }, waitTimeout, 20*time.Millisecond) {
		t.Fatalf("count %s never reached %d: %v", outcome, want, s.Consumer.Counts())
	}
}

// unmatched counts the unmatched_events rows of reason (of execID when not empty).
func (e *env) unmatched(t *testing.T, reason, execID string) int {
	t.Helper()
	if execID == "" {
		return e.count(t, "SELECT count(*) FROM unmatched_events WHERE reason = $1", reason)
	}
	return e.count(t, "SELECT count(*) FROM unmatched_events WHERE reason = $1 AND execution_id = $2", reason, execID)
}

// waitState returns the status and version of the execution's wait of node.
func (e *env) waitState(t *testing.T, execID, node string) (status string, version int64) {
	t.Helper()
	rows, err := e.direct.Query(t.Context(), "SELECT status, version FROM execution_wait_states WHERE execution_id = $1 AND node_id = $2", execID, node)
	require.NoError(t, err)
	defer rows.Close()
	require.True(t, rows.Next(), "no wait of %s at node %s", execID, node)
	require.NoError(t, rows.Scan(&status, &version))
	return status, version
}

// TestNamedKafkaEventsByIDs waits for two named Kafka events of one topic, told apart by
// their type and correlated by the default id fields: each record is recorded as the
// event its type names (the consumer names none), and one of a type the node does not
// expect is not applied.
func TestNamedKafkaEventsByIDs(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("named", events(
		obj{"name": "packed", "source": "kafka", "topic": "parcels", "type": "packed"},
		obj{"name": "shipped", "source": "kafka", "topic": "parcels", "type": "shipped", "filter": obj{"carrier": "acme"}},
	)))
	execID := e.startExecution(t, s, "named", nil)
	corrID := e.correlationID(t, s, execID)

	shipped := ids(execID, corrID, obj{"type": "shipped", "carrier": "acme"})
	packed := ids(execID, corrID, obj{"type": "packed", "box": 3})
	e.produce(t,
		record("parcels", 0, ids(execID, corrID, obj{"type": "returned"})),                    // no such event
		record("parcels", 0, ids(execID, corrID, obj{"type": "shipped", "carrier": "other"})), // its filter refuses it
	)
	requireCount(t, s, "filter", 2)
	status, version := e.waitState(t, execID, "wait")
	require.Equal(t, "waiting", status)
	require.Equal(t, int64(1), version, "neither record was applied")

	e.produce(t, record("parcels", 0, shipped), record("parcels", 0, packed))
	v := e.waitStatus(t, s, execID, "completed")
	out := waitOutput(t, v)
	require.Equal(t, jsonOf(t, shipped), out["shipped"])
	require.Equal(t, jsonOf(t, packed), out["packed"])
	require.Equal(t, jsonOf(t, []string{"shipped", "packed"}), out["arrival_order"])
	src := out["events"].([]any)[0].(map[string]any)["source"]
	require.Equal(t, map[string]any{"kind": "kafka", "topic": "parcels", "partition": float64(0), "offset": float64(2)}, src)
	require.Equal(t, out, e.fake.continuation(t, execID)["wait"])
	e.waitCommitted(t, s, "parcels", 0, 4)
	require.Equal(t, 2, e.unmatched(t, "filter_failed", execID), "the refused records are listed as unmatched")
}

// TestPayloadMatch correlates records by a value of their payload: one record reaches
// every wait expecting its value (two executions of one order) and no other; a record
// whose value nobody expects is committed and listed as unmatched; one with neither ids
// nor a value is skipped as before.
func TestPayloadMatch(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("pay", events(obj{
		"name": "paid", "source": "kafka", "topic": "payments",
		"match": obj{"left": "order.id", "op": "eq", "right": "input.order_id"},
	})))
	first := e.startExecution(t, s, "pay", obj{"order_id": "A-1"})
	second := e.startExecution(t, s, "pay", obj{"order_id": "A-1"})
	other := e.startExecution(t, s, "pay", obj{"order_id": "B-2"})
	e.waits(t, 3)

	paid := obj{"order": obj{"id": "A-1"}, "amount": 42}
	e.produce(t, record("payments", 0, paid))
	for _, id := range []string{first, second} {
		v := e.waitStatus(t, s, id, "completed")
		require.Equal(t, jsonOf(t, paid), waitOutput(t, v)["paid"])
		require.Equal(t, jsonOf(t, paid), e.fake.continuation(t, id)["wait"].(map[string]any)["paid"])
	}
	requireCount(t, s, "completed", 1) // one record, counted once
	// Both deliveries were decided in the record's one transaction: the third wait's
	// state is already final for it.
	status, version := e.waitState(t, other, "wait")
	require.Equal(t, "waiting", status, "a wait expecting another value is not reached")
	require.Equal(t, int64(1), version)

	e.produce(t,
		record("payments", 0, obj{"order": obj{"id": "Z-9"}}), // a value no wait expects
		record("payments", 0, obj{"hello": "world"}),          // neither ids nor a value
	)
	requireCount(t, s, "no_match", 1)
	requireCount(t, s, "missing_id", 1)
	e.waitCommitted(t, s, "payments", 0, 3)
	require.Equal(t, 1, e.unmatched(t, "match_value_differs", ""))
	var src, excerpt string
	require.NoError(t, e.direct.QueryRow(t.Context(),
		"SELECT source::text, payload_excerpt FROM unmatched_events WHERE reason = 'match_value_differs'").Scan(&src, &excerpt))
	require.JSONEq(t, `{"kind": "kafka", "topic": "payments", "partition": 0, "offset": 1}`, src)
	require.Contains(t, excerpt, "Z-9")

	e.produce(t, record("payments", 0, obj{"order": obj{"id": "B-2"}}))
	e.waitStatus(t, s, other, "completed")
	e.fake.continuation(t, other)
	for _, id := range []string{first, second, other} {
		require.Equal(t, 1, e.fake.doneBy()[id], "the continuation of %s ran once", id)
	}
}

// TestEventsTopic sends events to executions by type over Kafka: delivered to a waiting
// node, buffered for a node not reached yet, recorded as unmatched for a finished or
// unknown execution, and dead-lettered when the record cannot be an event.
func TestEventsTopic(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	s := e.start(t, "pod-a")
	approval := obj{"name": "approval", "source": "send", "type": "approved"}
	e.put(t, s, e.definition("approve", events(approval)))

	var delivered string
	t.Run("delivered", func(t *testing.T) {
		delivered = e.startExecution(t, s, "approve", nil)
		e.correlationID(t, s, delivered)
		e.produce(t, record(eventsTopic, 0, sent(delivered, "approved", obj{"by": "alice"}, nil)))
		v := e.waitStatus(t, s, delivered, "completed")
		out := waitOutput(t, v)
		require.Equal(t, obj{"by": "alice"}, out["approval"])
		src := out["events"].([]any)[0].(map[string]any)["source"].(map[string]any)
		require.Equal(t, "kafka", src["kind"])
		require.Equal(t, eventsTopic, src["topic"])
		requireCount(t, s, "send_delivered", 1)
	})

	t.Run("execution_id_in_header", func(t *testing.T) {
		execID := e.startExecution(t, s, "approve", nil)
		e.correlationID(t, s, execID)
		e.produce(t, record(eventsTopic, 1, obj{"type": "approved", "payload": "ok"}, header("X-Execution-Id", execID)))
		v := e.waitStatus(t, s, execID, "completed")
		require.Equal(t, "ok", waitOutput(t, v)["approval"])
	})

	t.Run("buffered_before_the_wait", func(t *testing.T) {
		// The execution first waits for "go"; "approved" arrives before its node waits.
		def := obj{
			"name": "later",
			"vars": obj{"svc": e.fake.URL},
			"nodes": []obj{
				{"id": "first", "type": "wait_events", "data": events(obj{"name": "go", "source": "send", "type": "go"})},
				{"id": "wait", "type": "wait_events", "data": events(approval)},
				{"id": "done", "type": "http", "data": obj{
					"url": "@{_vars.svc}/done", "method": "POST",
					"body": obj{"execution_id": "@{_execution.id}", "wait": "@{nodes.wait.output}"},
				}},
			},
			"edges": []obj{{"source": "first", "target": "wait"}, {"source": "wait", "target": "done"}},
		}
		e.put(t, s, def)
		execID := e.startExecution(t, s, "later", nil)
		e.correlationID(t, s, execID)
		e.produce(t, record(eventsTopic, 2, sent(execID, "approved", obj{"early": true}, nil)))
		requireCount(t, s, "send_buffered", 1)
		require.Equal(t, 1, e.count(t, "SELECT count(*) FROM event_buffer WHERE execution_id = $1 AND event_type = 'approved'", execID))
		require.Equal(t, 1, e.unmatched(t, "buffered", execID))

		e.produce(t, record(eventsTopic, 2, sent(execID, "go", nil, nil)))
		v := e.waitStatus(t, s, execID, "completed")
		require.Equal(t, obj{"early": true}, waitOutput(t, v)["approval"], "the buffered event was taken by the wait")
		require.Zero(t, e.count(t, "SELECT count(*) FROM event_buffer WHERE execution_id = $1", execID))
		require.Equal(t, obj{"early": true}, e.fake.continuation(t, execID)["wait"].(map[string]any)["approval"])
	})

	t.Run("finished_or_unknown_execution", func(t *testing.T) {
		unknown := uuid.NewString()
		e.produce(t,
			record(eventsTopic, 0, sent(delivered, "approved", obj{"by": "bob"}, nil)),
			record(eventsTopic, 0, sent(unknown, "approved", nil, nil)),
		)
		requireCount(t, s, "send_execution_finished", 1)
		requireCount(t, s, "send_no_execution", 1)
		require.Equal(t, 1, e.unmatched(t, "execution_finished", delivered))
		require.Equal(t, 1, e.unmatched(t, "no_execution", unknown))
		require.Eventually(t, func() bool { return e.committed(t, eventsTopic)[0] == 3 }, waitTimeout, 20*time.Millisecond,
			"both records are committed")
		require.Equal(t, int64(2), e.execution(t, s, delivered).Waits[0].Version, "the finished wait is unchanged")
	})

	t.Run("invalid_records_dead_lettered", func(t *testing.T) {
		execID := uuid.NewString()
		invalid := []struct {
			rec    *kgoRecord
			reason string
		}{
			{record(eventsTopic, 1, sent(execID, "", obj{}, nil), header("trace", "t-1")), "type"},
			{record(eventsTopic, 1, obj{"execution_id": execID, "payload": 1}), "type"},
			{record(eventsTopic, 1, `["not", "an", "object"]`), "not a JSON object"},
			{record(eventsTopic, 1, `null`), "not a JSON object"},
			{record(eventsTopic, 1, sent("nope", "approved", nil, nil)), "not a UUID"},
			{record(eventsTopic, 1, obj{"type": "approved"}), "no execution_id"},
			{record(eventsTopic, 1, sent(execID, "approved", nil, obj{"id": 7})), "id must be a string"},
			{record(eventsTopic, 1, obj{"execution_id": execID, "type": "approved", "paylod": obj{}}), `unknown member "paylod"`},
			{record(eventsTopic, 1, `{"execution_id": "`+execID+`", oops`), "not JSON"},
		}
		const before = 1 // the header test's record
		for _, r := range invalid {
			e.produce(t, r.rec)
		}
		dls := e.deadLetters(t, eventsTopic+consumer.DLQSuffixDefault, len(invalid))
		require.Len(t, dls, len(invalid))
		for i, r := range invalid {
			requireDeadLetter(t, dls[i], eventsTopic, 1, before+int64(i), r.rec.Value, r.reason)
		}
		trace, ok := headerValue(dls[0], "trace")
		require.True(t, ok, "the source record's headers are kept")
		require.Equal(t, "t-1", trace)
		require.Eventually(t, func() bool { return e.committed(t, eventsTopic)[1] == before+int64(len(invalid)) }, waitTimeout,
			20*time.Millisecond, "dead-lettered records are committed")
		requireCount(t, s, "poison", int64(len(invalid)))
	})
}

// votes waits for two events of one type: each event sent is delivered to the first of
// them not received yet, so a duplicate applied twice would complete it.
func votes() obj {
	return events(obj{"name": "first", "source": "send", "type": "vote"}, obj{"name": "second", "source": "send", "type": "vote"})
}

// TestEventsTopicDuplicateID sends an event id twice: the second is a duplicate, applied
// nowhere and buffered nowhere.
func TestEventsTopicDuplicateID(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("votes", votes()))
	execID := e.startExecution(t, s, "votes", nil)
	e.correlationID(t, s, execID)

	e.produce(t,
		record(eventsTopic, 0, sent(execID, "vote", obj{"n": 1}, obj{"id": "v-1"})),
		record(eventsTopic, 0, sent(execID, "vote", obj{"n": "again"}, obj{"id": "v-1"})),
		record(eventsTopic, 0, sent(execID, "vote", obj{"n": 2}, obj{"id": "v-2"})),
	)
	v := e.waitStatus(t, s, execID, "completed")
	out := waitOutput(t, v)
	require.Equal(t, obj{"n": float64(1)}, out["first"])
	require.Equal(t, obj{"n": float64(2)}, out["second"], "the duplicate was not applied")
	requireCount(t, s, "send_duplicate", 1)
	require.Equal(t, int64(2), s.Consumer.Counts()["send_delivered"])
	require.Equal(t, 1, e.unmatched(t, "duplicate", execID))
	require.Zero(t, e.count(t, "SELECT count(*) FROM event_buffer"), "nothing buffered")
}

// TestEventsTopicRedelivery applies a sent event without an id while offset commits
// fail, then replaces the replica: the record comes again and is recognised by its
// position, so the wait does not take it a second time.
func TestEventsTopicRedelivery(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	var fail atomic.Bool
	var failed atomic.Int64
	fail.Store(true)
	failOffsetCommits(e.cluster, &fail, &failed)

	a := e.start(t, "pod-a")
	e.put(t, a, e.definition("votes", votes()))
	execID := e.startExecution(t, a, "votes", nil)
	e.correlationID(t, a, execID)
	e.produce(t, record(eventsTopic, 0, sent(execID, "vote", obj{"n": 1}, nil)))
	requireCount(t, a, "send_delivered", 1)
	require.Eventually(t, func() bool { return failed.Load() > 0 }, waitTimeout, 20*time.Millisecond, "commits were attempted and failed")
	a.stop()

	fail.Store(false)
	b := e.start(t, "pod-b")
	requireCount(t, b, "send_duplicate", 1)
	require.Eventually(t, func() bool { return e.committedSum(t, eventsTopic) == 1 }, waitTimeout, 20*time.Millisecond)
	status, version := e.waitState(t, execID, "wait")
	require.Equal(t, "waiting", status, "the redelivered record did not count as the second vote")
	require.Equal(t, int64(2), version)

	e.produce(t, record(eventsTopic, 0, sent(execID, "vote", obj{"n": 2}, nil)))
	v := e.waitStatus(t, b, execID, "completed")
	require.Equal(t, obj{"n": float64(2)}, waitOutput(t, v)["second"])
}

// TestEventsTopicDatabaseOutage sends events while the replica cannot reach PostgreSQL:
// nothing on the events topic is committed before it is applied, and once the database
// is back every event is delivered, once.
func TestEventsTopicDatabaseOutage(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s, proxy := e.startProxied(t, "pod-a")
	e.put(t, s, e.definition("votes", votes()))
	execID := e.startExecution(t, s, "votes", nil)
	e.correlationID(t, s, execID)
	// Cut once the wait's node is suspended: a run-queue item in flight at the cut stays
	// claimed until its lease runs out, which is the executor's business.
	require.Eventually(t, func() bool {
		return e.count(t, "SELECT count(*) FROM run_queue WHERE execution_id = $1", execID) == 0
	}, waitTimeout, 20*time.Millisecond)

	proxy.Cut()
	e.produce(t,
		record(eventsTopic, 0, sent(execID, "vote", obj{"n": 1}, nil)),
		record(eventsTopic, 0, sent(execID, "vote", obj{"n": 2}, nil)),
	)
	require.Eventually(t, func() bool { return s.Consumer.Ready(t.Context()) != nil }, waitTimeout, 20*time.Millisecond,
		"readiness reports the failing database")
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		require.Zero(t, e.committedSum(t, eventsTopic), "nothing committed during the outage")
	}
	require.Zero(t, s.Consumer.Counts()["send_delivered"])

	proxy.Restore()
	v := e.waitStatus(t, s, execID, "completed")
	out := waitOutput(t, v)
	require.Equal(t, obj{"n": float64(1)}, out["first"], "in record order")
	require.Equal(t, obj{"n": float64(2)}, out["second"])
	require.Eventually(t, func() bool { return e.committedSum(t, eventsTopic) == 2 }, waitTimeout, 20*time.Millisecond)
	require.Equal(t, int64(2), s.Consumer.Counts()["send_delivered"], "%v", s.Consumer.Counts())
	require.Eventually(t, func() bool { return s.Consumer.Ready(t.Context()) == nil }, waitTimeout, 20*time.Millisecond)
}
