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
	wf, err := Compile([]byte(orderFlow), BuiltinRegistry())
	require.NoError(t, err)

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
		KafkaEvent: &KafkaEvent{
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
		{Name: EventKafka, Source: SourceKafka, Topic: "payments.completed", Required: true, Timeout: 600 * time.Second},
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
	ok, err = out[0].Eval(env)
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
				KafkaEvent: &KafkaEvent{
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

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		def  string
		want []string // every error, in order
	}{
		// Document level.
		{name: "malformed JSON", def: `{"name": "x",}`, want: []string{`malformed JSON at offset 14: invalid character '}' looking for beginning of object key string`}},
		{name: "truncated JSON", def: `{"name": "x"`, want: []string{`malformed JSON at offset 12: unexpected end of input`}},
		{name: "empty input", def: ``, want: []string{`malformed JSON at offset 0: empty document`}},
		{name: "trailing data", def: `{"name": "x", "nodes": []} {}`, want: []string{`malformed JSON at offset 26: unexpected data after the top-level value`}},
		{name: "not an object", def: `[1, 2]`, want: []string{`must be a JSON object`}},
		{name: "empty object", def: `{}`, want: []string{`name: required`, `nodes: required: at least one node`}},
		{name: "unknown top-level fields", def: `{"name": "x", "nodes": [{"id": "a", "type": "http", "data": {"url": "http://a"}}], "nodez": [], "odd key": 1}`,
			want: []string{`nodez: unknown field`, `["odd key"]: unknown field`}},
		{name: "bad name and types", def: `{"name": "-bad name", "vars": [], "nodes": {}, "edges": "x"}`,
			want: []string{`name: must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`, `vars: must be an object`, `nodes: must be an array`, `edges: must be an array`}},
		{name: "name wrong type", def: `{"name": 5, "nodes": []}`, want: []string{`name: must be a string`, `nodes: required: at least one node`}},
		{name: "name too long", def: `{"name": "` + strings.Repeat("a", 129) + `", "nodes": [{"id": "a", "type": "http", "data": {"url": "http://a"}}]}`,
			want: []string{`name: must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`}},

		// Nodes.
		{name: "node problems", def: `{"name": "x", "nodes": [
			{"id": "a", "type": "http", "dat": {}},
			{"id": "b", "type": "foo"},
			{"type": "http", "data": {"url": "http://a"}},
			{"id": "a", "type": "http", "data": {"url": "http://a"}},
			{"id": "b/c", "type": 3, "data": []},
			"junk"
		]}`, want: []string{
			`nodes[0].dat: unknown field`,
			`nodes[0].data.url: required`,
			`nodes[1].type: unknown node type "foo" (known: http, wait, wait_events)`,
			`nodes[2].id: required`,
			`nodes[3].id: duplicate node id "a" (also nodes[0])`,
			`nodes[4].id: must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`,
			`nodes[4].type: must be a string`,
			`nodes[4].data: must be an object`,
			`nodes[5]: must be an object`,
		}},
		{name: "empty nodes", def: `{"name": "x", "nodes": []}`, want: []string{`nodes: required: at least one node`}},

		// Edges and graph.
		{name: "edge problems", def: `{"name": "x", "nodes": [
			{"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"}
		], "edges": [
			{"source": "a", "target": "b"},
			{"source": "a", "target": "ghost"},
			{"source": "a", "target": "a"},
			{"source": "a", "target": "b", "condition": "output.x"},
			{"target": "b", "cond": "x"},
			{"source": "b", "target": "a", "condition": "nope == 1"},
			{"source": "a", "target": "b", "condition": 5},
			3
		]}`, want: []string{
			`edges[1].target: unknown node "ghost"`,
			`edges[2]: self-loop on node "a"`,
			`edges[3]: duplicate edge a -> b (also edges[0])`,
			`edges[4].cond: unknown field`,
			`edges[4].source: required`,
			`edges[5].condition: unknown name nope (1:1)`,
			`edges[6]: duplicate edge a -> b (also edges[0])`,
			`edges[6].condition: must be a string`,
			`edges[7]: must be an object`,
			`edges: cycle a -> b -> a`,
		}},
		{name: "long cycle", def: `{"name": "x", "nodes": [
			{"id": "start", "type": "wait_events"}, {"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"}, {"id": "c", "type": "wait_events"}
		], "edges": [
			{"source": "start", "target": "a"}, {"source": "a", "target": "b"}, {"source": "b", "target": "c"}, {"source": "c", "target": "a"}
		]}`, want: []string{`edges: cycle a -> b -> c -> a`}},
		{name: "condition errors", def: `{"name": "x", "nodes": [{"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"}, {"id": "c", "type": "wait_events"}],
			"edges": [{"source": "a", "target": "b", "condition": "output.status >="}, {"source": "a", "target": "c", "condition": "1 + 1"}, {"source": "b", "target": "c", "condition": "  "}]}`,
			want: []string{
				`edges[0].condition: unexpected token EOF (1:16)`,
				`edges[1].condition: expected bool, but got int`,
				`edges[2].condition: must not be blank (omit it for an unconditional edge)`,
			}},

		// wait_events.
		{name: "wait unknown fields and types", def: waitNode(`{"apiCall": {"url": "http://a", "enabled": "yes", "retries": 3}, "timout": 5, "kafkaEvent": [], "requiredEvents": "x"}`),
			want: []string{
				`nodes[0].data.timout: unknown field`,
				`nodes[0].data.apiCall.enabled: must be a boolean`,
				`nodes[0].data.apiCall.retries: unknown field`,
				`nodes[0].data.kafkaEvent: must be an object`,
				`nodes[0].data.requiredEvents: must be an array of strings`,
			}},
		{name: "wait required when enabled", def: waitNode(`{"apiCall": {}, "kafkaEvent": {"enabled": true}}`),
			want: []string{`nodes[0].data.apiCall.url: required when enabled`, `nodes[0].data.kafkaEvent.topic: required when enabled`}},
		{name: "wait unknown strategy and onTimeout", def: waitNode(`{"aggregationStrategy": "most", "onTimeout": "explode"}`),
			want: []string{
				`nodes[0].data.aggregationStrategy: unknown strategy "most" (allowed: all, any, required_only, custom)`,
				`nodes[0].data.onTimeout: unknown value "explode" (allowed: fail, continue, continue_with_partial)`,
			}},
		{name: "wait custom without requiredEvents", def: waitNode(`{"kafkaEvent": {"topic": "t"}, "aggregationStrategy": "custom"}`),
			want: []string{`nodes[0].data.requiredEvents: required for aggregationStrategy "custom"`}},
		{name: "wait custom with empty requiredEvents", def: waitNode(`{"kafkaEvent": {"topic": "t"}, "aggregationStrategy": "custom", "requiredEvents": []}`),
			want: []string{`nodes[0].data.requiredEvents: required for aggregationStrategy "custom"`}},
		{name: "wait requiredEvents naming disabled and unknown events", def: waitNode(`{"apiCall": {"url": "http://a"}, "kafkaEvent": {"enabled": false, "topic": ""},
			"aggregationStrategy": "custom", "requiredEvents": ["kafka_event", "sms", 1, "api_response", "api_response"]}`),
			want: []string{
				`nodes[0].data.requiredEvents[2]: must be a string`,
				`nodes[0].data.requiredEvents[0]: names disabled event "kafka_event"`,
				`nodes[0].data.requiredEvents[1]: unknown event "sms" (known: api_response, kafka_event)`,
				`nodes[0].data.requiredEvents[4]: duplicate event "api_response" (also requiredEvents[3])`,
			}},
		{name: "wait requiredEvents without custom", def: waitNode(`{"apiCall": {"url": "http://a"}, "requiredEvents": ["api_response"]}`),
			want: []string{`nodes[0].data.requiredEvents: only used with aggregationStrategy "custom"`}},
		{name: "wait required_only without required events", def: waitNode(`{"apiCall": {"url": "http://a", "required": false}, "aggregationStrategy": "required_only"}`),
			want: []string{`nodes[0].data.aggregationStrategy: "required_only" needs at least one enabled event with required: true`}},
		{name: "wait bad durations", def: waitNode(`{"timeout": 0, "apiCall": {"url": "http://a", "timeout": "soon"}, "kafkaEvent": {"topic": "t", "timeout": -5}}`),
			want: []string{
				`nodes[0].data.timeout: must be greater than 0`,
				`nodes[0].data.apiCall.timeout: invalid duration "soon": use seconds as a number or a duration like "90s" or "5m"`,
				`nodes[0].data.kafkaEvent.timeout: must be greater than 0`,
			}},
		{name: "wait more bad durations", def: waitNode(`{"timeout": true, "apiCall": {"url": "http://a", "timeout": "-1s"}, "kafkaEvent": {"topic": "t", "timeout": 1e300}}`),
			want: []string{
				`nodes[0].data.timeout: must be a number of seconds or a duration string like "90s"`,
				`nodes[0].data.apiCall.timeout: must be greater than 0`,
				`nodes[0].data.kafkaEvent.timeout: duration 1e300 seconds is too large`,
			}},
		{name: "wait api call fields", def: waitNode(`{"apiCall": {"url": "ftp://a", "method": "BREW", "headers": {"Bad Header": "x", "X-N": 1}, "body": 5,
			"correlationIdField": "a..b", "correlationIdHeader": "Bad Header", "executionIdField": ""}}`),
			want: []string{
				`nodes[0].data.apiCall.url: must be an absolute http or https URL`,
				`nodes[0].data.apiCall.method: unsupported method "BREW" (allowed: GET, POST, PUT, PATCH, DELETE)`,
				`nodes[0].data.apiCall.headers.X-N: must be a string`,
				`nodes[0].data.apiCall.headers["Bad Header"]: invalid header name "Bad Header"`,
				`nodes[0].data.apiCall.body: must be an object, an array or a string`,
				`nodes[0].data.apiCall.correlationIdHeader: invalid header name "Bad Header"`,
				`nodes[0].data.apiCall.correlationIdField: invalid dot path "a..b": empty segment at offset 2`,
				`nodes[0].data.apiCall.executionIdField: must not be empty`,
			}},
		{name: "wait template syntax", def: waitNode(`{"apiCall": {"url": "@{_vars.serviceUrl/process", "headers": {"Authorization": "Bearer @{secrets.token}"},
			"body": {"customer": {"email": "@{}"}, "items": ["ok", "@{_execution.start}"]}}}`),
			want: []string{
				`nodes[0].data.apiCall.url: unterminated "@{" at offset 0`,
				`nodes[0].data.apiCall.headers.Authorization: @{secrets.token} at offset 7: unknown root "secrets" (known: _trigger, _vars, _execution, nodes)`,
				`nodes[0].data.apiCall.body.customer.email: @{} at offset 0: empty expression`,
				`nodes[0].data.apiCall.body.items[1]: @{_execution.start} at offset 0: _execution fields are id and correlationId`,
			}},
		{name: "wait kafka fields", def: waitNode(`{"kafkaEvent": {"topic": "bad topic!", "correlationIdField": "data[", "executionIdField": 7,
			"filter": {"data.status": {"nested": 1}, "a..b": "x", "tags": ["a"]}}}`),
			want: []string{
				`nodes[0].data.kafkaEvent.executionIdField: must be a string`,
				`nodes[0].data.kafkaEvent.topic: invalid Kafka topic "bad topic!" (letters, digits, '.', '_', '-'; at most 249)`,
				`nodes[0].data.kafkaEvent.correlationIdField: invalid dot path "data[": unbalanced '[' at offset 4`,
				`nodes[0].data.kafkaEvent.filter["a..b"]: invalid dot path "a..b": empty segment at offset 2`,
				`nodes[0].data.kafkaEvent.filter["data.status"]: must be a scalar (string, number, boolean or null)`,
				`nodes[0].data.kafkaEvent.filter.tags: must be a scalar (string, number, boolean or null)`,
			}},
		{name: "wait output mapping", def: waitNode(`{"apiCall": {"url": "http://a"}, "outputMapping": {"a": "kafka_event.x", "b": "sms", "c": "api_response..x", "d": "", "e": 3, "ok": "api_response.body[0]"}}`),
			want: []string{
				`nodes[0].data.outputMapping.e: must be a string`,
				`nodes[0].data.outputMapping.a: names disabled event "kafka_event"`,
				`nodes[0].data.outputMapping.b: names unknown event "sms" (known: api_response, kafka_event)`,
				`nodes[0].data.outputMapping.c: invalid dot path "api_response..x": empty segment at offset 13`,
				`nodes[0].data.outputMapping.d: must be api_response|kafka_event or <event>.<dot path>`,
			}},

		// http.
		{name: "http problems", def: httpNode(`{"method": "TRACE", "timeout": 61, "failOnNon2xx": "no", "headers": [], "extra": 1}`),
			want: []string{
				`nodes[0].data.extra: unknown field`,
				`nodes[0].data.url: required`,
				`nodes[0].data.method: unsupported method "TRACE" (allowed: GET, POST, PUT, PATCH, DELETE)`,
				`nodes[0].data.headers: must be an object`,
				`nodes[0].data.failOnNon2xx: must be a boolean`,
				`nodes[0].data.timeout: must be at most 1m0s`,
			}},
		{name: "http template", def: httpNode(`{"url": "https://a/@{nodes.x}", "body": {"q": "@{_trigger"}}`),
			want: []string{
				`nodes[0].data.url: @{nodes.x} at offset 10: node references look like nodes.<id>.output[.path]`,
				`nodes[0].data.body.q: unterminated "@{" at offset 0`,
			}},

		// Several classes at once, each with its path.
		{name: "many errors at once", def: `{"name": "", "extra": true, "nodes": [
			{"id": "a", "type": "wait_events", "data": {"kafkaEvent": {"topic": ""}, "aggregationStrategy": "custom", "requiredEvents": ["api_response"]}},
			{"id": "a", "type": "http", "data": {"url": "@{"}}
		], "edges": [{"source": "a", "target": "z"}]}`,
			want: []string{
				`extra: unknown field`,
				`name: required`,
				`nodes[0].data.kafkaEvent.topic: required when enabled`,
				`nodes[0].data.requiredEvents[0]: names disabled event "api_response"`,
				`nodes[1].id: duplicate node id "a" (also nodes[0])`,
				`nodes[1].data.url: unterminated "@{" at offset 0`,
				`edges[0].target: unknown node "z"`,
			}},
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
	wf, err := Compile([]byte(waitNode(`{"apiCall": {"enabled": false}}`)), nil)
	require.NoError(t, err)
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
	wf, err := Compile([]byte(`{"name": "g", "nodes": [
		{"id": "a", "type": "wait_events"}, {"id": "b", "type": "wait_events"},
		{"id": "c", "type": "wait_events"}, {"id": "d", "type": "wait_events"}
	], "edges": [
		{"source": "a", "target": "c"}, {"source": "b", "target": "c"},
		{"source": "c", "target": "d"}, {"source": "a", "target": "d", "condition": "input.amount > vars.threshold"}
	], "vars": {"threshold": 100}}`), nil)
	require.NoError(t, err)
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

	ok, err = in[1].Eval(map[string]any{"input": map[string]any{"amount": json.Number("150")}, "vars": wf.Definition().Vars})
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
