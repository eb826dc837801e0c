package callbacks

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Route is where external services call back; :service is a free label (the name of
// the calling service) stored with the event: 1 to MaxServiceLen characters of UTF-8
// text without control characters.
const Route = "/api/internal/callbacks/:service"

// MaxServiceLen bounds the :service label, in bytes.
const MaxServiceLen = 200

// Id headers and body fields of a callback.
const (
	HeaderExecutionID   = "X-Execution-Id"
	HeaderCorrelationID = "X-Correlation-Id"
	FieldExecutionID    = "execution_id"
	FieldCorrelationID  = "correlation_id"
)

// The expected event a callback is: the api_response of the wait's apiCall unless the
// query parameter or the header names one of its events with source callback. Neither
// is covered by a webhook signature, which signs the body only; like the :service label,
// the name only selects which of the wait's events the signed body is.
const (
	QueryEvent  = "event"
	HeaderEvent = "X-Rendezvous-Event"
)

// eventNamePattern is the syntax of an event name in a definition.
var eventNamePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// MaxBodyBytesDefault bounds a callback body; larger ones get 413.
const MaxBodyBytesDefault = 1 << 20

// Config configures the callback endpoint.
type Config struct {
	// Secrets enables Standard Webhooks signatures when not empty: every callback must be
	// signed with one of them (several allow rotation). Default: none, unsigned.
	Secrets []string
	// SignatureTolerance is the accepted clock skew of webhook-timestamp. Default
	// SignatureToleranceDefault.
	SignatureTolerance time.Duration
	// MaxBodyBytes bounds a body. Default MaxBodyBytesDefault.
	MaxBodyBytes int64
	// RatePerSource and BurstPerSource bound the callbacks one source address may send:
	// a bucket of BurstPerSource refilled at RatePerSource a second; beyond it, 429 with
	// Retry-After. Defaults RatePerSourceDefault and BurstPerSourceDefault; a negative
	// rate turns the limit off.
	RatePerSource, BurstPerSource int
	// RatePerExecution and BurstPerExecution bound the callbacks for one execution, from
	// any source, the same way. Defaults RatePerExecutionDefault and
	// BurstPerExecutionDefault; a negative rate turns the limit off.
	RatePerExecution, BurstPerExecution int
	// RateLimitKeys bounds the buckets kept per scope. Default RateLimitKeysDefault.
	RateLimitKeys int
	// TrustedProxies are the addresses and CIDRs of proxies in front of the replicas: a
	// callback from one of them is counted against the address its X-Forwarded-For
	// names. Default none: the peer's address is the source.
	TrustedProxies []string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.SignatureTolerance <= 0 {
		c.SignatureTolerance = SignatureToleranceDefault
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = MaxBodyBytesDefault
	}
	defInt := func(d *int, v int) {
		if *d == 0 {
			*d = v
		}
	}
	defInt(&c.RatePerSource, RatePerSourceDefault)
	defInt(&c.BurstPerSource, BurstPerSourceDefault)
	defInt(&c.RatePerExecution, RatePerExecutionDefault)
	defInt(&c.BurstPerExecution, BurstPerExecutionDefault)
	defInt(&c.RateLimitKeys, RateLimitKeysDefault)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.BurstPerSource < 1:
		return errors.New("callbacks.burst_per_source: must be at least 1")
	case c.BurstPerExecution < 1:
		return errors.New("callbacks.burst_per_execution: must be at least 1")
	case c.RateLimitKeys < 2:
		return errors.New("callbacks.rate_limit_keys: must be at least 2")
	}
	return nil
}

// Handler serves the callback endpoint.
type Handler struct {
	cfg      Config
	agg      *aggregator.Aggregator
	verifier *Verifier
	// perSource and perExecution are the rate limits (nil: off); proxies are trusted to
	// name the source.
	perSource, perExecution *keyedLimiter
	proxies                 proxies
}

