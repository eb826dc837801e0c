package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/template"
)

// Helpers on raw JSON (the definition envelope keeps node data raw so that
// parsers receive exactly what the author wrote).

func firstByte(r json.RawMessage) byte {
	r = bytes.TrimLeft(r, " \t\r\n")
	if len(r) == 0 {
		return 0
	}
	return r[0]
}

func isNull(r json.RawMessage) bool {
	return len(bytes.TrimSpace(r)) == 0 || bytes.Equal(bytes.TrimSpace(r), []byte("null"))
}

func asObject(r json.RawMessage) (map[string]json.RawMessage, bool) {
	if firstByte(r) != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r, &m); err != nil {
		return nil, false
	}
	return m, true
}

func asArray(r json.RawMessage) ([]json.RawMessage, bool) {
	if firstByte(r) != '[' {
		return nil, false
	}
	var a []json.RawMessage
	if err := json.Unmarshal(r, &a); err != nil {
		return nil, false
	}
	return a, true
}

func asString(r json.RawMessage) (string, bool) {
	if firstByte(r) != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		return "", false
	}
	return s, true
}

// decodeAny decodes with UseNumber so numbers keep their exact text.
func decodeAny(r json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(r))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// childPath appends key to a JSON path: "a.key", or a["odd key"] when the
// key would make the path ambiguous.
func childPath(path, key string) string {
	if !simpleKey.MatchString(key) {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

// object reads fields of decoded node data, reporting type errors with
// their JSON paths. Absent fields and explicit nulls both take defaults.
type object struct {
	path string
	m    map[string]any
	errs *errList
}

// parseData decodes node data (nil meaning {}) into an object reader.
func parseData(data json.RawMessage, path string, errs *errList) (*object, bool) {
	if isNull(data) {
		return &object{path: path, m: map[string]any{}, errs: errs}, true
	}
	v, err := decodeAny(data)
	if err != nil {
		errs.add(path, "malformed JSON: %v", err)
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		errs.add(path, "must be an object")
		return nil, false
	}
	return &object{path: path, m: m, errs: errs}, true
}

func (o *object) p(key string) string { return childPath(o.path, key) }

// get returns the value of key; null counts as absent.
func (o *object) get(key string) (any, bool) {
	v, ok := o.m[key]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// unknown reports fields outside known.
func (o *object) unknown(known ...string) {
	unknownFields(o.errs, o.m, o.path, known...)
}

// unknownFields reports every key of m not in known, in key order: a misspelt field is
// an error, not silently ignored.
func unknownFields[V any](errs *errList, m map[string]V, path string, known ...string) {
	for _, k := range sortedKeys(m) {
		if !slices.Contains(known, k) {
			errs.add(childPath(path, k), "unknown field")
		}
	}
}

func (o *object) str(key, def string) string {
	v, ok := o.get(key)
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok {
		o.errs.add(o.p(key), "must be a string")
		return def
	}
	return s
}

func (o *object) boolean(key string, def bool) bool {
	v, ok := o.get(key)
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		o.errs.add(o.p(key), "must be a boolean")
		return def
	}
	return b
}

// child returns the nested object at key; present reports whether it
// exists (non-null) and is an object.
func (o *object) child(key string) (*object, bool) {
	v, ok := o.get(key)
	if !ok {
		return nil, false
	}
	m, ok := v.(map[string]any)
	if !ok {
		o.errs.add(o.p(key), "must be an object")
		return nil, false
	}
	return &object{path: o.p(key), m: m, errs: o.errs}, true
}

func (o *object) stringMap(key string) map[string]string {
	c, ok := o.child(key)
	if !ok {
		return nil
	}
	out := make(map[string]string, len(c.m))
	for _, k := range sortedKeys(c.m) {
		s, ok := c.m[k].(string)
		if !ok {
			o.errs.add(c.p(k), "must be a string")
			continue
		}
		out[k] = s
	}
	return out
}

func (o *object) stringSlice(key string) []string {
	v, ok := o.get(key)
	if !ok {
		return nil
	}
	arr, ok := v.([]any)
	if !ok {
		o.errs.add(o.p(key), "must be an array of strings")
		return nil
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			o.errs.add(indexPath(o.p(key), i), "must be a string")
			continue
		}
		out = append(out, s)
	}
	return out
}

// duration reads a positive duration given as a JSON number of seconds
// (fractions allowed) or a Go duration string such as "90s" or "5m".
func (o *object) duration(key string, def time.Duration) time.Duration {
	v, ok := o.get(key)
	if !ok {
		return def
	}
	d, err := parseDuration(v)
	if err != nil {
		o.errs.add(o.p(key), "%s", err)
		return def
	}
	return d
}

func parseDuration(v any) (time.Duration, error) {
	var d time.Duration
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("invalid number of seconds %s", x)
		}
		if f*float64(time.Second) >= math.MaxInt64 {
			return 0, fmt.Errorf("duration %s seconds is too large", x)
		}
		d = time.Duration(f * float64(time.Second))
		if d <= 0 && f > 0 {
			return 0, fmt.Errorf("duration %s seconds is too small", x)
		}
	case string:
		var err error
		d, err = time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: use seconds as a number or a duration like \"90s\" or \"5m\"", x)
		}
	default:
		return 0, fmt.Errorf("must be a number of seconds or a duration string like \"90s\"")
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be greater than 0")
	}
	return d, nil
}

