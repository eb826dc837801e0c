package consumer_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// requireDeadLetter checks a dead-letter record against its source record.
func requireDeadLetter(t *testing.T, dl *kgoRecord, topic string, partition int32, offset int64, value []byte, reason string) time.Time {
	t.Helper()
	require.Equal(t, value, dl.Value, "the original value")
	for key, want := range map[string]string{
		consumer.HeaderTopic:     topic,
		consumer.HeaderPartition: strconv.Itoa(int(partition)),
		consumer.HeaderOffset:    strconv.FormatInt(offset, 10),
	} {
		got, ok := headerValue(dl, key)
		require.True(t, ok, "header %s", key)
		require.Equal(t, want, got, "header %s", key)
	}
	got, ok := headerValue(dl, consumer.HeaderReason)
	require.True(t, ok, "header %s", consumer.HeaderReason)
	require.Contains(t, got, reason)
	seen, ok := headerValue(dl, consumer.HeaderFirstSeen)
	require.True(t, ok, "header %s", consumer.HeaderFirstSeen)
	at, err := time.Parse(time.RFC3339Nano, seen)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), at, waitTimeout)
	return at
}

// TestPoisonRecords sends records that can never be applied: not JSON, too large, and
// JSON that jsonb rejects though Go reads it (\u0000, bytes that are not UTF-8, half a
// surrogate pair, a number beyond numeric). Each goes to <topic>.dlq with the
// reason and its origin, its offset is committed, and a valid record after them on the
// same partition applies.
func TestPoisonRecords(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a", func(c *server.Config) { c.Kafka.MaxRecordBytes = 300 })
	e.put(t, s, e.definition("psn", kafkaOnly("psn")))
	execID := e.startExecution(t, s, "psn", nil)
	corrID := e.correlationID(t, s, execID)

	poison := []struct {
		rec    *kgoRecord
		reason string
	}{
		{record("psn", 0, `{"execution_id": "`+execID+`", oops`, header("trace", "t-1")), "not JSON"},
		{record("psn", 0, ids(execID, corrID, obj{"pad": strings.Repeat("x", 400)})), "exceeds 300"},
		{record("psn", 0, `{"execution_id": "`+execID+`", "correlation_id": "`+corrID+`", "note": "a\u0000b"}`), `\u0000`},
		// What Go reads without complaint and jsonb refuses.
		{record("psn", 0, `{"execution_id": "`+execID+`", "correlation_id": "`+corrID+`", "note": "caf`+"\xc3"+`"}`), "not valid UTF-8"},
		{record("psn", 0, `{"execution_id": "`+execID+`", "correlation_id": "`+corrID+`", "note": "\ud83d"}`), "surrogate pair"},
		{record("psn", 0, `{"execution_id": "`+execID+`", "correlation_id": "`+corrID+`", "n": 1e-20000}`), "numeric range"},
	}
	valid := ids(execID, corrID, obj{"status": "fine"})
	for _, p := range poison {
		e.produce(t, p.rec)
	}
	e.produce(t, record("psn", 0, valid))

	v := e.waitStatus(t, s, execID, "completed")
	require.Equal(t, jsonOf(t, valid), waitOutput(t, v)["kafkaEvent"], "only the valid record was applied")
	require.Equal(t, int64(2), v.Waits[0].Version)

	dls := e.deadLetters(t, "psn.dlq", len(poison))
	require.Len(t, dls, len(poison))
	for i, p := range poison {
		requireDeadLetter(t, dls[i], "psn", 0, int64(i), p.rec.Value, p.reason)
	}
	trace, ok := headerValue(dls[0], "trace")
	require.True(t, ok, "the source record's headers are kept")
	require.Equal(t, "t-1", trace)

	e.waitCommitted(t, s, "psn", 0, int64(len(poison)+1))
	counts := s.Consumer.Counts()
	require.Equal(t, int64(len(poison)), counts[string(consumer.ReasonPoison)], "%v", counts)
	require.Equal(t, int64(1), counts["completed"], "%v", counts)
}

