package testkit

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// FakeService plays the external service a workflow calls: the correlated calls of
// wait_events nodes (usually POST /process) and the continuations' http nodes (usually
// POST /done). It records every request per path and answers through per-path routes;
// a path without a route is answered 202 with {}. Tests read what it received, or wait
// for a request to arrive (Await), which needs no polling.
type FakeService struct {
	// URL is the service's base URL, for a definition's vars.
	URL string

	mu     sync.Mutex
	reqs   map[string][]Request
	routes map[string]Route
	// arrived is closed, and replaced, when a request is recorded.
	arrived chan struct{}
}

// Request is one request the fake service received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	// Raw is the body as sent; Body is it decoded, nil when it is not a JSON object.
	Raw  []byte
	Body map[string]any
}

// Field is a body member's value as text ("" when absent or not a string).
func (r Request) Field(name string) string {
	s, _ := r.Body[name].(string)
	return s
}

// Reply is how a route answers.
type Reply struct {
	Status int
	Body   string
	Header map[string]string
	// Delay holds the answer back (or until the client gives up).
	Delay time.Duration
}

// Route answers the nth request (1-based) on its path.
type Route func(n int, r Request) Reply

// Accepted is the default answer: 202 with {}.
var Accepted = Reply{Status: http.StatusAccepted, Body: `{}`}

// OK answers 200 with the JSON object {"ok":true}, as a continuation's endpoint that
// reports success.
var OK = Reply{Status: http.StatusOK, Body: `{"ok":true}`}

// Always is a route that gives every request the same reply.
func Always(rep Reply) Route { return func(int, Request) Reply { return rep } }

// NewFakeService starts a fake service that is closed when the test ends.
func NewFakeService(t testing.TB) *FakeService {
	f := &FakeService{reqs: map[string][]Request{}, routes: map[string]Route{}, arrived: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *FakeService) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Raw: raw}
	_ = json.Unmarshal(raw, &rec.Body)
	f.mu.Lock()
	f.reqs[rec.Path] = append(f.reqs[rec.Path], rec)
	n := len(f.reqs[rec.Path])
	route := f.routes[rec.Path]
	close(f.arrived)
	f.arrived = make(chan struct{})
	f.mu.Unlock()
	rep := Accepted
	if route != nil {
		rep = route(n, rec)
	}
	if rep.Delay > 0 {
		select {
		case <-time.After(rep.Delay):
		case <-r.Context().Done():
			return
		}
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if w.Header().Get("Content-Type") == "" && strings.HasPrefix(rep.Body, "{") {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Body)
}

// On sets how requests on path are answered from now on.
func (f *FakeService) On(path string, route Route) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[path] = route
}

// Requests returns the requests received on path, in order of arrival.
func (f *FakeService) Requests(path string) []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.reqs[path]...)
}

// Count is the number of requests received on path.
func (f *FakeService) Count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs[path])
}

// Paths lists the paths that received a request, in no order.
func (f *FakeService) Paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Keys(f.reqs))
}

// CountBy counts the requests on path per value of a string body field.
func (f *FakeService) CountBy(path, field string) map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, r := range f.reqs[path] {
		if s, ok := r.Body[field].(string); ok {
			out[s]++
		}
	}
	return out
}

// Find returns the first request on path whose string body field has value.
func (f *FakeService) Find(path, field, value string) (Request, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs[path] {
		if r.Field(field) == value {
			return r, true
		}
	}
	return Request{}, false
}

// Await waits up to timeout for the first request on path that match accepts (every
// request when match is nil), among those received so far and those to come, and
// fails the test when none arrives. It wakes on each arrival instead of polling.
func (f *FakeService) Await(t testing.TB, timeout time.Duration, path string, match func(Request) bool, what string) Request {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		f.mu.Lock()
		reqs, arrived := f.reqs[path], f.arrived
		f.mu.Unlock()
		for ; seen < len(reqs); seen++ {
			if match == nil || match(reqs[seen]) {
				return reqs[seen]
			}
		}
		select {
		case <-arrived:
		case <-deadline.C:
			t.Fatalf("the fake service received no %s on %s within %v", what, path, timeout)
			return Request{}
		}
	}
}

// AwaitNth waits for the nth request (1-based) on path.
func (f *FakeService) AwaitNth(t testing.TB, timeout time.Duration, path string, n int) Request {
	t.Helper()
	i := 0
	return f.Await(t, timeout, path, func(Request) bool { i++; return i == n }, "request")
}