// New returns a Handler that feeds agg.
func New(agg *aggregator.Aggregator, cfg Config) (*Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, agg: agg,
		perSource:    newKeyedLimiter(cfg.RatePerSource, cfg.BurstPerSource, cfg.RateLimitKeys),
		perExecution: newKeyedLimiter(cfg.RatePerExecution, cfg.BurstPerExecution, cfg.RateLimitKeys),
	}
	var err error
	if h.proxies, err = parseProxies(cfg.TrustedProxies); err != nil {
		return nil, err
	}
	if len(cfg.Secrets) > 0 {
		v, err := NewVerifier(cfg.Secrets, cfg.SignatureTolerance)
		if err != nil {
			return nil, fmt.Errorf("callbacks.secrets: %w", err)
		}
		h.verifier = v
	}
	return h, nil
}

// Register adds the endpoint to e, and its per-source rate limit ahead of e's routing
// and middleware: a flood is answered at the cost of the check, not of a span, an
// access decision and an audit lookup each.
func (h *Handler) Register(e *echo.Echo) {
	e.Pre(h.limitSources)
	e.POST(Route, h.handle)
}

// routePrefix is Route up to its parameter.
var routePrefix = strings.TrimSuffix(Route, ":service")

// limitSources answers 429 to a callback whose source is over its limit.
func (h *Handler) limitSources(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if !strings.HasPrefix(req.URL.Path, routePrefix) {
			return next(c)
		}
		if wait := h.perSource.take(h.proxies.source(req)); wait > 0 {
			h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, RejectRateLimited)
			return limited(c, LimitSource, wait)
		}
		return next(c)
	}
}

// Accepted is the body of 200 and 202 answers.
type Accepted struct {
	Status      string           `json:"status"` // recorded, completed or duplicate
	WaitStateID uuid.UUID        `json:"wait_state_id"`
	WaitStatus  vocab.WaitStatus `json:"wait_status"`
	Version     int64            `json:"version"`
}

func (h *Handler) handle(c echo.Context) error {
	req := c.Request()
	if req.ContentLength > h.cfg.MaxBodyBytes {
		h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, "poison")
		return tooLarge(h.cfg.MaxBodyBytes)
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, h.cfg.MaxBodyBytes+1))
	if err != nil {
		return problem.New(http.StatusBadRequest, "could not read body: "+err.Error())
	}
	if int64(len(body)) > h.cfg.MaxBodyBytes {
		h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, "poison")
		return tooLarge(h.cfg.MaxBodyBytes)
	}

	var webhookID string
	if h.verifier != nil {
		webhookID, err = h.verifier.Verify(req.Header, body)
		if err != nil {
			h.cfg.Logger.WarnContext(req.Context(), "callback rejected: bad signature", "service", c.Param("service"), "err", err)
			h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, "invalid_signature")
			return problem.New(http.StatusUnauthorized, err.Error()).WithType("invalid-signature")
		}
	}

	ev, perr := parse(req.Header, body, h.verifier != nil)
	if perr == nil {
		perr = checkService(c.Param("service"))
	}
	if perr == nil {
		ev.Name, perr = eventName(req)
	}
	if perr != nil {
		h.cfg.Logger.WarnContext(req.Context(), "callback rejected", "service", c.Param("service"), "err", perr.Detail)
		h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, rejectReason(perr))
		return perr
	}
	if wait := h.perExecution.take(ev.ExecutionID.String()); wait > 0 {
		h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, RejectRateLimited)
		return limited(c, LimitExecution, wait)
	}
	if webhookID != "" {
		// Neither id headers nor the event's name are covered by the signature: the
		// delivery is bound to the wait and event it named first.
		same, err := h.agg.BindWebhookID(req.Context(), webhookID, ev.ExecutionID, ev.CorrelationID, ev.Name)
		if err != nil {
			return h.failed(c, ev, err)
		}
		if !same {
			h.cfg.Logger.WarnContext(req.Context(), "callback rejected: webhook-id replayed against another wait or event", "service", c.Param("service"),
				"webhook_id", webhookID, "execution_id", ev.ExecutionID, "correlation_id", ev.CorrelationID, "event", ev.Name)
			h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, "invalid_signature")
			return problem.New(http.StatusConflict, "this webhook-id was delivered to another wait or as another event; a signed delivery names one").
				WithType("webhook-id-reused")
		}
	}
	ev.Source = aggregator.Source{Kind: aggregator.SourceCallback, Service: c.Param("service")}
	ev.IdempotencyKey = webhookID
	// The caller's trace, if it sent one, is linked from the event's span in the wait's
	// own trace.
	ev.Link = telemetry.SpanContextOf(req.Context(), nil, propagation.HeaderCarrier(req.Header))

	res, err := h.agg.Apply(req.Context(), ev)
	if ue := (*aggregator.UnstorableError)(nil); errors.As(err, &ue) {
		h.agg.RecordRejected(req.Context(), aggregator.SourceCallback, "poison")
		return problem.New(http.StatusBadRequest, "the body cannot be stored: "+ue.Reason).WithType("unstorable-payload")
	}
	if err != nil {
		return h.failed(c, ev, err)
	}
	ok := Accepted{Status: string(res.Outcome), WaitStateID: res.WaitStateID, WaitStatus: res.Status, Version: res.Version}
	switch res.Outcome {
	case aggregator.Recorded, aggregator.Completed:
		return c.JSON(http.StatusAccepted, ok)
	case aggregator.Duplicate:
		return c.JSON(http.StatusOK, ok)
	case aggregator.Late:
		return problem.New(http.StatusConflict, fmt.Sprintf("the wait is already %s; the event was not applied", res.Status)).
			WithType("late-event").With("wait_status", res.Status).With("event", ev.Name)
	case aggregator.AlreadyRecorded:
		return problem.New(http.StatusConflict, fmt.Sprintf("the wait already holds a different %s; the event was not applied", ev.Name)).
			WithType("already-recorded").With("event", ev.Name)
	case aggregator.NotExpected:
		why := "its events have no callback event of this name"
		if ev.Name == aggregator.EventAPIResponse {
			why = "apiCall is not enabled; name another event with ?" + QueryEvent + "="
		}
		return problem.New(http.StatusUnprocessableEntity, fmt.Sprintf("the wait does not expect a callback for event %s (%s)", ev.Name, why)).
			WithType("not-expected").With("event", ev.Name)
	case aggregator.FilterMismatch:
		return problem.New(http.StatusUnprocessableEntity, fmt.Sprintf("the body does not pass the filter of event %s; the event was not applied", ev.Name)).
			WithType("filter-mismatch").With("event", ev.Name)
	default: // NotFound, IDMismatch: indistinguishable to the caller, ids are capabilities
		return problem.New(http.StatusNotFound, "no wait matches this execution_id and correlation_id").WithType("wait-not-found")
	}
}

