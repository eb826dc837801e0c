package callbacks

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSource: the peer is the source unless it is a trusted proxy; then the nearest
// untrusted hop of X-Forwarded-For is, and what a client wrote to the left of it is not.
func TestSource(t *testing.T) {
	t.Parallel()
	ps, err := parseProxies([]string{"10.0.0.0/8", "192.168.1.1"})
	require.NoError(t, err)
	for _, tc := range []struct {
		peer, xff, want string
	}{
		{"203.0.113.9:5000", "", "203.0.113.9"},
		{"203.0.113.9:5000", "1.2.3.4", "203.0.113.9"}, // an untrusted peer's header is ignored
		{"10.1.2.3:5000", "198.51.100.7", "198.51.100.7"},
		{"10.1.2.3:5000", "6.6.6.6, 198.51.100.7, 10.9.9.9", "198.51.100.7"},
		{"192.168.1.1:5000", "198.51.100.7,192.168.1.1", "198.51.100.7"},
		{"10.1.2.3:5000", "", "10.1.2.3"},
		{"10.1.2.3:5000", "garbage", "garbage"},
		{"[::ffff:10.1.2.3]:5000", "2001:db8::1", "2001:db8::1"},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: http.Header{}}
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		require.Equal(t, tc.want, ps.source(r), "%s %s", tc.peer, tc.xff)
	}
	_, err = parseProxies([]string{"nope"})
	require.ErrorContains(t, err, "callbacks.trusted_proxies")
}

// TestKeyedLimiterBounded: a flood of distinct keys keeps at most max buckets, and a
// key over its burst is told how long to wait.
func TestKeyedLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newKeyedLimiter(1, 2, 100)
	require.Zero(t, l.take("a"))
	require.Zero(t, l.take("a"))
	require.Positive(t, l.take("a"))
	for i := range 10_000 {
		l.take(string(rune(i + 1000)))
		require.LessOrEqual(t, len(l.buckets), 100)
	}
	require.Nil(t, newKeyedLimiter(-1, 1, 2))
	require.Zero(t, (*keyedLimiter)(nil).take("x"))
}
