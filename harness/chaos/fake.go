package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Call is one correlated call of a wait_events node that reached the fake service.
type Call struct {
	ExecutionID    uuid.UUID `json:"execution_id"`
	CorrelationID  uuid.UUID `json:"correlation_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	// Plan is the plan index the call's body names.
	Plan int       `json:"plan"`
	At   time.Time `json:"at"`
	// Status is what the fake answered.
	Status int `json:"status"`
}

// Continuation is one call of a continuation's http node: the side effect of a resumed
// wait.
type Continuation struct {
	Kind           string    `json:"kind"`
	ExecutionID    uuid.UUID `json:"execution_id"`
	CorrelationID  uuid.UUID `json:"correlation_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	// Sender names the replica process that made the call (its RENDEZVOUS_VAR_SENDER).
	Sender string    `json:"sender"`
	At     time.Time `json:"at"`
}

// fake is the external service: it receives the correlated calls (and tells the driver
// that a wait's call arrived, so it may answer) and the continuations' side effects.
type fake struct {
	srv *http.Server
	ln  net.Listener

	// failFirst says whether the first call of the execution of a plan index is answered
	// 503. The call names its plan index in its body: the driver may learn the
	// execution's id only after its call arrived.
	failFirst func(plan int) bool
	// onCall is told about every call answered 2xx.
	onCall func(Call)

	mu            sync.Mutex
	calls         []Call
	continuations []Continuation
	malformed     []string
}

func startFake(failFirst func(plan int) bool, onCall func(Call)) (*fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake service: %w", err)
	}
	f := &fake{ln: ln, failFirst: failFirst, onCall: onCall}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /calls", f.call)
	mux.HandleFunc("POST /continuations", f.continuation)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// URL is the base URL the definitions call.
func (f *fake) URL() string { return "http://" + f.ln.Addr().String() }

func (f *fake) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.srv.Shutdown(ctx)
}

func (f *fake) call(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	execID, err1 := uuid.Parse(r.Header.Get("X-Execution-Id"))
	corrID, err2 := uuid.Parse(r.Header.Get("X-Correlation-Id"))
	var body struct {
		ExecutionID   string      `json:"execution_id"`
		CorrelationID string      `json:"correlation_id"`
		Plan          json.Number `json:"plan"`
	}
	raw, _ := io.ReadAll(r.Body)
	err3 := json.Unmarshal(raw, &body)
	plan, err4 := body.Plan.Int64()
	if err := errors.Join(err1, err2, err3, err4); err != nil || body.ExecutionID != execID.String() || body.CorrelationID != corrID.String() {
		f.mu.Lock()
		f.malformed = append(f.malformed, fmt.Sprintf("call with headers %s/%s and body %s: %v",
			r.Header.Get("X-Execution-Id"), r.Header.Get("X-Correlation-Id"), raw, err))
		f.mu.Unlock()
		http.Error(w, "malformed", http.StatusBadRequest)
		return
	}
	c := Call{ExecutionID: execID, CorrelationID: corrID, IdempotencyKey: r.Header.Get("Idempotency-Key"), Plan: int(plan), At: at, Status: http.StatusOK}
	f.mu.Lock()
	first := true
	for _, prev := range f.calls {
		if prev.CorrelationID == corrID {
			first = false
			break
		}
	}
	if first && f.failFirst(c.Plan) {
		c.Status = http.StatusServiceUnavailable
	}
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	w.WriteHeader(c.Status)
	if c.Status == http.StatusOK {
		f.onCall(c)
	}
}

func (f *fake) continuation(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var body struct {
		Kind          string `json:"kind"`
		ExecutionID   string `json:"execution_id"`
		CorrelationID string `json:"correlation_id"`
	}
	raw, _ := io.ReadAll(r.Body)
	err := json.Unmarshal(raw, &body)
	execID, err1 := uuid.Parse(body.ExecutionID)
	corrID, err2 := uuid.Parse(body.CorrelationID)
	if err := errors.Join(err, err1, err2); err != nil {
		f.mu.Lock()
		f.malformed = append(f.malformed, fmt.Sprintf("continuation %s: %v", raw, err))
		f.mu.Unlock()
		http.Error(w, "malformed", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.continuations = append(f.continuations, Continuation{
		Kind: body.Kind, ExecutionID: execID, CorrelationID: corrID, IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Sender: r.Header.Get("X-Chaos-Sender"), At: at,
	})
	f.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// snapshot copies what the fake recorded.
func (f *fake) snapshot() (calls []Call, continuations []Continuation, malformed []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Call(nil), f.calls...), append([]Continuation(nil), f.continuations...), append([]string(nil), f.malformed...)
}

// continuationCount is for quiescence: it stops changing once every continuation ran.
func (f *fake) continuationCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.continuations)
}
