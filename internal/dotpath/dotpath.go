// Package dotpath follows dot paths such as "data.correlation_id" or
// "items[0].sku" through decoded JSON values (map[string]any, []any).
//
// It owns path syntax and lookup only. It does not know where a path comes
// from (Kafka field extraction, event filters, outputMapping, templates) nor
// what a missing value means to the caller; callers decide how to report it.
package dotpath

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Split parses path into its segments: "a.b[0].c" and "a.b.0.c" both yield
// ["a", "b", "0", "c"]. The empty path yields no segments and no error.
//
// Syntax errors are reported rather than tolerated so that a definition with
// a typo such as "data..id" fails at validation time instead of silently
// never matching at run time.
func Split(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	var segs []string
	i := 0
	// expectSegment is true when the next token must be a name or a bracket
	// (at the start and right after a '.').
	expectSegment := true
	for i < len(path) {
		switch c := path[i]; c {
		case '.':
			if expectSegment {
				return nil, fmt.Errorf("empty segment at offset %d", i)
			}
			expectSegment = true
			i++
			if i == len(path) {
				return nil, fmt.Errorf("empty segment at offset %d", i)
			}
		case '[':
			if expectSegment && i > 0 {
				return nil, fmt.Errorf("expected a name after '.' at offset %d", i)
			}
			end := strings.IndexByte(path[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("unbalanced '[' at offset %d", i)
			}
			idx := path[i+1 : i+1+end]
			if idx == "" {
				return nil, fmt.Errorf("empty index at offset %d", i)
			}
			if !isIndex(idx) {
				return nil, fmt.Errorf("index %q at offset %d must be a non-negative integer", idx, i)
			}
			segs = append(segs, idx)
			i += end + 2
			expectSegment = false
			if i < len(path) && path[i] != '.' && path[i] != '[' {
				return nil, fmt.Errorf("expected '.' or '[' at offset %d", i)
			}
		case ']':
			return nil, fmt.Errorf("unbalanced ']' at offset %d", i)
		default:
			if !expectSegment {
				// Unreachable given the loop structure, kept as a guard.
				return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			start := i
			for i < len(path) && path[i] != '.' && path[i] != '[' && path[i] != ']' {
				i++
			}
			segs = append(segs, path[start:i])
			expectSegment = false
		}
	}
	return segs, nil
}

// isIndex reports whether s is a plain non-negative decimal integer.
func isIndex(s string) bool {
	if s == "" || len(s) > 18 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ErrSyntax is wrapped by errors returned from Split (via Validate).
var ErrSyntax = errors.New("invalid dot path")

// Validate is Split for callers that only need the syntax check; the error
// wraps ErrSyntax.
func Validate(path string) error {
	if _, err := Split(path); err != nil {
		return fmt.Errorf("%w %q: %v", ErrSyntax, path, err)
	}
	return nil
}

// Get follows path through v. The empty path returns v itself. It reports
// false when the path is malformed or any segment is missing.
//
// A path without brackets, the common form, is walked where it lies rather than
// split first: some callers follow the same path once for every Kafka record
// they consume, and splitting it allocated its segments each time.
func Get(v any, path string) (any, bool) {
	if path != "" && !strings.ContainsAny(path, "[]") {
		for {
			seg, rest, more := strings.Cut(path, ".")
			if seg == "" {
				return nil, false // an empty segment, which Split refuses
			}
			next, ok := Step(v, seg)
			if !ok {
				return nil, false
			}
			if !more {
				return next, true
			}
			v, path = next, rest
		}
	}
	segs, err := Split(path)
	if err != nil {
		return nil, false
	}
	return GetSegments(v, segs)
}

// GetSegments is Get for an already split path.
func GetSegments(v any, segs []string) (any, bool) {
	out, n := Lookup(v, segs)
	return out, n == len(segs)
}

// Lookup follows segs through v and returns the deepest value reached and
// how many segments were resolved. The lookup succeeded when matched equals
// len(segs); otherwise value is the value at segs[:matched], which lets
// callers say precisely where a path broke ("customer has no field email").
func Lookup(v any, segs []string) (value any, matched int) {
	cur := v
	for i, seg := range segs {
		next, ok := Step(cur, seg)
		if !ok {
			return cur, i
		}
		cur = next
	}
	return cur, len(segs)
}

// Step resolves one segment against v: a key of a map or an index of a
// slice. Maps and slices other than the decoded-JSON types are handled via
// reflection so that e.g. map[string]string headers are navigable too.
func Step(v any, seg string) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		out, ok := x[seg]
		return out, ok
	case []any:
		i, ok := index(seg, len(x))
		if !ok {
			return nil, false
		}
		return x[i], true
	case map[string]string:
		out, ok := x[seg]
		return out, ok
	case nil:
		return nil, false
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, false
		}
		e := rv.MapIndex(reflect.ValueOf(seg).Convert(rv.Type().Key()))
		if !e.IsValid() {
			return nil, false
		}
		return e.Interface(), true
	case reflect.Slice, reflect.Array:
		i, ok := index(seg, rv.Len())
		if !ok {
			return nil, false
		}
		return rv.Index(i).Interface(), true
	}
	return nil, false
}

func index(seg string, n int) (int, bool) {
	if !isIndex(seg) {
		return 0, false
	}
	i, err := strconv.Atoi(seg)
	if err != nil || i >= n {
		return 0, false
	}
	return i, true
}
