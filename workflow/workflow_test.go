package workflow

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// orderFlow is a realistic definition: fetch an order, ask a payment
// service to process it (answer arrives via callback and Kafka), then
// branch on timeout.
const orderFlow = `{
  "name": "order-payment",
  "vars": {"serviceUrl": "https://payments.internal", "threshold": 100},
  "nodes": [
    {"id": "fetch-order", "type": "http", "data": {
      "url": "https://orders.internal/orders/@{_trigger.orderId}",
      "headers": {"Authorization": "Bearer @{_vars.ordersToken}"}
    }},
    {"id": "await-payment", "type": "wait_events", "data": {
      "apiCall": {
        "url": "@{_vars.serviceUrl}/process",
        "body": {"order": "@{nodes.fetch-order.output.body}", "correlation": "@{_execution.correlationId}"}
      },
      "kafkaEvent": {"topic": "payments.completed", "correlationIdField": "data.correlation_id", "filter": {"data.status": "ok"}},
      "timeout": "10m",
      "onTimeout": "continue_with_partial"
    }},
    {"id": "notify", "type": "http", "data": {"url": "https://notify.internal/ok", "method": "post", "body": "done"}},
    {"id": "escalate", "type": "http", "data": {"url": "https://notify.internal/late", "timeout": 2.5, "failOnNon2xx": false}}
  ],
  "edges": [
    {"source": "fetch-order", "target": "await-payment", "condition": "output.status < 400"},
    {"source": "await-payment", "target": "notify", "condition": "output.timeout == false"},
    {"source": "await-payment", "target": "escalate", "condition": "output.timeout == true"}
  ]
}`

func TestCompileOrderFlow(t *testing.T) {
	t.Parallel()
	wf := requireValid(t, []byte(orderFlow))

	require.Equal(t, []string{"fetch-order"}, wf.Roots())
	ids := []string{}
	for _, n := range wf.Nodes() {
		ids = append(ids, n.ID)
	}
	require.Equal(t, []string{"fetch-order", "await-payment", "notify", "escalate"}, ids)

	def := wf.Definition()
	require.Equal(t, "order-payment", def.Name)
	require.Equal(t, json.Number("100"), def.Vars["threshold"])
	require.Len(t, def.Edges, 3)
	require.JSONEq(t, `{"url": "https://notify.internal/ok", "method": "post", "body": "done"}`, string(def.Nodes[2].Data))

	n, ok := wf.Node("await-payment")
	require.True(t, ok)
	require.Equal(t, TypeWaitEvents, n.Type)
	w := n.Config.(*WaitEvents)
	require.Equal(t, &WaitEvents{
		APICall: &APICall{
			URL:    "@{_vars.serviceUrl}/process",
			Method: "POST",
			Body: map[string]any{
				"order":       "@{nodes.fetch-order.output.body}",
				"correlation": "@{_execution.correlationId}",
			},
			CorrelationIDField:  "correlation_id",
			CorrelationIDHeader: "X-Correlation-Id",
			ExecutionIDField:    "execution_id",
			ExecutionIDHeader:   "X-Execution-Id",
			Timeout:             600 * time.Second, // the node's overall timeout: the event has none of its own
			Required:            true,
		},
		KafkaEvent: &KafkaEvent{Format: FormatAuto,
			Topic:              "payments.completed",
			CorrelationIDField: "data.correlation_id",
			ExecutionIDField:   "execution_id",
			Filter:             map[string]any{"data.status": "ok"},
			Timeout:            600 * time.Second,
			Required:           true,
		},
		AggregationStrategy: "all",
		Timeout:             10 * time.Minute,
		OnTimeout:           "continue_with_partial",
		OutputMapping:       map[string]string{"apiResponse": "api_response", "kafkaEvent": "kafka_event"},
	}, w)
	require.Equal(t, []ExpectedEvent{
		{Name: EventAPIResponse, Source: SourceCallback, Required: true, Timeout: 600 * time.Second},
		{Name: EventKafka, Source: SourceKafka, Topic: "payments.completed", Filter: map[string]any{"data.status": "ok"}, Required: true, Timeout: 600 * time.Second},
	}, w.Expected())

	fetch, _ := wf.Node("fetch-order")
	require.Equal(t, &HTTP{
		URL:          "https://orders.internal/orders/@{_trigger.orderId}",
		Method:       "GET",
		Headers:      map[string]string{"Authorization": "Bearer @{_vars.ordersToken}"},
		Timeout:      10 * time.Second,
		FailOnNon2xx: true,
	}, fetch.Config)
	notify, _ := wf.Node("notify")
	require.Equal(t, "POST", notify.Config.(*HTTP).Method)
	require.Equal(t, "done", notify.Config.(*HTTP).Body)
	escalate, _ := wf.Node("escalate")
	require.Equal(t, 2500*time.Millisecond, escalate.Config.(*HTTP).Timeout)
	require.False(t, escalate.Config.(*HTTP).FailOnNon2xx)

	out := wf.Outgoing("await-payment")
	require.Len(t, out, 2)
	require.Equal(t, "notify", out[0].Target)
	in := wf.Incoming("await-payment")
	require.Len(t, in, 1)
	require.Equal(t, "fetch-order", in[0].Source)
	require.Empty(t, wf.Incoming("fetch-order"))

	// Timed out with partial results: only escalate runs.
	env := map[string]any{"output": map[string]any{"timeout": true}}
	ok, err := out[0].Eval(env)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = out[1].Eval(env)
	require.NoError(t, err)
	require.True(t, ok)

	// Accessors return copies.
	wf.Roots()[0] = "mutated"
	require.Equal(t, []string{"fetch-order"}, wf.Roots())
}

func TestWaitEventsDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want *WaitEvents
	}{
		{
			name: "no data: nothing to wait for",
			data: ``,
			want: &WaitEvents{AggregationStrategy: "all", Timeout: 300 * time.Second, OnTimeout: "fail", OutputMapping: map[string]string{}},
		},
		{
			name: "disabled objects are ignored, even invalid ones",
			data: `{"apiCall": {"enabled": false, "method": "BREW", "bogus": 1}, "kafkaEvent": {"enabled": false}}`,
			want: &WaitEvents{AggregationStrategy: "all", Timeout: 300 * time.Second, OnTimeout: "fail", OutputMapping: map[string]string{}},
		},
		{
			name: "kafka only, custom strategy, explicit mapping",
			data: `{"kafkaEvent": {"topic": "t1", "required": false, "timeout": 30, "filter": {"type": "done", "n": 1, "ok": true, "x": null}},
			        "aggregationStrategy": "custom", "requiredEvents": ["kafka_event"], "timeout": 60.5,
			        "outputMapping": {"result": "kafka_event.data.result", "raw": "kafka_event"}}`,
			want: &WaitEvents{
				KafkaEvent: &KafkaEvent{Format: FormatAuto,
					Topic: "t1", CorrelationIDField: "correlation_id", ExecutionIDField: "execution_id",
					Filter:  map[string]any{"type": "done", "n": json.Number("1"), "ok": true, "x": nil},
					Timeout: 30 * time.Second,
				},
				AggregationStrategy: "custom",
				RequiredEvents:      []string{"kafka_event"},
				Timeout:             60500 * time.Millisecond,
				OnTimeout:           "fail",
				OutputMapping:       map[string]string{"result": "kafka_event.data.result", "raw": "kafka_event"},
			},
		},
		{
			name: "api call with everything set",
			data: `{"apiCall": {"enabled": true, "url": "https://x.example/p", "method": "put", "headers": {"X-Key": "@{_vars.key}"},
			        "body": "raw @{_trigger.id}", "correlationIdField": "meta.corr", "correlationIdHeader": "X-Corr",
			        "executionIdField": "exec", "executionIdHeader": "X-Exec", "timeout": "1m", "required": false},
			        "aggregationStrategy": "any", "onTimeout": "continue"}`,
			want: &WaitEvents{
				APICall: &APICall{
					URL: "https://x.example/p", Method: "PUT", Headers: map[string]string{"X-Key": "@{_vars.key}"},
					Body: "raw @{_trigger.id}", CorrelationIDField: "meta.corr", CorrelationIDHeader: "X-Corr",
					ExecutionIDField: "exec", ExecutionIDHeader: "X-Exec", Timeout: time.Minute, Required: false,
				},
				AggregationStrategy: "any",
				Timeout:             300 * time.Second,
				OnTimeout:           "continue",
				OutputMapping:       map[string]string{"apiResponse": "api_response"},
			},
		},
		{
			name: "payload matches with lookback: buffer defaults to fifo, and only with lookback",
			data: `{"events": [
			          {"name": "paid", "source": "kafka", "topic": "payments", "type": "payment.settled", "lookback": "10m",
			           "match": {"left": "order.id", "op": "eq", "right": "input.order_id"}},
			          {"name": "latest", "source": "kafka", "topic": "payments", "lookback": 90, "buffer": "last_write_wins",
			           "match": {"left": "order.id", "op": "eq", "right": "input.order_id"}},
			          {"name": "live", "source": "kafka", "topic": "payments",
			           "match": {"left": "order.id", "op": "eq", "right": "input.order_id"}}
			        ], "aggregationStrategy": "any"}`,
			want: &WaitEvents{
				Events: []NamedEvent{
					{Name: "paid", Source: SourceKafka, Topic: "payments", Format: FormatAuto, Type: "payment.settled", Required: true, Timeout: 300 * time.Second,
						Match: &Match{Left: "order.id", Op: "eq", Right: "input.order_id"}, Lookback: 10 * time.Minute, Buffer: BufferFIFO},
					{Name: "latest", Source: SourceKafka, Topic: "payments", Format: FormatAuto, Required: true, Timeout: 300 * time.Second,
						Match: &Match{Left: "order.id", Op: "eq", Right: "input.order_id"}, Lookback: 90 * time.Second, Buffer: BufferLastWriteWins},
					{Name: "live", Source: SourceKafka, Topic: "payments", Format: FormatAuto, Required: true, Timeout: 300 * time.Second,
						Match: &Match{Left: "order.id", Op: "eq", Right: "input.order_id"}},
				},
				AggregationStrategy: "any",
				Timeout:             300 * time.Second,
				OnTimeout:           "fail",
				OutputMapping:       map[string]string{"paid": "paid", "latest": "latest", "live": "live"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var data json.RawMessage
			if tt.data != "" {
				data = json.RawMessage(tt.data)
			}
			cfg, errs := ParseWaitEventsNode(data, "nodes[0].data")
			require.Empty(t, errs)
			require.Equal(t, tt.want, cfg)
			def := `{"name": "w", "nodes": [{"id": "wait", "type": "wait_events"}]}`
			if tt.data != "" {
				def = waitNode(tt.data)
			}
			require.Empty(t, editorErrors(t, []byte(def)), "the published schema accepts it too")
		})
	}
}

