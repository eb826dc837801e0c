package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/server"
)

// dockerReachable asks the Docker engine with a short deadline: on machines without one
// this answers in milliseconds, not after testcontainers' own retries.
func dockerReachable() bool {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer provider.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return provider.Health(ctx) == nil
}

// TestKafkaContainerSmoke runs the consumer against a real Kafka broker in a container:
// one record completes one Kafka-only wait. The in-process kfake broker covers
// everything else; this checks that nothing depends on kfake's leniency.
func TestKafkaContainerSmoke(t *testing.T) {
	if !dockerReachable() {
		t.Skip("no Docker engine reachable: testcontainers Kafka smoke test skipped")
	}
	t.Parallel()
	limit(t)
	ctx := context.Background()
	kc, err := tckafka.Run(ctx, "confluentinc/confluent-local:7.5.0", tckafka.WithClusterID("rendezvous-test"))
	testcontainers.CleanupContainer(t, kc)
	require.NoError(t, err)
	brokers, err := kc.Brokers(ctx)
	require.NoError(t, err)

	e := setup(t) // the kfake cluster goes unused here; the producer and admin are replaced
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	e.prod = prod

	s := e.start(t, "pod-a", func(c *server.Config) { c.Kafka.Brokers = brokers })
	e.put(t, s, e.definition("smoke", kafkaOnly("smoke")))
	execID := e.startExecution(t, s, "smoke", nil)
	corrID := e.correlationID(t, s, execID)
	e.produce(t, record("smoke", 0, ids(execID, corrID, obj{"status": "real broker"})))
	v := e.waitStatus(t, s, execID, "completed")
	require.Equal(t, "real broker", waitOutput(t, v)["kafkaEvent"].(map[string]any)["status"])
	require.NoError(t, s.Consumer.Ready(ctx))
}
