package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/server"
)

// TestReplayDeadLetters: a replica configured with too small a record limit dead-letters
// a valid record (the bug). After the fix — a replica with the default limit — the
// dead-letter topic is drained back: a dry run reports the record and produces nothing;
// the replay re-produces it to its source topic, marked as replayed and without the
// dead-letter headers, and the execution completes with it, once. A record on the
// dead-letter topic that the consumer did not write is skipped, and --since skips what
// came before it.
func TestReplayDeadLetters(t *testing.T) {
	t.Parallel()
	limit(t)
	ctx := context.Background()
	e := setup(t, kfake.DefaultNumPartitions(1))
	buggy := e.start(t, "pod-a", func(c *server.Config) { c.Kafka.MaxRecordBytes = 300 })
	e.put(t, buggy, e.definition("rpl", kafkaOnly("rpl")))
	execID := e.startExecution(t, buggy, "rpl", nil)
	corrID := e.correlationID(t, buggy, execID)
	big := record("rpl", 0, ids(execID, corrID, obj{"pad": strings.Repeat("x", 400)}), header("trace", "t-9"))
	e.produce(t, big)
	e.deadLetters(t, "rpl.dlq", 1)
	e.produce(t, record("rpl.dlq", 0, `{"by": "hand"}`))
	buggy.stop()

	fixed := e.start(t, "pod-b")
	cfg := consumer.ReplayConfig{Kafka: consumer.Config{Brokers: e.cluster.ListenAddrs()}, Topic: "rpl.dlq", DryRun: true}
	rep, err := consumer.ReplayDeadLetters(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	require.Equal(t, 1, rep.Skipped)
	require.Equal(t, "rpl", rep.Records[0].SourceTopic)
	require.Contains(t, rep.Records[0].Reason, "exceeds 300")
	require.Equal(t, "no rendezvous-dlq-topic header", rep.Records[1].Skipped)
	require.Equal(t, int64(1), e.endOffset(t, "rpl"), "a dry run produces nothing")

	cfg.DryRun = false
	rep, err = consumer.ReplayDeadLetters(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	require.Equal(t, int64(2), e.endOffset(t, "rpl"))
	v := e.waitStatus(t, fixed, execID, "completed")
	require.Equal(t, jsonOf(t, ids(execID, corrID, obj{"pad": strings.Repeat("x", 400)})), waitOutput(t, v)["kafkaEvent"])

	replayed := readAt(t, e, "rpl", 1)
	require.Equal(t, big.Value, replayed.Value)
	from, ok := headerValue(replayed, consumer.HeaderReplayedFrom)
	require.True(t, ok)
	require.Equal(t, "rpl.dlq/0/0", from)
	trace, _ := headerValue(replayed, "trace")
	require.Equal(t, "t-9", trace, "the record's own headers are kept")
	for _, h := range replayed.Headers {
		require.False(t, strings.HasPrefix(h.Key, "rendezvous-dlq-"), "dead-letter header %s", h.Key)
	}

	cfg.Since = time.Now().Add(time.Hour)
	rep, err = consumer.ReplayDeadLetters(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, rep.Replayed, "nothing was dead-lettered since")
	require.Equal(t, int64(2), e.endOffset(t, "rpl"))
	_, err = consumer.ReplayDeadLetters(ctx, consumer.ReplayConfig{Kafka: cfg.Kafka})
	require.ErrorContains(t, err, "topic: must not be empty")
}

// readAt reads the record at offset of partition 0 of topic.
func readAt(t *testing.T, e *env, topic string, offset int64) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(offset)}}))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0]
		}
	}
}
