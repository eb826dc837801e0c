package workflow

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/vocab"
)

// editor validates the way an editor given the published files does: a
// fresh compiler loading schema/*.json from the directory and checking a
// whole definition against workflow.json, node data included.
var editor = sync.OnceValues(func() (*schemaSet, error) {
	return compileSchemas(os.DirFS("schema"))
})

// editorErrors returns what the editor reports for raw, rendered like
// FieldError.String.
func editorErrors(t testing.TB, raw []byte) []string {
	t.Helper()
	s, err := editor()
	require.NoError(t, err)
	doc, err := decodeInstance(raw)
	require.NoError(t, err)
	var out []string
	for _, fe := range s.validate(s.full, doc, "") {
		out = append(out, fe.String())
	}
	return out
}

// requireValid asserts that raw compiles and that the published schema
// accepts it too: a definition the service takes must not be flagged in an
// editor.
func requireValid(t testing.TB, raw []byte) *Workflow {
	t.Helper()
	wf, err := Compile(raw, BuiltinRegistry())
	require.NoError(t, err)
	require.Empty(t, editorErrors(t, raw), "the service accepts it, the schema must too")
	return wf
}

// TestInvalidCorpus is the "one source of truth" check: for every
// definition in testdata/invalid, Compile reports exactly the errors of its
// .want file, in order, and validating it with nothing but the published
// schema files reports exactly those marked "schema" — the same paths and
// messages. Errors marked "go" are what a schema cannot express.
func TestInvalidCorpus(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/invalid/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw, err := os.ReadFile(f)
			require.NoError(t, err)
			all, fromSchema := readWant(t, strings.TrimSuffix(f, ".json")+".want")

			require.Equal(t, all, compileErrs(t, string(raw)), "Compile")

			got := editorErrors(t, raw)
			slices.Sort(got)
			slices.Sort(fromSchema)
			require.Equal(t, fromSchema, got, "published schema")
		})
	}
}

// readWant parses a .want file: "# comment" lines, then one error per line,
// "schema <error>" or "go <error>".
func readWant(t *testing.T, path string) (all, fromSchema []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		origin, msg, ok := strings.Cut(line, " ")
		require.True(t, ok && (origin == "schema" || origin == "go"), "%s: line %q must start with schema or go", path, line)
		all = append(all, msg)
		if origin == "schema" {
			fromSchema = append(fromSchema, msg)
		}
	}
	require.NotEmpty(t, all, path)
	return all, fromSchema
}

// TestValidDefinitionsMatchSchema: the examples and testdata/valid compile
// and pass the published schema.
func TestValidDefinitionsMatchSchema(t *testing.T) {
	t.Parallel()
	examples, err := filepath.Glob("../examples/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	valid, err := filepath.Glob("testdata/valid/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, valid)
	for _, f := range append(examples, valid...) {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = Compile(raw, BuiltinRegistry())
		require.NoError(t, err, f)
		require.Empty(t, editorErrors(t, raw), f)
	}
}

func TestValidNullsMeanDefaults(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/valid/nulls-mean-absent.json")
	require.NoError(t, err)
	wf := requireValid(t, raw)
	w, _ := wf.Node("w")
	cfg := w.Config.(*WaitEvents)
	require.Equal(t, "POST", cfg.APICall.Method)
	require.Equal(t, DefaultCorrelationIDHeader, cfg.APICall.CorrelationIDHeader)
	require.True(t, cfg.APICall.Required)
	require.Equal(t, DefaultWaitTimeout, cfg.Timeout)
	require.Equal(t, map[string]any{"data.status": nil}, cfg.KafkaEvent.Filter)
	require.Equal(t, vocab.StrategyAll, cfg.AggregationStrategy)
	off, _ := wf.Node("off")
	require.Empty(t, off.Config.(*WaitEvents).Expected())
	h, _ := wf.Node("h")
	require.Equal(t, &HTTP{URL: "https://a.example", Method: "GET", Timeout: DefaultHTTPTimeout, FailOnNon2xx: true}, h.Config)
}

