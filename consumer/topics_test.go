package consumer_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// logLines keeps the log output of a replica, besides the test's, to count messages.
type logLines struct{ testkit.Buffer }

// count is how many lines contain s.
func (l *logLines) count(s string) int {
	return strings.Count(l.String(), s)
}

// withLogs makes the replica log at info level into lines as well as the test output.
func withLogs(t *testing.T, lines *logLines) func(*server.Config) {
	return func(c *server.Config) {
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), lines), &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Kafka.Logger = c.Logger
	}
}

// noAutoCreate makes the replica's Kafka client ask for no topic creation, as serve does
// against a real cluster: only provisioning creates dead-letter topics.
func noAutoCreate(c *server.Config) { c.Kafka.AllowAutoTopicCreation = false }

// createTopic creates topic with the given partitions.
func (e *env) createTopic(t *testing.T, topic string, partitions int32) {
	t.Helper()
	_, err := e.adm.CreateTopic(t.Context(), partitions, 1, nil, topic)
	require.NoError(t, err)
}

// partitions is how many partitions topic has, 0 when it does not exist. It asks the
// broker directly: the admin client's cached metadata request would create the topic
// (the test producer allows auto-creation) and answer from a stale cache.
func (e *env) partitions(t *testing.T, topic string) int {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(t.Context(), e.prod)
	require.NoError(t, err)
	for _, tp := range resp.Topics {
		if tp.Topic != nil && *tp.Topic == topic && tp.ErrorCode == 0 {
			return len(tp.Partitions)
		}
	}
	return 0
}

// metricValue is the value of the first sample of name whose labels include want,
// scraped from the replica's /metrics; ok is false when there is none.
func metricValue(t *testing.T, s *svc, name string, want map[string]string) (float64, bool) {
	t.Helper()
	return testkit.Scrape(t, s.Addr()).First(name, want)
}

// readyz is the replica's /readyz answer.
type readyz struct {
	Status  string           `json:"status"`
	Stalled []consumer.Stall `json:"kafka_stalled_partitions"`
}

func getReadyz(t *testing.T, s *svc) (int, readyz) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr() + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	var r readyz
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	return resp.StatusCode, r
}

// logOperatorView writes what an operator sees of the replica's Kafka intake into the
// test's output (-v): the /readyz body and the lag, stall and dead-letter failure series.
func logOperatorView(t *testing.T, s *svc) {
	t.Helper()
	for _, path := range []string{"/readyz", "/metrics"} {
		resp, err := http.Get("http://" + s.Addr() + path)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		for _, l := range strings.Split(string(raw), "\n") {
			if path == "/readyz" || regexp.MustCompile(`^rendezvous_(kafka_consumer_lag|kafka_partition_stalled|dead_letter_write_failures_total)\{`).MatchString(l) {
				t.Logf("GET %s: %s", path, l)
			}
		}
	}
}

// TestDeadLetterTopicsProvisioned: a replica whose client creates no topic by itself (as
// against a real cluster) creates the dead-letter topic of every topic it consumes, with
// the source topic's partition count, as soon as it consumes it — the events topic at
// start, a definition's topic once stored — so the first poison record finds it. A dead
// letter keeps its record's partition.
func TestDeadLetterTopicsProvisioned(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	e.createTopic(t, "prov", 4)
	e.createTopic(t, consumer.EventsTopicDefault, 2)
	s := e.start(t, "pod-a", noAutoCreate)

	require.Eventually(t, func() bool { return e.partitions(t, consumer.EventsTopicDefault+".dlq") == 2 }, waitTimeout, 20*time.Millisecond,
		"the events topic's dead-letter topic is created at start")
	require.Zero(t, e.partitions(t, "prov.dlq"), "no definition consumes prov yet")

	e.put(t, s, e.definition("prov", kafkaOnly("prov")))
	require.Eventually(t, func() bool { return e.partitions(t, "prov.dlq") == 4 }, waitTimeout, 20*time.Millisecond,
		"a stored definition's topic gets its dead-letter topic, with its partition count")

	execID := e.startExecution(t, s, "prov", nil)
	corrID := e.correlationID(t, s, execID)
	bad := record("prov", 2, "not json")
	e.produce(t, bad, record("prov", 2, ids(execID, corrID, obj{"status": "after the poison"})))
	e.waitStatus(t, s, execID, "completed")
	dls := e.deadLetters(t, "prov.dlq", 1)
	require.Len(t, dls, 1)
	requireDeadLetter(t, dls[0], "prov", 2, 0, bad.Value, "not JSON")
	require.Equal(t, int32(2), dls[0].Partition, "a dead letter keeps its record's partition")
}