// checkTemplate reports template syntax errors in s at path.
func checkTemplate(errs *errList, path, s string) {
	if err := template.Check(s); err != nil {
		errs.add(path, "%s", err)
	}
}

// checkTemplates walks a JSON value (a request body) and checks every
// string; map keys are not templated and therefore not checked.
func checkTemplates(errs *errList, path string, v any) {
	switch x := v.(type) {
	case string:
		checkTemplate(errs, path, x)
	case map[string]any:
		for _, k := range sortedKeys(x) {
			checkTemplates(errs, childPath(path, k), x[k])
		}
	case []any:
		for i, e := range x {
			checkTemplates(errs, indexPath(path, i), e)
		}
	}
}

// checkDotPath validates a required dot-path field.
func checkDotPath(errs *errList, path, s string) {
	if s == "" {
		errs.add(path, "must not be empty")
		return
	}
	if _, err := dotpath.Split(s); err != nil {
		errs.add(path, "invalid dot path %q: %v", s, err)
	}
}

var methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// method reads an HTTP method; case-insensitive, normalized to upper case.
func (o *object) method(def string) string {
	m := o.str("method", def)
	up := strings.ToUpper(m)
	if !slices.Contains(methods, up) {
		o.errs.add(o.p("method"), "unsupported method %q (allowed: %s)", m, strings.Join(methods, ", "))
		return def
	}
	return up
}

// headerName matches an RFC 9110 token.
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// headers reads a header map, checking names and template syntax of values.
func (o *object) headers() map[string]string {
	h := o.stringMap("headers")
	hp := o.p("headers")
	for _, k := range sortedKeys(h) {
		if !headerName.MatchString(k) {
			o.errs.add(childPath(hp, k), "invalid header name %q", k)
			continue
		}
		checkTemplate(o.errs, childPath(hp, k), h[k])
	}
	return h
}

// headerField reads an optional header-name field with a default.
func (o *object) headerField(key, def string) string {
	s := o.str(key, def)
	if !headerName.MatchString(s) {
		o.errs.add(o.p(key), "invalid header name %q", s)
		return def
	}
	return s
}

// url reads a required URL with template syntax checks; a URL without
// templates must already be an absolute http(s) URL.
func (o *object) url(requiredMsg string) string {
	v, present := o.get("url")
	if !present {
		o.errs.add(o.p("url"), "%s", requiredMsg)
		return ""
	}
	s, ok := v.(string)
	if !ok {
		o.errs.add(o.p("url"), "must be a string")
		return ""
	}
	if strings.TrimSpace(s) == "" {
		o.errs.add(o.p("url"), "%s", requiredMsg)
		return ""
	}
	if err := template.Check(s); err != nil {
		o.errs.add(o.p("url"), "%s", err)
		return s
	}
	if !template.HasTemplates(s) {
		if err := checkAbsoluteURL(s); err != nil {
			o.errs.add(o.p("url"), "%s", err)
		}
	}
	return s
}

// checkAbsoluteURL accepts only absolute http(s) URLs with a host.
func checkAbsoluteURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("invalid URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("must be an absolute http or https URL")
	}
	if u.Host == "" {
		return fmt.Errorf("must include a host")
	}
	return nil
}

// body reads an optional request body: any JSON value except that numbers
// and booleans at the top level make no sense as a body.
func (o *object) body() any {
	v, ok := o.get("body")
	if !ok {
		return nil
	}
	switch v.(type) {
	case map[string]any, []any, string:
	default:
		o.errs.add(o.p("body"), "must be an object, an array or a string")
		return nil
	}
	checkTemplates(o.errs, o.p("body"), v)
	return v
}