func TestSchemaFiles(t *testing.T) {
	t.Parallel()
	names := SchemaNames()
	require.Equal(t, []string{"common.json", "http.json", "wait.json", "wait_events.json", "workflow.json"}, names)
	for _, name := range names {
		b, ok := Schema(name)
		require.True(t, ok, name)
		onDisk, err := os.ReadFile(filepath.Join("schema", name))
		require.NoError(t, err)
		require.Equal(t, onDisk, b, "served as committed")
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc))
		require.NotContains(t, doc, "$id", "relative $refs resolve where the file was loaded from")
		require.Equal(t, "https://json-schema.org/draft/2020-12/schema", doc["$schema"])
	}
	for _, name := range []string{"nope.json", "../workflow.go", "schema/workflow.json", ""} {
		_, ok := Schema(name)
		require.False(t, ok, name)
	}
	// Every built-in node type has its schema.
	for _, typ := range BuiltinRegistry().Known() {
		require.Contains(t, names, nodeSchemas[typ], typ)
	}
	names[0] = "mutated"
	require.Equal(t, "common.json", SchemaNames()[0])
}

func TestCompileSchemasFails(t *testing.T) {
	t.Parallel()
	good := fstest.MapFS{}
	for _, name := range SchemaNames() {
		b, _ := Schema(name)
		good[name] = &fstest.MapFile{Data: b}
	}
	_, err := compileSchemas(good)
	require.NoError(t, err)

	tests := []struct {
		name    string
		file    string
		content string
		want    string
	}{
		{"not JSON", "http.json", `{"type": `, "http.json"},
		{"not an object", "http.json", `[]`, `http.json: not a JSON object`},
		{"an $id", "http.json", `{"$id": "https://elsewhere.example/http.json"}`, `http.json: has $id https://elsewhere.example/http.json`},
		{"invalid keyword", "http.json", `{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "objekt"}`, "http.json"},
		{"dangling $ref", "wait.json", `{"$ref": "missing.json"}`, "missing.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fsys := fstest.MapFS{}
			for k, v := range good {
				fsys[k] = v
			}
			fsys[tt.file] = &fstest.MapFile{Data: []byte(tt.content)}
			_, err := compileSchemas(fsys)
			require.ErrorContains(t, err, tt.want)

			dir := fstest.MapFS{}
			for k, v := range fsys {
				dir["schema/"+k] = v
			}
			require.PanicsWithValue(t, "workflow: embedded JSON Schemas do not compile (fix workflow/schema): "+err.Error(),
				func() { mustCompileSchemas(dir, "schema") })
		})
	}
}

// schemaDoc returns the decoded schema file name.
func schemaDoc(t *testing.T, name string) map[string]any {
	t.Helper()
	b, ok := Schema(name)
	require.True(t, ok)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	return doc
}

// at follows keys through nested objects.
func at(t *testing.T, v any, keys ...string) any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		require.True(t, ok, "at %q", k)
		v = m[k]
	}
	return v
}

