package readmodel

import (
	"encoding/base64"
	"strings"
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

// requireCursorRefused asserts the refusal of a cursor: a QueryError about the cursor
// parameter whose reason contains want.
func requireCursorRefused(t *testing.T, err error, want, cursor string) {
	t.Helper()
	qe, ok := err.(*QueryError)
	require.True(t, ok, "%q: want a *QueryError, got %v", cursor, err)
	require.Equal(t, "cursor", qe.Param)
	require.Contains(t, qe.Reason, want, "%q", cursor)
}

func TestCursorRoundTrips(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	id := uuid.New()
	for _, k := range []kind{kindWaitStates, kindExecutions} {
		gotAt, gotID, err := decodeTimeID(k, encodeTimeID(k, at, id))
		require.NoError(t, err)
		require.True(t, at.Equal(gotAt), "%s != %s", gotAt, at)
		require.Equal(t, id, gotID)
	}
	// Microseconds are what PostgreSQL keeps; a time before 1970 is a negative count.
	early := time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)
	gotAt, _, err := decodeTimeID(kindExecutions, encodeTimeID(kindExecutions, early, id))
	require.NoError(t, err)
	require.True(t, early.Equal(gotAt), "%s != %s", gotAt, early)

	for _, k := range []kind{kindWorkflows, kindTokens} {
		for _, name := range []string{"orders.v2", "x", "ünïcode-名前", strings.Repeat("n", 300)} {
			got, err := decodeName(k, encodeName(k, name))
			require.NoError(t, err)
			require.Equal(t, name, got)
		}
	}
	for _, k := range []kind{kindAudit, kindUnmatched, kindDeadLetters} {
		for _, n := range []int64{1, 255, 1 << 40, 1<<63 - 1} {
			got, err := decodeID(k, encodeID(k, n))
			require.NoError(t, err)
			require.Equal(t, n, got)
		}
	}
}

// TestCursorOfAnotherList: every list refuses every other list's cursor, and says
// whose it is, even when the two lists page by keys of the same shape.
func TestCursorOfAnotherList(t *testing.T) {
	at, id := time.Now(), uuid.New()
	cursors := map[kind]string{
		kindWaitStates: encodeTimeID(kindWaitStates, at, id), kindExecutions: encodeTimeID(kindExecutions, at, id),
		kindWorkflows: encodeName(kindWorkflows, "orders"), kindTokens: encodeName(kindTokens, "orders"),
		kindAudit: encodeID(kindAudit, 7), kindUnmatched: encodeID(kindUnmatched, 7), kindDeadLetters: encodeID(kindDeadLetters, 7),
	}
	require.Len(t, cursors, len(kinds), "a cursor for every kind")
	decoders := map[kind]func(string) error{}
	for k := range cursors {
		switch k {
		case kindWaitStates, kindExecutions:
			decoders[k] = func(s string) error { _, _, err := decodeTimeID(k, s); return err }
		case kindWorkflows, kindTokens:
			decoders[k] = func(s string) error { _, err := decodeName(k, s); return err }
		default:
			decoders[k] = func(s string) error { _, err := decodeID(k, s); return err }
		}
	}
	for list, decode := range decoders {
		for other, c := range cursors {
			err := decode(c)
			if other == list {
				require.NoError(t, err, "%s reads its own cursor", kinds[list].list)
				continue
			}
			requireCursorRefused(t, err, "a cursor of "+kinds[other].list+", not of "+kinds[list].list, c)
		}
	}
}

func TestCursorGarbage(t *testing.T) {
	b64 := base64.RawURLEncoding.EncodeToString
	id := uuid.New()
	good := encodeTimeID(kindWaitStates, time.Now(), id)
	// The same bytes with a padding bit set: decodes only when decoding is lenient.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	lenient := good[:len(good)-1] + string(alphabet[strings.IndexByte(alphabet, good[len(good)-1])|1])
	farFuture := append([]byte{byte(kindWaitStates), 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, id[:]...)
	for _, bad := range []string{
		"", "%%", "not base64!", good + "A", good[:len(good)-2], lenient,
		base64.URLEncoding.EncodeToString(append([]byte{byte(kindWaitStates)}, make([]byte, 24)...)), // padded
		b64([]byte{'z'}),                         // no list's kind
		b64(farFuture),                           // not a time PostgreSQL takes
		b64([]byte{byte(kindWaitStates)}),        // no key
		b64([]byte{byte(kindExecutions)}),        // another list's kind, but no key
		b64([]byte{byte(kindWorkflows), 'a', 0}), // another list's kind, a key no list makes
	} {
		_, _, err := decodeTimeID(kindWaitStates, bad)
		requireCursorRefused(t, err, "not a cursor of this list", bad)
	}
	for _, bad := range []string{
		"", b64([]byte{byte(kindWorkflows)}), b64([]byte{byte(kindWorkflows), 'a', 0}), b64([]byte{byte(kindWorkflows), 0xff}),
	} {
		_, err := decodeName(kindWorkflows, bad)
		requireCursorRefused(t, err, "not a cursor of this list", bad)
	}
	for _, bad := range []string{
		"", b64([]byte{byte(kindAudit), 0, 0, 0, 0, 0, 0, 0, 0}), // id 0
		b64([]byte{byte(kindAudit), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), // negative
		b64([]byte{byte(kindAudit), 0, 0, 0, 1}),                                     // short
		encodeID(kindAudit, 7) + "AA",
	} {
		_, err := decodeID(kindAudit, bad)
		requireCursorRefused(t, err, "not a cursor of this list", bad)
	}
}

func FuzzTimeCursor(f *testing.F) {
	f.Add(encodeTimeID(kindExecutions, time.Now(), uuid.New()))
	f.Add("ZQ")
	f.Fuzz(func(t *testing.T, s string) {
		at, id, err := decodeTimeID(kindExecutions, s)
		if err != nil {
			return
		}
		// Whatever decodes is a cursor this package could have made.
		require.Equal(t, s, encodeTimeID(kindExecutions, at, id))
	})
}

func FuzzNameCursor(f *testing.F) {
	f.Add(encodeName(kindWorkflows, "orders"))
	f.Add("bg")
	f.Fuzz(func(t *testing.T, s string) {
		name, err := decodeName(kindWorkflows, s)
		if err != nil {
			return
		}
		require.Equal(t, s, encodeName(kindWorkflows, name))
	})
}

func FuzzIDCursor(f *testing.F) {
	f.Add(encodeID(kindDeadLetters, 42))
	f.Add("ZA")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := decodeID(kindDeadLetters, s)
		if err != nil {
			return
		}
		require.Equal(t, s, encodeID(kindDeadLetters, id))
	})
}
