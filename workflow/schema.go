package workflow

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/big"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/rendezvous-run/rendezvous/internal/suggest"
)

// The JSON Schemas in schema/ are the single statement of a definition's
// structure: Compile validates with them, the service publishes them under
// /schemas/, and an editor given workflow.json reports the same structural
// errors, at the same paths and with the same messages, as the service. Go
// code checks only what a schema cannot express.

//go:embed schema/*.json
var schemaFiles embed.FS

// SchemaBaseURL is where the files are placed when they are compiled here. The
// files themselves carry no $id: their $refs are relative ("common.json#/…"),
// so an editor resolves them against wherever it loaded the file from — the
// service's /schemas/ or the directory in a checkout — and never against a host
// that does not serve them.
const SchemaBaseURL = "https://schemas.rendezvous.invalid/"

// workflowSchema is the file describing a whole definition.
const workflowSchema = "workflow.json"

// envelopeSchema is the part of workflow.json without the data of built-in
// node types: Compile leaves node data to the node's parser, which validates
// it with its own schema, so that a Registry may define other types.
const envelopeSchema = workflowSchema + "#/$defs/definition"

// nodeSchemas names the data schema of each built-in node type.
var nodeSchemas = map[string]string{
	TypeWaitEvents: "wait_events.json",
	TypeHTTP:       "http.json",
	TypeWait:       "wait.json",
}

// SchemaNames returns the names of the published schemas, sorted, e.g.
// "workflow.json".
func SchemaNames() []string {
	return slices.Clone(schemas.names)
}

// Schema returns the schema file called name (one of SchemaNames).
func Schema(name string) ([]byte, bool) {
	if !slices.Contains(schemas.names, name) {
		return nil, false
	}
	b, err := fs.ReadFile(schemaFiles, "schema/"+name)
	if err != nil {
		return nil, false
	}
	return b, true
}

// schemas is compiled once; the files are part of the binary, so a schema
// that does not compile is a programming error caught by any test run.
var schemas = mustCompileSchemas(schemaFiles, "schema")

func mustCompileSchemas(fsys fs.FS, dir string) *schemaSet {
	sub, err := fs.Sub(fsys, dir)
	if err == nil {
		var s *schemaSet
		if s, err = compileSchemas(sub); err == nil {
			return s
		}
	}
	panic(fmt.Sprintf("workflow: embedded JSON Schemas do not compile (fix workflow/schema): %v", err))
}

// schemaSet holds the compiled schemas and their documents, whose
// errorMessage keywords word the reported problems.
type schemaSet struct {
	names    []string
	docs     map[string]any // schema URL without fragment -> document
	full     *jsonschema.Schema
	envelope *jsonschema.Schema
	nodes    map[string]*jsonschema.Schema // node type -> data schema
}