// TestSchemaMatchesGo: the values the Go code acts on (strategies, event
// names, defaults, bounds) are the ones the schema states.
func TestSchemaMatchesGo(t *testing.T) {
	t.Parallel()
	we := schemaDoc(t, "wait_events.json")
	require.Equal(t, []any{string(vocab.StrategyAll), string(vocab.StrategyAny), string(vocab.StrategyRequiredOnly), string(vocab.StrategyCustom), nil}, at(t, we, "properties", "aggregationStrategy", "enum"))
	require.Equal(t, string(vocab.StrategyAll), at(t, we, "properties", "aggregationStrategy", "default"))
	require.Equal(t, []any{string(vocab.OnTimeoutFail), string(vocab.OnTimeoutContinue), string(vocab.OnTimeoutContinueWithPartial), nil}, at(t, we, "properties", "onTimeout", "enum"))
	require.Equal(t, string(vocab.OnTimeoutFail), at(t, we, "properties", "onTimeout", "default"))
	for _, n := range eventNames {
		// The two built-in names are valid event names, reserved for apiCall/kafkaEvent.
		require.Regexp(t, at(t, we, "$defs", "eventName", "pattern"), n)
	}
	require.Equal(t, []any{string(SourceCallback), string(SourceKafka), string(SourceSend)}, at(t, we, "$defs", "event", "properties", "source", "enum"))
	require.Equal(t, []any{string(BufferFIFO), string(BufferLastWriteWins), nil}, at(t, we, "$defs", "event", "properties", "buffer", "enum"))
	require.Equal(t, string(BufferFIFO), at(t, we, "$defs", "event", "properties", "buffer", "default"))
	require.Equal(t, []any{MatchOpEq}, at(t, we, "$defs", "match", "properties", "op", "enum"))
	require.Equal(t, DefaultWaitTimeout.Seconds(), at(t, we, "properties", "timeout", "default"))
	api := at(t, we, "$defs", "apiCall", "properties")
	require.Equal(t, "POST", at(t, api, "method", "default"))
	require.Equal(t, DefaultCorrelationIDField, at(t, api, "correlationIdField", "default"))
	require.Equal(t, DefaultCorrelationIDHeader, at(t, api, "correlationIdHeader", "default"))
	require.Equal(t, DefaultExecutionIDField, at(t, api, "executionIdField", "default"))
	require.Equal(t, DefaultExecutionIDHeader, at(t, api, "executionIdHeader", "default"))
	kafka := at(t, we, "$defs", "kafkaEvent", "properties")
	require.Equal(t, DefaultCorrelationIDField, at(t, kafka, "correlationIdField", "default"))
	require.Equal(t, DefaultExecutionIDField, at(t, kafka, "executionIdField", "default"))

	h := schemaDoc(t, "http.json")
	require.Equal(t, MaxHTTPTimeout.Seconds(), at(t, h, "properties", "timeout", "maximum"))
	require.Equal(t, DefaultHTTPTimeout.Seconds(), at(t, h, "properties", "timeout", "default"))
	require.Equal(t, "GET", at(t, h, "properties", "method", "default"))

	w := schemaDoc(t, "wait.json")
	for _, mode := range []string{WaitFor, WaitUntil, WaitUntilTime} {
		require.Contains(t, at(t, w, "properties"), mode)
	}

	wf := schemaDoc(t, "workflow.json")
	require.Equal(t, float64(maxConditionLen), at(t, wf, "$defs", "edge", "properties", "condition", "maxLength"))
	// builtinNodeData dispatches every built-in type to its schema.
	var dispatched []string
	for _, branch := range at(t, wf, "$defs", "builtinNodeData", "allOf").([]any) {
		typ := at(t, branch, "if", "properties", "type", "const").(string)
		dispatched = append(dispatched, typ)
		ref := at(t, branch, "then", "properties", "data", "then", "$ref")
		require.Equal(t, nodeSchemas[typ], ref, typ)
	}
	slices.Sort(dispatched)
	require.Equal(t, BuiltinRegistry().Known(), dispatched)
}

// TestSchemaNodeDataRequired: the editor's rule for absent data (workflow.json
// requires data for a type) matches the service's (data is required when the
// type's schema rejects {}).
func TestSchemaNodeDataRequired(t *testing.T) {
	t.Parallel()
	for typ, sch := range schemas.nodes {
		rejectsEmpty := len(schemas.validate(sch, map[string]any{}, "")) > 0
		raw := []byte(`{"name": "x", "nodes": [{"id": "a", "type": "` + typ + `"}]}`)
		editorRequires := slices.Contains(editorErrors(t, raw), "nodes[0].data: required")
		require.Equal(t, rejectsEmpty, editorRequires, typ)
		_, err := Compile(raw, nil)
		if rejectsEmpty {
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, []FieldError{{Path: "nodes[0].data", Message: "required"}}, ve.Errors)
		} else {
			require.NoError(t, err, typ)
		}
	}
}

