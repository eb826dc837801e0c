package outbound_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/outbound"
)

// TestCircuitBreaker: consecutive failures open a host's circuit; then nothing is sent
// there and a request is told how long to wait; a request that waits for the circuit is
// sent as its probe once it half-opens, and its success closes it.
func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	var hits atomic.Int64
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	c, err := outbound.NewClient(outbound.ClientConfig{Allow: []string{"127.0.0.1"},
		Breaker: outbound.BreakerConfig{Failures: 2, OpenFor: 200 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	host := strings.TrimPrefix(srv.URL, "http://")
	req := func() *outbound.Request {
		return &outbound.Request{Method: http.MethodGet, URL: srv.URL + "/x", Headers: http.Header{}}
	}
	ctx := context.Background()
	opt := outbound.SendOptions{Timeout: 5 * time.Second}

	resp, err := c.Do(ctx, req(), opt)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	_, err = c.Do(ctx, req(), opt)
	open := outbound.CircuitOpen(err)
	require.NotNil(t, open, "the second failure opens the circuit: %v", err)
	require.ErrorContains(t, open.Cause, "status 503")
	require.Equal(t, map[string]outbound.CircuitState{host: outbound.CircuitStateOpen}, c.Circuits())

	for range 5 {
		_, err = c.Do(ctx, req(), opt)
		open = outbound.CircuitOpen(err)
		require.NotNil(t, open)
		require.Nil(t, open.Cause, "held back, not sent")
		require.Positive(t, open.RetryIn)
	}
	require.EqualValues(t, 2, hits.Load(), "nothing was sent while the circuit was open")

	down.Store(false)
	resp, err = c.Do(ctx, req(), outbound.SendOptions{Timeout: 5 * time.Second, WaitForCircuit: true})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.Status)
	require.EqualValues(t, 3, hits.Load())
	require.Empty(t, c.Circuits(), "the probe's success closed the circuit")
}
