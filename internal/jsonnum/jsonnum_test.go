package jsonnum

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecode(t *testing.T) {
	t.Parallel()

	v, err := Decode([]byte(`{"id": 9007199254740993, "big": 1e400, "list": [1.50, -0]}`))
	require.NoError(t, err)
	m := v.(map[string]any)
	require.Equal(t, json.Number("9007199254740993"), m["id"])
	require.Equal(t, json.Number("1e400"), m["big"])
	require.Equal(t, []any{json.Number("1.50"), json.Number("-0")}, m["list"])

	// Re-encoding gives back the numbers as they were written.
	out, err := json.Marshal(v)
	require.NoError(t, err)
	require.Equal(t, `{"big":1e400,"id":9007199254740993,"list":[1.50,-0]}`, string(out))

	for _, bad := range []string{``, `{`, `{} {}`, `1 2`, `nul`} {
		_, err := Decode([]byte(bad))
		require.Error(t, err, bad)
	}
	_, err = Decode([]byte(" [1] \n"))
	require.NoError(t, err)
}

func TestNumberCanonical(t *testing.T) {
	t.Parallel()

	same := [][]any{
		{json.Number("42"), json.Number("42.0"), json.Number("4.2e1"), json.Number("420E-1"), json.Number("0.42e+2"), 42, int64(42), 42.0},
		{json.Number("0"), json.Number("-0"), json.Number("0.000"), json.Number("0e7"), 0, 0.0, math.Copysign(0, -1)},
		{json.Number("-1.5"), json.Number("-15e-1"), -1.5},
		{json.Number("0.1"), 0.1},
		{json.Number("9007199254740993"), json.Number("9007199254740993.000")},
		{json.Number("1e400"), json.Number("10e399")},
		{json.Number("18446744073709551615"), uint64(math.MaxUint64)},
	}
	var canon []string
	for _, group := range same {
		first, ok := Of(group[0])
		require.True(t, ok, "%v", group[0])
		for _, v := range group[1:] {
			n, ok := Of(v)
			require.True(t, ok, "%v", v)
			require.Equal(t, first.String(), n.String(), "%v (%T) and %v", v, v, group[0])
			require.True(t, Equal(group[0], v))
		}
		canon = append(canon, first.String())
	}
	require.Equal(t, []string{"42e0", "0", "-15e-1", "1e-1", "9007199254740993e0", "1e400", "18446744073709551615e0"}, canon)

	different := [][2]any{
		{json.Number("9007199254740993"), json.Number("9007199254740992")},
		{json.Number("9007199254740993"), float64(9007199254740992)},
		{json.Number("0.1"), json.Number("0.1000000000000000055511151231257827")},
		{json.Number("1e400"), json.Number("1e401")},
		{json.Number("1e-400"), json.Number("0")},
		{json.Number("1"), json.Number("-1")},
		{json.Number("42"), "42"},
		{true, "true"},
		{nil, json.Number("0")},
	}
	for _, pair := range different {
		require.False(t, Equal(pair[0], pair[1]), "%v and %v", pair[0], pair[1])
		require.False(t, Equal(pair[1], pair[0]), "%v and %v", pair[1], pair[0])
	}

	require.True(t, Equal("a", "a"))
	require.True(t, Equal(false, false))
	require.True(t, Equal(nil, nil))
	require.False(t, Equal(map[string]any{}, map[string]any{}))
	require.False(t, Equal([]any{}, []any{}))

	for _, bad := range []any{json.Number(""), json.Number("-"), json.Number("1."), json.Number(".5"), json.Number("1e"),
		json.Number("1e+"), json.Number("0x10"), json.Number("1 "), math.NaN(), math.Inf(1), "1", nil} {
		_, ok := Of(bad)
		require.False(t, ok, "%#v", bad)
	}
}

func TestNumberFloat64(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in    json.Number
		want  float64
		exact bool
	}{
		{"42", 42, true},
		{"4.2e1", 42, true},
		{"0.1", 0.1, true},
		{"-0", 0, true},
		{"9007199254740992", 9007199254740992, true},
		{"9007199254740993", 9007199254740992, false},
		{"0.1000000000000000055511151231257827", 0.1, false},
		{"1e400", math.Inf(1), false},
		{"1e-400", 0, false},
	} {
		n, ok := Of(tc.in)
		require.True(t, ok, tc.in)
		f, exact := n.Float64()
		require.Equal(t, tc.want, f, tc.in)
		require.Equal(t, tc.exact, exact, tc.in)
	}
}

