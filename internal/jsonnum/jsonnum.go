// Package jsonnum reads JSON values with their numbers exact. encoding/json decodes a
// number into a float64 by default, which rounds every integer beyond 2^53: an order id
// of 9007199254740993 becomes 9007199254740992, is sent on in API calls and node outputs
// as the wrong id, and compares equal to its neighbour in filters and payload matches, so
// one execution's event could be taken for another's. A number outside float64's range,
// such as 1e400, does not decode at all, although it is valid JSON and PostgreSQL stores
// it.
//
// Decode keeps every number as its json.Number text, and Of reads a number's exact
// decimal value, so that Equal and canonical forms compare values rather than texts: 42,
// 42.0 and 4.2e1 are one number, 2^53 and 2^53+1 are two. It owns no I/O and no policy:
// where numbers are compared or keyed is the callers' business.
package jsonnum

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Decode reads one JSON value with its numbers as json.Number. Like json.Unmarshal, it
// refuses anything after the value but white space. Its values are encoding/json's; a
// text that is not JSON gets encoding/json's error.
func Decode(raw []byte) (any, error) {
	if v, ok := parseValue(raw, true); ok {
		return v, nil
	}
	return decodeStd(raw)
}

// decodeStd is Decode by encoding/json: what parseValue is checked against, and where a
// text parseValue refuses gets its error.
func decodeStd(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid character after top-level value")
	}
	return v, nil
}

// Number is a number's exact decimal value: digits × 10^exp, digits without leading or
// trailing zeros (empty for zero, which has no sign).
type Number struct {
	neg    bool
	digits string
	exp    *big.Int // nil for zero
}

// Of reads the number v holds: a json.Number (in JSON's grammar), a float64 (its
// shortest decimal form, the value its literal meant) or a Go integer. ok is false for
// anything else, and for NaN and the infinities.
func Of(v any) (n Number, ok bool) {
	switch x := v.(type) {
	case json.Number:
		return parse(string(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Number{}, false
		}
		return parse(strconv.FormatFloat(x, 'g', -1, 64))
	case float32:
		return Of(float64(x))
	case int:
		return parse(strconv.FormatInt(int64(x), 10))
	case int64:
		return parse(strconv.FormatInt(x, 10))
	case int32:
		return parse(strconv.FormatInt(int64(x), 10))
	case uint64:
		return parse(strconv.FormatUint(x, 10))
	case uint:
		return parse(strconv.FormatUint(uint64(x), 10))
	}
	return Number{}, false
}

// parse reads a number in JSON's grammar: -?digits(.digits)?([eE][+-]?digits)?.
func parse(s string) (Number, bool) {
	var n Number
	rest := s
	if strings.HasPrefix(rest, "-") {
		n.neg, rest = true, rest[1:]
	}
	intPart, rest := leadingDigits(rest)
	if intPart == "" {
		return Number{}, false
	}
	var frac string
	if strings.HasPrefix(rest, ".") {
		if frac, rest = leadingDigits(rest[1:]); frac == "" {
			return Number{}, false
		}
	}
	exp := new(big.Int)
	if rest != "" {
		if rest[0] != 'e' && rest[0] != 'E' {
			return Number{}, false
		}
		rest = rest[1:]
		sign := ""
		if rest != "" && (rest[0] == '+' || rest[0] == '-') {
			sign, rest = rest[:1], rest[1:]
		}
		digits, tail := leadingDigits(rest)
		if digits == "" || tail != "" {
			return Number{}, false
		}
		exp.SetString(sign+digits, 10)
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	trimmed := strings.TrimRight(digits, "0")
	if trimmed == "" {
		return Number{}, true // zero, whatever its sign and exponent
	}
	exp.Sub(exp, big.NewInt(int64(len(frac))))
	exp.Add(exp, big.NewInt(int64(len(digits)-len(trimmed))))
	n.digits, n.exp = trimmed, exp
	return n, true
}

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

// IsZero reports whether n is zero.
func (n Number) IsZero() bool { return n.digits == "" }

// String is n's canonical form, equal for equal values and only for them: "0", or the
// digits and the exponent, as in "-15e-1" for -1.5.
func (n Number) String() string {
	if n.IsZero() {
		return "0"
	}
	sign := ""
	if n.neg {
		sign = "-"
	}
	return sign + n.digits + "e" + n.exp.String()
}

// Equal reports whether n and m are the same value.
func (n Number) Equal(m Number) bool { return n.String() == m.String() }

// Float64 returns the float64 nearest n, and whether that float64 is n: whether n is
// written as that float64's shortest decimal form would be (0.1 is, 2^53+1 is not, nor is
// 1e400, which is beyond float64's range).
func (n Number) Float64() (float64, bool) {
	if n.IsZero() {
		return 0, true
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || math.IsInf(f, 0) {
		return f, false
	}
	back, ok := Of(f)
	return f, ok && back.Equal(n)
}

// Equal compares two decoded JSON scalars: numbers by exact value (whatever their Go
// type), strings and booleans as such, null only with null. Objects and arrays are never
// equal to anything.
func Equal(a, b any) bool {
	if na, ok := Of(a); ok {
		nb, ok := Of(b)
		return ok && na.Equal(nb)
	}
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}

// DeepEqual compares two decoded JSON values: objects by their members, arrays element
// by element, scalars as Equal does. It is how JSON that PostgreSQL's jsonb has
// rewritten (1e2 as 100, -0 as 0) is recognised as the JSON that was sent.
func DeepEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !DeepEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !DeepEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return Equal(a, b)
}
