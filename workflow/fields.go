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
	"github.com/rendezvous-run/rendezvous/workflow/template"
	"github.com/rendezvous-run/rendezvous/workflow/waittime"
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

// object reads node data that its schema has already checked. Readers are
// lenient — a value of the wrong type yields the default, because the schema
// reported it — and semantic checks skip the values the schema rejected, so
// each problem is reported once. Absent fields and explicit nulls both take
// defaults.
type object struct {
	path     string
	m        map[string]any
	errs     *errList
	rejected map[string]bool // paths with a schema error
}

// parseNodeData validates a built-in node type's data against its schema
// (absent or null data counts as {}; when the schema rejects {}, the data is
// required) and returns a reader for the semantic checks. ok is false when
// the data is not an object, so there is nothing further to check.
func parseNodeData(typ string, data json.RawMessage, path string, errs *errList) (*object, bool) {
	sch := schemas.nodes[typ]
	if isNull(data) {
		if len(schemas.validate(sch, map[string]any{}, path)) > 0 {
			errs.add(path, "required")
			return nil, false
		}
		return &object{path: path, m: map[string]any{}, errs: errs}, true
	}
	v, err := decodeInstance(data)
	if err != nil {
		errs.add(path, "malformed JSON: %v", err)
		return nil, false
	}
	found := schemas.validate(sch, v, path)
	*errs = append(*errs, found...)
	m, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	o := &object{path: path, m: m, errs: errs, rejected: make(map[string]bool, len(found))}
	for _, fe := range found {
		o.rejected[fe.Path] = true
	}
	return o, true
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

// checkable returns the value of key for a semantic check: present, not
// null and not already rejected by the schema.
func (o *object) checkable(key string) (any, bool) {
	v, ok := o.get(key)
	if !ok || o.rejected[o.p(key)] {
		return nil, false
	}
	return v, true
}

func (o *object) str(key, def string) string {
	if s, ok := o.m[key].(string); ok {
		return s
	}
	return def
}

// enum reads a string of one of the definition's word lists (a strategy, a source, …)
// into its type, or def when it is absent: the schema has already refused a value
// outside the list.
func enum[T ~string](o *object, key string, def T) T {
	return T(o.str(key, string(def)))
}

func (o *object) boolean(key string, def bool) bool {
	if b, ok := o.m[key].(bool); ok {
		return b
	}
	return def
}

// child returns the nested object at key, or nil when it is absent or not
// an object.
func (o *object) child(key string) *object {
	m, ok := o.m[key].(map[string]any)
	if !ok {
		return nil
	}
	return &object{path: o.p(key), m: m, errs: o.errs, rejected: o.rejected}
}

// stringMap returns the string entries of the object at key.
func (o *object) stringMap(key string) map[string]string {
	c := o.child(key)
	if c == nil {
		return nil
	}
	out := make(map[string]string, len(c.m))
	for k, v := range c.m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// stringSlice returns the string elements of the array at key.
func (o *object) stringSlice(key string) []string {
	arr, ok := o.m[key].([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(arr))
	for _, e := range arr {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// duration reads a positive duration given as a JSON number of seconds
// (fractions allowed) or a string waittime.ParseDuration reads: "90s", "PT90M",
// "90 minutes". The schema checks the shape; parsing finds what a pattern cannot:
// zero ("0s"), years and months, and values too large or too small for a
// time.Duration.
func (o *object) duration(key string, def time.Duration) time.Duration {
	v, ok := o.checkable(key)
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

// ParseDurationJSON reads a duration as stored in a definition (a JSON number
// of seconds or a duration string), for values read back from the database.
func ParseDurationJSON(raw []byte) (time.Duration, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return 0, err
	}
	return parseDuration(v)
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
		// The one parser of durations written as text, so that a timeout, a lookback
		// and a wait's "for" accept the same forms and refuse with the same list.
		var err error
		if d, err = waittime.ParseDuration(x); err != nil {
			return 0, fmt.Errorf("%w; or a JSON number of seconds", err)
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

// dotPathField reads an optional dot-path field with a default and checks
// its syntax; emptiness is the schema's to report.
func (o *object) dotPathField(key, def string) string {
	s := o.str(key, def)
	if _, ok := o.checkable(key); ok {
		if _, err := dotpath.Split(s); err != nil {
			o.errs.add(o.p(key), "invalid dot path %q: %v", s, err)
		}
	}
	return s
}

// method reads an HTTP method, normalized to upper case; the schema allows
// any case.
func (o *object) method(def string) string {
	if _, ok := o.checkable("method"); !ok {
		return def
	}
	return strings.ToUpper(o.str("method", def))
}

// headers reads a header map and checks the template syntax of its values;
// header names are the schema's.
func (o *object) headers() map[string]string {
	h := o.stringMap("headers")
	hp := o.p("headers")
	for _, k := range sortedKeys(h) {
		if p := childPath(hp, k); !o.rejected[p] {
			checkTemplate(o.errs, p, h[k])
		}
	}
	return h
}

// url reads the URL and checks its templates; a URL without templates must
// already be an absolute http(s) URL. Presence and blankness are the
// schema's.
func (o *object) url() string {
	s := o.str("url", "")
	if _, ok := o.checkable("url"); !ok {
		return s
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

// body reads an optional request body (an object, an array or a string, as
// the schema says) and checks the templates in its strings.
func (o *object) body() any {
	v, ok := o.checkable("body")
	if !ok {
		return nil
	}
	checkTemplates(o.errs, o.p("body"), v)
	return v
}