// TestSchemaLint keeps the schemas useful in an editor and their errors
// readable: every field is described, a subschema that combines
// alternatives words its failure, and propertyNames is avoided (jsonschema
// v6.0.3 reports its errors at a wrong instance location).
func TestSchemaLint(t *testing.T) {
	t.Parallel()
	s, err := editor()
	require.NoError(t, err)
	for _, name := range SchemaNames() {
		doc := schemaDoc(t, name)
		var walk func(v any, loc string, conditional bool)
		walk = func(v any, loc string, conditional bool) {
			switch x := v.(type) {
			case []any:
				for i, e := range x {
					walk(e, loc+"/"+strconv.Itoa(i), conditional)
				}
			case map[string]any:
				require.NotContains(t, x, "propertyNames", "%s%s", name, loc)
				for _, kw := range []string{"anyOf", "oneOf", "not"} {
					if _, ok := x[kw]; ok && !conditional {
						require.Contains(t, x, "errorMessage", "%s%s: %s needs an errorMessage", name, loc, kw)
					}
				}
				if props, ok := x["properties"].(map[string]any); ok && !conditional {
					for p, sub := range props {
						require.True(t, described(s, name, sub), "%s%s/properties/%s has no description", name, loc, p)
					}
				}
				for k, sub := range x {
					// Conditions and the branches that restate properties
					// for them are not where fields are documented.
					cond := conditional || slices.Contains([]string{"if", "then", "else", "not", "anyOf", "oneOf", "allOf"}, k)
					walk(sub, loc+"/"+k, cond)
				}
			}
		}
		walk(doc, "#", false)
	}
}

// described reports whether a property schema has a description, directly
// or through its $ref.
func described(s *schemaSet, file string, sub any) bool {
	m, _ := sub.(map[string]any)
	if d, _ := m["description"].(string); d != "" {
		return true
	}
	ref, _ := m["$ref"].(string)
	if ref == "" {
		return false
	}
	if strings.HasPrefix(ref, "#") {
		ref = file + ref
	}
	target, _ := s.lookup(SchemaBaseURL + ref).(map[string]any)
	d, _ := target["description"].(string)
	return d != ""
}

func TestSchemaMessages(t *testing.T) {
	t.Parallel()
	sch := schemas.nodes[TypeHTTP]
	tests := []struct {
		data string
		want []FieldError
	}{
		{`{"url": "http://a", "timeout": -1}`, []FieldError{{"d.timeout", "must be greater than 0"}}},
		{`{"url": "http://a", "timeout": 60.5}`, []FieldError{{"d.timeout", "must be at most 60"}}},
		{`{"url": "http://a", "timeout": [1]}`, []FieldError{{"d.timeout", `must be a number of seconds or a duration string like "90s"`}}},
		{`{"url": "http://a", "method": 1, "failOnNon2xx": {}}`, []FieldError{{"d.failOnNon2xx", "must be a boolean"}, {"d.method", "must be a string"}}},
		{`[]`, []FieldError{{"d", "must be an object"}}},
		{`{"url": "http://a", "headers": {"0": "x", "a b": "y", "ok": 1}}`, []FieldError{
			{`d.headers["a b"]`, "invalid header name: use letters, digits and !#$%&'*+.^_`|~-"},
			{"d.headers.ok", "must be a string"},
		}},
	}
	for _, tt := range tests {
		v, err := decodeInstance([]byte(tt.data))
		require.NoError(t, err)
		require.Equal(t, tt.want, schemas.validate(sch, v, "d"), tt.data)
	}
	require.Equal(t, "must be a number, a string or an array", "must be "+typeNames([]string{"number", "string", "array", "null"}))
	require.Equal(t, "must be null", "must be "+typeNames([]string{"null"}))
}

func TestInstancePath(t *testing.T) {
	t.Parallel()
	doc := map[string]any{"nodes": []any{map[string]any{"0": map[string]any{"odd key": 1}}}}
	require.Equal(t, `base.nodes[0].0["odd key"]`, instancePath("base", doc, []string{"nodes", "0", "0", "odd key"}))
	require.Equal(t, `nodes[0].data.url`, instancePath("", doc, []string{"nodes", "0", "data", "url"}))
	require.Equal(t, `["odd key"]`, instancePath("", doc, []string{"odd key"}))
	require.Equal(t, `nodes.7`, instancePath("", map[string]any{}, []string{"nodes", "7"}))
}

