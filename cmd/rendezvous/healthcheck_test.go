package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	status := func(code int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet || r.URL.Path != healthcheckPath {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	healthcheck := func(args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"healthcheck"}, args...), &stdout, &stderr)
		return code, stdout.String() + stderr.String()
	}

	t.Run("200 is healthy", func(t *testing.T) {
		t.Parallel()
		code, out := healthcheck("--url", status(http.StatusOK).URL+healthcheckPath)
		require.Equal(t, 0, code, out)
	})
	t.Run("503 is unhealthy", func(t *testing.T) {
		t.Parallel()
		code, out := healthcheck("--url", status(http.StatusServiceUnavailable).URL+healthcheckPath)
		require.Equal(t, 1, code)
		require.Contains(t, out, "503")
	})
	t.Run("nothing listening is unhealthy", func(t *testing.T) {
		t.Parallel()
		code, out := healthcheck("--url", "http://"+freePort(t)+healthcheckPath)
		require.Equal(t, 1, code, out)
	})
	t.Run("no answer in time is unhealthy", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })
		code, out := healthcheck("--url", srv.URL+healthcheckPath, "--timeout", "50ms")
		require.Equal(t, 1, code)
		require.Contains(t, out, "deadline exceeded")
	})
	t.Run("default URL follows --http-addr", func(t *testing.T) {
		t.Parallel()
		srv := status(http.StatusOK) // 404 on any path but /healthz
		_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
		code, out := healthcheck("--http-addr", ":"+port)
		require.Equal(t, 0, code, out)
	})
	t.Run("bad arguments", func(t *testing.T) {
		t.Parallel()
		code, out := healthcheck("--url", "localhost:8080/healthz")
		require.Equal(t, 1, code)
		require.Contains(t, out, "want an http(s) URL")
		code, out = healthcheck("--http-addr", "8080")
		require.Equal(t, 1, code)
		require.Contains(t, out, "--http-addr")
	})
}

func TestHealthcheckURL(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		":8080":          "http://127.0.0.1:8080/healthz",
		"0.0.0.0:9000":   "http://127.0.0.1:9000/healthz",
		"[::]:9000":      "http://127.0.0.1:9000/healthz",
		"10.0.0.7:8080":  "http://10.0.0.7:8080/healthz",
		"127.0.0.1:8081": "http://127.0.0.1:8081/healthz",
		"[::1]:8080":     "http://[::1]:8080/healthz",
	} {
		got, err := healthcheckURL("", addr)
		require.NoError(t, err, addr)
		require.Equal(t, want, got, addr)
	}
	got, err := healthcheckURL("http://example.test:1/readyz", ":8080")
	require.NoError(t, err)
	require.Equal(t, "http://example.test:1/readyz", got, "--url wins")
}
