package consumer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/server"
)

// TestCommittedSignal: the consumer's Committed signal follows the group's commits on
// the broker, never runs ahead of them. The broker holds the first commit and refuses
// the second: when each reaches it, and when the third reaches it after the refusal, the
// signal still shows only what the broker had acknowledged before.
func TestCommittedSignal(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	var sigs consumer.TestSignals
	sigs.Committed.Init()
	part := consumer.TopicPartition{Topic: "csig", Partition: 0}
	mark := func() int64 {
		if at, ok := sigs.Committed.Get(part); ok {
			return at
		}
		return -1
	}

	// arrived carries the signal's value when a commit reached the broker. The
	// consumer commits only what it polled, and only this topic has records. (A commit
	// names its topics by id from version 10 of the request on, so it is not filtered by
	// name.)
	arrived := make(chan int64, 3)
	release := make(chan struct{})
	commits := 0 // only the control function, run by the cluster one request at a time
	e.cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		commits++
		arrived <- mark()
		switch commits {
		case 1: // held until the test has looked
			e.cluster.SleepControl(func() { <-release })
		case 2:
			return refuseCommit(r), nil, true
		}
		return nil, nil, false
	})
	arrival := func() int64 {
		t.Helper()
		select {
		case at := <-arrived:
			return at
		case <-time.After(waitTimeout):
			t.Fatal("no commit reached the broker")
			return 0
		}
	}

	s := e.start(t, "pod-a", func(c *server.Config) { c.Kafka.TestSignals = sigs })
	e.put(t, s, e.definition("csig", kafkaOnly("csig")))
	execID := e.startExecution(t, s, "csig", nil)
	corrID := e.correlationID(t, s, execID)

	e.produce(t, record("csig", 0, ids(execID, corrID, obj{"n": 1})))
	require.Equal(t, int64(-1), arrival(), "signalled before the first commit reached the broker")
	require.Equal(t, int64(-1), mark(), "signalled while the broker held the commit")
	close(release)
	require.Equal(t, int64(1), sigs.Committed.WaitAtLeastFor(t, part, 1, waitTimeout))
	require.Equal(t, int64(1), e.committed(t, "csig")[0])

	// The second commit is refused; the third reaches the broker only after the poll
	// that made the second one is over, so by then a signal of the refused commit would
	// show.
	e.produce(t, record("csig", 0, ids(execID, corrID, obj{"n": 2})))
	require.Equal(t, int64(1), arrival())
	e.produce(t, record("csig", 0, ids(execID, corrID, obj{"n": 3})))
	require.Equal(t, int64(1), arrival(), "the refused commit was signalled")
	require.Equal(t, int64(3), sigs.Committed.WaitAtLeastFor(t, part, 3, waitTimeout))
	require.Equal(t, int64(3), e.committed(t, "csig")[0])
}
