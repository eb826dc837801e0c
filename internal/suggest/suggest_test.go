package suggest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClosest(t *testing.T) {
	t.Parallel()
	fields := []string{"apiCall", "kafkaEvent", "events", "aggregationStrategy", "timeout", "onTimeout", "outputMapping"}
	for _, tc := range []struct{ in, want string }{
		{"timout", "timeout"},
		{"Timeout", "timeout"},
		{"aggregationStrategie", "aggregationStrategy"},
		{"apicall", "apiCall"},
		{"event", "events"},
		{"color", ""},
		{"x", ""},
		{"", ""},
	} {
		require.Equal(t, tc.want, Closest(tc.in, fields), "Closest(%q)", tc.in)
	}
	require.Empty(t, Closest("anything", nil))
	require.Equal(t, "server", Closest("sever", []string{"server", "timeout", "o"}))
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"flaw", "lawn", 2}, {"same", "same", 0},
	} {
		require.Equal(t, tc.want, distance(tc.a, tc.b), "%q %q", tc.a, tc.b)
		require.Equal(t, tc.want, distance(tc.b, tc.a), "%q %q", tc.b, tc.a)
	}
}