// compileErrs compiles def and returns the rendered FieldErrors.
func compileErrs(t *testing.T, def string) []string {
	t.Helper()
	wf, err := Compile([]byte(def), BuiltinRegistry())
	require.Error(t, err)
	require.Nil(t, wf)
	var ve *ValidationError
	require.True(t, errors.As(err, &ve), "error %T is not a *ValidationError", err)
	out := make([]string, len(ve.Errors))
	for i, e := range ve.Errors {
		out[i] = e.String()
	}
	return out
}

// waitNode wraps wait_events data into a one-node definition.
func waitNode(data string) string {
	return `{"name": "w", "nodes": [{"id": "wait", "type": "wait_events", "data": ` + data + `}]}`
}

func httpNode(data string) string {
	return `{"name": "h", "nodes": [{"id": "call", "type": "http", "data": ` + data + `}]}`
}

// TestCompileErrors covers documents that are not JSON, which no schema can
// see. Invalid definitions are in testdata/invalid (TestInvalidCorpus), each
// error marked with whether the schema or Go code finds it.
func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		def  string
		want []string // every error, in order
	}{
		{name: "malformed JSON", def: `{"name": "x",}`, want: []string{`malformed JSON at line 1, column 14 (offset 13): invalid character '}' looking for beginning of object key string`}},
		{name: "malformed JSON on line 3", def: "{\n  \"name\": \"x\",\n}", want: []string{`malformed JSON at line 3, column 1 (offset 17): invalid character '}' looking for beginning of object key string`}},
		{name: "truncated JSON", def: `{"name": "x"`, want: []string{`malformed JSON at line 1, column 13 (offset 12): unexpected end of input`}},
		{name: "empty input", def: ``, want: []string{`malformed JSON at line 1, column 1 (offset 0): empty document`}},
		{name: "trailing data", def: `{"name": "x", "nodes": []} {}`, want: []string{`malformed JSON at line 1, column 28 (offset 27): unexpected data after the top-level value`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, compileErrs(t, tt.def))
		})
	}
}

