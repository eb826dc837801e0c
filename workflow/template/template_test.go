package template

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	require.NoError(t, d.Decode(&v))
	return v
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func testScope(t *testing.T) Scope {
	return Scope{
		Trigger: decode(t, `{"customer": {"name": "Ada", "tags": ["vip", "eu"]}, "amount": 120.5, "data": {"id": 7}, "flag": true, "none": null}`),
		Vars:    map[string]any{"serviceUrl": "https://svc.internal", "apiKey": "from-definition", "retries": json.Number("3"), "cfg": map[string]any{"region": "eu"}},
		LookupEnv: env(map[string]string{
			"RENDEZVOUS_VAR_APIKEY":   "from-env",
			"RENDEZVOUS_VAR_MY_TOKEN": "tok",
			"RENDEZVOUS_VAR_JSONCFG":  `{"zone": "b"}`,
		}),
		ExecutionID:   "exec-1",
		CorrelationID: "corr-1",
		Nodes: map[string]any{
			"fetch":      decode(t, `{"status": 200, "body": {"items": [{"sku": "A"}]}}`),
			"step.2":     map[string]any{"ok": true},
			"has.output": map[string]any{"v": "x"},
		},
	}
}

func TestRenderString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr string
	}{
		{name: "plain", in: "no templates here", want: "no templates here"},
		{name: "var", in: "@{_vars.serviceUrl}/process", want: "https://svc.internal/process"},
		{name: "env overrides var", in: "Bearer @{_vars.apiKey}", want: "Bearer from-env"},
		{name: "env name normalized", in: "@{_vars.my-token}", want: "tok"},
		{name: "env json deeper path", in: "@{_vars.jsonCfg.zone}", want: "b"},
		{name: "var nested", in: "@{_vars.cfg.region}", want: "eu"},
		{name: "number var", in: "n=@{_vars.retries}", want: "n=3"},
		{name: "trigger path", in: "@{_trigger.customer.name}", want: "Ada"},
		{name: "array index", in: "@{_trigger.customer.tags[1]}-@{_trigger.customer.tags.0}", want: "eu-vip"},
		{name: "lone object is json", in: "@{_trigger.data}", want: `{"id":7}`},
		{name: "number", in: "@{_trigger.amount}", want: "120.5"},
		{name: "bool and null", in: "@{_trigger.flag}/@{_trigger.none}", want: "true/null"},
		{name: "execution", in: "@{_execution.id}:@{_execution.correlationId}", want: "exec-1:corr-1"},
		{name: "node output", in: "@{nodes.fetch.output.body.items[0].sku}", want: "A"},
		{name: "node id with dots", in: "@{nodes.step.2.output.ok}", want: "true"},
		{name: "node id containing output", in: "@{nodes.has.output.output.v}", want: "x"},
		{name: "whitespace", in: "@{ _trigger.customer.name }", want: "Ada"},
		{name: "escape", in: "literal @@{_trigger.x} and @{_trigger.customer.name}", want: "literal @{_trigger.x} and Ada"},
		{name: "lone at", in: "a@b @ {x} @@", want: "a@b @ {x} @@"},
		{name: "missing field", in: "@{_trigger.customer.email}", wantErr: `@{_trigger.customer.email}: _trigger.customer has no field "email"`},
		{name: "missing index", in: "@{_trigger.customer.tags[5]}", wantErr: `_trigger.customer.tags has no index 5 (length 2)`},
		{name: "into scalar", in: "@{_trigger.customer.name.first}", wantErr: `_trigger.customer.name is a string, cannot read "first"`},
		{name: "into null", in: "@{_trigger.none.x}", wantErr: `_trigger.none is null, cannot read "x"`},
		{name: "missing var", in: "@{_vars.nope}", wantErr: `_vars has no field "nope" (and RENDEZVOUS_VAR_NOPE is not set)`},
		{name: "missing node", in: "@{nodes.later.output}", wantErr: `node "later" has no output`},
		{name: "syntax", in: "@{_trigger", wantErr: `unterminated "@{" at offset 0`},
		{name: "unknown root", in: "@{trigger.x}", wantErr: `unknown root "trigger"`},
	}
	sc := testScope(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := RenderString(tt.in, sc)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRenderMissingIsErrMissing(t *testing.T) {
	t.Parallel()
	_, err := RenderString("@{_trigger.nope}", testScope(t))
	require.ErrorIs(t, err, ErrMissing)
	_, err = RenderString("@{_trigger", testScope(t))
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrMissing)
}

