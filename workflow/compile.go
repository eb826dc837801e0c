package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// errList accumulates FieldErrors.
type errList []FieldError

func (l *errList) add(path, format string, args ...any) {
	*l = append(*l, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Compile parses raw JSON, validates everything and returns a runnable
// Workflow, or a *ValidationError listing all problems with their JSON
// paths, in the order they appear in the document. A nil reg means
// BuiltinRegistry(). It never panics.
//
// The document is first validated against the published schema
// (workflow.json without the data of built-in types, which each type's
// parser validates against its own schema); what remains here is what a
// schema cannot express: unique node ids, registered node types, edges
// between existing nodes, cycles and conditions that compile.
func Compile(raw []byte, reg Registry) (wf *Workflow, err error) {
	if reg == nil {
		reg = BuiltinRegistry()
	}
	defer func() {
		// Defensive: a bug here must surface as an error, not take the
		// worker down while a user submits a definition.
		if r := recover(); r != nil {
			wf, err = nil, &ValidationError{Errors: []FieldError{{Message: fmt.Sprintf("internal error: %v", r)}}}
		}
	}()
	c := compiler{reg: reg}
	wf = c.compile(raw)
	sortByDocument(raw, c.warns)
	if len(c.errs) > 0 {
		sortByDocument(raw, c.errs)
		return nil, &ValidationError{Errors: c.errs, Warnings: c.warns}
	}
	wf.warns = c.warns
	return wf, nil
}

type compiler struct {
	reg      Registry
	errs     errList
	warns    []FieldError    // from node configs that are Warners
	rejected map[string]bool // paths with a schema error, not checked again
}

// str returns the string at key of obj when the schema accepted it.
func (c *compiler) str(obj map[string]json.RawMessage, path, key string) (string, bool) {
	s, ok := asString(obj[key])
	if !ok || c.rejected[childPath(path, key)] {
		return "", false
	}
	return s, true
}

func (c *compiler) compile(raw []byte) *Workflow {
	if err := checkJSON(raw); err != nil {
		c.errs.add("", "%s", err)
		return nil
	}
	doc, err := decodeInstance(raw)
	if err != nil {
		c.errs.add("", "malformed JSON: %s", err)
		return nil
	}
	found := schemas.validate(schemas.envelope, doc, "")
	c.errs = append(c.errs, found...)
	c.rejected = make(map[string]bool, len(found))
	for _, fe := range found {
		c.rejected[fe.Path] = true
	}
	top, ok := asObject(raw)
	if !ok {
		return nil
	}
	var def Definition
	def.Name, _ = c.str(top, "", "name")
	fields, _ := doc.(map[string]any)
	def.Vars, _ = fields["vars"].(map[string]any)
	c.warns = append(c.warns, credentialVars(def.Vars)...)
	top0 := &object{m: fields, errs: &c.errs, rejected: c.rejected}
	def.EventBufferTTL = top0.duration("eventBufferTtl", 0)
	def.Triggers = parseTriggers(top0)
	if d, ok := fields["display"].(string); ok {
		def.Display = d
		if err := checkDisplay(d); err != nil {
			c.errs.add("display", "%s", err)
		}
	}
	nodeRaws, _ := asArray(top["nodes"])
	nodes, configs := c.nodes(nodeRaws)
	def.Nodes = nodes

	edgeRaws, _ := asArray(top["edges"])
	ids := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if n.ID != "" {
			if _, dup := ids[n.ID]; !dup {
				ids[n.ID] = i
			}
		}
	}
	edges, compiled, graph := c.edges(edgeRaws, ids)
	def.Edges = edges
	c.cycles(nodes, graph)

	if len(c.errs) > 0 {
		return nil
	}
	wf := &Workflow{
		def:  def,
		byID: make(map[string]*CompiledNode, len(nodes)),
		in:   make(map[string][]*CompiledEdge),
		out:  make(map[string][]*CompiledEdge),
	}
	for i, n := range nodes {
		cn := &CompiledNode{ID: n.ID, Type: n.Type, Config: configs[i]}
		wf.nodes = append(wf.nodes, cn)
		wf.byID[n.ID] = cn
	}
	for _, e := range compiled {
		wf.out[e.Source] = append(wf.out[e.Source], e)
		wf.in[e.Target] = append(wf.in[e.Target], e)
	}
	for _, n := range nodes {
		if len(wf.in[n.ID]) == 0 {
			wf.roots = append(wf.roots, n.ID)
		}
	}
	return wf
}

// nodes checks node ids for duplicates and types against the registry, and
// runs each node's parser; configs[i] is the parsed config of nodes[i].
func (c *compiler) nodes(raws []json.RawMessage) ([]Node, []any) {
	nodes := make([]Node, len(raws))
	configs := make([]any, len(raws))
	firstSeen := make(map[string]int)
	for i, r := range raws {
		path := indexPath("nodes", i)
		obj, ok := asObject(r)
		if !ok {
			continue
		}
		n := &nodes[i]
		if id, ok := c.str(obj, path, "id"); ok {
			if prev, dup := firstSeen[id]; dup {
				c.errs.add(path+".id", "duplicate node id %q (also nodes[%d])", id, prev)
			} else {
				firstSeen[id] = i
			}
			n.ID = id
		}
		var parser NodeParser
		if typ, ok := c.str(obj, path, "type"); ok {
			n.Type = typ
			if parser = c.reg[typ]; parser == nil {
				c.errs.add(path+".type", "unknown node type %q (known: %s)", typ, strings.Join(c.reg.Known(), ", "))
			}
		}
		data := obj["data"]
		if isNull(data) {
			data = nil
		} else if _, isObj := asObject(data); !isObj {
			continue // the schema reported it
		}
		n.Data = slices.Clone(data)
		if parser != nil {
			cfg, errs := runParser(parser, data, path+".data")
			c.errs = append(c.errs, errs...)
			configs[i] = cfg
			if w, ok := cfg.(Warner); ok {
				c.warns = append(c.warns, w.Warnings()...)
			}
		}
	}
	return nodes, configs
}

// runParser isolates Compile from a misbehaving third-party parser.
func runParser(p NodeParser, data json.RawMessage, path string) (cfg any, errs []FieldError) {
	defer func() {
		if r := recover(); r != nil {
			cfg, errs = nil, []FieldError{{Path: path, Message: fmt.Sprintf("internal error: node parser panicked: %v", r)}}
		}
	}()
	return p(data, path)
}

// edges checks edges against the node ids and compiles their conditions;
// graph holds the adjacency of the valid edges only, so cycle detection is
// not confused by dangling ones.
func (c *compiler) edges(raws []json.RawMessage, ids map[string]int) ([]Edge, []*CompiledEdge, map[string][]string) {
	edges := make([]Edge, 0, len(raws))
	var compiled []*CompiledEdge
	graph := make(map[string][]string)
	seen := make(map[[2]string]int)
	for i, r := range raws {
		path := indexPath("edges", i)
		obj, ok := asObject(r)
		if !ok {
			continue
		}
		var e Edge
		valid := true
		for _, end := range []struct {
			key string
			dst *string
		}{{"source", &e.Source}, {"target", &e.Target}} {
			s, ok := c.str(obj, path, end.key)
			if !ok {
				valid = false
				continue
			}
			*end.dst = s
			if _, exists := ids[s]; !exists {
				c.errs.add(path+"."+end.key, "unknown node %q", s)
				valid = false
			}
		}
		if valid && e.Source == e.Target {
			c.errs.add(path, "self-loop on node %q", e.Source)
			valid = false
		}
		if valid {
			key := [2]string{e.Source, e.Target}
			if prev, dup := seen[key]; dup {
				c.errs.add(path, "duplicate edge %s -> %s (also edges[%d])", e.Source, e.Target, prev)
				valid = false
			} else {
				seen[key] = i
			}
		}
		ce := &CompiledEdge{Source: e.Source, Target: e.Target}
		if s, ok := c.str(obj, path, "condition"); ok {
			e.Condition = s
			ce.Condition = s
			prog, err := compileCondition(s)
			if err != nil {
				c.errs.add(path+".condition", "%s", err)
			}
			ce.program = prog
		}
		edges = append(edges, e)
		// A bad condition does not make the edge structurally invalid:
		// keep it in the graph so cycles through it are still reported.
		if valid {
			compiled = append(compiled, ce)
			graph[e.Source] = append(graph[e.Source], e.Target)
		}
	}
	return edges, compiled, graph
}

// cycles reports every cycle found by a depth-first search, walking nodes
// and edges in definition order so the report is deterministic.
func (c *compiler) cycles(nodes []Node, graph map[string][]string) {
	const (
		white = iota
		grey
		black
	)
	color := make(map[string]int, len(nodes))
	var stack []string
	var visit func(id string)
	visit = func(id string) {
		color[id] = grey
		stack = append(stack, id)
		for _, next := range graph[id] {
			switch color[next] {
			case white:
				visit(next)
			case grey:
				start := slices.Index(stack, next)
				cyc := append(slices.Clone(stack[start:]), next)
				c.errs.add("edges", "cycle %s", strings.Join(cyc, " -> "))
			}
		}
		stack = stack[:len(stack)-1]
		color[id] = black
	}
	for _, n := range nodes {
		if n.ID != "" && color[n.ID] == white {
			visit(n.ID)
		}
	}
}

// checkJSON reports malformed JSON with the line and column of the problem (both from
// 1, the column in bytes, as editors and compilers count) and its byte offset.
func checkJSON(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			// The offset counts the byte the decoder stopped at.
			return malformed(raw, int(se.Offset)-1, se.Error())
		case errors.Is(err, io.EOF):
			return malformed(raw, 0, "empty document")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return malformed(raw, len(raw), "unexpected end of input")
		}
		return malformed(raw, int(dec.InputOffset()), err.Error())
	}
	off := int(dec.InputOffset())
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		rest := bytes.TrimLeft(raw[off:], " \t\r\n")
		return malformed(raw, len(raw)-len(rest), "unexpected data after the top-level value")
	}
	return nil
}

// malformed words a syntax error at byte index at of raw.
func malformed(raw []byte, at int, msg string) error {
	at = max(min(at, len(raw)), 0)
	line := 1 + bytes.Count(raw[:at], []byte("\n"))
	col := at - bytes.LastIndexByte(raw[:at], '\n')
	return fmt.Errorf("malformed JSON at line %d, column %d (offset %d): %s", line, col, at, msg)
}
