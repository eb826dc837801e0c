// Package template renders "@{...}" placeholders inside decoded JSON values
// (request URLs, headers and bodies of workflow nodes).
//
// It owns the template syntax, the names a template may reference
// (_trigger, _vars, _execution, nodes) and the rendering rules. It does not
// own where the values come from: callers build a Scope from the execution,
// the definition and earlier node outputs. It performs no I/O except reading
// RENDEZVOUS_VAR_* environment variables (through Scope.LookupEnv) so that
// secrets can override definition vars without ever being stored.
//
// Syntax:
//
//	@{_trigger}                 the whole execution input
//	@{_trigger.customer.email}  a dot path into the input (items[0] or items.0)
//	@{_vars.serviceUrl}         a definition var, overridden by RENDEZVOUS_VAR_SERVICEURL
//	@{_execution.id}            the execution id
//	@{_execution.correlationId} the correlation id of the current node
//	@{nodes.fetch.output.body}  output of the node "fetch"
//	@{secrets.TOKEN}            a secret, left for the sender (see RootSecrets)
//	@@{                         a literal "@{"
package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/rendezvous-run/rendezvous/internal/dotpath"
)

// Roots a template expression may start with.
const (
	RootTrigger   = "_trigger"
	RootVars      = "_vars"
	RootExecution = "_execution"
	RootNodes     = "nodes"
	// RootSecrets names a secret by reference. Rendering never resolves it: it leaves a
	// reference carrying Scope.SecretMark (SecretRef), which the sender of a request
	// replaces with the secret's value as the request leaves, so the value is in no
	// rendered string anything might store, log or quote in an error. Text that only
	// looks like a reference (an execution's input, say) lacks the mark of the render
	// and is sent as it is.
	RootSecrets = "secrets"
)

// EnvPrefix is prepended to a var name to form the environment variable
// that overrides it.
const EnvPrefix = "RENDEZVOUS_VAR_"

// ErrMissing is matched (errors.Is) by render errors caused by a template
// naming a value that does not exist in the Scope, as opposed to syntax
// errors. Callers may want to fail a node on the former but reject the
// definition on the latter.
var ErrMissing = errors.New("template value missing")

// Scope is everything a template may reference while rendering.
type Scope struct {
	// Trigger is the execution input, referenced as @{_trigger...}.
	Trigger any
	// Vars are the definition vars, referenced as @{_vars.<name>...}.
	Vars map[string]any
	// LookupEnv reads environment variables; nil means os.LookupEnv.
	// RENDEZVOUS_VAR_<NAME> (name upper-cased, non-alphanumerics replaced
	// by '_') overrides Vars[name], so secrets never live in the database.
	LookupEnv func(string) (string, bool)
	// ExecutionID is referenced as @{_execution.id}.
	ExecutionID string
	// CorrelationID is referenced as @{_execution.correlationId}; empty
	// means no correlation id exists for the node being rendered, which
	// makes such a reference an error.
	CorrelationID string
	// Nodes maps a node id to that node's output, referenced as
	// @{nodes.<id>.output...}.
	Nodes map[string]any
	// SecretMark is set, unguessable, by whoever renders a request that may carry
	// secrets: @{secrets.NAME} renders as SecretRef(NAME, SecretMark). Empty, a
	// reference renders as written.
	SecretMark string
}

// SecretRef is what @{secrets.name} renders as under mark: the reference itself, with
// the mark after the name ("@{secrets.TOKEN:3f9a…}").
func SecretRef(name, mark string) string {
	if mark == "" {
		return "@{" + RootSecrets + "." + name + "}"
	}
	return "@{" + RootSecrets + "." + name + ":" + mark + "}"
}

// ValidSecretName reports whether name may follow "secrets.": letters, digits, '_' and
// '-', as the keys of a Kubernetes secret (without dots, which separate path segments).
func ValidSecretName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Error is a template failure, located within the value passed to Render.
type Error struct {
	// Location is where in the rendered value the failing string sits,
	// e.g. "body.data" or "headers.Authorization"; empty for the top level.
	Location string
	// Template is the failing placeholder, e.g. "@{_trigger.x}"; empty when
	// the string as a whole is malformed.
	Template string
	// Err is the cause. errors.Is(err, ErrMissing) reports a missing value.
	Err error
}

