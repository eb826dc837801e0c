// Package workflow owns workflow definitions: their JSON shape, their
// validation (every problem reported at once, located by a JSON path such as
// nodes[2].data.kafkaEvent.topic), the configuration of the built-in node
// types (wait_events, http, wait) and the compiled graph an executor walks.
//
// The shape is stated once, in the JSON Schemas of schema/ (embedded, and
// published by the service under /schemas/): validation runs them first, so
// an editor given workflow.json reports the same structural errors at the
// same paths; the Go code checks only what a schema cannot express.
//
// It does not execute anything: it performs no I/O, keeps no state and
// knows nothing about storage, HTTP callbacks or Kafka. Executors own
// running nodes; they extend the set of node types by adding parsers to a
// Registry. Template rendering lives in package template; this package only
// checks template syntax.
package workflow

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// Definition is the JSON document describing a workflow.
type Definition struct {
	Name string         `json:"name"`
	Vars map[string]any `json:"vars,omitempty"`
	// EventBufferTTL is eventBufferTtl: how long an event sent to an execution
	// waits for a node to wait for its type; 0 means DefaultEventBufferTTL.
	EventBufferTTL time.Duration `json:"-"`
	Nodes          []Node        `json:"nodes"`
	Edges          []Edge        `json:"edges,omitempty"`
	// Triggers are the Kafka records that start executions of the workflow.
	Triggers []Trigger `json:"-"`
	// Display is the template of an execution's summary (its business key), read from
	// its input alone; empty: the input's first scalar fields (see Summary).
	Display string `json:"-"`
}

// Node is one step of a definition; Data is interpreted by the parser
// registered for Type.
type Node struct {
	ID   string          `json:"id"`
	Type string          `json:"type"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Edge connects two nodes. Target runs after Source when Condition (an
// expr-lang expression, empty meaning always) evaluates to true.
type Edge struct {
	Source    string `json:"source"`
	Target    string `json:"target"`
	Condition string `json:"condition,omitempty"`
}

// FieldError is one problem in a definition, located by a JSON path like
// nodes[2].data.kafkaEvent.topic. An empty Path means the whole document.
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String renders "path: message", or just the message when Path is empty.
func (e FieldError) String() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// ValidationError carries every problem found in a definition, never just
// the first, so that authors can fix a definition in one round trip.
type ValidationError struct {
	Errors []FieldError
	// Warnings are what the definition holds to no effect (see Workflow.Warnings),
	// reported beside the errors so that one answer says everything.
	Warnings []FieldError
}

// Warner is implemented by a node config that holds fields to no effect: a
// field its settings make unused. Such a definition is valid — it runs as if
// the field were absent — and Compile reports each as a warning at its JSON
// path, so that a definition written for another strategy is stored as it is
// and its author still learns what is ignored.
type Warner interface {
	Warnings() []FieldError
}

// Error joins all problems: "invalid definition: a: x; b: y".
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.String()
	}
	return "invalid definition: " + strings.Join(parts, "; ")
}

// NodeParser validates and decodes one node type's data; path is the JSON
// path of the data, e.g. "nodes[2].data", and prefixes every returned
// error. It must report every problem and never panic. data is nil when
// the node has no data (or null), and otherwise an object. The built-in
// parsers validate data against their published schema (wait_events.json,
// http.json, wait.json) before checking what a schema cannot express.
type NodeParser func(data json.RawMessage, path string) (config any, errs []FieldError)

// Registry maps a node type to its parser.
type Registry map[string]NodeParser

// Known returns the registered node types, sorted.
func (r Registry) Known() []string {
	return slices.Sorted(maps.Keys(r))
}

// BuiltinRegistry returns a new Registry holding the node types this
// package implements. Callers may add types to the returned map.
func BuiltinRegistry() Registry {
	return Registry{
		TypeWaitEvents: ParseWaitEventsNode,
		TypeHTTP:       ParseHTTPNode,
		TypeWait:       ParseWaitNode,
	}
}

// Built-in node types.
const (
	TypeWaitEvents = "wait_events"
	TypeHTTP       = "http"
)

// CompiledNode is a validated node with its decoded configuration (for the
// built-in types *WaitEvents, *HTTP or *Wait).
type CompiledNode struct {
	ID     string
	Type   string
	Config any
}

// Workflow is a compiled, validated definition: an acyclic graph whose
// edge conditions are already compiled. It is immutable and safe for
// concurrent use.
type Workflow struct {
	def   Definition
	nodes []*CompiledNode
	byID  map[string]*CompiledNode
	in    map[string][]*CompiledEdge
	out   map[string][]*CompiledEdge
	roots []string
	warns []FieldError
}

// Warnings lists what the definition holds to no effect, each at its JSON path, in
// document order; empty (not nil) when there is nothing to say.
func (w *Workflow) Warnings() []FieldError {
	return append([]FieldError{}, w.warns...)
}

// credentialWords mark a var name as a credential's.
var credentialWords = []string{"token", "password", "passwd", "secret", "key", "credential"}

// credentialVars warns of each var whose name looks like a credential's: a var's value
// is stored with the definition, and shown to every viewer; @{secrets.NAME} is read at
// send time instead.
func credentialVars(vars map[string]any) []FieldError {
	var out []FieldError
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		lower := strings.ToLower(name)
		if !slices.ContainsFunc(credentialWords, func(w string) bool { return strings.Contains(lower, w) }) {
			continue
		}
		out = append(out, FieldError{Path: "vars." + name, Message: fmt.Sprintf(
			"%q looks like a credential: a var's value is stored with the definition and readable by every viewer; reference a secret instead, @{secrets.%s}, set as %s or a file in --secrets-dir (or override the var with %s)",
			name, secretName(name), "RENDEZVOUS_SECRET_"+strings.ToUpper(strings.ReplaceAll(secretName(name), "-", "_")), template.EnvName(name))})
	}
	return out
}

// secretName suggests a secret's name for a var's: the characters a secret name may
// not have become '_'.
func secretName(v string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, v)
}

// Definition returns a copy of the definition the workflow was compiled
// from.
func (w *Workflow) Definition() Definition {
	d := w.def
	d.Vars = maps.Clone(w.def.Vars)
	d.Nodes = slices.Clone(w.def.Nodes)
	d.Edges = slices.Clone(w.def.Edges)
	d.Triggers = slices.Clone(w.def.Triggers)
	return d
}

// Node returns the node with the given id.
func (w *Workflow) Node(id string) (*CompiledNode, bool) {
	n, ok := w.byID[id]
	return n, ok
}

// Nodes returns all nodes in definition order.
func (w *Workflow) Nodes() []*CompiledNode { return slices.Clone(w.nodes) }

// Roots returns the ids of nodes without incoming edges, in definition
// order; an execution starts there.
func (w *Workflow) Roots() []string { return slices.Clone(w.roots) }

// Incoming returns the edges targeting id, in definition order.
func (w *Workflow) Incoming(id string) []*CompiledEdge { return slices.Clone(w.in[id]) }

// Outgoing returns the edges leaving id, in definition order.
func (w *Workflow) Outgoing(id string) []*CompiledEdge { return slices.Clone(w.out[id]) }
