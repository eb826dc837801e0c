package aggregator_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
)

// TestMatchValue pins the canonical forms of match values: equal values share one form
// and different values never do, and numbers a float64 holds keep the form they had
// before numbers were read exact, the shortest JSON of their float64, so keys stored
// with waits registered earlier still match.
func TestMatchValue(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in   []any
		want string
	}{
		{[]any{"A-1"}, `"A-1"`},
		{[]any{"42"}, `"42"`},
		{[]any{true}, `true`},
		// The forms of float64 numbers, as encoding/json writes them.
		{[]any{json.Number("42"), json.Number("4.2e1"), json.Number("42.000"), 42.0, 42, int64(42)}, `42`},
		{[]any{json.Number("0"), json.Number("-0"), json.Number("0e10"), 0.0}, `0`},
		{[]any{json.Number("-1.5"), -1.5}, `-1.5`},
		{[]any{json.Number("0.1"), 0.1}, `0.1`},
		{[]any{json.Number("1e21"), 1e21}, `1e+21`},
		{[]any{json.Number("0.0000001"), 1e-7}, `1e-7`},
		{[]any{json.Number("9007199254740992"), float64(1 << 53)}, `9007199254740992`},
		// Numbers no float64 is: their exact digits and exponent.
		{[]any{json.Number("9007199254740993"), json.Number("90071992547409930e-1")}, `#9007199254740993e0`},
		{[]any{json.Number("0.1000000000000000055511151231257827")}, `#1000000000000000055511151231257827e-34`},
		{[]any{json.Number("1e400"), json.Number("10E+399")}, `#1e400`},
		{[]any{json.Number("-1e-400")}, `#-1e-400`},
	} {
		for _, v := range tc.in {
			got, ok := aggregator.MatchValue(v)
			require.True(t, ok, "%#v", v)
			require.Equal(t, tc.want, got, "%#v", v)
		}
	}
	for _, v := range []any{nil, map[string]any{}, []any{}, json.Number("x")} {
		_, ok := aggregator.MatchValue(v)
		require.False(t, ok, "%#v", v)
	}
}

// FuzzMatchValue: two numbers get one match key exactly when they are the same value
// (jsonnum.Equal, itself checked against math/big), whatever their texts.
func FuzzMatchValue(f *testing.F) {
	for _, s := range [][2]string{{"42", "4.2e1"}, {"9007199254740993", "9007199254740992"}, {"-0", "0"},
		{"0.1", "0.1000000000000000055511151231257827"}, {"1e400", "1e401"}, {"1e21", "1000000000000000000000"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, oka := aggregator.MatchValue(json.Number(a))
		kb, okb := aggregator.MatchValue(json.Number(b))
		if !oka || !okb {
			return
		}
		require.Equal(t, jsonnum.Equal(json.Number(a), json.Number(b)), ka == kb, "%s (%s) and %s (%s)", a, ka, b, kb)
	})
}
