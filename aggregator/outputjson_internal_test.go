package aggregator

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestOutputIsItsDefinition checks that Output, which writes the document directly, is
// the JSON value of outputByMaps, the plain statement of what a node output holds:
// whole payloads, paths inside them, events that did not arrive, named events, keys
// Output writes itself, exact numbers, strings that need escaping, the missing list.
func TestOutputIsItsDefinition(t *testing.T) {
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
		missing  []string
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
		}, timedOut: []string{"late"}, flag: true, missing: []string{"shipped", "n\u00e9"}},
		{name: "no mapping", row: dbsqlc.ExecutionWaitState{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.row.CorrelationID = uuid.New()
			c.row.AggregationStrategy = vocab.StrategyAll
			want, err := outputByMaps(c.row, received, c.timedOut, c.flag, c.missing)
			require.NoError(t, err)
			wantJSON, err := json.Marshal(want)
			require.NoError(t, err)
			got, err := Output(c.row, received, c.timedOut, c.flag, c.missing)
			require.NoError(t, err)
			require.True(t, json.Valid(got), "%s", got)
			wantV, err := jsonnum.Decode(wantJSON)
			require.NoError(t, err)
			gotV, err := jsonnum.Decode(got)
			require.NoError(t, err)
			require.Equal(t, wantV, gotV)
		})
	}

	// A payload with spaces goes through json.Compact, which refuses one that is not JSON.
	// One without is copied as it is: a payload reaches Output from a json column or
	// through CheckStorable, and a broken one would be refused by the json column the
	// output is written to.
	t.Run("not JSON", func(t *testing.T) {
		row := dbsqlc.ExecutionWaitState{OutputMapping: []byte(`{"k":"kafka_event"}`), KafkaEventData: []byte(`{"a": `)}
		_, err := outputByMaps(row, nil, nil, false, nil)
		require.Error(t, err)
		_, err = Output(row, nil, nil, false, nil)
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

// outputByMaps states what Output writes the plain way, as maps marshalled: the
// definition Output is checked against.
func outputByMaps(ws dbsqlc.ExecutionWaitState, received []Received, timedOutEvents []string, timedOut bool, missing []string) (map[string]any, error) {
	payloads := map[string]any{}
	raws := map[string][]byte{EventAPIResponse: ws.ApiResponseData, EventKafka: ws.KafkaEventData}
	if len(ws.EventData) > 0 {
		var named map[string]json.RawMessage
		if err := json.Unmarshal(ws.EventData, &named); err != nil {
			return nil, fmt.Errorf("decode event_data: %w", err)
		}
		for name, raw := range named {
			raws[name] = raw
		}
	}
	for name, raw := range raws {
		if len(raw) == 0 {
			continue
		}
		// Numbers stay exact: an id mapped into the output is the id that arrived.
		v, err := jsonnum.Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("decode %s data: %w", name, err)
		}
		payloads[name] = v
	}
	var mapping map[string]string
	if len(ws.OutputMapping) > 0 {
		if err := json.Unmarshal(ws.OutputMapping, &mapping); err != nil {
			return nil, fmt.Errorf("decode output_mapping: %w", err)
		}
	}
	out := map[string]any{}
	for key, path := range mapping {
		name, sub, _ := strings.Cut(path, ".")
		v, ok := payloads[name]
		if ok && sub != "" {
			v, ok = dotpath.Get(v, sub)
		}
		if !ok {
			v = nil
		}
		out[key] = v
	}
	events := make([]map[string]any, len(received))
	order := make([]string, len(received))
	for i, r := range received {
		events[i] = map[string]any{"name": r.Name, "received_at": r.ReceivedAt, "source": r.Source}
		order[i] = r.Name
	}
	out["events"] = events
	out["arrival_order"] = order
	out["correlation_id"] = ws.CorrelationID.String()
	out["strategy"] = ws.AggregationStrategy
	out["timeout"] = timedOut
	if timedOutEvents == nil {
		timedOutEvents = []string{}
	}
	out["timed_out_events"] = timedOutEvents
	if missing == nil {
		missing = []string{}
	}
	out["missing_required_events"] = missing
	return out, nil
}

func TestAppendUUIDIsString(t *testing.T) {
	t.Parallel()
	ids := []uuid.UUID{uuid.Nil, uuid.Max, uuid.MustParse("0123abcd-4567-89ef-fedc-ba9876543210")}
	for range 100 {
		ids = append(ids, uuid.New())
	}
	for _, id := range ids {
		require.Equal(t, `"`+id.String(), string(appendUUID([]byte(`"`), id)))
	}
}
