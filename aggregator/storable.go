package aggregator

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
)

// PostgreSQL's numeric, which jsonb stores every number as, holds at most this many
// decimal digits before the point and this many after it (its weight and display
// scale limits). Go reads numbers beyond them without complaint (1e-20000 as 0), so
// they are checked here, before a batch is written, rather than discovered by a failed
// statement that takes its whole transaction down.
const (
	numericMaxIntDigits  = 131072
	numericMaxFracDigits = 16383
	// numericMaxExponent: PostgreSQL refuses any exponent at least this large, whatever
	// the digits.
	numericMaxExponent = 1<<30 - 1
)

// UnstorableError says why PostgreSQL cannot store a payload as jsonb. It matches
// ErrUnstorablePayload with errors.Is.
type UnstorableError struct {
	// Reason is a sentence fragment for the sender: what, and at which byte.
	Reason string
}

func (e *UnstorableError) Error() string {
	return "aggregator: payload cannot be stored: " + e.Reason
}

// Is makes errors.Is(err, ErrUnstorablePayload) hold.
func (e *UnstorableError) Is(target error) bool { return target == ErrUnstorablePayload }

// CheckStorable returns nil when PostgreSQL's jsonb accepts payload (an empty payload
// is stored as null), else an *UnstorableError naming the first thing it would refuse.
// Go's own JSON reading is more lenient than jsonb in four ways, each of which would
// otherwise fail the statement that stores the event — and with it every other event of
// its transaction, again on every retry:
//   - bytes that are not UTF-8 (Go replaces them; the database refuses the text);
//   - the escape \u0000 (jsonb has no NUL character);
//   - a surrogate escape that is not half of a pair, such as \ud83d alone (what a
//     sender cutting a string inside an emoji produces);
//   - a number outside numeric's range, such as 1e-20000 or 1e200000.
func CheckStorable(payload []byte) error {
	if len(payload) == 0 {
		return nil
	}
	if !jsonnum.Valid(payload) {
		return &UnstorableError{Reason: "not valid JSON"}
	}
	if !utf8.Valid(payload) {
		return &UnstorableError{Reason: fmt.Sprintf("not valid UTF-8 (byte %d)", firstInvalidUTF8(payload))}
	}
	// The text is valid JSON, so strings are closed and escapes complete: the scan only
	// needs to tell strings from numbers.
	for i := 0; i < len(payload); {
		switch c := payload[i]; {
		case c == '"':
			end, err := checkString(payload, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			end := i + 1
			for end < len(payload) && isNumberByte(payload[end]) {
				end++
			}
			if !numericFits(payload[i:end]) {
				return &UnstorableError{Reason: fmt.Sprintf("the number %s (byte %d) is outside PostgreSQL's numeric range", clip(payload[i:end]), i)}
			}
			i = end
		default:
			i++
		}
	}
	return nil
}

// Storable reports whether CheckStorable accepts payload.
func Storable(payload []byte) bool { return CheckStorable(payload) == nil }

// checkString checks the string starting at the quote at start and returns the index
// after its closing quote.
func checkString(p []byte, start int) (int, error) {
	i := start + 1
	for p[i] != '"' {
		if p[i] != '\\' {
			i++
			continue
		}
		if p[i+1] != 'u' {
			i += 2
			continue
		}
		r := hex4(p[i+2 : i+6])
		switch {
		case r == 0:
			return 0, &UnstorableError{Reason: fmt.Sprintf(`\u0000 (byte %d): PostgreSQL cannot store the NUL character`, i)}
		case r >= 0xD800 && r <= 0xDBFF:
			if i+11 >= len(p) || p[i+6] != '\\' || p[i+7] != 'u' {
				return 0, unpaired(p, i)
			}
			if low := hex4(p[i+8 : i+12]); low < 0xDC00 || low > 0xDFFF {
				return 0, unpaired(p, i)
			}
			i += 12
			continue
		case r >= 0xDC00 && r <= 0xDFFF:
			return 0, unpaired(p, i)
		}
		i += 6
	}
	return i + 1, nil
}

func unpaired(p []byte, i int) error {
	return &UnstorableError{Reason: fmt.Sprintf(`the escape %s (byte %d) is half of a surrogate pair without the other half`, p[i:i+6], i)}
}

// hex4 reads four hex digits (valid JSON guarantees them).
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// numericFits reports whether PostgreSQL's numeric holds the JSON number tok: its scale
// (digits after the point, as written and moved by the exponent) at most
// numericMaxFracDigits, and, unless it is zero, its digits before the point at most
// numericMaxIntDigits.
func numericFits(tok []byte) bool {
	s := string(tok)
	if s[0] == '-' {
		s = s[1:]
	}
	mantissa, expText := s, ""
	for j := range len(s) {
		if s[j] == 'e' || s[j] == 'E' {
			mantissa, expText = s[:j], s[j+1:]
			break
		}
	}
	intPart, frac := mantissa, ""
	for j := range len(mantissa) {
		if mantissa[j] == '.' {
			intPart, frac = mantissa[:j], mantissa[j+1:]
			break
		}
	}
	exp := 0
	if expText != "" {
		e, err := strconv.ParseInt(expText, 10, 64)
		if err != nil || e >= numericMaxExponent || e <= -numericMaxExponent {
			return false
		}
		exp = int(e)
	}
	if len(frac)-exp > numericMaxFracDigits {
		return false
	}
	digits := intPart + frac
	leading := 0
	for leading < len(digits) && digits[leading] == '0' {
		leading++
	}
	if leading == len(digits) {
		return true // zero: no digits before the point
	}
	return len(intPart)+exp-leading <= numericMaxIntDigits
}

// clip shortens a number for an error message.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:37]) + "..."
	}
	return string(b)
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}
