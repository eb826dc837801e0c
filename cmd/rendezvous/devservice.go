package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// exampleServiceAddrDefault is where the example definitions expect their external
// service: their vars.serviceUrl is http://127.0.0.1:9090.
const exampleServiceAddrDefault = "127.0.0.1:9090"

// exampleService stands in, under `rendezvous dev`, for the external service the example
// definitions call, so that each of them can be started by hand and run to its end. It
// answers as such a service would — an approval request is accepted (202) and decided
// later, by a callback the person trying it out sends; a notification is taken (200) —
// and logs each request with what to do next. It is never part of serve.
type exampleService struct {
	srv *http.Server
	ln  net.Listener
}

func startExampleService(addr, api string, logger *slog.Logger) (*exampleService, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--example-service-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /approvals", func(w http.ResponseWriter, r *http.Request) {
		body := readJSON(r)
		exec, corr := r.Header.Get("X-Execution-Id"), r.Header.Get("X-Correlation-Id")
		logger.InfoContext(r.Context(), "example service: approval requested; decide it with a callback",
			"order", body["order"], "amount", body["amount"], "execution_id", exec, "correlation_id", corr,
			"callback", fmt.Sprintf(`curl -X POST %s/api/internal/callbacks/approvals -d '{"execution_id":"%s","correlation_id":"%s","decision":"approved"}'`, api, exec, corr))
		w.WriteHeader(http.StatusAccepted)
	})
	mux.HandleFunc("POST /notifications", func(w http.ResponseWriter, r *http.Request) {
		body := readJSON(r)
		raw, _ := json.Marshal(body)
		logger.InfoContext(r.Context(), "example service: notification received", "execution_id", r.Header.Get("X-Execution-Id"), "body", string(raw))
		w.WriteHeader(http.StatusOK)
	})
	s := &exampleService{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("example service stopped", "err", err)
		}
	}()
	return s, nil
}

// URL is the base URL the examples' vars.serviceUrl must hold to reach it.
func (s *exampleService) URL() string { return "http://" + s.ln.Addr().String() }

func (s *exampleService) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// readJSON reads a small JSON object body; anything else reads as empty, which only
// the log line shows.
func readJSON(r *http.Request) map[string]any {
	var body map[string]any
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body)
	return body
}
