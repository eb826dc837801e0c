package outbound

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
)

// SecretEnvPrefix is prepended to a secret's name (upper-cased, '-' as '_') to form the
// environment variable that holds it: @{secrets.api-token} is RENDEZVOUS_SECRET_API_TOKEN.
const SecretEnvPrefix = "RENDEZVOUS_SECRET_"

// ClientConfig configures the Client of every outbound request: http nodes and
// correlated calls.
type ClientConfig struct {
	// Allow lists what the egress policy allows beyond public addresses
	// (--outbound-allow; the forms are NewPolicy's). Default none.
	Allow []string
	// Self lists the addresses this replica listens on (host:port), refused unless
	// Allow names them with their port. The service sets it.
	Self []string
	// SecretsDir holds secrets one file per name, as a mounted Kubernetes secret
	// (--secrets-dir). Default empty: secrets come from the environment only.
	SecretsDir string
	// LookupEnv reads the environment variables of secrets. Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Resolver resolves host names before the policy judges their addresses. Default
	// the system's.
	Resolver *net.Resolver
	// Breaker configures the circuit breaker of each destination host.
	Breaker BreakerConfig
	// WrapTransport, when set, wraps the transport that enforces the policy: a test's
	// network that holds requests. Default none.
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// MeterProvider receives rendezvous.outbound.refused and the circuits' states.
	// Default a no-op provider.
	MeterProvider metric.MeterProvider
}

// Client sends outbound requests under the egress policy, resolving their secrets as
// they leave. One per replica: its breakers are the replica's view of each host.
type Client struct {
	http    *http.Client
	secrets secretSource
	refused metric.Int64Counter
	// breakers are the circuits of the hosts this replica calls.
	breakers *breakers
}

// NewClient returns a Client for cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	policy, err := NewPolicy(cfg.Allow, cfg.Self)
	if err != nil {
		return nil, err
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	lookup := cfg.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := &Client{secrets: secretSource{dir: cfg.SecretsDir, lookupEnv: lookup}}
	// No proxy from the environment: a proxy would make the connection the policy sees
	// the proxy's, whatever the request's destination.
	tr := &http.Transport{
		Proxy: nil, DialContext: policy.dialer(cfg.Resolver),
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second,
	}
	var rt http.RoundTripper = tr
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(tr)
	}
	c.http = &http.Client{Transport: rt, CheckRedirect: checkRedirect}
	m := mp.Meter(scope)
	if c.refused, err = m.Int64Counter("rendezvous.outbound.refused",
		metric.WithDescription("Outbound requests the egress policy refused, by reason (metadata, link_local, reserved, loopback, private, unspecified, self).")); err != nil {
		return nil, err
	}
	if c.breakers, err = newBreakers(cfg.Breaker, m); err != nil {
		return nil, err
	}
	return c, nil
}

// CloseIdleConnections closes the client's idle keep-alive connections.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// followKey marks a request whose redirects are followed.
type followKey struct{}

// checkRedirect answers a request with its 3xx unless the caller asked to follow
// redirects; a followed redirect dials through the same policy, so it reaches only
// allowed destinations.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if follow, _ := req.Context().Value(followKey{}).(bool); !follow {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// SendOptions are a request's own settings.
type SendOptions struct {
	// Timeout bounds the request, its redirects included.
	Timeout time.Duration
	// FollowRedirects follows 3xx answers (to allowed destinations); otherwise a 3xx is
	// the answer.
	FollowRedirects bool
	// WaitForCircuit waits, within Timeout, while the host's circuit is open, and sends
	// then: a caller that holds its slot (an http node). Without it, a request its
	// circuit holds back, or whose failure opened the circuit, is a *CircuitOpenError
	// for the caller to send again later without counting an attempt (a correlated
	// call).
	WaitForCircuit bool
}

// Do sends req. When ctx holds a span, the request carries its W3C traceparent (over one
// the definition set), so the receiver can continue the trace: the wait's call span for
// a correlated call, the node's span for an http node. Secrets are put in as the request
// leaves and taken out of what comes back; its errors name the request as rendered
// (Request.Target), never a secret's value.
func (c *Client) Do(ctx context.Context, req *Request, opt SendOptions) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	out, used, err := c.secrets.resolve(req)
	if err != nil {
		return nil, err
	}
	var body io.Reader
	if out.Body != nil {
		body = bytes.NewReader(out.Body)
	}
	hr, err := http.NewRequestWithContext(context.WithValue(ctx, followKey{}, opt.FollowRedirects), out.Method, out.URL, body)
	if err != nil {
		return nil, used.redactErr(err)
	}
	hr.Header = out.Headers
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hr.Header))
	host := strings.ToLower(hr.URL.Host)
	for opt.WaitForCircuit {
		wait := c.breakers.wait(host)
		if wait == 0 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, used.redactErr(&CircuitOpenError{Host: host, RetryIn: wait})
		case <-t.C:
		}
	}
	resp, err := c.breakers.do(host, func() (*http.Response, error) { return c.http.Do(hr) })
	if err != nil {
		if r := Refused(err); r != nil {
			c.refused.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", string(r.Reason))))
		}
		if !opt.WaitForCircuit && CircuitOpen(err) == nil {
			if wait := c.breakers.wait(host); wait > 0 {
				err = &CircuitOpenError{Host: host, RetryIn: wait, Cause: used.redactErr(err)}
			}
		}
		return nil, used.redactErr(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, used.redactErr(fmt.Errorf("read response: %w", err))
	}
	out2 := used.redactResponse(&Response{Status: resp.StatusCode, Headers: resp.Header, Body: raw})
	if !opt.WaitForCircuit && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests) {
		if wait := c.breakers.wait(host); wait > 0 {
			return nil, &CircuitOpenError{Host: host, RetryIn: wait,
				Cause: fmt.Errorf("status %d: %s", out2.Status, Excerpt(out2.Body))}
		}
	}
	return out2, nil
}

