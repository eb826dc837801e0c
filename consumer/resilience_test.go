package consumer_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server"
)

// startMany starts n executions of name concurrently and returns their ids.
func (e *env) startMany(t *testing.T, s *svc, name string, n int) []string {
	t.Helper()
	out := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = e.startExecution(t, s, name, obj{"i": i})
		}()
	}
	wg.Wait()
	return out
}

// TestRebalanceMidStream runs two replicas in one group while records flow: the second
// joins part-way (partitions move to it) and the first leaves later (all move back).
// 300 waits get one record each, 30 of them twice: every wait completes exactly once,
// nothing is lost, and everything is committed in the end.
func TestRebalanceMidStream(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(rebalancePartitions))
	a := e.start(t, "pod-a")
	execIDs, recs := e.rebalanceRecords(t, a)

	b := e.produceRebalancing(t, recs, rebalancing{chunk: 10, pause: 100 * time.Millisecond, join: 6, leave: 22}, a)
	e.requireEachCompletedOnce(t, execIDs, recs, a, b)
}

// TestRebalanceDuringWidenedPolls is TestRebalanceMidStream with polls of one record
// and 2 lanes, the records produced 30 at a time: each burst is a backlog over every
// partition, so every poll widens with what the client has buffered (up to 4 records of
// up to 4 partitions) while the second replica joins and the first leaves. Records taken
// by a widened poll are applied and committed by the member that polled them, as those
// of the poll itself are: every wait completes exactly once and every offset is
// committed.
func TestRebalanceDuringWidenedPolls(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(rebalancePartitions))
	small := func(c *server.Config) { c.Kafka.MaxPollRecords, c.Kafka.Lanes = 1, 2 }
	a := e.start(t, "pod-a", small)
	execIDs, recs := e.rebalanceRecords(t, a)

	b := e.produceRebalancing(t, recs, rebalancing{chunk: 30, pause: 300 * time.Millisecond, join: 2, leave: 7}, a, small)
	e.requireEachCompletedOnce(t, execIDs, recs, a, b)
}

// rebalancing is when produceRebalancing changes the group: recs are produced chunk at a
// time, pause apart; the second replica joins after chunk number join and the first
// leaves after chunk number leave.
type rebalancing struct {
	chunk       int
	pause       time.Duration
	join, leave int
}

// produceRebalancing produces recs while the group changes under them, as r says: a
// second replica, started with opts, joins mid-stream and a leaves mid-stream. It
// returns the second replica.
func (e *env) produceRebalancing(t *testing.T, recs []*kgo.Record, r rebalancing, a *svc, opts ...func(*server.Config)) *svc {
	t.Helper()
	var b *svc
	for i := 0; i < len(recs); i += r.chunk {
		e.produce(t, recs[i:min(i+r.chunk, len(recs))]...)
		switch i / r.chunk {
		case r.join:
			b = e.start(t, "pod-b", opts...) // joins the group mid-stream
		case r.leave:
			a.stop() // leaves the group mid-stream
		}
		time.Sleep(r.pause)
	}
	return b
}

// rebalancePartitions is the partition count of the rebalance tests' topic.
const rebalancePartitions = 6

// rebalanceRecords starts the rebalance tests' 300 executions on s and returns them with
// their records: one per wait, spread over the partitions, and 30 earlier ones produced
// again a little later (the same event redelivered).
func (e *env) rebalanceRecords(t *testing.T, s *svc) ([]string, []*kgo.Record) {
	t.Helper()
	const n, dups = 300, 30
	e.put(t, s, e.definition("rb", kafkaOnly("rb")))
	execIDs := e.startMany(t, s, "rb", n)
	corr := e.waits(t, n)
	recs := make([]*kgo.Record, 0, n+dups)
	for i, id := range execIDs {
		recs = append(recs, record("rb", int32(i%rebalancePartitions), ids(id, corr[id], obj{"i": i})))
		if i%(n/dups) == n/dups-1 {
			j := i - 7
			recs = append(recs, record("rb", int32((j+1)%rebalancePartitions), ids(execIDs[j], corr[execIDs[j]], obj{"i": j})))
		}
	}
	require.Len(t, recs, n+dups)
	return execIDs, recs
}

