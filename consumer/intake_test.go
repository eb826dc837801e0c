package consumer_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestDesignNoteConfigurations runs five typical wait_events configurations end
// to end through one replica: a definition stored over the API, executions started,
// events delivered as a callback and/or a Kafka record, and each execution's continuation
// run exactly once with the payloads in the wait's output. Strategy "all" is run with
// both arrival orders.
func TestDesignNoteConfigurations(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	s := e.start(t, "pod-a")
	apiCall := func(extra obj) obj {
		out := obj{"url": "@{_vars.svc}/process"}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}

	type delivery struct {
		event string // "callback" or "kafka"
		// wantStatus is the callback's HTTP status; for a record, whether it completes.
		wantStatus int
		completes  bool
	}
	kafka := func(completes bool) delivery { return delivery{event: "kafka", completes: completes} }
	callback := func(status int, completes bool) delivery {
		return delivery{event: "callback", wantStatus: status, completes: completes}
	}
	for _, tc := range []struct {
		name     string
		wait     func(topic string) obj
		deliver  []delivery
		recorded []string // arrival_order of the completed wait
	}{
		{
			name: "1_all_both/callback_first",
			wait: func(topic string) obj {
				return obj{"apiCall": apiCall(nil), "kafkaEvent": obj{"topic": topic}, "aggregationStrategy": "all"}
			},
			deliver:  []delivery{callback(http.StatusAccepted, false), kafka(true)},
			recorded: []string{"api_response", "kafka_event"},
		},
		{
			name: "1_all_both/kafka_first",
			wait: func(topic string) obj {
				return obj{"apiCall": apiCall(nil), "kafkaEvent": obj{"topic": topic}, "aggregationStrategy": "all"}
			},
			deliver:  []delivery{kafka(false), callback(http.StatusAccepted, true)},
			recorded: []string{"kafka_event", "api_response"},
		},
		{
			// Either event completes the wait; the other, arriving later, is late (409).
			name: "2_any_both_optional",
			wait: func(topic string) obj {
				return obj{"apiCall": apiCall(obj{"required": false}), "kafkaEvent": obj{"topic": topic, "required": false},
					"aggregationStrategy": "any"}
			},
			deliver:  []delivery{kafka(true), callback(http.StatusConflict, false)},
			recorded: []string{"kafka_event"},
		},
		{
			name:     "3_api_only",
			wait:     func(string) obj { return obj{"apiCall": apiCall(nil)} },
			deliver:  []delivery{callback(http.StatusAccepted, true)},
			recorded: []string{"api_response"},
		},
		{
			name:     "4_kafka_only",
			wait:     func(topic string) obj { return obj{"kafkaEvent": obj{"topic": topic}} },
			deliver:  []delivery{kafka(true)},
			recorded: []string{"kafka_event"},
		},
		{
			// The optional record is kept when it comes first; only the callback completes.
			name: "5_custom_api_required/kafka_first",
			wait: func(topic string) obj {
				return obj{"apiCall": apiCall(nil), "kafkaEvent": obj{"topic": topic, "required": false},
					"aggregationStrategy": "custom", "requiredEvents": []string{"api_response"}}
			},
			deliver:  []delivery{kafka(false), callback(http.StatusAccepted, true)},
			recorded: []string{"kafka_event", "api_response"},
		},
		{
			name: "5_custom_api_required/callback_only",
			wait: func(topic string) obj {
				return obj{"apiCall": apiCall(nil), "kafkaEvent": obj{"topic": topic, "required": false},
					"aggregationStrategy": "custom", "requiredEvents": []string{"api_response"}}
			},
			deliver:  []delivery{callback(http.StatusAccepted, true)},
			recorded: []string{"api_response"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "cfg-" + sanitize(tc.name)
			topic := name + ".events"
			e.put(t, s, e.definition(name, tc.wait(topic)))
			execID := e.startExecution(t, s, name, obj{"case": tc.name})
			corrID := e.correlationID(t, s, execID)

			cbPayload := obj{"decision": "approved", "case": tc.name}
			recPayload := ids(execID, corrID, obj{"event_type": "shipment.delivered", "case": tc.name})
			for i, d := range tc.deliver {
				switch d.event {
				case "callback":
					require.Equal(t, d.wantStatus, e.callback(t, s, execID, corrID, cbPayload), "delivery %d", i)
				case "kafka":
					e.produce(t, record(topic, 0, recPayload))
					// Wait for the record to be applied before anything else arrives.
					require.Eventually(t, func() bool {
						v := e.execution(t, s, execID)
						return len(v.Waits) == 1 && len(v.Waits[0].ReceivedEvents) == i+1
					}, waitTimeout, 20*time.Millisecond, "record not applied")
				}
				v := e.execution(t, s, execID)
				if d.completes {
					require.Equal(t, vocab.WaitCompleted, v.Waits[0].Status, "delivery %d completes the wait", i)
				} else if d.wantStatus != http.StatusConflict {
					require.Equal(t, vocab.WaitWaiting, v.Waits[0].Status, "delivery %d leaves the wait open", i)
				}
			}

			v := e.waitStatus(t, s, execID, "completed")
			w := v.Waits[0]
			require.Equal(t, int64(1+len(tc.recorded)), w.Version)
			require.NotNil(t, w.ResumedAt)
			out := waitOutput(t, v)
			require.Equal(t, jsonOf(t, tc.recorded), out["arrival_order"])
			wantAPI, wantKafka := any(nil), any(nil)
			for _, ev := range tc.recorded {
				switch ev {
				case "api_response":
					wantAPI = jsonOf(t, ids(execID, corrID, cbPayload))
				case "kafka_event":
					wantKafka = jsonOf(t, recPayload)
				}
			}
			require.Equal(t, wantAPI, out["apiResponse"])
			require.Equal(t, wantKafka, out["kafkaEvent"])
			if wantKafka != nil {
				events := out["events"].([]any)
				var src map[string]any
				for _, ev := range events {
					if ev.(map[string]any)["name"] == "kafka_event" {
						src = ev.(map[string]any)["source"].(map[string]any)
					}
				}
				require.Equal(t, map[string]any{"kind": "kafka", "topic": topic, "partition": float64(0), "offset": float64(0)}, src)
			}

			// The continuation received the same output, once.
			body := e.fake.continuation(t, execID)
			require.Equal(t, out, body["wait"])
			time.Sleep(200 * time.Millisecond)
			require.Equal(t, 1, e.fake.doneBy()[execID], "continuation ran once")
		})
	}
}