func TestValidationErrorFormatting(t *testing.T) {
	t.Parallel()
	_, err := Compile([]byte(`{"nodes": [{"id": "a", "type": "nope"}]}`), nil)
	require.EqualError(t, err, `invalid definition: name: required; nodes[0].type: unknown node type "nope" (known: http, wait, wait_events)`)
	require.Equal(t, "boom", FieldError{Message: "boom"}.String())
	require.Equal(t, "a.b: boom", FieldError{Path: "a.b", Message: "boom"}.String())

	b, err := json.Marshal(FieldError{Path: "p", Message: "m"})
	require.NoError(t, err)
	require.JSONEq(t, `{"path": "p", "message": "m"}`, string(b))
}

func TestNeitherEventEnabledIsValid(t *testing.T) {
	t.Parallel()
	wf := requireValid(t, []byte(waitNode(`{"apiCall": {"enabled": false}}`)))
	n, _ := wf.Node("wait")
	require.Empty(t, n.Config.(*WaitEvents).Expected())
}

func TestCustomRegistry(t *testing.T) {
	t.Parallel()
	reg := BuiltinRegistry()
	reg["noop"] = func(data json.RawMessage, path string) (any, []FieldError) {
		if len(data) > 0 {
			return nil, []FieldError{{Path: path, Message: "takes no data"}}
		}
		return "noop-config", nil
	}
	reg["panics"] = func(json.RawMessage, string) (any, []FieldError) { panic("bug") }

	wf, err := Compile([]byte(`{"name": "x", "nodes": [{"id": "a", "type": "noop"}]}`), reg)
	require.NoError(t, err)
	n, _ := wf.Node("a")
	require.Equal(t, "noop-config", n.Config)

	errs := compileErrs2(t, `{"name": "x", "nodes": [{"id": "a", "type": "noop", "data": {}}, {"id": "b", "type": "panics"}]}`, reg)
	require.Equal(t, []string{
		`nodes[0].data: takes no data`,
		`nodes[1].data: internal error: node parser panicked: bug`,
	}, errs)

	_, err = Compile([]byte(`{"name": "x", "nodes": [{"id": "a", "type": "http", "data": {"url": "http://a"}}]}`), Registry{"noop": reg["noop"]})
	require.EqualError(t, err, `invalid definition: nodes[0].type: unknown node type "http" (known: noop)`)
}

func compileErrs2(t *testing.T, def string, reg Registry) []string {
	t.Helper()
	_, err := Compile([]byte(def), reg)
	var ve *ValidationError
	require.True(t, errors.As(err, &ve))
	out := []string{}
	for _, e := range ve.Errors {
		out = append(out, e.String())
	}
	return out
}