// TestDeadLetterWriteFailure makes the dead-letter topic refuse writes: the partition
// stops at the first poison record until the dead-letter write succeeds. Nothing after
// it is applied meanwhile (the valid record's wait keeps waiting) or committed; then the
// partition moves on, each record applied once and each poison record dead-lettered once.
func TestDeadLetterWriteFailure(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	fault := e.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: "dlf.dlq", Err: kerr.InvalidRecord, Count: -1,
	})
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("dlf", kafkaOnly("dlf")))
	execID := e.startExecution(t, s, "dlf", nil)
	corrID := e.correlationID(t, s, execID)

	bad := record("dlf", 0, "not json at all")
	bad2 := record("dlf", 0, "[1, 2")
	e.produce(t, bad, record("dlf", 0, ids(execID, corrID, obj{"status": "after the poison"})), bad2)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, fault.Wait(ctx, 3), "the dead-letter write is tried, and retried after a backoff")
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		at, ok := e.committed(t, "dlf")[0]
		require.True(t, !ok || at == 0, "committed past the poison record: %d", at)
		require.Equal(t, vocab.WaitWaiting, e.execution(t, s, execID).Waits[0].Status, "applied a record after the poison one")
	}
	require.Zero(t, s.Consumer.Counts()[string(consumer.ReasonPoison)])

	fault.Remove()
	removed := time.Now()
	e.waitCommitted(t, s, "dlf", 0, 3, "the partition moves on once the dead letters are written")
	dls := e.deadLetters(t, "dlf.dlq", 2)
	require.Len(t, dls, 2)
	firstSeen := requireDeadLetter(t, dls[0], "dlf", 0, 0, bad.Value, "not JSON")
	require.True(t, firstSeen.Before(removed), "first-seen (%s) is the first failed attempt, before the write could succeed (%s)",
		firstSeen, removed)
	requireDeadLetter(t, dls[1], "dlf", 0, 2, bad2.Value, "not JSON")
	require.Equal(t, int64(2), e.endOffset(t, "dlf.dlq"), "each poison record dead-lettered once")
	v := e.waitStatus(t, s, execID, "completed")
	require.Equal(t, int64(2), v.Waits[0].Version)
	counts := s.Consumer.Counts()
	require.Equal(t, int64(2), counts[string(consumer.ReasonPoison)], "%v", counts)
	require.Equal(t, int64(1), counts["completed"], "%v", counts)
	t.Logf("dead-letter write refused %d times; counts %v", fault.Hits(), counts)
}

// TestDeadLetterWrittenOnce: a poison record is dead-lettered before the records after it
// are applied. When applying them then fails (the database refuses every wait update
// for a while) and the batch is retried, the poison record is not dead-lettered again.
func TestDeadLetterWrittenOnce(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("dwo", kafkaOnly("dwo")))
	execID := e.startExecution(t, s, "dwo", nil)
	corrID := e.correlationID(t, s, execID)
	fault := dbtest.FailUpdates(t, e.direct, "fail_waits", "execution_wait_states", "true", "XX000", "wait updates fail for the test")

	bad := record("dwo", 0, "not json")
	e.produce(t, bad, record("dwo", 0, ids(execID, corrID, obj{"status": "after the poison"})))
	require.Eventually(t, func() bool { return fault.Failures(t) >= 3 }, waitTimeout, 20*time.Millisecond,
		"applying is tried, and retried after a backoff")
	require.Equal(t, int64(1), e.endOffset(t, "dwo.dlq"), "dead-lettered before applying, once")
	at, ok := e.committed(t, "dwo")[0]
	require.True(t, !ok || at == 0, "committed past records not applied: %d", at)

	fault.Remove(t)
	e.waitStatus(t, s, execID, "completed")
	e.waitCommitted(t, s, "dwo", 0, 2)
	require.Equal(t, int64(1), e.endOffset(t, "dwo.dlq"), "the retries did not dead-letter it again")
	requireDeadLetter(t, e.deadLetters(t, "dwo.dlq", 1)[0], "dwo", 0, 0, bad.Value, "not JSON")
	counts := s.Consumer.Counts()
	require.Equal(t, int64(1), counts[string(consumer.ReasonPoison)], "%v", counts)
	t.Logf("wait updates failed %d times; counts %v", fault.Failures(t), counts)
}

