package workflow

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// FieldError paths look like nodes[2].data.kafkaEvent.topic or
// headers["Bad Header"] (see childPath and indexPath). Errors are reported in
// the order their locations appear in the document — the order an editor
// lists them in — which needs the paths taken apart again.

// pathSegment is one step of a path: an object key or an array index.
type pathSegment struct {
	key   string
	index int // -1 for a key
	end   int // offset in the path just after the segment: p[:end] is its prefix
}

// splitPath parses a path made by childPath and indexPath. A malformed
// remainder (a custom parser's own notation) becomes one last key, so every
// path still has a well-defined place in the order.
func splitPath(p string) []pathSegment {
	var segs []pathSegment
	i := 0
	rest := func() []pathSegment {
		return append(segs, pathSegment{key: p[i:], index: -1, end: len(p)})
	}
	for i < len(p) {
		switch {
		case p[i] == '[' && i+1 < len(p) && p[i+1] == '"':
			q, err := strconv.QuotedPrefix(p[i+1:])
			if err != nil || i+1+len(q) >= len(p) || p[i+1+len(q)] != ']' {
				return rest()
			}
			key, _ := strconv.Unquote(q)
			i += len(q) + 2
			segs = append(segs, pathSegment{key: key, index: -1, end: i})
		case p[i] == '[':
			j := strings.IndexByte(p[i:], ']')
			n, err := strconv.Atoi(p[i+1 : i+max(j, 1)])
			if j < 0 || err != nil || n < 0 {
				return rest()
			}
			i += j + 1
			segs = append(segs, pathSegment{index: n, end: i})
		default:
			start := i
			if p[i] == '.' {
				if len(segs) == 0 {
					return rest()
				}
				start++
			} else if len(segs) > 0 {
				return rest()
			}
			j := start
			for j < len(p) && p[j] != '.' && p[j] != '[' {
				j++
			}
			if j == start {
				return rest()
			}
			i = j
			segs = append(segs, pathSegment{key: p[start:j], index: -1, end: i})
		}
	}
	return segs
}

// comparePaths orders paths segment by segment: indexes numerically before
// keys, keys alphabetically, a parent before its children.
func comparePaths(a, b string) int {
	sa, sb := splitPath(a), splitPath(b)
	for i := range min(len(sa), len(sb)) {
		x, y := sa[i], sb[i]
		switch {
		case x.index >= 0 && y.index >= 0:
			if c := cmp.Compare(x.index, y.index); c != 0 {
				return c
			}
		case x.index >= 0:
			return -1
		case y.index >= 0:
			return 1
		default:
			if c := strings.Compare(x.key, y.key); c != 0 {
				return c
			}
		}
	}
	return cmp.Compare(len(sa), len(sb))
}

// sortByDocument orders errs by where their paths appear in raw (a path that
// does not exist, such as a missing field, sits at its nearest existing
// parent), then by comparePaths; errors at one path keep their order.
func sortByDocument(raw []byte, errs []FieldError) {
	want := map[string]bool{"": true}
	for _, e := range errs {
		for _, s := range splitPath(e.Path) {
			want[e.Path[:s.end]] = true
		}
	}
	offsets := valueOffsets(raw, want)
	pos := make(map[string]int64, len(errs))
	for _, e := range errs {
		p := offsets[""]
		segs := splitPath(e.Path)
		for i := len(segs) - 1; i >= 0; i-- {
			if off, ok := offsets[e.Path[:segs[i].end]]; ok {
				p = off
				break
			}
		}
		pos[e.Path] = p
	}
	slices.SortStableFunc(errs, func(a, b FieldError) int {
		if c := cmp.Compare(pos[a.Path], pos[b.Path]); c != 0 {
			return c
		}
		return comparePaths(a.Path, b.Path)
	})
}

// valueOffsets returns where in raw the value at each wanted path begins. It
// walks the tokens once, recording only wanted paths, so a large document
// costs time but no memory beyond the answer.
func valueOffsets(raw []byte, want map[string]bool) map[string]int64 {
	out := map[string]int64{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var walk func(path string) bool
	walk = func(path string) bool {
		off := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if want[path] {
			if _, seen := out[path]; !seen {
				out[path] = off
			}
		}
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				kt, err := dec.Token()
				key, ok := kt.(string)
				if err != nil || !ok || !walk(childPath(path, key)) {
					return false
				}
			}
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if !walk(indexPath(path, i)) {
					return false
				}
			}
		default:
			return true
		}
		_, err = dec.Token() // the closing delimiter
		return err == nil
	}
	walk("")
	return out
}
