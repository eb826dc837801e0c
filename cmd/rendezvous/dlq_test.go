package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/consumer"
)

// TestDLQReplay drives `rendezvous dlq replay` against a broker: a dry run prints what it
// would do and produces nothing, the replay re-produces the record to its source topic
// and says so; bad flags are refused before anything is read.
func TestDLQReplay(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The source topic exists, with one record in it.
	require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: "ship", Value: []byte(`{}`)}).FirstErr())
	require.NoError(t, prod.ProduceSync(ctx, &kgo.Record{Topic: "ship.dlq", Value: []byte(`{"n": 1}`), Headers: []kgo.RecordHeader{
		{Key: consumer.HeaderTopic, Value: []byte("ship")}, {Key: consumer.HeaderReason, Value: []byte("not JSON")},
	}}).FirstErr())

	dlqRun := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"dlq", "replay", "--kafka-brokers", brokers}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	code, out, errOut := dlqRun("--topic", "ship.dlq", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^would replay  ship\.dlq/0/0 -> ship \(dead-lettered \S+: not JSON\)$`, out)
	require.Contains(t, out, "would replay 1 records of ship.dlq, skipped 0\n")

	code, out, errOut = dlqRun("--topic", "ship.dlq", "--since", "1h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "replayed 1 records of ship.dlq, skipped 0\n")
	ends, err := kadmEnd(ctx, prod, "ship")
	require.NoError(t, err)
	require.Equal(t, int64(2), ends)

	for _, bad := range [][]string{{}, {"--topic", "ship.dlq", "--since", "yesterday"}} {
		code, _, errOut = dlqRun(bad...)
		require.Equal(t, 1, code)
		require.Contains(t, errOut, "rendezvous dlq: ")
	}
}

// kadmEnd is the end offset of partition 0 of topic.
func kadmEnd(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset, o.Err
}