func TestRenderCorrelationUnavailable(t *testing.T) {
	t.Parallel()
	sc := testScope(t)
	sc.CorrelationID = ""
	_, err := RenderString("@{_execution.correlationId}", sc)
	require.EqualError(t, err, "@{_execution.correlationId}: _execution.correlationId is not available in this node")
	require.ErrorIs(t, err, ErrMissing)
}

func TestRenderDefaultLookupEnv(t *testing.T) {
	t.Setenv("RENDEZVOUS_VAR_SERVICEURL", "http://from-os")
	got, err := RenderString("@{_vars.serviceUrl}", Scope{Vars: map[string]any{"serviceUrl": "x"}})
	require.NoError(t, err)
	require.Equal(t, "http://from-os", got)
}

func TestRenderValue(t *testing.T) {
	t.Parallel()
	sc := testScope(t)
	in := decode(t, `{
		"data": "@{_trigger.data}",
		"amount": "@{_trigger.amount}",
		"label": "amount=@{_trigger.amount} for @{_trigger.customer.name}",
		"tags": ["@{_trigger.customer.tags}", "static", 1, true, null],
		"@{_trigger.customer.name}": "keys are not templated",
		"nested": {"corr": "@{_execution.correlationId}"}
	}`)
	got, err := Render(in, sc)
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"data":                      map[string]any{"id": json.Number("7")},
		"amount":                    json.Number("120.5"),
		"label":                     "amount=120.5 for Ada",
		"tags":                      []any{[]any{"vip", "eu"}, "static", json.Number("1"), true, nil},
		"@{_trigger.customer.name}": "keys are not templated",
		"nested":                    map[string]any{"corr": "corr-1"},
	}, got)

	// The result is a deep copy: mutating it leaves the scope intact.
	got.(map[string]any)["data"].(map[string]any)["id"] = "changed"
	require.Equal(t, json.Number("7"), sc.Trigger.(map[string]any)["data"].(map[string]any)["id"])
	// ...and the input intact.
	require.Equal(t, "@{_trigger.data}", in.(map[string]any)["data"])
}

func TestRenderErrorLocation(t *testing.T) {
	t.Parallel()
	sc := testScope(t)
	tests := []struct {
		name string
		in   any
		want string
		loc  string
	}{
		{
			name: "nested map",
			in:   map[string]any{"body": map[string]any{"data": "@{_trigger.customer.email}"}},
			want: `body.data: @{_trigger.customer.email}: _trigger.customer has no field "email"`,
			loc:  "body.data",
		},
		{
			name: "array",
			in:   map[string]any{"items": []any{"ok", "x @{_vars.nope}"}},
			want: `items[1]: @{_vars.nope}: _vars has no field "nope" (and RENDEZVOUS_VAR_NOPE is not set)`,
			loc:  "items[1]",
		},
		{
			name: "syntax",
			in:   map[string]any{"h": "@{}"},
			want: `h: @{} at offset 0: empty expression`,
			loc:  "h",
		},
		{
			name: "top level string",
			in:   "@{_trigger.zzz}",
			want: `@{_trigger.zzz}: _trigger has no field "zzz"`,
		},
		{
			name: "string map",
			in:   map[string]string{"Authorization": "Bearer @{_vars.missing}"},
			want: `Authorization: @{_vars.missing}: _vars has no field "missing" (and RENDEZVOUS_VAR_MISSING is not set)`,
			loc:  "Authorization",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Render(tt.in, sc)
			require.EqualError(t, err, tt.want)
			var te *Error
			require.True(t, errors.As(err, &te))
			require.Equal(t, tt.loc, te.Location)
		})
	}
}