func TestGraphShape(t *testing.T) {
	t.Parallel()
	// Diamond with two roots: a -> c, b -> c, c -> d, a -> d.
	wf := requireValid(t, []byte(`{"name": "g", "nodes": [
		{"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"},
		{"id": "c", "type": "wait_events"}, {"id": "d", "type": "wait_events"}
	], "edges": [
		{"source": "a", "target": "c"}, {"source": "b", "target": "c"},
		{"source": "c", "target": "d"}, {"source": "a", "target": "d", "condition": "input.amount > vars.threshold"}
	], "vars": {"threshold": 100}}`))
	require.Equal(t, []string{"a", "b"}, wf.Roots())
	in := wf.Incoming("d")
	require.Len(t, in, 2)
	require.Equal(t, "c", in[0].Source)
	require.Equal(t, "a", in[1].Source)
	require.Len(t, wf.Outgoing("a"), 2)
	require.Empty(t, wf.Outgoing("d"))
	require.Nil(t, wf.Incoming("nope"))
	_, ok := wf.Node("nope")
	require.False(t, ok)

	ok, err := in[1].Eval(map[string]any{"input": map[string]any{"amount": json.Number("150")}, "vars": wf.Definition().Vars})
	require.NoError(t, err)
	require.True(t, ok)
}

func TestEdgeEval(t *testing.T) {
	t.Parallel()
	output := map[string]any{"status": json.Number("503"), "timeout": false, "body": map[string]any{"ok": true}, "ratio": json.Number("0.5")}
	env := map[string]any{
		"output": output,
		"input":  map[string]any{"amount": 120.0, "country": "DE"},
		"vars":   map[string]any{"limit": json.Number("100")},
		"nodes":  map[string]any{"fetch": map[string]any{"output": map[string]any{"status": 200}}},
	}
	tests := []struct {
		cond    string
		env     map[string]any
		want    bool
		wantErr string
	}{
		{cond: "", want: true},
		{cond: "output.timeout == false", want: true},
		{cond: "output.timeout == true", want: false},
		{cond: "output.status >= 400", want: true},
		{cond: "output.status >= 400 && output.status < 500", want: false},
		{cond: "output.ratio < 1", want: true},
		{cond: "input.amount > 100", want: true},
		{cond: "input.amount > vars.limit", want: true},
		{cond: "input.country in ['DE', 'FR']", want: true},
		{cond: "nodes.fetch.output.status == 200", want: true},
		{cond: "output.body.ok", want: true},
		{cond: "output.missing == nil", want: true},
		{cond: "output.missing == true", want: false},
		{cond: "output?.nope?.deeper == nil", want: true},
		{cond: "nodes.other?.output?.x == nil", want: true},
		{cond: "output.missing > 3", wantErr: "invalid operation"},
		{cond: "output.nope.deeper == 1", wantErr: "cannot fetch deeper"},
		{cond: "output.body", wantErr: `condition "output.body"`},
		// Absent env entries behave as empty objects.
		{cond: "output.timeout == nil && input.x == nil && vars.y == nil", env: map[string]any{}, want: true},
		{cond: "output.timeout == nil", env: nil, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.cond, func(t *testing.T) {
			t.Parallel()
			e := &CompiledEdge{Source: "a", Target: "b", Condition: tt.cond}
			if tt.cond != "" {
				prog, err := compileCondition(tt.cond)
				require.NoError(t, err)
				e.program = prog
			}
			useEnv := env
			if tt.env != nil || strings.HasPrefix(tt.cond, "output.timeout == nil") {
				useEnv = tt.env
			}
			got, err := e.Eval(useEnv)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	// The caller's env is not modified by number normalization.
	require.Equal(t, json.Number("503"), output["status"])
}

func TestEdgeEvalHandBuilt(t *testing.T) {
	t.Parallel()
	ok, err := (&CompiledEdge{Condition: "input.n == 1"}).Eval(map[string]any{"input": map[string]any{"n": 1}})
	require.NoError(t, err)
	require.True(t, ok)
	_, err = (&CompiledEdge{Condition: "bogus("}).Eval(nil)
	require.Error(t, err)
	_, err = (*CompiledEdge)(nil).Eval(nil)
	require.Error(t, err)
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      any
		want    time.Duration
		wantErr string
	}{
		{in: json.Number("90"), want: 90 * time.Second},
		{in: json.Number("0.25"), want: 250 * time.Millisecond},
		{in: "90s", want: 90 * time.Second},
		{in: "5m", want: 5 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "PT90M", want: 90 * time.Minute},
		{in: "P2D", want: 48 * time.Hour},
		{in: "1 hour", want: time.Hour},
		{in: "30 minutes", want: 30 * time.Minute},
		{in: "2 days", want: 48 * time.Hour},
		{in: "90 seconds", want: 90 * time.Second},
		{in: "1 month", wantErr: "months are not a fixed length"},
		{in: "0 seconds", wantErr: "must be greater than 0"},
		{in: "1 fortnight", wantErr: `or a number and a unit such as "90 minutes"`},
		{in: json.Number("0"), wantErr: "must be greater than 0"},
		{in: json.Number("1e-12"), wantErr: "too small"},
		{in: "0s", wantErr: "must be greater than 0"},
		{in: "5", wantErr: "invalid duration"},
		{in: false, wantErr: "must be a number of seconds"},
		{in: []any{}, wantErr: "must be a number of seconds"},
	}
	for _, tt := range tests {
		d, err := parseDuration(tt.in)
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, "%v", tt.in)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, d)
	}
}