func sanitize(s string) string {
	out := []byte(s)
	for i, c := range out {
		if c == '/' || c == '_' {
			out[i] = '-'
		}
	}
	return string(out)
}

// TestRecordIDs covers where ids come from (dot paths, headers), the node's filter, and
// records without usable ids, which are counted, committed and do not block their
// partition.
func TestRecordIDs(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")

	t.Run("dot_paths_and_filter", func(t *testing.T) {
		e.put(t, s, e.definition("nested", obj{"kafkaEvent": obj{
			"topic": "payments", "executionIdField": "data.execution_id", "correlationIdField": "data.correlation_id",
			"filter": obj{"data.status": "ok", "data.attempt": 1},
		}}))
		execID := e.startExecution(t, s, "nested", nil)
		corrID := e.correlationID(t, s, execID)
		data := func(status string) obj {
			return obj{"data": obj{"execution_id": execID, "correlation_id": corrID, "status": status, "attempt": 1}}
		}

		e.produce(t, record("payments", 0, data("pending")))
		require.Eventually(t, func() bool { return s.Consumer.Counts()["filter"] >= 1 }, waitTimeout, 20*time.Millisecond)
		w := e.execution(t, s, execID).Waits[0]
		require.Equal(t, vocab.WaitWaiting, w.Status)
		require.Equal(t, int64(1), w.Version, "a filtered record is not applied")

		e.produce(t, record("payments", 0, data("ok")))
		v := e.waitStatus(t, s, execID, "completed")
		require.Equal(t, jsonOf(t, data("ok")), waitOutput(t, v)["kafkaEvent"])
		require.Equal(t, int64(2), v.Waits[0].Version)
		e.waitCommitted(t, s, "payments", 0, 2)
	})

	t.Run("headers", func(t *testing.T) {
		e.put(t, s, e.definition("headers", kafkaOnly("by-header")))
		execID := e.startExecution(t, s, "headers", nil)
		corrID := e.correlationID(t, s, execID)
		// The body has no ids: the record headers named like the fields carry them.
		e.produce(t, record("by-header", 0, obj{"status": "delivered"},
			header("execution_id", execID), header("correlation_id", corrID)))
		v := e.waitStatus(t, s, execID, "completed")
		require.Equal(t, obj{"status": "delivered"}, waitOutput(t, v)["kafkaEvent"])
	})

	t.Run("missing_and_invalid_ids", func(t *testing.T) {
		e.put(t, s, e.definition("ids", kafkaOnly("ids")))
		execID := e.startExecution(t, s, "ids", nil)
		corrID := e.correlationID(t, s, execID)
		e.produce(t,
			record("ids", 0, obj{"hello": "world"}),                                   // no ids at all
			record("ids", 0, obj{"execution_id": execID}),                             // no correlation id
			record("ids", 0, obj{"execution_id": 42, "correlation_id": corrID}),       // not a string
			record("ids", 0, obj{"execution_id": "nope", "correlation_id": "nope"}),   // not UUIDs
			record("ids", 0, `["a", "b"]`),                                            // JSON, but no object
			record("ids", 0, ids(execID, corrID, obj{"status": "arrived after all"})), // the good one
		)
		v := e.waitStatus(t, s, execID, "completed")
		require.Equal(t, "arrived after all", waitOutput(t, v)["kafkaEvent"].(map[string]any)["status"])
		counts := s.Consumer.Counts()
		require.Equal(t, int64(4), counts["missing_id"], "%v", counts)
		require.Equal(t, int64(1), counts["invalid_id"], "%v", counts)
		require.Zero(t, counts["poison"], "records without ids are not poison: %v", counts)
		e.waitCommitted(t, s, "ids", 0, 6, "every record is committed")
	})
}

