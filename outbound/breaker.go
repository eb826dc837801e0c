package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of BreakerConfig.
const (
	BreakerFailuresDefault = 5
	BreakerOpenForDefault  = 10 * time.Second
	BreakerProbesDefault   = 1
)

// BreakerConfig configures the circuit breaker each destination host has in a replica:
// after Failures consecutive failed requests (a network error, a 5xx, a 429) it opens,
// and for OpenFor no request is sent there; then it lets Probes requests through
// (half-open), which close it when they all succeed and open it again when one fails.
type BreakerConfig struct {
	// Failures opens the circuit. Default BreakerFailuresDefault; negative turns the
	// breakers off.
	Failures int
	// OpenFor is how long an open circuit sends nothing. Default BreakerOpenForDefault.
	OpenFor time.Duration
	// Probes is how many requests a half-open circuit lets through. Default
	// BreakerProbesDefault.
	Probes int
}

// CircuitState is a host's circuit state: the state label of /readyz's
// outbound_circuits and the value of rendezvous_outbound_circuit_state.
type CircuitState string

const (
	CircuitStateClosed   CircuitState = "closed"
	CircuitStateHalfOpen CircuitState = "half_open"
	CircuitStateOpen     CircuitState = "open"
)

// CircuitOpenError is a request not sent because its host's circuit is open (or
// half-open with its probes in flight). It was not an attempt: the caller waits for
// RetryIn and sends it then.
type CircuitOpenError struct {
	Host    string
	RetryIn time.Duration
	// Cause is the failure of this request that opened the circuit; nil when the
	// request was held back unsent.
	Cause error
}

func (e *CircuitOpenError) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%v; the circuit for %s opened: nothing is sent there for %s", e.Cause, e.Host, e.RetryIn.Round(time.Millisecond))
	}
	return fmt.Sprintf("circuit open for %s: nothing is sent there for %s after its consecutive failures", e.Host, e.RetryIn.Round(time.Millisecond))
}

func (e *CircuitOpenError) Unwrap() error { return e.Cause }

// CircuitOpen returns the CircuitOpenError in err's chain, or nil.
func CircuitOpen(err error) *CircuitOpenError {
	var e *CircuitOpenError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// errServerFailure marks an answer the breaker counts as a failure; the answer itself is
// returned to the caller.
var errServerFailure = errors.New("server failure")

// breakers are a replica's circuit breakers, one per destination host (host:port).
type breakers struct {
	cfg BreakerConfig
	mu  sync.Mutex
	// by holds each host's breaker and when it last opened.
	by map[string]*hostBreaker
}

type hostBreaker struct {
	cb       *gobreaker.CircuitBreaker[*http.Response]
	openedAt time.Time // guarded by breakers.mu
}

func newBreakers(cfg BreakerConfig, m metric.Meter) (*breakers, error) {
	if cfg.Failures == 0 {
		cfg.Failures = BreakerFailuresDefault
	}
	if cfg.OpenFor <= 0 {
		cfg.OpenFor = BreakerOpenForDefault
	}
	if cfg.Probes <= 0 {
		cfg.Probes = BreakerProbesDefault
	}
	b := &breakers{cfg: cfg, by: map[string]*hostBreaker{}}
	if cfg.Failures < 0 {
		return b, nil
	}
	_, err := m.Int64ObservableGauge("rendezvous.outbound.circuit.state",
		metric.WithDescription("The circuit of each destination host this replica has called: 0 closed, 1 half-open (probing), 2 open (nothing sent)."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			for host, st := range b.states() {
				v := int64(0)
				switch st {
				case CircuitStateHalfOpen:
					v = 1
				case CircuitStateOpen:
					v = 2
				}
				o.Observe(v, metric.WithAttributes(attribute.String("host", host)))
			}
			return nil
		}))
	return b, err
}

// get returns host's breaker, made on first use.
func (b *breakers) get(host string) *hostBreaker {
	b.mu.Lock()
	defer b.mu.Unlock()
	hb := b.by[host]
	if hb != nil {
		return hb
	}
	hb = &hostBreaker{}
	hb.cb = gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{
		Name:        host,
		MaxRequests: uint32(b.cfg.Probes),
		Timeout:     b.cfg.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(b.cfg.Failures) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.mu.Lock()
				hb.openedAt = time.Now()
				b.mu.Unlock()
			}
		},
		// A request the caller gave up on, or one the policy refused, says nothing of
		// the host.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) || Refused(err) != nil
		},
	})
	b.by[host] = hb
	return hb
}

// retryIn is how long until host's open circuit lets a probe through; a half-open one
// is asked again after a fraction of OpenFor.
func (b *breakers) retryIn(hb *hostBreaker) time.Duration {
	if hb.cb.State() == gobreaker.StateHalfOpen {
		return max(b.cfg.OpenFor/10, 10*time.Millisecond)
	}
	b.mu.Lock()
	opened := hb.openedAt
	b.mu.Unlock()
	return max(time.Until(opened.Add(b.cfg.OpenFor)), 10*time.Millisecond)
}

// wait is how long a request to host has to wait for its circuit: 0 when it may be sent.
func (b *breakers) wait(host string) time.Duration {
	if b.cfg.Failures < 0 {
		return 0
	}
	b.mu.Lock()
	hb := b.by[host]
	b.mu.Unlock()
	if hb == nil {
		return 0
	}
	switch hb.cb.State() {
	case gobreaker.StateOpen:
		return b.retryIn(hb)
	case gobreaker.StateHalfOpen:
		if hb.cb.Counts().Requests >= uint32(b.cfg.Probes) {
			return b.retryIn(hb)
		}
	}
	return 0
}

// do sends through host's circuit; a request the circuit holds back is a
// *CircuitOpenError.
func (b *breakers) do(host string, send func() (*http.Response, error)) (*http.Response, error) {
	if b.cfg.Failures < 0 {
		return send()
	}
	hb := b.get(host)
	resp, err := hb.cb.Execute(func() (*http.Response, error) {
		resp, err := send()
		if err == nil && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests) {
			return resp, errServerFailure
		}
		return resp, err
	})
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return nil, &CircuitOpenError{Host: host, RetryIn: b.retryIn(hb)}
	}
	if errors.Is(err, errServerFailure) {
		return resp, nil
	}
	return resp, err
}

// states are the circuits' states by host.
func (b *breakers) states() map[string]CircuitState {
	b.mu.Lock()
	hosts := make(map[string]*hostBreaker, len(b.by))
	for h, hb := range b.by {
		hosts[h] = hb
	}
	b.mu.Unlock()
	out := make(map[string]CircuitState, len(hosts))
	for h, hb := range hosts {
		switch hb.cb.State() {
		case gobreaker.StateOpen:
			out[h] = CircuitStateOpen
		case gobreaker.StateHalfOpen:
			out[h] = CircuitStateHalfOpen
		default:
			out[h] = CircuitStateClosed
		}
	}
	return out
}

// Circuits are the hosts whose circuit is not closed, and its state: the detail /readyz
// shows.
func (c *Client) Circuits() map[string]CircuitState {
	out := map[string]CircuitState{}
	for h, st := range c.breakers.states() {
		if st != CircuitStateClosed {
			out[h] = st
		}
	}
	return out
}