// Error implements error: "location: template: cause".
func (e *Error) Error() string {
	parts := make([]string, 0, 3)
	if e.Location != "" {
		parts = append(parts, e.Location)
	}
	if e.Template != "" {
		parts = append(parts, e.Template)
	}
	if e.Err != nil {
		parts = append(parts, e.Err.Error())
	}
	return strings.Join(parts, ": ")
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// missingError carries a human message while matching ErrMissing.
type missingError struct{ msg string }

func (e *missingError) Error() string        { return e.msg }
func (e *missingError) Is(target error) bool { return target == ErrMissing }

func missing(format string, args ...any) error {
	return &missingError{msg: fmt.Sprintf(format, args...)}
}

// part is a piece of a template string: literal text or a placeholder.
type part struct {
	text   string   // literal text, or the raw placeholder "@{...}"
	isExpr bool     // text is a placeholder
	segs   []string // parsed expression when isExpr
}

// parse splits s into literal and placeholder parts and validates every
// placeholder's syntax and root.
func parse(s string) ([]part, error) {
	var parts []part
	var lit strings.Builder
	i := 0
	for i < len(s) {
		if strings.HasPrefix(s[i:], "@@{") {
			lit.WriteString("@{")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "@{") {
			lit.WriteByte(s[i])
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			return nil, fmt.Errorf("unterminated \"@{\" at offset %d", i)
		}
		raw := s[i : i+2+end+1]
		segs, err := parseExpr(s[i+2 : i+2+end])
		if err != nil {
			return nil, fmt.Errorf("%s at offset %d: %w", raw, i, err)
		}
		if lit.Len() > 0 {
			parts = append(parts, part{text: lit.String()})
			lit.Reset()
		}
		parts = append(parts, part{text: raw, isExpr: true, segs: segs})
		i += len(raw)
	}
	if lit.Len() > 0 {
		parts = append(parts, part{text: lit.String()})
	}
	return parts, nil
}

// parseExpr validates the inside of a placeholder and returns its segments.
func parseExpr(expr string) ([]string, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, errors.New("empty expression")
	}
	if strings.ContainsAny(expr, " \t\r\n") {
		return nil, errors.New("expression must be a single dot path")
	}
	segs, err := dotpath.Split(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid path: %v", err)
	}
	switch segs[0] {
	case RootTrigger:
		return segs, nil
	case RootVars:
		if len(segs) < 2 {
			return nil, errors.New("_vars needs a variable name, e.g. @{_vars.serviceUrl}")
		}
		return segs, nil
	case RootExecution:
		if len(segs) != 2 || (segs[1] != "id" && segs[1] != "correlationId") {
			return nil, errors.New("_execution fields are id and correlationId")
		}
		return segs, nil
	case RootSecrets:
		if len(segs) != 2 || !ValidSecretName(segs[1]) {
			return nil, errors.New("secrets are named @{secrets.NAME}: letters, digits, '_' and '-'")
		}
		return segs, nil
	case RootNodes:
		// Node ids may contain dots, so "output" may be any segment after
		// the id; resolution picks the split naming an existing node.
		if outputIndex(segs) < 0 {
			return nil, errors.New("node references look like nodes.<id>.output[.path]")
		}
		return segs, nil
	}
	return nil, fmt.Errorf("unknown root %q (known: %s, %s, %s, %s, %s)", segs[0], RootTrigger, RootVars, RootExecution, RootNodes, RootSecrets)
}

// outputIndex returns the index of the first "output" segment that can
// follow a node id, or -1.
func outputIndex(segs []string) int {
	for k := 2; k < len(segs); k++ {
		if segs[k] == "output" {
			return k
		}
	}
	return -1
}

// Check reports syntax problems in s without resolving anything:
// unterminated "@{", empty expressions, malformed paths, unknown roots and
// malformed _execution / nodes references. Definition validation uses it.
func Check(s string) error {
	_, err := parse(s)
	return err
}

// HasTemplates reports whether s contains at least one placeholder (an
// escaped "@@{" does not count). Malformed strings report false.
func HasTemplates(s string) bool {
	parts, err := parse(s)
	if err != nil {
		return false
	}
	for _, p := range parts {
		if p.isExpr {
			return true
		}
	}
	return false
}

// RenderString renders s and always returns a string: a lone placeholder
// naming an object yields its JSON encoding. Used for URLs and headers.
func RenderString(s string, sc Scope) (string, error) {
	out, err := renderString(s, &sc, false)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			return "", err
		}
		return "", &Error{Err: err}
	}
	str, _ := out.(string)
	return str, nil
}

// Render returns a deep copy of v (decoded JSON: map[string]any, []any,
// string, json.Number, float64, bool, nil) with templates replaced.
//
// A string that is exactly one placeholder becomes the referenced raw value
// (an object, a number...), so "@{_trigger.data}" forwards structured data.
// A string mixing text and placeholders stays a string with each value
// stringified: strings as-is, everything else JSON-encoded. Map keys are not
// templated. Errors are *Error values naming the location within v.
func Render(v any, s Scope) (any, error) {
	return render(v, &s, "")
}