// TestDeadLetterTopicRefused: the cluster refuses to create a dead-letter topic. The
// refusal is logged once, with the fix; the partition holding a poison record stalls
// there and says so everywhere an operator looks — the stalled gauge with its reason,
// the lag counting every record not applied, the failed writes counted, /readyz (still
// 200) naming it — while the topic's other partition goes on. Once creation is allowed,
// the replica creates the topic, the partition drains, and every signal returns to
// normal.
func TestDeadLetterTopicRefused(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	refused := e.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "ref.dlq", Err: kerr.TopicAuthorizationFailed, Count: -1,
	})
	e.createTopic(t, "ref", 2)
	var lines logLines
	s := e.start(t, "pod-a", noAutoCreate, withLogs(t, &lines))
	e.put(t, s, e.definition("ref", kafkaOnly("ref")))

	const behind = 5 // valid records after the poison record on partition 0
	var stuck []string
	var recs []*kgoRecord
	recs = append(recs, record("ref", 0, "not json"))
	for range behind {
		id := e.startExecution(t, s, "ref", nil)
		stuck = append(stuck, id)
		recs = append(recs, record("ref", 0, ids(id, e.correlationID(t, s, id), obj{"n": len(stuck)})))
	}
	free := e.startExecution(t, s, "ref", nil)
	recs = append(recs, record("ref", 1, ids(free, e.correlationID(t, s, free), obj{"n": 0})))
	e.produce(t, recs...)

	e.waitStatus(t, s, free, "completed") // the other partition goes on
	p0 := map[string]string{"topic": "ref", "partition": "0"}
	stalled := map[string]string{"topic": "ref", "partition": "0", "reason": string(consumer.StallDeadLetter)}
	failures := map[string]string{"topic": "ref", "reason": "unknown_topic"}
	require.Eventually(t, func() bool {
		v, _ := metricValue(t, s, "rendezvous_dead_letter_write_failures_total", failures)
		return v >= 3
	}, waitTimeout, 50*time.Millisecond, "the dead-letter write is retried, and each failure counted")
	v, ok := metricValue(t, s, "rendezvous_kafka_partition_stalled", stalled)
	require.True(t, ok && v == 1, "stalled gauge: %v %v", v, ok)
	v, ok = metricValue(t, s, "rendezvous_kafka_partition_stalled", map[string]string{"topic": "ref", "partition": "1", "reason": string(consumer.StallDeadLetter)})
	require.True(t, ok && v == 0, "the advancing partition reads 0: %v %v", v, ok)
	v, ok = metricValue(t, s, "rendezvous_kafka_consumer_lag", p0)
	require.True(t, ok, "lag of partition 0")
	require.Equal(t, float64(behind+1), v, "lag counts the poison record and every record behind it")

	logOperatorView(t, s)
	code, rz := getReadyz(t, s)
	require.Equal(t, http.StatusOK, code, "a stalled partition leaves the replica ready")
	require.Equal(t, "ready", rz.Status)
	require.Len(t, rz.Stalled, 1, "%+v", rz.Stalled)
	st := rz.Stalled[0]
	require.Equal(t, "ref", st.Topic)
	require.Equal(t, int32(0), st.Partition)
	require.Equal(t, consumer.StallDeadLetter, st.Reason)
	require.Equal(t, int64(0), st.Offset)
	require.NotEmpty(t, st.Error)
	require.WithinDuration(t, time.Now(), st.Since, waitTimeout)

	require.Equal(t, 1, lines.count("could not create dead-letter topic"), "the refusal is logged once, not on every retry")
	require.Equal(t, 1, lines.count("grant this client CREATE"), "the log line says how to fix it")
	for _, id := range stuck {
		require.Equal(t, vocab.WaitWaiting, e.execution(t, s, id).Waits[0].Status, "nothing behind the poison record is applied")
	}
	_, committed := e.committed(t, "ref")[0]
	require.False(t, committed, "nothing of partition 0 is committed")

	refused.Remove()
	for _, id := range stuck {
		e.waitStatus(t, s, id, "completed")
	}
	require.Eventually(t, func() bool {
		v, _ := metricValue(t, s, "rendezvous_kafka_partition_stalled", stalled)
		lag, _ := metricValue(t, s, "rendezvous_kafka_consumer_lag", p0)
		return v == 0 && lag == 0
	}, waitTimeout, 50*time.Millisecond, "stalled and lag return to 0")
	_, rz = getReadyz(t, s)
	require.Empty(t, rz.Stalled)
	require.Equal(t, 2, e.partitions(t, "ref.dlq"), "the replica created the topic once allowed")
	dls := e.deadLetters(t, "ref.dlq", 1)
	require.Len(t, dls, 1)
	requireDeadLetter(t, dls[0], "ref", 0, 0, []byte("not json"), "not JSON")
}

