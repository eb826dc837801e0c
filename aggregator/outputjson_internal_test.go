package aggregator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
)

// TestOutputJSONIsOutput checks that the node output the event paths write (outputJSON)
// is the JSON value Output gives, encoded: whole payloads, paths inside them, missing
// events, named events, keys Output sets itself, exact numbers, strings that need
// escaping.
func TestOutputJSONIsOutput(t *testing.T) {
	t.Parallel()
	p, o := int32(3), int64(12345)
	at := time.Date(2026, 5, 1, 12, 30, 45, 123456789, time.UTC)
	received := []Received{
		{Name: EventKafka, ReceivedAt: at, Source: Source{Kind: SourceKafka, Topic: "orders", Partition: &p, Offset: &o}, Key: "sha256:ab"},
		{Name: "shipped", ReceivedAt: at.Add(time.Second), Source: Source{Kind: SourceSend, Service: "svc <&> \"x\""}, Key: "id:é\n"},
		{Name: EventAPIResponse, ReceivedAt: at.Add(2 * time.Second), Source: Source{Kind: SourceCallback}, Key: "k"},
	}
	cases := []struct {
		name     string
		row      dbsqlc.ExecutionWaitState
		timedOut []string
		flag     bool
	}{
		{name: "bench", row: dbsqlc.ExecutionWaitState{
			OutputMapping:  []byte(`{"apiResponse":"api_response","kafkaEvent":"kafka_event"}`),
			KafkaEventData: []byte(`{"execution_id":"e","correlation_id":"c","status":"done"}`),
		}},
		{name: "everything", row: dbsqlc.ExecutionWaitState{
			OutputMapping: []byte(`{"whole":"kafka_event","id":"kafka_event.order.id","missing":"kafka_event.nope",
				"api":"api_response", "ship":"shipped.where", "none":"never", "events":"kafka_event", "strategy":"api_response",
				"big":"kafka_event.big","arr":"kafka_event.list.1", "nul":"nul", "nulsub":"nul.x"}`),
			KafkaEventData:  []byte(" {\"order\" : {\"id\": 9007199254740993}, \"big\": 1e400, \"list\": [1, 2.50, \"<&>\"], \"dup\": 1, \"dup\": 2}\n"),
			ApiResponseData: []byte(`"plain"`),
			EventData:       []byte(`{"shipped": {"where": "here \u00e9 \u2028"}, "nul": null}`),
		}, timedOut: []string{"late"}, flag: true},
		{name: "no mapping", row: dbsqlc.ExecutionWaitState{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.row.CorrelationID = uuid.New()
			c.row.AggregationStrategy = StrategyAll
			want, err := Output(c.row, received, c.timedOut, c.flag)
			require.NoError(t, err)
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)
			got, err := outputJSON(c.row, received, c.timedOut, c.flag)
			require.NoError(t, err)
			require.True(t, json.Valid(got), "%s", got)
			wantV, err := jsonnum.Decode(wantJSON)
			require.NoError(t, err)
			gotV, err := jsonnum.Decode(got)
			require.NoError(t, err)
			require.Equal(t, wantV, gotV)
		})
	}

	t.Run("not JSON", func(t *testing.T) {
		row := dbsqlc.ExecutionWaitState{OutputMapping: []byte(`{"k":"kafka_event"}`), KafkaEventData: []byte(`{"a":`)}
		_, err := Output(row, nil, nil, false)
		require.Error(t, err)
		_, err = outputJSON(row, nil, nil, false)
		require.Error(t, err)
	})
}

// TestReceivedJSONIsMarshal checks receivedJSON against json.Marshal.
func TestReceivedJSONIsMarshal(t *testing.T) {
	t.Parallel()
	p, o := int32(-1), int64(1<<62)
	at := time.Date(2026, 5, 1, 12, 30, 45, 0, time.FixedZone("x", 3600))
	for _, rs := range [][]Received{nil, {}, {
		{Name: EventKafka, ReceivedAt: at, Source: Source{Kind: SourceKafka, Topic: "t\"\\", Partition: &p, Offset: &o}, Key: "sha256:ab"},
		{Name: "x\u0001", ReceivedAt: at.UTC().Add(time.Nanosecond), Source: Source{Kind: SourceSend, Service: "s"}},
	}} {
		want, err := json.Marshal(rs)
		require.NoError(t, err)
		got, err := receivedJSON(rs)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}
