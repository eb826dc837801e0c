package executor

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
)

func TestMissingEvents(t *testing.T) {
	received := func(names ...string) []aggregator.Received {
		var out []aggregator.Received
		for _, n := range names {
			out = append(out, aggregator.Received{Name: n})
		}
		return out
	}
	tests := []struct {
		name     string
		enabled  []string
		received []aggregator.Received
		timedOut []string
		want     []string
	}{
		{"nothing yet", []string{"api_response", "kafka_event"}, nil, nil, []string{"api_response", "kafka_event"}},
		{"one received", []string{"api_response", "kafka_event"}, received("api_response"), nil, []string{"kafka_event"}},
		{"one timed out", []string{"api_response", "kafka_event"}, nil, []string{"kafka_event"}, []string{"api_response"}},
		{"all accounted for", []string{"api_response", "kafka_event"}, received("kafka_event"), []string{"api_response"}, []string{}},
		{"a timer", []string{}, nil, nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, missingEvents(tt.enabled, tt.received, tt.timedOut))
		})
	}
}

func TestCursors(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	id := uuid.New()
	c := encodeTimeCursor(cursorWaitStates, at, id)
	gotAt, gotID, err := decodeTimeCursor(cursorWaitStates, c)
	require.NoError(t, err)
	require.True(t, at.Equal(gotAt))
	require.Equal(t, id, gotID)

	name, err := decodeNameCursor(encodeNameCursor("orders.v2"))
	require.NoError(t, err)
	require.Equal(t, "orders.v2", name)

	b64 := base64.RawURLEncoding.EncodeToString
	farFuture := append([]byte{cursorWaitStates, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, id[:]...)
	for _, bad := range []string{
		"", "%%", c + "A", c[:len(c)-2],
		encodeTimeCursor(cursorExecutions, at, id), // another list's
		b64(farFuture), // not a time PostgreSQL takes
	} {
		_, _, err := decodeTimeCursor(cursorWaitStates, bad)
		var qe *QueryError
		require.ErrorAs(t, err, &qe, "%q", bad)
		require.Equal(t, "cursor", qe.Param)
	}
	for _, bad := range []string{"", b64([]byte{cursorWorkflows}), b64([]byte{cursorWorkflows, 'a', 0}), b64([]byte{cursorWorkflows, 0xff}), encodeTimeCursor(cursorWaitStates, at, id)} {
		_, err := decodeNameCursor(bad)
		require.Error(t, err, "%q", bad)
	}
}

func FuzzTimeCursor(f *testing.F) {
	f.Add(encodeTimeCursor(cursorExecutions, time.Now(), uuid.New()))
	f.Add("ZQ")
	f.Fuzz(func(t *testing.T, s string) {
		at, id, err := decodeTimeCursor(cursorExecutions, s)
		if err != nil {
			return
		}
		// Whatever decodes is a cursor this package could have made.
		require.Equal(t, s, encodeTimeCursor(cursorExecutions, at, id))
	})
}
