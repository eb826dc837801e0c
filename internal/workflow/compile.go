package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// namePattern constrains workflow names and node ids: they appear in URLs,
// logs and template paths, so keep them printable and bounded.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

const namePatternDesc = `must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`

// errList accumulates FieldErrors.
type errList []FieldError

func (l *errList) add(path, format string, args ...any) {
	*l = append(*l, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Compile parses raw JSON, validates everything and returns a runnable
// Workflow, or a *ValidationError listing all problems with their JSON
// paths. A nil reg means BuiltinRegistry(). It never panics.
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
	if len(c.errs) > 0 {
		return nil, &ValidationError{Errors: c.errs}
	}
	return wf, nil
}

type compiler struct {
	reg  Registry
	errs errList
}

func (c *compiler) compile(raw []byte) *Workflow {
	if err := checkJSON(raw); err != nil {
		c.errs.add("", "%s", err)
		return nil
	}
	top, ok := asObject(raw)
	if !ok {
		c.errs.add("", "must be a JSON object")
		return nil
	}
	var def Definition
	unknownFields(&c.errs, top, "", "name", "vars", "nodes", "edges")

	// name
	if r, ok := top["name"]; !ok || isNull(r) {
		c.errs.add("name", "required")
	} else if s, ok := asString(r); !ok {
		c.errs.add("name", "must be a string")
	} else if s == "" {
		c.errs.add("name", "required")
	} else if !namePattern.MatchString(s) {
		c.errs.add("name", "%s", namePatternDesc)
	} else {
		def.Name = s
	}

	// vars
	if r, ok := top["vars"]; ok && !isNull(r) {
		if _, isObj := asObject(r); !isObj {
			c.errs.add("vars", "must be an object")
		} else if v, err := decodeAny(r); err == nil {
			def.Vars, _ = v.(map[string]any)
		}
	}

	// nodes
	var nodeRaws []json.RawMessage
	if r, ok := top["nodes"]; !ok || isNull(r) {
		c.errs.add("nodes", "required: at least one node")
	} else if arr, ok := asArray(r); !ok {
		c.errs.add("nodes", "must be an array")
	} else if len(arr) == 0 {
		c.errs.add("nodes", "required: at least one node")
	} else {
		nodeRaws = arr
	}
	nodes, configs := c.nodes(nodeRaws)
	def.Nodes = nodes

	// edges
	var edgeRaws []json.RawMessage
	if r, ok := top["edges"]; ok && !isNull(r) {
		if arr, ok := asArray(r); !ok {
			c.errs.add("edges", "must be an array")
		} else {
			edgeRaws = arr
		}
	}
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

// nodes validates every node; configs[i] is the parsed config of nodes[i].
func (c *compiler) nodes(raws []json.RawMessage) ([]Node, []any) {
	nodes := make([]Node, len(raws))
	configs := make([]any, len(raws))
	firstSeen := make(map[string]int)
	for i, r := range raws {
		path := "nodes[" + strconv.Itoa(i) + "]"
		obj, ok := asObject(r)
		if !ok {
			c.errs.add(path, "must be an object")
			continue
		}
		unknownFields(&c.errs, obj, path, "id", "type", "data")
		n := &nodes[i]
		if id, ok := c.requiredString(obj, "id", path); ok {
			if !namePattern.MatchString(id) {
				c.errs.add(path+".id", "%s", namePatternDesc)
			} else if prev, dup := firstSeen[id]; dup {
				c.errs.add(path+".id", "duplicate node id %q (also nodes[%d])", id, prev)
			} else {
				firstSeen[id] = i
			}
			n.ID = id
		}
		typ, typeOK := c.requiredString(obj, "type", path)
		n.Type = typ
		var parser NodeParser
		if typeOK {
			parser = c.reg[typ]
			if parser == nil {
				c.errs.add(path+".type", "unknown node type %q (known: %s)", typ, strings.Join(c.reg.Known(), ", "))
			}
		}
		data := obj["data"]
		if isNull(data) {
			data = nil
		} else if _, isObj := asObject(data); !isObj {
			c.errs.add(path+".data", "must be an object")
			continue
		}
		n.Data = slices.Clone(data)
		if parser != nil {
			cfg, errs := runParser(parser, data, path+".data")
			c.errs = append(c.errs, errs...)
			configs[i] = cfg
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

// requiredString reads obj[key] as a non-empty string, reporting problems
// at path.key.
func (c *compiler) requiredString(obj map[string]json.RawMessage, key, path string) (string, bool) {
	r, ok := obj[key]
	if !ok || isNull(r) {
		c.errs.add(path+"."+key, "required")
		return "", false
	}
	s, ok := asString(r)
	if !ok {
		c.errs.add(path+"."+key, "must be a string")
		return "", false
	}
	if s == "" {
		c.errs.add(path+"."+key, "required")
		return "", false
	}
	return s, true
}

// edges validates edges against the node ids; graph holds the adjacency of
// the valid edges only, so cycle detection is not confused by dangling ones.
func (c *compiler) edges(raws []json.RawMessage, ids map[string]int) ([]Edge, []*CompiledEdge, map[string][]string) {
	edges := make([]Edge, 0, len(raws))
	var compiled []*CompiledEdge
	graph := make(map[string][]string)
	seen := make(map[[2]string]int)
	for i, r := range raws {
		path := "edges[" + strconv.Itoa(i) + "]"
		obj, ok := asObject(r)
		if !ok {
			c.errs.add(path, "must be an object")
			continue
		}
		unknownFields(&c.errs, obj, path, "source", "target", "condition")
		var e Edge
		valid := true
		for _, end := range []struct {
			key string
			dst *string
		}{{"source", &e.Source}, {"target", &e.Target}} {
			s, ok := c.requiredString(obj, end.key, path)
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
		if r, ok := obj["condition"]; ok && !isNull(r) {
			if s, ok := asString(r); !ok {
				c.errs.add(path+".condition", "must be a string")
			} else {
				e.Condition = s
				ce.Condition = s
				prog, err := compileCondition(s)
				if err != nil {
					c.errs.add(path+".condition", "%s", err)
				}
				ce.program = prog
			}
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

// checkJSON reports malformed JSON with the byte offset of the problem.
func checkJSON(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("malformed JSON at offset %d: %s", se.Offset, se.Error())
		case errors.Is(err, io.EOF):
			return errors.New("malformed JSON at offset 0: empty document")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("malformed JSON at offset %d: unexpected end of input", len(raw))
		}
		return fmt.Errorf("malformed JSON at offset %d: %s", dec.InputOffset(), err)
	}
	off := dec.InputOffset()
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("malformed JSON at offset %d: unexpected data after the top-level value", off)
	}
	return nil
}
