package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/outbound"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// NodeType is one kind of node: how its data is validated when a definition is stored,
// and what running it does. Adding a node type means adding an entry to the registry
// handed to New; the executor itself does not change.
type NodeType struct {
	// Parse validates the node's data and returns its decoded configuration, which Run
	// receives as RunContext.Node.Config.
	Parse workflow.NodeParser
	// Run does the node's work outside any database transaction. An error means the
	// attempt could not be made (and is retried); a failed node is an Outcome.
	Run func(ctx context.Context, rc *RunContext) (Outcome, error)
	// Inline says Run does no I/O: it only renders templates and decides, so it may run
	// inside a transaction without holding locks across a network call, and an outcome
	// that is not used may be dropped (the node runs again later). A root node of such a
	// type that waits is run in the transaction that starts its execution, its wait
	// registered there, instead of through the run queue (see insertExecution).
	Inline bool
}

// RunContext is what a node sees while it runs.
type RunContext struct {
	ExecutionID uuid.UUID
	Node        *workflow.CompiledNode
	// Scope renders the node's templates: execution input, vars, earlier outputs.
	Scope template.Scope
	// HTTP sends the node's requests under the egress policy.
	HTTP   *outbound.Client
	Logger *slog.Logger
	// Now is when the node runs, on the executor's clock (Config.Clock): the time a
	// node decides by, as a wait node's moment to resume.
	Now time.Time
}

// Outcome is the result of running a node; the executor records it in one transaction
// together with the graph's next step.
type Outcome struct {
	Status OutcomeStatus
	Output map[string]any
	// Error explains a failed node.
	Error string
	// Wait is registered in the same transaction that records a waiting outcome, so the
	// wait state and its outbound call exist together or not at all.
	Wait *aggregator.Registration
}

// OutcomeStatus says how a node run ended.
type OutcomeStatus int

const (
	// OutcomeCompleted moves the graph on.
	OutcomeCompleted OutcomeStatus = iota
	// OutcomeFailed fails the node and the execution.
	OutcomeFailed
	// OutcomeWaiting suspends the node until its wait is satisfied.
	OutcomeWaiting
)

// Completed returns a completed outcome.
func Completed(output map[string]any) Outcome {
	return Outcome{Status: OutcomeCompleted, Output: output}
}

// Failed returns a failed outcome.
func Failed(format string, args ...any) Outcome {
	return Outcome{Status: OutcomeFailed, Error: fmt.Sprintf(format, args...)}
}

// BuiltinNodeTypes returns the node types every executor knows.
func BuiltinNodeTypes() map[string]NodeType {
	return map[string]NodeType{
		"wait_events": {Parse: workflow.ParseWaitEventsNode, Run: runWaitEvents, Inline: true},
		"http":        {Parse: workflow.ParseHTTPNode, Run: runHTTP},
		"wait":        {Parse: workflow.ParseWaitNode, Run: runWait, Inline: true},
	}
}

// runWait schedules a time-based wait: a wait state whose deadline is the moment it
// resumes, fired by the deadline sweeper like any timeout. A moment already past
// completes the node at once. Settings that cannot be evaluated (a template naming a
// missing value, an unknown zone) fail the node, naming the bad value, and leave the
// wait recorded in status error.
func runWait(_ context.Context, rc *RunContext) (Outcome, error) {
	cfg := rc.Node.Config.(*workflow.Wait)
	now := rc.Now.UTC()
	plan, err := cfg.Plan(now, &rc.Scope)
	if err != nil {
		out := Failed("%v", err)
		out.Wait = &aggregator.Registration{
			ExecutionID: rc.ExecutionID, NodeID: rc.Node.ID, CorrelationID: db.NewID(),
			Timer: &aggregator.Timer{Error: err.Error(), Settings: map[string]any{"mode": cfg.Mode()}},
		}
		return out, nil
	}
	if !plan.At.After(now) {
		output := plan.Settings
		output["wait_type"] = string(vocab.WaitTypeTimer)
		output["scheduled_for"] = plan.At.UTC()
		output["resumed_at"] = now
		return Completed(output), nil
	}
	return Outcome{Status: OutcomeWaiting, Output: map[string]any{
		"status": string(vocab.WaitScheduled), "scheduled_for": plan.At.UTC(),
	}, Wait: &aggregator.Registration{
		ExecutionID: rc.ExecutionID, NodeID: rc.Node.ID, CorrelationID: db.NewID(),
		Timer: &aggregator.Timer{At: plan.At, Settings: plan.Settings},
	}}, nil
}