// requireEachCompletedOnce checks the end of a rebalance test: each wait resumed and
// completed by exactly one record, the redelivered ones counted as duplicates, every
// offset committed, and the second replica (b) part of it.
func (e *env) requireEachCompletedOnce(t *testing.T, execIDs []string, recs []*kgo.Record, a, b *svc) {
	t.Helper()
	e.requireResumedOnce(t, execIDs, 1)
	require.Eventually(t, func() bool { return e.committedSum(t, "rb") == int64(len(recs)) }, waitTimeout, 50*time.Millisecond,
		"all offsets committed")
	counts := sumCounts(a, b)
	t.Logf("counts: pod-a %v, pod-b %v", a.Consumer.Counts(), b.Consumer.Counts())
	require.Equal(t, int64(len(execIDs)), counts["completed"], "each wait completed by exactly one record: %v", counts)
	require.GreaterOrEqual(t, counts["duplicate"], int64(len(recs)-len(execIDs)), "%v", counts)
	require.Positive(t, b.Consumer.Counts()["completed"], "the second replica took part")
	require.Zero(t, counts["poison"]+counts["missing_id"]+counts["not_found"]+counts["id_mismatch"], "%v", counts)
}

// failOffsetCommits makes the broker answer every OffsetCommit with an error while fail
// is set, and counts the failed requests.
func failOffsetCommits(cluster *kfake.Cluster, fail *atomic.Bool, failed *atomic.Int64) {
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !fail.Load() {
			return nil, nil, false // the broker handles it; the control stays installed
		}
		cluster.KeepControl()
		failed.Add(1)
		return refuseCommit(req.(*kmsg.OffsetCommitRequest)), nil, true
	})
}

// refuseCommit is the broker's answer refusing every partition of a commit.
func refuseCommit(r *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = kerr.InvalidCommitOffsetSize.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// TestOffsetCommitFailure applies records while every offset commit fails, then replaces
// the replica: the new one gets every record again, absorbs them as duplicates, commits
// them, and no wait is resumed twice.
func TestOffsetCommitFailure(t *testing.T) {
	t.Parallel()
	limit(t)
	const n = 40
	e := setup(t)
	var fail atomic.Bool
	var failed atomic.Int64
	fail.Store(true)
	failOffsetCommits(e.cluster, &fail, &failed)

	a := e.start(t, "pod-a")
	e.put(t, a, e.definition("cf", kafkaOnly("cf")))
	execIDs := e.startMany(t, a, "cf", n)
	corr := e.waits(t, n)
	for i, id := range execIDs {
		e.produce(t, record("cf", int32(i%3), ids(id, corr[id], obj{"i": i})))
	}
	e.requireResumedOnce(t, execIDs, 1)
	require.Eventually(t, func() bool { return a.Consumer.Counts()["completed"] == n }, waitTimeout, 20*time.Millisecond)
	require.Positive(t, failed.Load(), "commits were attempted and failed")
	require.Zero(t, e.committedSum(t, "cf"), "nothing was committed")
	a.stop()

	fail.Store(false)
	b := e.start(t, "pod-b")
	require.Eventually(t, func() bool { return b.Consumer.Counts()["duplicate"] == n }, waitTimeout, 20*time.Millisecond,
		"every record is redelivered and absorbed as a duplicate")
	require.Eventually(t, func() bool { return e.committedSum(t, "cf") == n }, waitTimeout, 20*time.Millisecond,
		"the redelivered records are committed")
	require.Zero(t, b.Consumer.Counts()["completed"]+b.Consumer.Counts()["recorded"], "%v", b.Consumer.Counts())
	time.Sleep(300 * time.Millisecond) // a second continuation would show up by now
	e.requireResumedOnce(t, execIDs, 1)
}

// TestDatabaseOutage cuts a replica off PostgreSQL while records arrive: nothing is
// committed past what is applied, readiness reports the failure, and once the database
// is back every record is applied and committed.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	limit(t)
	const before, during = 20, 40
	e := setup(t)
	s, proxy := e.startProxied(t, "pod-a")

	e.put(t, s, e.definition("outage", kafkaOnly("outage")))
	execIDs := e.startMany(t, s, "outage", before+during)
	corr := e.waits(t, before+during)
	recs := make([]*kgo.Record, len(execIDs))
	for i, id := range execIDs {
		recs[i] = record("outage", int32(i%3), ids(id, corr[id], obj{"i": i}))
	}

	e.produce(t, recs[:before]...)
	require.Eventually(t, func() bool { return e.committedSum(t, "outage") == before }, waitTimeout, 20*time.Millisecond)
	require.Equal(t, before, e.applied(t))
	require.NoError(t, s.Consumer.Ready(context.Background()))
	// Cut only once their continuations ran: a run-queue item in flight at the cut stays
	// claimed until its lease (minutes) runs out, which is the executor's business.
	require.Eventually(t, func() bool {
		return e.count(t, "SELECT count(*) FROM executions WHERE status = 'completed'") == before
	}, waitTimeout, 20*time.Millisecond)

	proxy.Cut()
	// A record without ids among them, behind a record that needs the database on the
	// same partition: it is retried with it, committed with it, and counted once.
	var later []*kgoRecord
	for _, r := range recs[before:] {
		later = append(later, r)
		if r.Partition == 0 && len(later) < 4 {
			later = append(later, record("outage", 0, obj{"no": "ids"}))
		}
	}
	require.Len(t, later, during+1)
	e.produce(t, later...)
	// committedNotAhead checks the invariant: offsets are read first, then the applied
	// records, which only grow.
	committedNotAhead := func() {
		committed := e.committedSum(t, "outage")
		applied := e.applied(t)
		if committed > int64(applied) {
			t.Errorf("committed offsets (%d) ahead of applied records (%d)", committed, applied)
		}
	}
	require.Eventually(t, func() bool {
		committedNotAhead()
		return s.Consumer.Ready(context.Background()) != nil
	}, waitTimeout, 20*time.Millisecond, "readiness reports the failing database")
	require.False(t, t.Failed())
	err := s.Consumer.Ready(context.Background())
	t.Logf("ready during the outage: %v", err)
	// Let the consumer retry a few times with backoff.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		committedNotAhead()
	}
	require.Equal(t, int64(before), e.committedSum(t, "outage"), "nothing committed during the outage")
	require.Equal(t, before, e.applied(t), "nothing applied during the outage")
	require.Error(t, s.Consumer.Ready(context.Background()))

	proxy.Restore()
	require.Eventually(t, func() bool {
		return e.applied(t) == before+during && e.committedSum(t, "outage") == before+during+1
	}, waitTimeout, 20*time.Millisecond, "all records applied and committed after the outage")
	require.Eventually(t, func() bool { return s.Consumer.Ready(context.Background()) == nil }, waitTimeout, 20*time.Millisecond)
	e.requireResumedOnce(t, execIDs, 1)
	counts := s.Consumer.Counts()
	t.Logf("counts: %v", counts)
	require.LessOrEqual(t, counts["completed"], int64(before+during), "%v", counts)
	require.Equal(t, int64(before+during), counts["completed"]+counts["duplicate"], "%v", counts)
	require.Equal(t, int64(1), counts["missing_id"], "counted once, not once per retry: %v", counts)
}