func render(v any, sc *Scope, loc string) (any, error) {
	switch x := v.(type) {
	case string:
		out, err := renderString(x, sc, true)
		if err != nil {
			var te *Error
			if errors.As(err, &te) {
				te.Location = loc
				return nil, te
			}
			return nil, &Error{Location: loc, Err: err}
		}
		return out, nil
	case map[string]any:
		if x == nil {
			return x, nil
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := render(e, sc, joinKey(loc, k))
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		if x == nil {
			return x, nil
		}
		out := make([]any, len(x))
		for i, e := range x {
			r, err := render(e, sc, loc+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]string:
		// Headers are often kept in this shape; keep the type.
		out := make(map[string]string, len(x))
		for k, e := range x {
			r, err := render(e, sc, joinKey(loc, k))
			if err != nil {
				return nil, err
			}
			out[k] = stringify(r)
		}
		return out, nil
	}
	return v, nil
}

func joinKey(loc, k string) string {
	if loc == "" {
		return k
	}
	return loc + "." + k
}

// renderString renders one string; raw allows a lone placeholder to yield
// a non-string value.
func renderString(s string, sc *Scope, raw bool) (any, error) {
	if !strings.Contains(s, "@{") {
		return s, nil // fast path, also keeps plain strings byte-identical
	}
	parts, err := parse(s)
	if err != nil {
		return nil, err
	}
	if raw && len(parts) == 1 && parts[0].isExpr {
		val, err := resolve(parts[0].segs, sc)
		if err != nil {
			return nil, &Error{Template: parts[0].text, Err: err}
		}
		return deepCopy(val), nil
	}
	var b strings.Builder
	for _, p := range parts {
		if !p.isExpr {
			b.WriteString(p.text)
			continue
		}
		val, err := resolve(p.segs, sc)
		if err != nil {
			return nil, &Error{Template: p.text, Err: err}
		}
		b.WriteString(stringify(val))
	}
	return b.String(), nil
}

// stringify renders a value for embedding in text: strings as-is,
// everything else JSON-encoded.
func stringify(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return strconv.FormatFloat(x, 'g', -1, 64)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// resolve looks up a parsed expression in the scope.
func resolve(segs []string, sc *Scope) (any, error) {
	switch segs[0] {
	case RootTrigger:
		return walk(sc.Trigger, RootTrigger, segs[1:])
	case RootVars:
		return resolveVar(segs[1], segs[2:], sc)
	case RootExecution:
		if segs[1] == "id" {
			if sc.ExecutionID == "" {
				return nil, missing("_execution.id is not available")
			}
			return sc.ExecutionID, nil
		}
		if sc.CorrelationID == "" {
			return nil, missing("_execution.correlationId is not available in this node")
		}
		return sc.CorrelationID, nil
	case RootNodes:
		return resolveNode(segs, sc)
	case RootSecrets:
		return SecretRef(segs[1], sc.SecretMark), nil
	}
	return nil, fmt.Errorf("unknown root %q", segs[0])
}

func resolveVar(name string, rest []string, sc *Scope) (any, error) {
	lookup := sc.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	envName := EnvName(name)
	if s, ok := lookup(envName); ok {
		var val any = s
		if len(rest) > 0 {
			// A deeper path into an env override only makes sense when
			// the variable holds JSON; decode it for that case only so
			// that plain string secrets stay strings.
			d := json.NewDecoder(strings.NewReader(s))
			d.UseNumber()
			var decoded any
			if err := d.Decode(&decoded); err == nil {
				val = decoded
			}
		}
		return walk(val, RootVars+"."+name, rest)
	}
	val, ok := sc.Vars[name]
	if !ok {
		return nil, missing("_vars has no field %q (and %s is not set)", name, envName)
	}
	return walk(val, RootVars+"."+name, rest)
}

func resolveNode(segs []string, sc *Scope) (any, error) {
	var firstID string
	for k := 2; k < len(segs); k++ {
		if segs[k] != "output" {
			continue
		}
		id := strings.Join(segs[1:k], ".")
		if firstID == "" {
			firstID = id
		}
		out, ok := sc.Nodes[id]
		if !ok {
			continue
		}
		return walk(out, "nodes."+id+".output", segs[k+1:])
	}
	return nil, missing("node %q has no output (not executed yet, or no such node)", firstID)
}

// walk follows rest through v and describes where it broke.
func walk(v any, prefix string, rest []string) (any, error) {
	out, n := dotpath.Lookup(v, rest)
	if n == len(rest) {
		return out, nil
	}
	where := prefix
	if n > 0 {
		where += "." + strings.Join(rest[:n], ".")
	}
	seg := rest[n]
	switch x := out.(type) {
	case map[string]any, map[string]string:
		return nil, missing("%s has no field %q", where, seg)
	case []any:
		return nil, missing("%s has no index %s (length %d)", where, seg, len(x))
	case nil:
		return nil, missing("%s is null, cannot read %q", where, seg)
	}
	return nil, missing("%s is a %s, cannot read %q", where, kind(out), seg)
}

func kind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number, float64, float32, int, int64, int32, uint, uint64:
		return "number"
	case bool:
		return "boolean"
	}
	return fmt.Sprintf("%T", v)
}

// EnvName returns the environment variable that overrides var name:
// RENDEZVOUS_VAR_ + name upper-cased with non-alphanumerics replaced by '_'.
func EnvName(name string) string {
	var b strings.Builder
	b.WriteString(EnvPrefix)
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z':
			b.WriteRune(r - 'a' + 'A')
		case (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}

// deepCopy copies decoded JSON so rendered output never aliases the scope;
// a later mutation of a node's output must not change another's input.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return x
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		if x == nil {
			return x
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(x))
		for k, e := range x {
			out[k] = e
		}
		return out
	}
	return v
}