// FuzzEqual checks Equal and the canonical form against math/big's exact rationals, for
// numbers whose exponent is small enough for big.Rat to hold: two JSON numbers are equal
// exactly when their values are, and Float64 says exact exactly when the float64 is the
// written value's shortest form.
func FuzzEqual(f *testing.F) {
	for _, s := range [][2]string{{"42", "4.2e1"}, {"9007199254740993", "9007199254740992"}, {"-0", "0e5"},
		{"0.1", "0.1000000000000000055511151231257827"}, {"1.50", "15E-1"}, {"123456789012345678901234567890", "1.2345678901234567890123456789e29"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, oka := rat(a)
		rb, okb := rat(b)
		if !oka || !okb {
			return
		}
		na, ok := Of(json.Number(a))
		require.True(t, ok, a)
		nb, ok := Of(json.Number(b))
		require.True(t, ok, b)
		require.Equal(t, ra.Cmp(rb) == 0, na.Equal(nb), "%s and %s", a, b)
		require.Equal(t, ra.Cmp(rb) == 0, Equal(json.Number(a), json.Number(b)), "%s and %s", a, b)
		require.Equal(t, na.Equal(nb), na.String() == nb.String())
		if f, exact := na.Float64(); exact {
			fr, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
			require.True(t, ok)
			require.Zero(t, fr.Cmp(ra), "%s is said to be the float64 %v", a, f)
		}
	})
}

// rat reads s as big.Rat when it is a JSON number (json.Valid, no object or string) with
// a short exponent, else false.
func rat(s string) (*big.Rat, bool) {
	if s == "" || !json.Valid([]byte(s)) || strings.ContainsAny(s, " \t\r\n") || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		if e, err := strconv.Atoi(s[i+1:]); err != nil || e > 400 || e < -400 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// BenchmarkDecode prices exact numbers against encoding/json's float64 decoding of the
// same record, in one run: go test ./internal/jsonnum -bench Decode -benchmem.
func BenchmarkDecode(b *testing.B) {
	record := []byte(`{"execution_id":"01a2026e-a3a9-7f38-90c7-dc02931e4b62","correlation_id":"01a2026e-a3b0-73e3-b058-038ce0d4056e",` +
		`"type":"payment.settled","data":{"order_id":9007199254740993,"amount":42.5,"currency":"EUR","lines":[1,2,3]}}`)
	b.Run("float64", func(b *testing.B) {
		for b.Loop() {
			var v any
			if err := json.Unmarshal(record, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("jsonnum", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode(record); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDeepEqual(t *testing.T) {
	t.Parallel()

	decode := func(s string) any {
		v, err := Decode([]byte(s))
		require.NoError(t, err, s)
		return v
	}
	for _, pair := range [][2]string{
		{`{"a": 1e2, "b": [-0, 1.50], "c": {"d": null, "e": "x"}}`, `{"c": {"e": "x", "d": null}, "b": [0, 1.5], "a": 100}`},
		{`[]`, `[]`},
		{`{}`, `{}`},
	} {
		require.True(t, DeepEqual(decode(pair[0]), decode(pair[1])), "%s and %s", pair[0], pair[1])
	}
	for _, pair := range [][2]string{
		{`{"id": 9007199254740993}`, `{"id": 9007199254740992}`},
		{`{"a": 1}`, `{"a": 1, "b": 1}`},
		{`{"a": 1}`, `{"b": 1}`},
		{`[1, 2]`, `[2, 1]`},
		{`[1]`, `[1, 1]`},
		{`{"a": []}`, `{"a": {}}`},
		{`{"a": "1"}`, `{"a": 1}`},
	} {
		require.False(t, DeepEqual(decode(pair[0]), decode(pair[1])), "%s and %s", pair[0], pair[1])
		require.False(t, DeepEqual(decode(pair[1]), decode(pair[0])), "%s and %s", pair[1], pair[0])
	}
}