// TestBackoffPerPartition: a partition whose records keep failing backs off further on
// each failure, even while another partition's records apply on every poll. One shared
// count, reset by any poll that failed nothing, retried it at the minimum backoff
// forever, rebuilding and rolling back its batch every few milliseconds.
//
// Readiness stays up throughout: the fault is the partition's own, not an outage, and
// taking the pod out of the Service would not help. Lanes that reported one by one made
// it flip whenever a poll held only the stuck partition's retry.
func TestBackoffPerPartition(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(2))
	s := e.start(t, "pod-a")
	e.put(t, s, e.definition("bop", kafkaOnly("bop")))
	execID := e.startExecution(t, s, "bop", nil)
	corrID := e.correlationID(t, s, execID)
	// The stuck record's update fails with an error that is neither an outage nor about
	// its data (lock_not_available).
	fault := dbtest.FailUpdates(t, e.direct, "stuck", "execution_wait_states",
		`NEW.kafka_event_data->>'stuck' = 'yes'`, "55P03", "stuck for the test")
	attempts := func() int { return fault.Failures(t) }

	e.produce(t, record("bop", 0, ids(execID, corrID, obj{"stuck": "yes"})))
	require.Eventually(t, func() bool { return attempts() > 0 }, waitTimeout, 10*time.Millisecond)
	// Partition 1 meanwhile applies a record every 25 ms (ids of no wait: recorded as
	// unmatched, a database write that succeeds).
	from, start := attempts(), time.Now()
	var unready []error
	for range 80 {
		e.produce(t, record("bop", 1, ids(uuid.NewString(), uuid.NewString(), nil)))
		for range 5 {
			if err := s.Consumer.Ready(t.Context()); err != nil {
				unready = append(unready, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	tried, took := attempts()-from, time.Since(start)
	require.Empty(t, unready, "readiness went down %d times of 400", len(unready))
	// Backoff 20 ms doubling to 200 ms (the tests' configuration): a few attempts to
	// reach the ceiling, then one per 200 ms. At the minimum backoff it was about one
	// per 40 ms (58 in 2.3 s).
	bound := int(took/(200*time.Millisecond)) + 8
	t.Logf("the stuck partition was tried %d times in %s (bound %d)", tried, took.Round(time.Millisecond), bound)
	require.LessOrEqual(t, tried, bound)
	require.Eventually(t, func() bool { return e.committed(t, "bop")[1] == 80 }, waitTimeout, 20*time.Millisecond,
		"the other partition kept moving")
	_, ok := e.committed(t, "bop")[0]
	require.False(t, ok, "nothing committed on the stuck partition")

	fault.Remove(t)
	e.waitStatus(t, s, execID, "completed")
	require.Eventually(t, func() bool { return e.committed(t, "bop")[0] == 1 }, waitTimeout, 20*time.Millisecond)
}

// TestReadinessAfterOutage: readiness goes down while the database cannot be reached and
// comes back once it answers, even when the only record this replica has keeps failing
// for its own sake (its wait's updates fail) and so never applies. Readiness waited for
// a batch to apply, and stayed down for as long as that partition was stuck.
func TestReadinessAfterOutage(t *testing.T) {
	t.Parallel()
	limit(t)
	e := setup(t, kfake.DefaultNumPartitions(1))
	s, proxy := e.startProxied(t, "pod-a")
	e.put(t, s, e.definition("rao", kafkaOnly("rao")))
	execID := e.startExecution(t, s, "rao", nil)
	corrID := e.correlationID(t, s, execID)
	require.Eventually(t, func() bool {
		return e.count(t, "SELECT count(*) FROM run_queue WHERE execution_id = $1", execID) == 0
	}, waitTimeout, 20*time.Millisecond)
	fault := dbtest.FailUpdates(t, e.direct, "stuck_rao", "execution_wait_states", "true", "XX000", "stuck for the test")

	proxy.Cut()
	e.produce(t, record("rao", 0, ids(execID, corrID, nil)))
	require.Eventually(t, func() bool { return s.Consumer.Ready(t.Context()) != nil }, waitTimeout, 20*time.Millisecond,
		"readiness reports the unreachable database")

	proxy.Restore()
	require.Eventually(t, func() bool { return s.Consumer.Ready(t.Context()) == nil }, waitTimeout, 20*time.Millisecond,
		"readiness comes back with the database")
	before := fault.Failures(t)
	require.Eventually(t, func() bool { return fault.Failures(t) >= before+2 }, waitTimeout, 20*time.Millisecond,
		"the record is retried and still fails")
	require.NoError(t, s.Consumer.Ready(t.Context()), "a record failing for its own sake leaves readiness up")
	_, ok := e.committed(t, "rao")[0]
	require.False(t, ok, "nothing committed past the stuck record")

	fault.Remove(t)
	e.waitStatus(t, s, execID, "completed")
	require.Eventually(t, func() bool { return e.committed(t, "rao")[0] == 1 }, waitTimeout, 20*time.Millisecond)
}

// TestSessionTimeout: the replica joins its group with the configured session timeout,
// which bounds how long a replica killed without leaving holds its partitions (and, in a
// rebalance begun meanwhile, the group's). Kafka brokers keep the client default, 45 s,
// unless told otherwise.
func TestSessionTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		set  time.Duration
		want time.Duration
	}{{"default", 0, 45 * time.Second}, {"configured", 7 * time.Second, 7 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			joined := make(chan int32, 1)
			e.cluster.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
				select {
				case joined <- req.(*kmsg.JoinGroupRequest).SessionTimeoutMillis:
				default:
				}
				return nil, nil, false // observed only: the broker handles the join
			})
			e.start(t, "pod-a", func(c *server.Config) { c.Kafka.SessionTimeout = tc.set })
			select {
			case ms := <-joined:
				require.Equal(t, tc.want, time.Duration(ms)*time.Millisecond)
			case <-time.After(waitTimeout):
				require.FailNow(t, "the replica never joined its group")
			}
		})
	}
}
