package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
)

// TestSecretsNeverStored runs a definition whose correlated call and http node carry
// @{secrets.TOKEN} (from the environment) and @{secrets.db-password} (from a file in
// --secrets-dir) in the URL, a header and the body, against a service that echoes the
// token back. The service receives both values; afterwards no row of any table of the
// schema, no log line (at debug) and no exported span holds either, and a definition
// naming a secret that is not set fails its node naming the secret.
func TestSecretsNeverStored(t *testing.T) {
	t.Parallel()
	// The password has characters JSON escapes; its prefix alone is searched for, as each
	// store writes those characters its own way.
	const token, passwordPrefix = "tok-3f1c9a7e5b2d4c60", "pw-Zq8x7y9"
	const password = passwordPrefix + `"q\uote"`
	schema := dbtest.NewSchema(t)
	fake := testkit.NewFakeService(t)
	fake.On("/echo", func(_ int, r testkit.Request) testkit.Reply {
		return testkit.Reply{Status: http.StatusOK, Body: fmt.Sprintf(`{"you_sent":%q}`, r.Header.Get("X-Api-Key")),
			Header: map[string]string{"X-Echo": r.Header.Get("X-Api-Key")}}
	})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "db-password"), []byte(password+"\n"), 0o600))
	var logs testkit.Buffer
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	cfg := replica.Config(t, schema.URL, "secrets")
	cfg.Telemetry = &telemetry.Telemetry{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider(), Propagator: propagation.TraceContext{}}
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Executor.Outbound.SecretsDir = dir
	cfg.Executor.Outbound.LookupEnv = func(k string) (string, bool) {
		if k == "RENDEZVOUS_SECRET_TOKEN" {
			return token, true
		}
		return "", false
	}
	cfg.Executor.PollInterval = 50 * time.Millisecond
	r := replica.Start(t, cfg)
	base := r.URL()

	def := map[string]any{
		"name": "secretive", "vars": map[string]any{"svc": fake.URL},
		"nodes": []any{
			map[string]any{"id": "wait", "type": "wait_events", "data": map[string]any{"apiCall": map[string]any{
				"url":     "@{_vars.svc}/process?key=@{secrets.TOKEN}",
				"headers": map[string]any{"Authorization": "Bearer @{secrets.TOKEN}"},
				"body":    map[string]any{"password": "@{secrets.db-password}", "order": "@{_trigger.order}"},
			}}},
			map[string]any{"id": "echo", "type": "http", "data": map[string]any{
				"url": "@{_vars.svc}/echo", "method": "POST",
				"headers": map[string]any{"X-Api-Key": "@{secrets.TOKEN}"},
				"body":    "user=admin&password=@{secrets.db-password}",
			}},
		},
		"edges": []any{map[string]any{"source": "wait", "target": "echo"}},
	}
	status, body := testkit.DoJSON(t, http.MethodPut, base+"/api/v1/workflows/secretive", def, nil)
	require.Equal(t, http.StatusCreated, status, body)
	// Input that poses as a reference is sent as it is, never resolved.
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/v1/workflows/secretive/executions",
		map[string]any{"input": map[string]any{"order": "@{secrets.TOKEN}"}}, nil)
	require.Equal(t, http.StatusCreated, status, body)
	id := body["id"].(string)

	call := fake.AwaitNth(t, 20*time.Second, "/process", 1)
	require.Equal(t, "Bearer "+token, call.Header.Get("Authorization"))
	require.Equal(t, password, call.Field("password"), "a JSON body carries the value, escaped")
	require.Equal(t, "@{secrets.TOKEN}", call.Field("order"))
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/internal/callbacks/acme",
		map[string]any{"execution_id": id, "correlation_id": call.Field("correlation_id"), "ok": true}, nil)
	require.Equal(t, http.StatusAccepted, status, body)
	echo := fake.AwaitNth(t, 20*time.Second, "/echo", 1)
	require.Equal(t, token, echo.Header.Get("X-Api-Key"))
	require.Equal(t, "user=admin&password="+password, string(echo.Raw))
	var exec map[string]any
	require.Eventually(t, func() bool {
		_, exec = testkit.DoJSON(t, http.MethodGet, base+"/api/v1/executions/"+id, nil, nil)
		return exec["status"] == "completed"
	}, 20*time.Second, 20*time.Millisecond)
	require.Contains(t, fmt.Sprint(exec), "[secret TOKEN]", "the echoed value is replaced in the node's output")

	// A secret that is not set fails the node, naming it.
	def = map[string]any{"name": "unset", "nodes": []any{map[string]any{"id": "call", "type": "http", "data": map[string]any{
		"url": fake.URL + "/echo", "headers": map[string]any{"Authorization": "Bearer @{secrets.NOT_THERE}"}}}}}
	status, body = testkit.DoJSON(t, http.MethodPut, base+"/api/v1/workflows/unset", def, nil)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = testkit.DoJSON(t, http.MethodPost, base+"/api/v1/workflows/unset/executions", map[string]any{"input": map[string]any{}}, nil)
	require.Equal(t, http.StatusCreated, status, body)
	unset := body["id"].(string)
	require.Eventually(t, func() bool {
		_, exec = testkit.DoJSON(t, http.MethodGet, base+"/api/v1/executions/"+unset, nil, nil)
		return exec["status"] == "failed"
	}, 20*time.Second, 20*time.Millisecond)
	nodeErr := exec["nodes"].([]any)[0].(map[string]any)["error"].(string)
	require.Contains(t, nodeErr, `secret "NOT_THERE" is not set`)
	require.Contains(t, nodeErr, "RENDEZVOUS_SECRET_NOT_THERE")
	require.Equal(t, 1, fake.Count("/echo"), "nothing was sent without its secret")

	r.Stop() // every span ended and exported, every log line written
	leaks := map[string]string{"token": token, "password": passwordPrefix}
	for what, v := range leaks {
		require.NotContains(t, logs.String(), v, "%s in the logs", what)
		for _, s := range spans.Ended() {
			require.NotContains(t, fmt.Sprint(s.Name(), s.Attributes(), s.Events(), s.Status()), v, "%s in span %s", what, s.Name())
		}
	}
	require.NotEmpty(t, spans.Ended())
	require.Contains(t, logs.String(), "correlated call sent", "the logs were captured at debug")

	// Every row of every table of the test's schema, as text.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, schema.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'`, schema.Name)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, tables, "node_execution_rows")
	scanned := 0
	for _, table := range tables {
		var n, hits int
		q := fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0) FROM %s t`,
			pgx.Identifier{table}.Sanitize())
		require.NoError(t, conn.QueryRow(ctx, q, token, passwordPrefix).Scan(&n, &hits))
		require.Zero(t, hits, "a secret in table %s", table)
		scanned += n
	}
	require.Positive(t, scanned)
	t.Logf("scanned %d rows in %d tables, %d spans, %d bytes of logs", scanned, len(tables), len(spans.Ended()), len(logs.String()))
}
