package jsonnum

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// parseCases are texts where a hand-written JSON reader most easily parts from
// encoding/json: escapes, surrogates, bytes that are not UTF-8, control characters, the
// number grammar's edges, literals, nesting depth, duplicate keys and white space.
var parseCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `true`, `false`, `null`, ` {"a" : [ 1 , 2 ] } `,
	`{"id":"0b0f7a4e-3f9c-4d2a-9a8e-1c2b3d4e5f60","n":9007199254740993,"x":1e400}`,
	`"a\"b\\c\/d\be\ff\ng\rh\ti"`, `"\u00e9\u4e2d"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\ude00\ud83d"`,
	`"\u0000"`, `"\uD83D\uDE00"`, `"\u12"`, `"\u12g4"`, `"\x"`, `"\`, `"abc`, "\"a\x01b\"", "\"a\x7fb\"",
	"\"\xff\"", "\"a\xc3\"", "\"\xed\xa0\x80\"", "\"é中😀\"", "\"\xef\xbf\xbd\"",
	`01`, `-`, `-a`, `1.`, `.5`, `1e`, `1e+`, `1E5`, `-0.0e-0`, `1.5E+10`, `2.`, `+1`, `0x10`, `1_000`,
	`tru`, `nulll`, `True`, `NaN`, `Infinity`,
	`{"a":1,"a":2}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`, `{"a"}`, `{"a":}`, `{1:2}`, `{"a" 1}`, `[1 2]`,
	`{} {}`, `1 2`, `[1]x`, ``, ` `, "\t\n\r [1]\r\n", "\f1", "\v1", "\ufeff1", "[1]\x00",
	`{"a":{"b":{"c":[{"d":null}]}}}`, `[[[[[]]]]]`, `[{}]`, `{"":""}`,
}

// TestParseAsEncodingJSON holds the fast reader to encoding/json: it reads exactly the
// texts encoding/json reads, to the same values, and for the others Decode returns
// encoding/json's error. Valid agrees with json.Valid throughout.
func TestParseAsEncodingJSON(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObj := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	cases := append(parseCases, deep(maxDepth), deep(maxDepth+1), deepObj(maxDepth), deepObj(maxDepth+1))
	for _, c := range cases {
		sameAsEncodingJSON(t, []byte(c))
	}
}

// sameAsEncodingJSON checks raw both ways.
func sameAsEncodingJSON(t *testing.T, raw []byte) {
	t.Helper()
	require.Equal(t, json.Valid(raw), Valid(raw), "Valid(%q)", raw)
	want, wantErr := decodeStd(raw)
	got, ok := parseValue(raw, true)
	if wantErr != nil {
		require.False(t, ok, "the fast reader read %q, which encoding/json refuses", raw)
		_, err := Decode(raw)
		require.EqualError(t, err, wantErr.Error(), "%q", raw)
		return
	}
	require.True(t, ok, "the fast reader refused %q, which encoding/json reads", raw)
	require.Equal(t, want, got, "%q", raw)
}

func FuzzParse(f *testing.F) {
	for _, c := range parseCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		sameAsEncodingJSON(t, raw)
	})
}

func BenchmarkDecodeRecord(b *testing.B) {
	raw := []byte(`{"execution_id":"0b0f7a4e-3f9c-4d2a-9a8e-1c2b3d4e5f60","correlation_id":"1c2b3d4e-5f60-4d2a-9a8e-0b0f7a4e3f9c","status":"shipped","amount":129.95,"items":[{"sku":"A-1","qty":2}]}`)
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeStd(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("valid", func(b *testing.B) {
		for b.Loop() {
			Valid(raw)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for b.Loop() {
			json.Valid(raw)
		}
	})
}