// TestRefusedByDatabase: a value PostgreSQL refuses that no check here foresaw (a trigger
// stands for it, raising a data exception for one record's payload) fails the batch it
// is in. Retrying the batch would fail alike forever, holding back its partition; instead
// its records are applied one by one, the refused one is dead-lettered with the
// database's reason, and the records around it on the same partition apply. Records that
// all fail alone are not dead-lettered.
func TestRefusedByDatabase(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("rfs", kafkaOnly("rfs")))
	fault := dbtest.FailUpdates(t, e.direct, "refuse_marked", "execution_wait_states",
		`NEW.kafka_event_data->>'refuse' = 'yes'`, "22023", "value refused for the test")
	execs := make([]string, 3)
	corrs := make([]string, 3)
	for i := range execs {
		execs[i] = e.startExecution(t, s, "rfs", nil)
		corrs[i] = e.correlationID(t, s, execs[i])
	}
	refused := record("rfs", 0, ids(execs[1], corrs[1], obj{"refuse": "yes"}))
	e.produce(t, record("rfs", 0, ids(execs[0], corrs[0], obj{"n": 0})), refused, record("rfs", 0, ids(execs[2], corrs[2], obj{"n": 2})))

	e.waitStatus(t, s, execs[0], "completed")
	e.waitStatus(t, s, execs[2], "completed")
	dls := e.deadLetters(t, "rfs.dlq", 1)
	require.Len(t, dls, 1)
	requireDeadLetter(t, dls[0], "rfs", 0, 1, refused.Value, "PostgreSQL refused the value: value refused for the test (SQLSTATE 22023)")
	e.waitCommitted(t, s, "rfs", 0, 3)
	v := e.execution(t, s, execs[1])
	require.Equal(t, vocab.WaitWaiting, v.Waits[0].Status, "the refused record changed nothing")
	counts := s.Consumer.Counts()
	require.Equal(t, int64(1), counts[string(consumer.ReasonPoison)], "%v", counts)
	require.Equal(t, int64(2), counts["completed"], "%v", counts)

	// When no record of a batch applies alone, the refusal is not one record's value but
	// something every statement meets: nothing is dead-lettered, the partition waits.
	more := make([]string, 2)
	var recs []*kgoRecord
	for i := range more {
		more[i] = e.startExecution(t, s, "rfs", nil)
		recs = append(recs, record("rfs", 0, ids(more[i], e.correlationID(t, s, more[i]), obj{"refuse": "yes"})))
	}
	e.produceOneBatch(t, recs...)
	time.Sleep(time.Second)
	require.Equal(t, int64(3), e.committed(t, "rfs")[0], "nothing committed past records that were not applied")
	require.Equal(t, int64(1), s.Consumer.Counts()[string(consumer.ReasonPoison)], "nothing more dead-lettered")
	// The refusal ends while no replica is applying. Ended during a round of isolation,
	// between the two records tried alone, it has the first refused alone and the second
	// applied alone, and the first is then poison, as the consumer must conclude: this
	// test once removed the trigger under the running replica, and failed now and then
	// exactly so.
	s.stop()
	fault.Remove(t)
	s2 := e.start(t, "pod-b")
	for _, id := range more {
		e.waitStatus(t, s2, id, "completed")
	}
	e.waitCommitted(t, s2, "rfs", 0, 5)
	require.Zero(t, s2.Consumer.Counts()[string(consumer.ReasonPoison)])
	require.Equal(t, int64(1), e.endOffset(t, "rfs.dlq"), "nothing more dead-lettered")
}