// compileSchemas compiles every *.json file at the root of fsys, each placed at
// SchemaBaseURL+its name, so the files resolve each other exactly as they do for
// an editor that loads them side by side. A file with an $id is refused: it would
// send an editor's $refs to the host it names.
func compileSchemas(fsys fs.FS) (*schemaSet, error) {
	names, err := fs.Glob(fsys, "*.json")
	if err != nil {
		return nil, err
	}
	s := &schemaSet{names: names, docs: map[string]any{}, nodes: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		top, ok := doc.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: not a JSON object", name)
		}
		if id, ok := top["$id"]; ok {
			return nil, fmt.Errorf("%s: has $id %v; relative $refs must resolve where the file is loaded from", name, id)
		}
		id := SchemaBaseURL + name
		if err := c.AddResource(id, doc); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s.docs[id] = doc
	}
	if s.full, err = c.Compile(SchemaBaseURL + workflowSchema); err != nil {
		return nil, err
	}
	if s.envelope, err = c.Compile(SchemaBaseURL + envelopeSchema); err != nil {
		return nil, err
	}
	for typ, name := range nodeSchemas {
		if s.nodes[typ], err = c.Compile(SchemaBaseURL + name); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// validate checks v (decoded with UseNumber) against sch and returns the
// problems with paths below base, ordered by path, then message.
func (s *schemaSet) validate(sch *jsonschema.Schema, v any, base string) []FieldError {
	err := sch.Validate(v)
	if err == nil {
		return nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return []FieldError{{Path: base, Message: err.Error()}}
	}
	var out []FieldError
	s.collect(verr, v, base, &out)
	slices.SortFunc(out, func(a, b FieldError) int {
		if c := comparePaths(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	// Two branches of a schema can word the same problem identically.
	return slices.Compact(out)
}

// collect flattens the error tree into FieldErrors, one per failing keyword.
func (s *schemaSet) collect(e *jsonschema.ValidationError, root any, base string, out *[]FieldError) {
	path := instancePath(base, root, e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Schema, *kind.Group, *kind.AllOf, *kind.Reference:
		for _, c := range e.Causes {
			s.collect(c, root, base, out)
		}
	case *kind.Required:
		for _, p := range k.Missing {
			*out = append(*out, FieldError{Path: childPath(path, p), Message: s.requiredMessage(e.SchemaURL, p)})
		}
	case *kind.DependentRequired:
		for _, p := range k.Missing {
			*out = append(*out, FieldError{Path: childPath(path, p), Message: fmt.Sprintf("required when %s is set", k.Prop)})
		}
	case *kind.AdditionalProperties:
		known := s.properties(e.SchemaURL)
		for _, p := range k.Properties {
			msg := "unknown field"
			if near := suggest.Closest(p, known); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			*out = append(*out, FieldError{Path: childPath(path, p), Message: msg})
		}
	default:
		*out = append(*out, FieldError{Path: path, Message: s.message(e)})
	}
}

// instancePath renders a JSON pointer's tokens as a FieldError path, walking
// the instance to tell array indexes from object keys that look like numbers.
func instancePath(base string, v any, tokens []string) string {
	p := base
	for _, tok := range tokens {
		if arr, ok := v.([]any); ok {
			i, err := strconv.Atoi(tok)
			if err == nil && i >= 0 && i < len(arr) {
				p, v = indexPath(p, i), arr[i]
				continue
			}
		}
		m, _ := v.(map[string]any)
		p, v = childPath(p, tok), m[tok]
	}
	return p
}

var printer = message.NewPrinter(language.English)

// message words a failed keyword. An errorMessage in the failing subschema
// (patternErrorMessage for a pattern) replaces the wording, as in editors
// that know these keywords.
func (s *schemaSet) message(e *jsonschema.ValidationError) string {
	if _, ok := e.ErrorKind.(*kind.Pattern); ok {
		if m := s.keyword(e.SchemaURL, "patternErrorMessage"); m != "" {
			return m
		}
	}
	if m := s.keyword(e.SchemaURL, "errorMessage"); m != "" {
		return m
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return "must be " + typeNames(k.Want)
	case *kind.Enum:
		var allowed []string
		for _, w := range k.Want {
			if w != nil {
				allowed = append(allowed, display(w, false))
			}
		}
		return fmt.Sprintf("unknown value %s (allowed: %s)", display(k.Got, true), strings.Join(allowed, ", "))
	case *kind.Const:
		return "must be " + display(k.Want, true)
	case *kind.Pattern:
		return "must match " + k.Want
	case *kind.MinLength:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long", k.Want)
	case *kind.MinItems:
		if k.Want == 1 {
			return "must not be empty"
		}
		return fmt.Sprintf("must have at least %d items", k.Want)
	case *kind.MaxItems:
		if k.Want == 0 {
			return "must be empty"
		}
		return fmt.Sprintf("must have at most %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("must have at least %d fields", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("must have at most %d fields", k.Want)
	case *kind.Minimum:
		return "must be at least " + ratString(k.Want)
	case *kind.Maximum:
		return "must be at most " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be greater than " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + ratString(k.Want)
	case *kind.UniqueItems:
		return fmt.Sprintf("must not contain duplicates (items %d and %d are equal)", k.Duplicates[0], k.Duplicates[1])
	case *kind.AnyOf:
		return "must match one of the allowed forms"
	case *kind.OneOf:
		if len(k.Subschemas) == 0 {
			return "must match one of the allowed forms"
		}
		return "must match only one of the allowed forms"
	case *kind.Not, *kind.FalseSchema:
		return "is not allowed"
	}
	return e.ErrorKind.LocalizedString(printer)
}

// requiredMessage words a missing property p of the object schema at
// schemaURL: the errorMessage that schema gives properties/p, or "required".
// It lets a conditional requirement say why ("required for
// aggregationStrategy "custom"").
func (s *schemaSet) requiredMessage(schemaURL, p string) string {
	sub, _ := s.lookup(schemaURL).(map[string]any)
	props, _ := sub["properties"].(map[string]any)
	prop, _ := props[p].(map[string]any)
	if m, ok := prop["errorMessage"].(string); ok && m != "" {
		return m
	}
	return "required"
}

// keyword returns the string keyword kw of the subschema at schemaURL.
func (s *schemaSet) keyword(schemaURL, kw string) string {
	sub, _ := s.lookup(schemaURL).(map[string]any)
	m, _ := sub[kw].(string)
	return m
}

// properties names, sorted, the properties declared by the schema at schemaURL (the
// location of a failed additionalProperties), its allOf branches included: the fields a
// misspelled one was probably meant to be.
func (s *schemaSet) properties(schemaURL string) []string {
	schemaURL = strings.TrimSuffix(schemaURL, "/additionalProperties")
	sub, _ := s.lookup(schemaURL).(map[string]any)
	parts := []any{sub}
	if all, ok := sub["allOf"].([]any); ok {
		parts = append(parts, all...)
	}
	var names []string
	for _, part := range parts {
		m, _ := part.(map[string]any)
		props, _ := m["properties"].(map[string]any)
		for name := range props {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// lookup resolves an absolute schema location ("…/http.json#/properties/url")
// in the loaded documents; nil when it is not there.
func (s *schemaSet) lookup(schemaURL string) any {
	base, frag, _ := strings.Cut(schemaURL, "#")
	v := s.docs[base]
	frag, err := url.PathUnescape(frag)
	if err != nil || frag == "" {
		return v
	}
	for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// typeNames words JSON types: "an object", "a number or a string". null is
// left out: where a schema allows it, it means "absent", not a choice.
func typeNames(types []string) string {
	var words []string
	for _, t := range types {
		switch t {
		case "null":
			continue
		case "object", "array", "integer":
			words = append(words, "an "+t)
		default:
			words = append(words, "a "+t)
		}
	}
	if len(words) == 0 {
		return "null"
	}
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// display renders a JSON value for a message; strings are quoted when quote.
func display(v any, quote bool) string {
	if s, ok := v.(string); ok && !quote {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// decodeInstance decodes raw JSON the way the schema validator expects it:
// numbers as json.Number, so large and precise values are compared exactly.
func decodeInstance(raw []byte) (any, error) {
	return jsonschema.UnmarshalJSON(bytes.NewReader(raw))
}