// newMark returns the mark of one render's secret references: unguessable, so that text
// from an execution's input cannot pose as a reference the definition made.
func newMark() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// secretRef finds a marked reference: its name and mark.
var secretRef = regexp.MustCompile(`@\{secrets\.([A-Za-z0-9_-]+):([0-9a-f]+)\}`)

// MissingSecretError is a secret a request references that is not set.
type MissingSecretError struct {
	Name string
	// Where says where it was looked for.
	Where string
}

func (e *MissingSecretError) Error() string {
	return fmt.Sprintf("secret %q is not set (%s)", e.Name, e.Where)
}

// secretSource reads secrets from the environment, then from files.
type secretSource struct {
	dir       string
	lookupEnv func(string) (string, bool)
}

// SecretEnvName returns the environment variable of secret name.
func SecretEnvName(name string) string {
	return SecretEnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func (s secretSource) get(name string) (string, error) {
	env := SecretEnvName(name)
	if v, ok := s.lookupEnv(env); ok {
		return v, nil
	}
	where := env + " is not set and no --secrets-dir is configured"
	if s.dir != "" {
		// The name is letters, digits, '_' and '-' (template.ValidSecretName): it cannot
		// leave the directory.
		raw, err := os.ReadFile(filepath.Join(s.dir, name))
		if err == nil {
			return strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r"), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("secret %q: read %s: %w", name, filepath.Join(s.dir, name), errors.Unwrap(err))
		}
		where = fmt.Sprintf("neither %s nor %s exists", env, filepath.Join(s.dir, name))
	}
	return "", &MissingSecretError{Name: name, Where: where}
}

// usedSecrets are the values a request carries, to be kept out of what is stored.
type usedSecrets []usedSecret

type usedSecret struct{ name, value string }

// resolve returns req with its marked references replaced by their values: as they are
// in the URL and headers, JSON-escaped in a JSON body.
func (s secretSource) resolve(req *Request) (*Request, usedSecrets, error) {
	out := &Request{Method: req.Method, URL: req.URL, Headers: req.Headers.Clone(), Body: req.Body}
	if req.mark == "" {
		return out, nil, nil
	}
	var used usedSecrets
	var firstErr error
	replace := func(text string, jsonText bool) string {
		if !strings.Contains(text, req.mark) {
			return text
		}
		return secretRef.ReplaceAllStringFunc(text, func(ref string) string {
			m := secretRef.FindStringSubmatch(ref)
			if m[2] != req.mark {
				return ref
			}
			v, err := s.get(m[1])
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return ref
			}
			if v != "" {
				used = append(used, usedSecret{name: m[1], value: v})
			}
			if jsonText {
				enc, _ := json.Marshal(v)
				return string(enc[1 : len(enc)-1])
			}
			return v
		})
	}
	out.URL = replace(out.URL, false)
	for k, vs := range out.Headers {
		for i, v := range vs {
			vs[i] = replace(v, false)
		}
		out.Headers[k] = vs
	}
	if req.Body != nil {
		out.Body = []byte(replace(string(req.Body), req.jsonBody))
	}
	if firstErr != nil {
		return nil, nil, firstErr
	}
	return out, used, nil
}

// redact replaces the secrets' values in s.
func (u usedSecrets) redact(s string) string {
	for _, sec := range u {
		s = strings.ReplaceAll(s, sec.value, "[secret "+sec.name+"]")
	}
	return s
}

// redactedError is an error whose message has no secret value in it; its chain is kept
// for errors.Is and errors.As (a refusal, a timeout).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr drops the URL that was sent from err (it may carry secrets; callers name
// the request as rendered, Request.Target), and takes secret values out of the rest.
func (u usedSecrets) redactErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if len(u) == 0 {
		return err
	}
	return &redactedError{msg: u.redact(err.Error()), err: err}
}

// redactResponse takes secret values out of a response (a service that echoes its
// Authorization header, say), since responses become node outputs and error messages.
func (u usedSecrets) redactResponse(r *Response) *Response {
	if len(u) == 0 {
		return r
	}
	for _, sec := range u {
		r.Body = bytes.ReplaceAll(r.Body, []byte(sec.value), []byte("[secret "+sec.name+"]"))
	}
	for k, vs := range r.Headers {
		for i, v := range vs {
			vs[i] = u.redact(v)
		}
		r.Headers[k] = vs
	}
	return r
}
