package api

// Events sent to an execution by type (POST /api/v1/executions/:id/events), and the
// operator's two views of events that reached no wait: the recent unmatched events with
// why, and the buffered events that no wait took before they expired or their execution
// ended (the dead letters). The aggregator decides everything; this file only checks
// the request and says what happened in HTTP.

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/internal/telemetry"
	"github.com/rendezvous-run/rendezvous/server/auth"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// sendShape is how a malformed body is told what is expected.
const sendShape = `body must be {"type": "...", "payload": <JSON>, "id": "..."}`

// delivery is what a sent event did at one waiting node.
type delivery struct {
	NodeID      string    `json:"node_id"`
	WaitStateID uuid.UUID `json:"wait_state_id"`
	// Event is the expected event of the node the sent event was taken as.
	Event      string           `json:"event"`
	Outcome    string           `json:"outcome"`
	WaitStatus vocab.WaitStatus `json:"wait_status"`
	Version    int64            `json:"version"`
}

// sendAnswer is the body of 200 and 202 answers to a sent event.
type sendAnswer struct {
	Outcome aggregator.SendOutcome `json:"outcome"`
	// Deliveries: delivered, and buffered when waiting nodes of the type refused it.
	Deliveries []delivery `json:"deliveries,omitempty"`
	// BufferID and ExpiresAt: buffered only.
	BufferID  int64      `json:"buffer_id,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// invalidField is a 400 problem about one member of a request body; field names it for
// programs, the detail for people.
func invalidField(slug, field, reason string) *problem.Problem {
	return problem.New(http.StatusBadRequest, field+": "+reason).WithType(slug).With("field", field)
}

// readSend parses and checks a sent event's body (aggregator.ParseSent, the parser the
// Kafka events topic uses too) and says what is wrong with it as a problem.
func readSend(body []byte) (aggregator.SentWire, error) {
	w, err := aggregator.ParseSent(body, aggregator.SentBody)
	we, ok := errors.AsType[*aggregator.SentWireError](err)
	if !ok {
		return w, err
	}
	switch we.Refusal {
	case aggregator.SentEmpty:
		return w, problem.New(http.StatusBadRequest, sendShape+": the body is empty").WithType("malformed-json")
	case aggregator.SentNotJSON, aggregator.SentNotObject:
		return w, problem.New(http.StatusBadRequest, sendShape+": "+we.Reason).WithType("malformed-json")
	case aggregator.SentUnknownMember:
		return w, invalidField("malformed-json", we.Field, `unknown field; a sent event has "type", "payload" and "id"`)
	case aggregator.SentNotString:
		return w, invalidField("malformed-json", we.Field, we.Reason)
	}
	return w, invalidField("invalid-request", we.Field, we.Reason)
}

// sendEvent delivers an event to every node of the execution waiting for its type, or
// buffers it until one does.
func (h *handlers) sendEvent(c echo.Context) error {
	if _, err := queryParams(c); err != nil {
		return err
	}
	id, err := uuid.Parse(c.Param("id"))
	if err != nil {
		return problem.New(http.StatusBadRequest, "execution id is not a UUID").WithType("malformed-id")
	}
	body, err := readBodyUpTo(c, aggregator.MaxSentBytes)
	if err != nil {
		return err
	}
	req, err := readSend(body)
	if err != nil {
		return err
	}
	if err := h.maySendTo(c, id); err != nil {
		return err
	}
	s := aggregator.Sent{ExecutionID: id, Type: req.Type, Payload: req.Payload, ID: req.ID,
		Source: aggregator.Source{Kind: aggregator.SourceSend}}
	hr := c.Request()
	// The sender's trace, if it sent one, is linked from the event's spans in the waits'
	// own traces.
	s.Link = telemetry.SpanContextOf(hr.Context(), nil, propagation.HeaderCarrier(hr.Header))

	res, err := h.agg.Send(hr.Context(), s)
	var unstorable *aggregator.UnstorableError
	switch {
	case errors.As(err, &unstorable):
		return invalidField("unstorable-payload", "payload", "cannot be stored: "+unstorable.Reason)
	case aggregator.Transient(err):
		return problem.RetryLater(c, "the event was not recorded; retry later")
	case err != nil:
		return fmt.Errorf("send %s event to execution %s: %w", s.Type, id, err)
	}
	answer := sendAnswer{Outcome: res.Outcome}
	for _, d := range res.Deliveries {
		answer.Deliveries = append(answer.Deliveries, delivery{NodeID: d.NodeID, WaitStateID: d.WaitStateID, Event: d.Event,
			Outcome: string(d.Outcome), WaitStatus: d.Status, Version: d.Version})
	}
	switch res.Outcome {
	case aggregator.SendDelivered:
		return c.JSON(http.StatusAccepted, answer)
	case aggregator.SendBuffered:
		answer.BufferID, answer.ExpiresAt = res.BufferID, &res.ExpiresAt
		return c.JSON(http.StatusAccepted, answer)
	case aggregator.SendDuplicate:
		return c.JSON(http.StatusOK, sendAnswer{Outcome: res.Outcome})
	case aggregator.SendNoExecution:
		return problem.New(http.StatusNotFound, "no execution "+id.String()).WithType("execution-not-found")
	case aggregator.SendExecutionFinished:
		return problem.New(http.StatusConflict, "execution is already "+string(res.ExecutionStatus)+"; the event was not applied").
			WithType("execution-finished").With("execution_status", res.ExecutionStatus)
	}
	return fmt.Errorf("send %s event to execution %s: unknown outcome %q", s.Type, id, res.Outcome)
}

// maySendTo refuses a sender limited to a workflow prefix an execution of another
// workflow. An execution that does not exist is refused alike, so that such a sender
// learns nothing of executions outside its workflows.
func (h *handlers) maySendTo(c echo.Context, id uuid.UUID) error {
	ctx := c.Request().Context()
	p := auth.FromContext(ctx)
	if p == nil || p.Role != auth.RoleSender || p.WorkflowPrefix == "" {
		return nil
	}
	v, err := h.lists.Execution(ctx, id)
	if err != nil && !errors.Is(err, readmodel.ErrNotFound) {
		return err
	}
	if err == nil && p.MaySendTo(v.Workflow) {
		return nil
	}
	return h.access.Auth.Refuse(ctx, c.Path(), auth.ReasonWorkflow,
		auth.Forbidden("this token may only send events to executions of workflows named "+p.WorkflowPrefix+"…"))
}

// listUnmatched lists recent events that no wait took, newest first, with why.
func (h *handlers) listUnmatched(c echo.Context) error {
	q, pg, err := listQuery(c, "reason", "execution")
	if err != nil {
		return err
	}
	f := readmodel.UnmatchedFilter{Reason: q["reason"]}
	if f.ExecutionID, err = queryUUID(q, "execution"); err != nil {
		return err
	}
	page, err := h.lists.Unmatched(c.Request().Context(), f, pg)
	return servePage(c, page, err)
}

// listDeadLetters lists buffered events that no wait took, newest first.
func (h *handlers) listDeadLetters(c echo.Context) error {
	q, pg, err := listQuery(c, "execution")
	if err != nil {
		return err
	}
	execution, err := queryUUID(q, "execution")
	if err != nil {
		return err
	}
	page, err := h.lists.DeadLetters(c.Request().Context(), execution, pg)
	return servePage(c, page, err)
}