// TestDeadLetterWriteHangs: the dead-letter write is never answered. Stopping the
// replica (SIGTERM) does not wait for it, and nothing after the poison record was
// applied or committed.
func TestDeadLetterWriteHangs(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	e.createTopic(t, "hang", 1)
	e.createTopic(t, "hang.dlq", 1)
	hung := make(chan struct{}, 1)
	td, err := e.adm.ListTopics(t.Context(), "hang.dlq")
	require.NoError(t, err)
	dlqID := td["hang.dlq"].ID // newer produce requests name topics by id
	e.cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == "hang.dlq" || tp.TopicID == dlqID {
				select {
				case hung <- struct{}{}:
				default:
				}
				return nil, nil, true // never answered
			}
		}
		return nil, nil, false
	})
	s := e.start(t, "pod-a", noAutoCreate, func(c *server.Config) { c.Kafka.DLQWriteTimeout = time.Hour })
	e.put(t, s, e.definition("hang", kafkaOnly("hang")))
	execID := e.startExecution(t, s, "hang", nil)
	e.produce(t, record("hang", 0, "not json"), record("hang", 0, ids(execID, e.correlationID(t, s, execID), obj{"n": 1})))

	select {
	case <-hung:
	case <-time.After(waitTimeout):
		t.Fatal("the dead-letter write was never sent")
	}
	stopped := time.Now()
	s.stop()
	took := time.Since(stopped)
	// The shutdown budget of a replica with nothing else in flight is its group leave
	// (bounded at 5 s); a dead-letter write must not add to it.
	require.Less(t, took, 5*time.Second, "stopping waited for the dead-letter write")
	require.Equal(t, vocab.WaitWaiting, e.execution(t, e.start(t, "pod-b", noKafka), execID).Waits[0].Status,
		"the record after the poison one was not applied")
	_, committed := e.committed(t, "hang")[0]
	require.False(t, committed, "nothing was committed past the poison record")
}

// TestTopicCreatedLater: a definition names a topic that does not exist yet. The replica
// logs once that it waits for it, and reads it from its beginning once it is created.
func TestTopicCreatedLater(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t)
	var lines logLines
	s := e.start(t, "pod-a", noAutoCreate, withLogs(t, &lines))
	e.put(t, s, e.definition("later", kafkaOnly("later")))
	execID := e.startExecution(t, s, "later", nil)
	corrID := e.correlationID(t, s, execID)
	const waiting = `waiting for kafka topic to be created; its records are read from its beginning once it exists" topic=later`
	require.Eventually(t, func() bool { return lines.count(waiting) == 1 }, waitTimeout, 20*time.Millisecond)
	time.Sleep(600 * time.Millisecond) // three refreshes
	require.Equal(t, 1, lines.count(waiting), "logged once")

	e.createTopic(t, "later", 2)
	e.produce(t, record("later", 1, ids(execID, corrID, obj{"n": 1})))
	e.waitStatus(t, s, execID, "completed")
	require.Eventually(t, func() bool { return e.partitions(t, "later.dlq") == 2 }, waitTimeout, 20*time.Millisecond,
		"its dead-letter topic is made once it exists")
}