// failed answers a callback whose event could not be recorded: 503 with Retry-After
// when offering it again may pass (aggregator.Transient), else the error as is (500).
func (h *Handler) failed(c echo.Context, ev aggregator.Event, err error) error {
	if aggregator.Transient(err) {
		h.cfg.Logger.ErrorContext(c.Request().Context(), "callback not recorded; its sender is told to retry", "execution_id", ev.ExecutionID,
			"correlation_id", ev.CorrelationID, "err", err)
		return problem.RetryLater(c, "the event was not recorded; retry later")
	}
	return err
}

func tooLarge(limit int64) error {
	return problem.New(http.StatusRequestEntityTooLarge, fmt.Sprintf("body exceeds %d bytes", limit)).WithType("body-too-large")
}

// eventName reads the expected event a callback names: the query parameter or the
// header (both may be given if they agree), api_response when neither is. An empty
// value counts as absent, as in the API's query parameters.
func eventName(req *http.Request) (string, *problem.Problem) {
	query, header := req.URL.Query()[QueryEvent], req.Header.Values(HeaderEvent)
	if len(query) > 1 || len(header) > 1 {
		return "", problem.New(http.StatusBadRequest, fmt.Sprintf("the event is named more than once (?%s=, %s)", QueryEvent, HeaderEvent)).
			WithType("malformed-event")
	}
	var q, hd string
	if len(query) == 1 {
		q = query[0]
	}
	if len(header) == 1 {
		hd = strings.TrimSpace(header[0])
	}
	if q != "" && hd != "" && q != hd {
		return "", problem.New(http.StatusBadRequest, fmt.Sprintf("?%s= and %s name different events", QueryEvent, HeaderEvent)).
			WithType("malformed-event")
	}
	name := cmp.Or(q, hd)
	if name == "" {
		return aggregator.EventAPIResponse, nil
	}
	if !eventNamePattern.MatchString(name) {
		return "", problem.New(http.StatusBadRequest, "the event name must be 1 to 64 letters, digits, '_' or '-'").WithType("malformed-event")
	}
	return name, nil
}

