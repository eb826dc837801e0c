package server_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/rendezvous-run/rendezvous/harness/testkit"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server"
)

// syncBuffer is a log sink safe for the service's goroutines.
type syncBuffer = testkit.Buffer

// TestErrorHandledOnce: a failed request is answered with its problem and handled once —
// the tracing middleware also reports errors to Echo, which must not log a second,
// false "error after response was committed".
func TestErrorHandledOnce(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := runService(t, server.Config{
		DatabaseURL: dbtest.NewSchema(t).URL, InstanceID: "errors", AutoMigrate: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	status, body := testkit.DoJSON(t, http.MethodGet, "http://"+s.Addr()+"/api/v1/executions/"+uuid.NewString(), nil, nil)
	require.Equal(t, http.StatusNotFound, status, body)
	status, _ = testkit.DoJSON(t, http.MethodPost, "http://"+s.Addr()+"/api/internal/callbacks/acme", []byte(`{`), nil)
	require.Equal(t, http.StatusBadRequest, status)
	require.NotContains(t, logs.String(), "after response was committed")
}