// TestUnknownFieldSuggestion: a misspelled field names the closest property its schema
// declares at that place; a field like none of them gets no guess.
func TestUnknownFieldSuggestion(t *testing.T) {
	t.Parallel()
	errs := compileErrs2(t, `{"name": "w", "edge": [], "nodes": [{"id": "wait", "type": "wait_events", "data": {
		"apiCall": {"url": "http://x", "method": "POST", "requierd": true},
		"aggregationStrategie": "all", "timout": 30, "color": "red"}}]}`, nil)
	require.Contains(t, errs, `edge: unknown field; did you mean "edges"?`)
	require.Contains(t, errs, `nodes[0].data.apiCall.requierd: unknown field; did you mean "required"?`)
	require.Contains(t, errs, `nodes[0].data.aggregationStrategie: unknown field; did you mean "aggregationStrategy"?`)
	require.Contains(t, errs, `nodes[0].data.timout: unknown field; did you mean "timeout"?`)
	require.Contains(t, errs, `nodes[0].data.color: unknown field`)
}

// TestCredentialVarsWarn: a var named like a credential is a warning at its path that
// points at secrets; the definition stays valid.
func TestCredentialVarsWarn(t *testing.T) {
	wf, err := Compile([]byte(`{"name": "w", "vars": {"serviceUrl": "https://a", "apiToken": "t", "db-password": "p", "KEY": "k"},
		"nodes": [{"id": "a", "type": "http", "data": {"url": "@{_vars.serviceUrl}"}}]}`), nil)
	require.NoError(t, err)
	ws := wf.Warnings()
	require.Len(t, ws, 3)
	paths := []string{ws[0].Path, ws[1].Path, ws[2].Path}
	require.Equal(t, []string{"vars.apiToken", "vars.db-password", "vars.KEY"}, paths, "in document order")
	require.Contains(t, ws[0].Message, "@{secrets.apiToken}")
	require.Contains(t, ws[0].Message, "RENDEZVOUS_SECRET_APITOKEN")
	require.Contains(t, ws[1].Message, "RENDEZVOUS_SECRET_DB_PASSWORD")
	clean, err := Compile([]byte(`{"name": "w", "vars": {"serviceUrl": "https://a"}, "nodes": [{"id": "a", "type": "http", "data": {"url": "https://b"}}]}`), nil)
	require.NoError(t, err)
	require.Empty(t, clean.Warnings())
}