// parse extracts the ids (headers first, then body fields) and the payload. It is a pure
// function so that it can be fuzzed.
func parse(h http.Header, body []byte, signed bool) (aggregator.Event, *problem.Problem) {
	var ev aggregator.Event
	// Members stay raw: only the two string ids are read, and no number elsewhere in the
	// body is converted (1e400 would not fit a float64).
	var obj map[string]json.RawMessage
	trimmed := strings.TrimSpace(string(body))
	switch {
	case trimmed == "":
		body = []byte("null")
	case !json.Valid(body):
		return ev, problem.New(http.StatusBadRequest, "body is not valid JSON").WithType("malformed-json")
	default:
		_ = json.Unmarshal(body, &obj) // not an object: ids must then come from headers
	}
	field := func(name string) string {
		var s string
		if raw, ok := obj[name]; ok && json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	execRaw := strings.TrimSpace(h.Get(HeaderExecutionID))
	if execRaw == "" {
		execRaw = field(FieldExecutionID)
	}
	corrRaw := strings.TrimSpace(h.Get(HeaderCorrelationID))
	if corrRaw == "" {
		corrRaw = field(FieldCorrelationID)
	}
	var missing []string
	if execRaw == "" {
		missing = append(missing, "execution_id")
	}
	if corrRaw == "" {
		missing = append(missing, "correlation_id")
	}
	if len(missing) > 0 {
		return ev, problem.New(http.StatusBadRequest,
			fmt.Sprintf("missing %s: send the %s/%s headers or the execution_id/correlation_id body fields",
				strings.Join(missing, " and "), HeaderExecutionID, HeaderCorrelationID)).WithType("missing-id")
	}
	var err error
	if ev.ExecutionID, err = uuid.Parse(execRaw); err != nil {
		return ev, problem.New(http.StatusBadRequest, "execution_id is not a UUID").WithType("malformed-id")
	}
	if ev.CorrelationID, err = uuid.Parse(corrRaw); err != nil {
		return ev, problem.New(http.StatusBadRequest, "correlation_id is not a UUID").WithType("malformed-id")
	}
	if signed {
		// A signature covers the body, not the headers: header ids that differ from the
		// signed body's would let a captured callback be replayed against another wait.
		for _, pair := range []struct {
			field string
			used  uuid.UUID
		}{{FieldExecutionID, ev.ExecutionID}, {FieldCorrelationID, ev.CorrelationID}} {
			if inBody, err := uuid.Parse(field(pair.field)); err == nil && inBody != pair.used {
				return ev, problem.New(http.StatusBadRequest, fmt.Sprintf(
					"the %s header differs from the signed body's %s: with signatures, header ids must agree with the body's",
					map[string]string{FieldExecutionID: HeaderExecutionID, FieldCorrelationID: HeaderCorrelationID}[pair.field], pair.field)).
					WithType("unsigned-ids")
			}
		}
	}
	ev.Name = aggregator.EventAPIResponse
	ev.Payload = json.RawMessage(body)
	return ev, nil
}

// rejectReason names a rejected callback's reason in metrics with the Kafka path's words:
// missing_id and invalid_id for the ids, poison for a body that cannot be an event.
// checkService refuses a :service label that could not be stored or read back: text
// that is not UTF-8, control characters (NUL among them, which jsonb refuses), or one
// longer than MaxServiceLen.
func checkService(service string) *problem.Problem {
	bad := service == "" || len(service) > MaxServiceLen || !utf8.ValidString(service) ||
		strings.ContainsFunc(service, unicode.IsControl)
	if !bad {
		return nil
	}
	return problem.New(http.StatusBadRequest, fmt.Sprintf("the service label in the path must be 1 to %d bytes of UTF-8 text without control characters", MaxServiceLen)).
		WithType("invalid-service")
}

func rejectReason(p *problem.Problem) string {
	switch {
	case strings.HasSuffix(p.Type, "/missing-id"):
		return "missing_id"
	case strings.HasSuffix(p.Type, "/malformed-id"):
		return "invalid_id"
	}
	return "poison"
}