func TestRenderStringMapKeepsType(t *testing.T) {
	t.Parallel()
	got, err := Render(map[string]string{"X-Id": "@{_execution.id}", "X-N": "@{_trigger.data}"}, testScope(t))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Id": "exec-1", "X-N": `{"id":7}`}, got)
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string
	}{
		{in: ""},
		{in: "plain"},
		{in: "@{_vars.serviceUrl}/process"},
		{in: "@{_trigger}"},
		{in: "@{_trigger.items[0].sku}"},
		{in: "@{_execution.id} @{_execution.correlationId}"},
		{in: "@{nodes.fetch.output}"},
		{in: "@{nodes.fetch.output.body.x}"},
		{in: "@@{not a template"},
		{in: "@{_trigger", wantErr: `unterminated "@{" at offset 0`},
		{in: "ok @{_trigger.a} then @{", wantErr: `unterminated "@{" at offset 22`},
		{in: "@{}", wantErr: "empty expression"},
		{in: "@{   }", wantErr: "empty expression"},
		{in: "@{foo.bar}", wantErr: `unknown root "foo" (known: _trigger, _vars, _execution, nodes, secrets)`},
		{in: "@{_vars}", wantErr: "_vars needs a variable name"},
		{in: "Bearer @{secrets.API_TOKEN}"},
		{in: "@{secrets}", wantErr: "secrets are named @{secrets.NAME}"},
		{in: "@{secrets.a.b}", wantErr: "secrets are named @{secrets.NAME}"},
		{in: "@{_execution.start}", wantErr: "_execution fields are id and correlationId"},
		{in: "@{_execution}", wantErr: "_execution fields are id and correlationId"},
		{in: "@{_execution.id.x}", wantErr: "_execution fields are id and correlationId"},
		{in: "@{nodes.fetch}", wantErr: "nodes.<id>.output"},
		{in: "@{nodes.output}", wantErr: "nodes.<id>.output"},
		{in: "@{nodes.fetch.result}", wantErr: "nodes.<id>.output"},
		{in: "@{_trigger..x}", wantErr: "invalid path: empty segment"},
		{in: "@{_trigger.a[x]}", wantErr: "invalid path"},
		{in: "@{_trigger.a b}", wantErr: "single dot path"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			err := Check(tt.in)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestHasTemplates(t *testing.T) {
	t.Parallel()
	require.True(t, HasTemplates("x @{_trigger} y"))
	require.False(t, HasTemplates("https://example.com"))
	require.False(t, HasTemplates("@@{_trigger}"))
	require.False(t, HasTemplates("@{"))
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"serviceUrl": "RENDEZVOUS_VAR_SERVICEURL",
		"api-key":    "RENDEZVOUS_VAR_API_KEY",
		"a.b c":      "RENDEZVOUS_VAR_A_B_C",
		"größe":      "RENDEZVOUS_VAR_GR__E",
	}
	for in, want := range tests {
		require.Equal(t, want, EnvName(in), in)
	}
}

func FuzzRender(f *testing.F) {
	for _, s := range []string{
		"", "@{", "@{}", "@@{", "@{_trigger}", "@{_trigger.a[0].b}", "x @{_vars.k} y",
		"@{nodes.a.output.b}", "@{nodes.a.b.output}", "@{_execution.id}", "@{_execution.correlationId}",
		"@{_trigger.a[}", "}@{@{}}", "@{_vars.a.b.c}",
	} {
		f.Add(s)
	}
	sc := Scope{
		Trigger:   map[string]any{"a": []any{map[string]any{"b": json.Number("1")}}},
		Vars:      map[string]any{"k": "v", "a": map[string]any{"b": nil}},
		LookupEnv: env(map[string]string{"RENDEZVOUS_VAR_J": `[1,{"x":2}]`}),
		Nodes:     map[string]any{"a": map[string]any{"b": "c"}, "a.b": nil},
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = Check(s)
		_, _ = RenderString(s, sc)
		_, _ = Render(map[string]any{s: []any{s, map[string]any{"k": s}}}, sc)
	})
}

// TestSecretRendersAsMarkedReference: a secret is never resolved by rendering; it stays
// a reference carrying the render's mark, so only the sender (which knows the mark) puts
// a value there, and text from the input that merely looks like a reference does not
// carry the mark.
func TestSecretRendersAsMarkedReference(t *testing.T) {
	sc := Scope{Trigger: map[string]any{"evil": "@{secrets.TOKEN}"}, SecretMark: "m1"}
	got, err := RenderString("Bearer @{secrets.TOKEN} @{_trigger.evil}", sc)
	require.NoError(t, err)
	require.Equal(t, "Bearer @{secrets.TOKEN:m1} @{secrets.TOKEN}", got)
	v, err := Render(map[string]any{"t": "@{secrets.TOKEN}"}, Scope{})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"t": "@{secrets.TOKEN}"}, v)
}
