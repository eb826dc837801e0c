package aggregator_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// storableCases are payloads at the edges of what jsonb accepts, with the verdict
// expected of CheckStorable (which TestCheckStorableAgreesWithPostgreSQL also asks
// PostgreSQL for).
var storableCases = []struct {
	payload string
	ok      bool
}{
	{``, true},
	{`{"a":"b"}`, true},
	{`{"a":"\\u0000"}`, true}, // an escaped backslash, then text
	{`{"a":"x\u0000y"}`, false},
	{`{"\u0000":1}`, false},
	{`["ok",{"deep":["\u0000"]}]`, false},
	{`{"a":`, false},
	{"{\"a\":\"\xff\"}", false},        // not UTF-8
	{"{\"a\":\"caf\xc3\"}", false},     // a cut multi-byte character
	{`{"a":"café ✓ 😀"}`, true},         // UTF-8 as bytes
	{`{"a":"\ud83d\ude00"}`, true},     // a pair
	{`{"a":"\ud83d"}`, false},          // a high half alone (a string cut inside an emoji)
	{`{"a":"\ude00"}`, false},          // a low half alone
	{`{"a":"\ude00\ud83d"}`, false},    // the halves swapped
	{`{"a":"\ud83d\u0041"}`, false},    // a high half, then no low half
	{`{"a":"\ud83dx"}`, false},         //
	{`{"\ud83d":1}`, false},            // in a key
	{`{"a":"\\ud83d"}`, true},          // an escaped backslash, then text
	{`{"a":"\u00e9\u2713"}`, true},     //
	{`1e-16383`, true},                 // numeric's smallest scale
	{`1e-16384`, false},                //
	{`1.5e-16383`, false},              //
	{`0e-16384`, false},                // zero, but the scale is still too large
	{`0e131073`, true},                 // zero has no digits before the point
	{`1e131071`, true},                 // numeric's most digits before the point
	{`9.9e131071`, true},               //
	{`0.001e131074`, true},             //
	{`1e131072`, false},                //
	{`-1e131072`, false},               //
	{`[1, 2.5, -0, 1E+5, 3e-2]`, true}, //
	{`{"n":1e99999999999}`, false},     // an exponent PostgreSQL refuses outright
	{`{"n":0e-99999999999}`, false},    //
	{`{"n":1e400}`, true},              // beyond float64, within numeric
	{`{"n":"1e-20000"}`, true},         // a string, not a number
	{`[true,false,null,"x"]`, true},    //
	{`"` + strings.Repeat("ab", 5000) + `"`, true},
}

func TestCheckStorable(t *testing.T) {
	t.Parallel()
	for _, tc := range storableCases {
		err := aggregator.CheckStorable([]byte(tc.payload))
		require.Equal(t, tc.ok, err == nil, "%q: %v", tc.payload, err)
		if err != nil {
			require.ErrorIs(t, err, aggregator.ErrUnstorablePayload)
			var ue *aggregator.UnstorableError
			require.True(t, errors.As(err, &ue))
			require.NotEmpty(t, ue.Reason)
		}
	}
	err := aggregator.CheckStorable([]byte(`{"a":"\ud83d"}`))
	require.ErrorContains(t, err, `\ud83d (byte 6)`)
	err = aggregator.CheckStorable([]byte(`[1e-20000]`))
	require.ErrorContains(t, err, "1e-20000 (byte 1) is outside PostgreSQL's numeric range")
}

// TestCheckStorableAgreesWithPostgreSQL asks PostgreSQL itself: for the edge cases and
// for a few thousand generated payloads, CheckStorable accepts exactly what jsonb
// accepts. A payload it accepted wrongly would fail the statement that stores it, and
// with it the transaction of every event batched alongside.
func TestCheckStorableAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	payloads := make([]string, 0, len(storableCases)+3000)
	for _, tc := range storableCases {
		if tc.payload != "" {
			payloads = append(payloads, tc.payload)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		payloads = append(payloads, randomJSON(r))
	}
	accepted, refused := 0, 0
	for _, p := range payloads {
		_, pgErr := pool.Exec(t.Context(), `SELECT $1::text::jsonb`, p)
		err := aggregator.CheckStorable([]byte(p))
		if pgErr == nil {
			accepted++
			require.NoError(t, err, "PostgreSQL accepts %q", p)
		} else {
			refused++
			require.Error(t, err, "PostgreSQL refuses %q: %v", p, pgErr)
		}
	}
	t.Logf("%d payloads accepted, %d refused, alike", accepted, refused)
	require.Greater(t, refused, 500, "the generator must reach the edges")
	require.Greater(t, accepted, 500)
}

// randomJSON is valid JSON text with, often, one of the things jsonb refuses: numbers
// near numeric's limits, escapes of any code point, bytes that are not UTF-8.
func randomJSON(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(`{"k":[`)
	for i := range 1 + r.IntN(3) {
		if i > 0 {
			b.WriteByte(',')
		}
		switch r.IntN(3) {
		case 0:
			b.WriteString(randomNumber(r))
		case 1:
			b.WriteByte('"')
			for range 1 + r.IntN(3) {
				switch r.IntN(4) {
				case 0:
					b.WriteString("x")
				case 1:
					fmt.Fprintf(&b, `\u%04x`, r.IntN(0x10000))
				case 2:
					// Around and inside the surrogate range, where pairs are decided.
					fmt.Fprintf(&b, `\u%04x`, 0xD700+r.IntN(0x1A00))
				case 3:
					if r.IntN(10) == 0 {
						b.WriteByte(byte(0x80 + r.IntN(0x80))) // a stray continuation or lead byte
					} else {
						b.WriteString("é")
					}
				}
			}
			b.WriteByte('"')
		case 2:
			b.WriteString(`"\\u0000"`)
		}
	}
	b.WriteString(`]}`)
	return b.String()
}

func randomNumber(r *rand.Rand) string {
	var b strings.Builder
	if r.IntN(2) == 0 {
		b.WriteByte('-')
	}
	zeros := []int{0, 0, 1, 3}[r.IntN(4)]
	if zeros > 0 {
		b.WriteString("0")
	} else {
		b.WriteString(fmt.Sprint(1 + r.IntN(99)))
	}
	if r.IntN(2) == 0 {
		b.WriteByte('.')
		b.WriteString(strings.Repeat("0", zeros))
		b.WriteString(fmt.Sprint(r.IntN(1000)))
	}
	if r.IntN(4) > 0 {
		// Exponents that straddle both limits.
		limits := []int{-16383, 131072, 131071, -16380, 131070, 0}
		exp := limits[r.IntN(len(limits))] + r.IntN(9) - 4
		fmt.Fprintf(&b, "e%+d", exp)
	}
	return b.String()
}