func TestSplitAndComparePaths(t *testing.T) {
	t.Parallel()
	segs := splitPath(`nodes[12].data["a.b"].x[3]`)
	var got []string
	for _, s := range segs {
		if s.index >= 0 {
			got = append(got, "#"+strconv.Itoa(s.index))
		} else {
			got = append(got, s.key)
		}
	}
	require.Equal(t, []string{"nodes", "#12", "data", "a.b", "x", "#3"}, got)
	require.Equal(t, "nodes[12]", `nodes[12].data["a.b"].x[3]`[:segs[1].end])
	require.Equal(t, `nodes[12].data["a.b"]`, `nodes[12].data["a.b"].x[3]`[:segs[3].end])

	// Malformed remainders become one key rather than being dropped.
	require.Len(t, splitPath(`a[x`), 2)
	require.Len(t, splitPath(`.a`), 1)
	require.Empty(t, splitPath(``))

	paths := []string{`nodes[10]`, `nodes[2].id`, `edges`, `nodes[2]`, ``, `["odd key"]`, `nodes[2].data.a`, `name`}
	slices.SortFunc(paths, comparePaths)
	require.Equal(t, []string{``, `edges`, `name`, `nodes[2]`, `nodes[2].data.a`, `nodes[2].id`, `nodes[10]`, `["odd key"]`}, paths)
}

func TestSortByDocument(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"nodes": [{"type": "x", "id": "a"}, {"data": {"b": 1, "a": 2}}], "name": 5}`)
	errs := []FieldError{
		{"name", "must be a string"},
		{"nodes[1].data.a", "second"},
		{"nodes[1].data.zz", "missing: at its parent"},
		{"nodes[0].id", "id"},
		{"", "root"},
		{"nodes[1].data.b", "first"},
		{"nodes[0].type", "type"},
		{"nodes[1].data.a", "second, again"},
	}
	sortByDocument(raw, errs)
	require.Equal(t, []FieldError{
		{"", "root"},
		{"nodes[0].type", "type"},
		{"nodes[0].id", "id"},
		{"nodes[1].data.zz", "missing: at its parent"},
		{"nodes[1].data.b", "first"},
		{"nodes[1].data.a", "second"},
		{"nodes[1].data.a", "second, again"},
		{"name", "must be a string"},
	}, errs)
}

// TestParseNodeDataDirectly: the parsers validate their data themselves, so
// callers outside Compile (the consumer reads kafkaEvent blocks) get the same
// checks.
func TestParseNodeDataDirectly(t *testing.T) {
	t.Parallel()
	_, errs := ParseWaitEventsNode(json.RawMessage(`{"kafkaEvent": {"topic": 5, "timeout": "1m"}}`), "")
	require.Equal(t, []FieldError{{"kafkaEvent.topic", "must be a string"}}, errs)
	cfg, errs := ParseWaitEventsNode(json.RawMessage(`{"kafkaEvent": {"topic": "t", "timeout": "1m"}}`), "")
	require.Empty(t, errs)
	require.Equal(t, time.Minute, cfg.(*WaitEvents).KafkaEvent.Timeout)
	_, errs = ParseHTTPNode(json.RawMessage(`"x"`), "d")
	require.Equal(t, []FieldError{{"d", "must be an object"}}, errs)
	_, errs = ParseHTTPNode(json.RawMessage(`{"url": `), "d")
	require.Len(t, errs, 1)
	require.True(t, strings.HasPrefix(errs[0].Message, "malformed JSON"), errs[0].Message)
	_, errs = ParseWaitNode(nil, "d")
	require.Equal(t, []FieldError{{"d", "required"}}, errs)
}

// TestSchemasServeEditors: an editor resolves the files' relative $refs against
// where it loaded them; every reference must name a published file.
func TestSchemasServeEditors(t *testing.T) {
	t.Parallel()
	refs := map[string]bool{}
	for _, name := range SchemaNames() {
		b, _ := Schema(name)
		for _, part := range strings.Split(string(b), `"$ref": "`)[1:] {
			ref, _, _ := strings.Cut(part, `"`)
			file, _, _ := strings.Cut(ref, "#")
			if file != "" {
				refs[file] = true
			}
		}
	}
	for ref := range refs {
		_, ok := Schema(ref)
		require.True(t, ok, ref)
	}
	require.True(t, refs["common.json"] && refs["http.json"] && refs["wait.json"] && refs["wait_events.json"], "%v", refs)
}