// TestNewDefinitionTopic stores definitions with new topics while the consumer runs:
// through its own replica (picked up at once) and through another replica without Kafka
// (picked up by the periodic refresh). Both topics are consumed without a restart.
func TestNewDefinitionTopic(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	a := e.start(t, "pod-a")
	b := e.start(t, "pod-b", noKafka)
	require.Nil(t, b.Consumer)

	for _, tc := range []struct {
		name string
		via  *svc
	}{{"same_replica", a}, {"other_replica", b}} {
		t.Run(tc.name, func(t *testing.T) {
			name, topic := "fresh-"+sanitize(tc.name), "fresh."+tc.name
			e.put(t, tc.via, e.definition(name, kafkaOnly(topic)))
			execID := e.startExecution(t, tc.via, name, nil)
			corrID := e.correlationID(t, tc.via, execID)
			e.produce(t, record(topic, 1, ids(execID, corrID, nil)))
			e.waitStatus(t, a, execID, "completed")
		})
	}
}

// TestConfiguredTopics consumes Config.Topics with the default id fields before any
// definition names them.
func TestConfiguredTopics(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	s := e.start(t, "pod-a", func(c *server.Config) { c.Kafka.Topics = []string{"configured"} })
	e.produce(t, record("configured", 2, ids("9b6d0c39-9f57-4a4e-8d3b-8b1d3f7f3f10", "a1c1e7a4-3d7f-4d47-9a3f-0c0f3f1d2b11", nil)))
	require.Eventually(t, func() bool { return s.Consumer.Counts()["not_found"] == 1 }, waitTimeout, 20*time.Millisecond,
		"the record of a configured topic is read (and matches no wait)")
	e.waitCommitted(t, s, "configured", 2, 1)
}

// TestDefinitionStoredMeanwhile stores definitions for a topic the consumer already
// reads, through another replica (a consumer hears at once only of definitions stored
// through its own) and with the periodic refresh too far off to help: a record with its ids at the new
// definition's fields, and one correlated by the new definition's payload match, each
// complete their wait, and nothing is skipped. A record that no definition can read is
// still skipped.
func TestDefinitionStoredMeanwhile(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a", func(c *server.Config) {
		c.Kafka.Topics = []string{"shared"}
		c.Kafka.TopicRefresh = time.Hour
	})
	other := e.start(t, "pod-b", noKafka)
	// The topic is read, with the default id fields, before either definition exists.
	e.produce(t, record("shared", 0, obj{"hello": "world"}))
	requireCount(t, s, "missing_id", 1)

	e.put(t, other, e.definition("nested-ids", obj{"kafkaEvent": obj{
		"topic": "shared", "executionIdField": "meta.exec", "correlationIdField": "meta.corr",
	}, "timeout": 600}))
	byIDs := e.startExecution(t, other, "nested-ids", nil)
	corr := e.correlationID(t, other, byIDs)
	e.produce(t, record("shared", 0, obj{"meta": obj{"exec": byIDs, "corr": corr}, "status": "shipped"}))
	v := e.waitStatus(t, s, byIDs, "completed")
	require.Equal(t, "shipped", waitOutput(t, v)["kafkaEvent"].(map[string]any)["status"])

	// Read by pod-a with the next definition: records of the topic carry ids at the
	// default fields too.
	e.put(t, other, e.definition("plain", obj{"kafkaEvent": obj{"topic": "shared"}, "timeout": 600}))
	e.put(t, other, e.definition("matched", events(obj{
		"name": "paid", "source": "kafka", "topic": "shared",
		"match": obj{"left": "order.id", "op": "eq", "right": "input.order_id"},
	})))
	byMatch := e.startExecution(t, other, "matched", obj{"order_id": "A-7"})
	e.waits(t, 2)
	e.produce(t, record("shared", 0, obj{"order": obj{"id": "A-7"}}))
	e.waitStatus(t, s, byMatch, "completed")

	// A record that reaches a wait by its ids is not skipped, yet may also be meant for
	// a payload match stored meanwhile: it reaches both.
	plain := e.startExecution(t, other, "plain", nil)
	plainCorr := e.correlationID(t, other, plain)
	e.put(t, other, e.definition("matched-too", events(obj{
		"name": "booked", "source": "kafka", "topic": "shared",
		"match": obj{"left": "ref", "op": "eq", "right": "input.ref"},
	})))
	alsoByMatch := e.startExecution(t, other, "matched-too", obj{"ref": "B-9"})
	e.waits(t, 4)
	e.produce(t, record("shared", 0, obj{"execution_id": plain, "correlation_id": plainCorr, "ref": "B-9"}))
	e.waitStatus(t, s, plain, "completed")
	e.waitStatus(t, s, alsoByMatch, "completed")

	e.produce(t, record("shared", 0, obj{"hello": "again"}))
	e.waitCommitted(t, s, "shared", 0, 5)
	require.Equal(t, int64(2), s.Consumer.Counts()["missing_id"], "only the records no definition reads are skipped")
}