// runWaitEvents registers the wait. The correlated call itself is not made here: it is
// an outbox row committed with the wait state, sent afterwards by any pod.
func runWaitEvents(ctx context.Context, rc *RunContext) (Outcome, error) {
	cfg := rc.Node.Config.(*workflow.WaitEvents)
	expected := cfg.Expected()
	if len(expected) == 0 {
		return Completed(map[string]any{"events": []any{}, "arrival_order": []string{}, "timeout": false}), nil
	}
	correlationID := db.NewID()
	if cfg.APICall != nil {
		// Rendered now only to fail fast on a template naming something that does not
		// exist; the outbox renders it again when it sends.
		rc.Scope.CorrelationID = correlationID.String()
		if _, err := outbound.Build(cfg.APICall, rc.Scope, rc.ExecutionID, correlationID); err != nil {
			return Failed("%v", err), nil
		}
	}
	reg := &aggregator.Registration{
		ExecutionID:    rc.ExecutionID,
		NodeID:         rc.Node.ID,
		CorrelationID:  correlationID,
		Strategy:       cfg.AggregationStrategy,
		RequiredEvents: cfg.RequiredEvents,
		Timeout:        cfg.Timeout,
		OnTimeout:      cfg.OnTimeout,
		OutputMapping:  cfg.OutputMapping,
		APICall:        cfg.APICall != nil,
	}
	for _, e := range expected {
		exp := aggregator.Expected{
			Name: e.Name, Source: e.Source, Topic: e.Topic, Type: e.Type, Filter: e.Filter, Buffer: e.Buffer,
			Required: e.Required, TimeoutMS: e.Timeout.Milliseconds(), LookbackMS: e.Lookback.Milliseconds(),
		}
		if e.Match != nil {
			// Resolved now, once: the value is stored with the wait and indexed, so a record
			// is matched by a lookup, whatever later happens to the execution's data.
			v, err := template.Render(e.Match.RightTemplate(), rc.Scope)
			if err != nil {
				return Failed("event %s: match.right %s: %v", e.Name, e.Match.Right, err), nil
			}
			val, ok := aggregator.MatchValue(v)
			if !ok {
				return Failed("event %s: match.right %s resolved to %s; it must be a string, number or boolean", e.Name, e.Match.Right, describe(v)), nil
			}
			exp.Match = &aggregator.ExpectedMatch{Left: e.Match.Left, Value: val}
		}
		reg.Expected = append(reg.Expected, exp)
	}
	return Outcome{Status: OutcomeWaiting, Wait: reg, Output: map[string]any{
		"status": string(vocab.WaitWaiting), "correlation_id": correlationID.String(), "execution_id": rc.ExecutionID.String(),
	}}, nil
}

// describe names a JSON value's kind for an error message.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func runHTTP(ctx context.Context, rc *RunContext) (Outcome, error) {
	cfg := rc.Node.Config.(*workflow.HTTP)
	req, body, err := outbound.Render(cfg.Method, cfg.URL, cfg.Headers, cfg.Body, rc.Scope, "data")
	if err != nil {
		return Failed("%v", err), nil
	}
	if err := outbound.Encode(req, body); err != nil {
		return Failed("%v", err), nil
	}
	// Stable per node and execution: a retried attempt (lease lost, pod killed) is
	// recognisable as the same call by a receiver that honours Idempotency-Key.
	req.Headers.Set("Idempotency-Key", rc.ExecutionID.String()+":"+rc.Node.ID)
	resp, err := rc.HTTP.Do(ctx, req, outbound.SendOptions{Timeout: cfg.Timeout, FollowRedirects: cfg.FollowRedirects, WaitForCircuit: true})
	var missing *outbound.MissingSecretError
	if outbound.Refused(err) != nil || errors.As(err, &missing) {
		// Neither changes on another attempt: the node fails now, saying why.
		return Failed("http %s: %v", req.Target(), err), nil
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("http %s: %w", req.Target(), err)
	}
	if cfg.FailOnNon2xx && (resp.Status < 200 || resp.Status > 299) {
		return Failed("http %s: status %d: %s", req.Target(), resp.Status, outbound.Excerpt(resp.Body)), nil
	}
	headers := map[string]any{}
	for k, v := range resp.Headers {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	var parsed any
	if len(resp.Body) > 0 {
		var err error
		if parsed, err = jsonnum.Decode(resp.Body); err != nil { // numbers exact, as in the body
			parsed = string(resp.Body)
		}
	}
	return Completed(map[string]any{"status": resp.Status, "headers": headers, "body": withoutNUL(parsed)}), nil
}

// withoutNUL replaces U+0000 in the strings and keys of a decoded JSON value: jsonb
// cannot hold it, and an output that cannot be recorded would make the node run again
// and again.
func withoutNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "\uFFFD")
	case []any:
		for i, e := range x {
			x[i] = withoutNUL(e)
		}
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(e)
		}
		return out
	}
	return v
}
