package consumer

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestWidenSpansPartitions: behind a backlog, the client hands a poll its records one
// partition after another, so a poll of MaxPollRecords holds one partition; widen takes
// more of what is buffered until the poll spans two partitions a lane, within its bound,
// each partition's records still contiguous and in order.
func TestWidenSpansPartitions(t *testing.T) {
	t.Parallel()
	const nParts, perPartition = 8, 40
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nParts, "backlog"))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	prod, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for p := range nParts {
		for i := range perPartition {
			recs = append(recs, &kgo.Record{Topic: "backlog", Partition: int32(p), Value: fmt.Appendf(nil, `{"i":%d}`, i)})
		}
	}
	require.NoError(t, prod.ProduceSync(ctx, recs...).FirstErr())

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("backlog"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	c := &Consumer{cfg: Config{Lanes: 2, MaxPollRecords: perPartition}, cl: cl, progress: newProgress(),
		logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	// The backlog is fetched and buffered, as it is while a replica applies the poll
	// before.
	require.Eventually(t, func() bool { return cl.BufferedFetchRecords() == int64(len(recs)) }, 30*time.Second, 10*time.Millisecond)

	first := c.took(ctx, cl.PollRecords(ctx, c.cfg.MaxPollRecords))
	require.Equal(t, 1, partitions(first), "a poll of a backlog holds one partition")
	got := c.widen(ctx, first)
	require.GreaterOrEqual(t, partitions(got), 2*c.cfg.Lanes, "widened to two partitions a lane")
	require.LessOrEqual(t, len(got), 2*c.cfg.Lanes*c.cfg.MaxPollRecords)
	next := map[int32]int64{}
	for _, r := range got {
		if off, ok := next[r.Partition]; ok {
			require.Equal(t, off, r.Offset, "partition %d in order, nothing skipped", r.Partition)
		}
		next[r.Partition] = r.Offset + 1
	}

	// Once the buffer is drained, a poll is what it took: widen adds nothing and does
	// not wait.
	rest := c.took(ctx, cl.PollRecords(nil, -1))
	require.Len(t, rest, len(recs)-len(got))
	start := time.Now()
	require.Len(t, c.widen(ctx, rest[:1]), 1)
	require.Less(t, time.Since(start), time.Second)
}

// partitions counts the partitions recs come from.
func partitions(recs []*kgo.Record) int {
	seen := map[tp]bool{}
	for _, r := range recs {
		seen[tp{r.Topic, r.Partition}] = true
	}
	return len(seen)
}
