package jsonnum

import (
	"encoding/json"
	"unicode/utf8"
)

// maxDepth is how deeply arrays and objects may nest: encoding/json's limit, past which
// it refuses a value rather than recurse further.
const maxDepth = 10000

// parser reads one JSON value from its text in a single pass, to what encoding/json
// decodes into an any with UseNumber: map[string]any, []any, string, json.Number, bool
// and nil. It is the fast path of Decode and Valid: every Kafka record's value is read,
// and with encoding/json's reflection, buffering and byte-at-a-time scanner, reading and
// checking it took about a fifth of a replica's CPU for applying the record (a CPU
// profile of rendezvous-bench --only kafka). It does not say why a text is not JSON: on
// a failure Decode asks encoding/json, whose error messages are the ones the dead letters
// and logs give.
type parser struct {
	b []byte
	// text is b as one string, when building: the strings and numbers read are slices of
	// it rather than copies each, so a record's value costs one copy of its text however
	// many keys and values it holds. What is read keeps the whole text alive with it.
	text  string
	i     int
	depth int
	build bool // false: validate only, allocating nothing
}

func (p *parser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value reads the value at p.i, after any white space.
func (p *parser) value() (any, bool) {
	p.skipSpace()
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, false
}

func (p *parser) literal(word string) bool {
	if len(p.b)-p.i < len(word) || string(p.b[p.i:p.i+len(word)]) != word {
		return false
	}
	p.i += len(word)
	return true
}

func (p *parser) object() (any, bool) {
	empty, ok := p.open('}')
	if !ok {
		return nil, false
	}
	var m map[string]any
	if p.build {
		m = map[string]any{}
	}
	for more := !empty; more; {
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, false
		}
		k, ok := p.strText()
		if !ok {
			return nil, false
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, false
		}
		p.i++
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		if p.build {
			m[k] = v // the last of duplicate keys wins, as in encoding/json
		}
		if more, ok = p.next('}'); !ok {
			return nil, false
		}
	}
	return m, true
}

func (p *parser) array() (any, bool) {
	empty, ok := p.open(']')
	if !ok {
		return nil, false
	}
	var a []any
	if p.build {
		a = []any{}
	}
	for more := !empty; more; {
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		if p.build {
			a = append(a, v)
		}
		if more, ok = p.next(']'); !ok {
			return nil, false
		}
	}
	return a, true
}

// open enters the array or object whose opening bracket is at p.i, and reports whether
// closer closes it at once.
func (p *parser) open(closer byte) (empty, ok bool) {
	p.depth++
	if p.depth > maxDepth {
		return false, false
	}
	p.i++
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == closer {
		p.i++
		p.depth--
		return true, true
	}
	return false, true
}

// next reads what follows an element: a comma (more follow) or closer (the array or
// object ends).
func (p *parser) next(closer byte) (more, ok bool) {
	p.skipSpace()
	if p.i >= len(p.b) {
		return false, false
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return true, true
	case closer:
		p.i++
		p.depth--
		return false, true
	}
	return false, false
}

// str reads the string whose opening quote is at p.i. A string of plain characters (no
// escape, valid UTF-8) is its bytes; any other is unquoted by encoding/json, so that
// escapes, surrogate pairs and invalid bytes (replaced by U+FFFD) read exactly as there.
func (p *parser) str() (any, bool) {
	s, ok := p.strText()
	if !ok || !p.build {
		return nil, ok
	}
	return s, true
}

// strText is str's string itself: an object's key is not boxed.
func (p *parser) strText() (string, bool) {
	start := p.i
	p.i++
	plain := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			if !p.build {
				return "", true
			}
			if plain {
				return p.text[start+1 : p.i-1], true
			}
			var s string
			if err := json.Unmarshal(p.b[start:p.i], &s); err != nil {
				return "", false
			}
			return s, true
		case c == '\\':
			plain = false
			p.i++
			if p.i >= len(p.b) {
				return "", false
			}
			switch p.b[p.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i++
			case 'u':
				if len(p.b)-p.i < 5 {
					return "", false
				}
				for _, h := range p.b[p.i+1 : p.i+5] {
					if !isHex(h) {
						return "", false
					}
				}
				p.i += 5
			default:
				return "", false
			}
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				plain = false // encoding/json reads the byte as U+FFFD
			}
			p.i += size
		}
	}
	return "", false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number reads a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() (any, bool) {
	start := p.i
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.b) {
		return nil, false
	}
	switch c := p.b[p.i]; {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		p.digits()
	default:
		return nil, false
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, false
		}
	}
	if !p.build {
		return nil, true
	}
	return json.Number(p.text[start:p.i]), true
}

// digits skips a run of decimal digits and says how long it was.
func (p *parser) digits() int {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i - start
}

// parseValue reads raw as one JSON value followed by nothing but white space.
func parseValue(raw []byte, build bool) (any, bool) {
	p := parser{b: raw, build: build}
	if build {
		p.text = string(raw)
	}
	v, ok := p.value()
	if !ok {
		return nil, false
	}
	p.skipSpace()
	return v, p.i == len(p.b)
}

// Valid reports whether raw is one JSON value, as json.Valid does, without allocating.
func Valid(raw []byte) bool {
	_, ok := parseValue(raw, false)
	return ok
}
