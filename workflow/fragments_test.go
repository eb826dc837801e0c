package workflow

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFragments reads stored pieces of wait_events nodes on their own, as the consumer
// does: with the node parser's defaults, nil for a disabled block, and an ErrFragment
// for a piece the schema refuses.
func TestFragments(t *testing.T) {
	t.Run("kafkaEvent", func(t *testing.T) {
		ke, err := ParseKafkaEventFragment(json.RawMessage(`{"topic": "payments", "executionIdField": "meta.exec"}`))
		require.NoError(t, err)
		require.Equal(t, "payments", ke.Topic)
		require.Equal(t, "meta.exec", ke.ExecutionIDField)
		require.Equal(t, DefaultCorrelationIDField, ke.CorrelationIDField, "the node's default")
		require.Equal(t, DefaultWaitTimeout, ke.Timeout, "the node's default timeout")
		require.True(t, ke.Required)

		ke, err = ParseKafkaEventFragment(json.RawMessage(`{"enabled": false, "topic": "payments"}`))
		require.NoError(t, err)
		require.Nil(t, ke, "disabled")

		_, err = ParseKafkaEventFragment(json.RawMessage(`{"topic": 5}`))
		require.ErrorIs(t, err, ErrFragment)
		require.ErrorContains(t, err, "kafkaEvent.topic")
	})

	t.Run("named event", func(t *testing.T) {
		e, err := ParseNamedEventFragment(json.RawMessage(
			`{"name": "paid", "source": "kafka", "topic": "orders", "match": {"left": "order.id", "op": "eq", "right": "input.order_id"}, "lookback": "10m"}`))
		require.NoError(t, err)
		require.Equal(t, "paid", e.Name)
		require.Equal(t, SourceKafka, e.Source)
		require.Equal(t, "orders", e.Topic)
		require.Equal(t, "order.id", e.Match.Left)
		require.Equal(t, "10m0s", e.Lookback.String())

		_, err = ParseNamedEventFragment(json.RawMessage(`{"name": "paid", "source": "kafka"}`))
		require.ErrorIs(t, err, ErrFragment, "a kafka event needs its topic")

		_, err = ParseNamedEventFragment(json.RawMessage(`"paid"`))
		require.ErrorIs(t, err, ErrFragment)
	})
}
