package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// waitSpec checks that the wait's stored configuration is the definition's and that its
// deadlines keep the definition's distances, and returns what decides the wait.
func (c *checker) waitSpec(p *ExecPlan, e *ExecLog, def *Definition, w ObservedWait) WaitSpec {
	spec := specOf(def, e.Wait)
	for _, d := range deadlineDistances(def, e.Wait) {
		c.violate(InvOutcome, p.Index, e.ID, "%s", d)
	}
	if w.Strategy != def.Strategy || w.OnTimeout != def.OnTimeout || !sameSet(w.Required, def.RequiredSet()) {
		c.violate(InvOutcome, p.Index, e.ID, "stored strategy %s/%s requiring %v; the definition says %s/%s requiring %v",
			w.Strategy, w.OnTimeout, w.Required, def.Strategy, def.OnTimeout, def.RequiredSet())
	}
	return spec
}

// specOf is what decides a wait of def with w's deadlines.
func specOf(def *Definition, w *WaitInfo) WaitSpec {
	spec := WaitSpec{Strategy: def.Strategy, OnTimeout: def.OnTimeout, Required: def.RequiredSet(), Expires: w.Expires}
	for _, ev := range def.Events {
		spec.Events = append(spec.Events, SpecEvent{Name: ev.Name, Required: ev.Required, Deadline: w.Deadlines[ev.Name]})
	}
	return spec
}

// deadlineDistances says where a wait's deadlines do not keep the definition's
// distances from the overall one (each event's own timeout, or the node's).
func deadlineDistances(def *Definition, w *WaitInfo) []string {
	var out []string
	for _, ev := range def.Events {
		own := ev.Timeout
		if own == 0 {
			own = def.Timeout
		}
		if got := w.Expires.Sub(w.Deadlines[ev.Name]); absDuration(got-(def.Timeout-own)) > time.Millisecond {
			out = append(out, fmt.Sprintf("%s deadline is %s before the overall one; the definition says %s", ev.Name, got, def.Timeout-own))
		}
	}
	return out
}

// deliveryWindows reads, from what the driver did, when each event may have been
// applied; answered holds what the answers to callbacks and sent events say was
// recorded, and faulted whether a Kafka record was produced while a fault disturbed its
// consumer.
func (c *checker) deliveryWindows(p *ExecPlan, e *ExecLog) (windows map[string]Window, answered map[string]bool, faulted bool) {
	windows, answered = map[string]Window{}, map[string]bool{}
	for _, ev := range e.Events {
		switch {
		case ev.Name == EventAPI || ev.Name == EventSend && !sentAsRecords(ev):
			read, what := callbackWindow, "callback"
			if ev.Name == EventSend {
				read, what = sendWindow, "sent event"
			}
			// The windows span every attempt (both lives of a redriven wait read them);
			// the answers are judged against the first life's rows, so by its attempts.
			win, _, ok, _ := read(ev)
			_, recorded, _, problems := read(firstLifeAttempts(e, ev))
			for _, pr := range problems {
				c.violate(InvAnswers, p.Index, e.ID, "%s: %s", what, pr)
			}
			if ok {
				windows[ev.Name] = win
			}
			if recorded != nil {
				answered[ev.Name] = *recorded
			}
		case kafkaSourced(ev.Name) || sentAsRecords(ev):
			win, ok, disturbed := kafkaWindow(ev, c.cfg.KafkaLatency, c.disturbed)
			if ok {
				windows[ev.Name] = win
				faulted = faulted || disturbed
			}
		}
	}
	return windows, answered, faulted
}

// firstLifeAttempts is ev with only the attempts that began before an operator's
// redrive of the execution: an attempt sent after it (a retry of a callback that a fault
// held back past the wait's deadline, say) may reach the reopened wait, so it belongs to
// the wait's second life, which the redrive's own checks judge from the final rows.
func firstLifeAttempts(e *ExecLog, ev EventLog) EventLog {
	if e.Redrive == nil || e.Redrive.Before == nil {
		return ev
	}
	at := e.Redrive.Before.At
	ev.Attempts = slices.DeleteFunc(slices.Clone(ev.Attempts), func(a Attempt) bool { return a.Start.After(at) })
	return ev
}

// life is what a wait's outcome is judged by: the final rows, or, for an execution an
// operator redrove, the snapshot taken just before the redrive, which is the only
// record of how the first life of the wait ended (the reopen resets its timed-out events
// and deadlines).
type life struct {
	wait     ObservedWait
	status   string
	nodes    map[string]ObservedNode
	redriven bool
}

// firstLife returns the life the delivery windows decide.
func (c *checker) firstLife(e *ExecLog, ex ObservedExecution, w ObservedWait, nodes map[string]ObservedNode) life {
	if e.Redrive == nil || e.Redrive.Before == nil || ex.RedriveCount == 0 {
		return life{wait: w, status: ex.Status, nodes: nodes}
	}
	b := e.Redrive.Before
	before := w
	before.Status, before.Version, before.Received, before.TimedOut = b.Wait.Status, b.Wait.Version, b.Wait.Received, b.Wait.TimedOut
	before.ResumedAt, before.ResumedBy = b.Wait.ResumedAt, b.Wait.ResumedBy
	return life{wait: before, status: b.Status, nodes: map[string]ObservedNode{"wait": {Status: b.WaitNode}}, redriven: true}
}

// outcome compares the outcome the service reached in the first life with those the
// delivery windows allow, and returns its class ("" when it has none).
func (c *checker) outcome(p *ExecPlan, e *ExecLog, def *Definition, spec WaitSpec, windows map[string]Window, faulted bool, l life) string {
	allowed := Allowed(spec, windows)
	w := l.wait
	actual, why := actualClass(w, l.nodes)
	c.checked(InvOutcome, 1)
	c.checked(InvRecorded, 1)
	if len(allowed) == 1 {
		c.report.Outcomes.Certain[allowed[0].Class]++
	} else {
		c.report.Outcomes.EitherOr++
		if faulted {
			c.report.Outcomes.Faulted++
		} else {
			c.report.Outcomes.Racing++
		}
	}
	if actual == "" {
		c.violate(InvOutcome, p.Index, e.ID, "%s (expected %s)", why, resultList(allowed))
		return ""
	}
	c.report.Outcomes.Actual[actual]++
	got := Result{Class: actual, Recorded: sorted(receivedNames(w.Received))}
	switch {
	case !slices.ContainsFunc(allowed, func(r Result) bool { return r.Class == actual }):
		c.violate(InvOutcome, p.Index, e.ID, "%s: got %s, expected %s; deliveries %s", def.Name, got, resultList(allowed), describeWindows(windows, spec))
	case !slices.ContainsFunc(allowed, func(r Result) bool { return r.String() == got.String() }):
		c.violate(InvRecorded, p.Index, e.ID, "%s: got %s, expected %s; deliveries %s", def.Name, got, resultList(allowed), describeWindows(windows, spec))
	}
	if want := executionStatus(actual); l.status != want {
		c.violate(InvOutcome, p.Index, e.ID, "wait ended %s but the execution is %s", actual, l.status)
	}
	// Continuing after a timeout with events missing under continue_with_partial
	// leaves a warning on the node; nothing else does.
	wantWarning := actual == ClassContinued && w.OnTimeout == "continue_with_partial" && len(w.TimedOut) > 0
	if gotWarning := l.nodes["wait"].Warning != ""; gotWarning != wantWarning {
		c.violate(InvOutcome, p.Index, e.ID, "wait ended %s under onTimeout %s with timed-out events %v; node warning %q",
			actual, w.OnTimeout, w.TimedOut, l.nodes["wait"].Warning)
	}
	return actual
}

// executionStatus is the status an execution ends with when its wait ends in class.
func executionStatus(class string) string {
	if class == ClassFailed {
		return "failed"
	}
	return "completed"
}

// version checks that the wait's version counts its applied changes: 1 at
// registration, one per recorded event, one per sweeper write that recorded timed-out
// events or ended the wait. A sweep may record several timed-out events at once, and a
// completion records passed deadlines without a write of its own, hence a range unless
// nothing timed out. (A redriven wait's second life adds to this; see redriven.)
func (c *checker) version(p *ExecPlan, e *ExecLog, w ObservedWait) {
	c.checked(InvVersion, 1)
	lo, hi := deadlineWrites(w)
	if extra := int(w.Version) - 1 - len(w.Received); extra < lo || extra > hi {
		c.violate(InvVersion, p.Index, e.ID, "version %d with %d recorded and %d timed-out events (%s): expected %d to %d",
			w.Version, len(w.Received), len(w.TimedOut), w.Status, 1+len(w.Received)+lo, 1+len(w.Received)+hi)
	}
	recorded := receivedNames(w.Received)
	for _, t := range w.TimedOut {
		if slices.Contains(recorded, t) || !slices.Contains(w.Enabled, t) {
			c.violate(InvRecorded, p.Index, e.ID, "timed_out_events %v names %s, which was received or is not enabled", w.TimedOut, t)
		}
	}
	if w.Status == "timeout" && len(w.TimedOut) == 0 {
		c.violate(InvRecorded, p.Index, e.ID, "timed out without any timed-out event")
	}
}

// deadlineWrites is how many sweeper writes a wait's version may count: at least one
// when it timed out, at most one per timed-out event.
func deadlineWrites(w ObservedWait) (lo, hi int) {
	if w.Status == "timeout" {
		lo = 1
	}
	return lo, len(w.TimedOut)
}

// continuation checks the side effects of a finished wait at the fake service: exactly
// one for a wait that continued, of the right kind, none for one that failed. A repeated
// call of the same http node (same Idempotency-Key) is at-least-once delivery when the
// process that sent the previous one died, or the database went away, before the node's
// result could be committed; any other repetition is a second resume. Violations count
// under inv: InvResumedOnce, or InvRedriveOnce for the life after a redrive.
func (c *checker) continuation(inv string, p *ExecPlan, e *ExecLog, w ObservedWait, actual string, nodes map[string]ObservedNode, conts []Continuation) {
	c.checked(inv, 1)
	if w.ResumedAt == nil || !strings.HasPrefix(w.ResumedBy, "chaos-r") {
		c.violate(inv, p.Index, e.ID, "wait %s but never marked resumed (resumed_by %q)", w.Status, w.ResumedBy)
	}
	want, node, other := KindSatisfied, NodeSatisfied, NodeTimedOut
	if actual != ClassCompleted {
		want, node, other = KindTimedOut, NodeTimedOut, NodeSatisfied
	}
	if actual == ClassFailed {
		if len(conts) > 0 {
			c.violate(inv, p.Index, e.ID, "the execution failed, yet %d continuation call(s) arrived (%s)", len(conts), conts[0].Kind)
		}
		for _, n := range []string{NodeSatisfied, NodeTimedOut} {
			if nodes[n].Status == "completed" {
				c.violate(inv, p.Index, e.ID, "node %s completed in a failed execution", n)
			}
		}
		return
	}
	if nodes[node].Status != "completed" || nodes[other].Status != "skipped" {
		c.violate(inv, p.Index, e.ID, "after %s: %s is %s and %s is %s", actual, node, nodes[node].Status, other, nodes[other].Status)
	}
	if len(conts) == 0 {
		c.violate(inv, p.Index, e.ID, "%s, but no continuation call arrived", actual)
		return
	}
	sort.Slice(conts, func(i, j int) bool { return conts[i].At.Before(conts[j].At) })
	for k, call := range conts {
		if call.Kind != want || call.ExecutionID != e.ID || call.IdempotencyKey != e.ID.String()+":"+node {
			c.violate(inv, p.Index, e.ID, "continuation call %s for execution %s with Idempotency-Key %q; expected %s for %s",
				call.Kind, call.ExecutionID, call.IdempotencyKey, want, e.ID)
		}
		if k == 0 {
			continue
		}
		if why := c.redeliveryCause(conts[k-1], call); why != "" {
			c.report.Deliveries.Redelivered++
			continue
		}
		c.violate(inv, p.Index, e.ID, "continuation ran again at %s (first by %s at %s, again by %s) with no fault to explain it",
			call.At.Format(time.StampMilli), conts[k-1].Sender, conts[k-1].At.Format(time.StampMilli), call.Sender)
	}
}

// redeliveryCause explains a repeated continuation call, or returns "".
func (c *checker) redeliveryCause(prev, next Continuation) string {
	for _, l := range c.log.Lifetimes {
		if l.Sender == prev.Sender && !l.End.IsZero() && !l.End.Before(prev.At) && !l.End.After(next.At) {
			return fmt.Sprintf("%s stopped before committing", l.Sender)
		}
	}
	for _, f := range c.log.Faults {
		if f.Kind == FaultDatabase && !f.Start.After(next.At) && !f.End.Before(prev.At.Add(-time.Second)) {
			return "database outage before the result was committed"
		}
	}
	return ""
}

// actualClass reads the outcome class from the wait and its node, or says why it has none.
// The node is read as operators read it (node_executions), where a wait's outcome shows
// from the wait's own row.
func actualClass(w ObservedWait, nodes map[string]ObservedNode) (string, string) {
	switch w.Status {
	case "completed":
		if s := nodes["wait"].Status; s != "completed" {
			return "", fmt.Sprintf("wait completed but its node is %q", s)
		}
		return ClassCompleted, ""
	case "timeout":
		switch nodes["wait"].Status {
		case "completed":
			return ClassContinued, ""
		case "failed":
			return ClassFailed, ""
		}
		return "", fmt.Sprintf("wait timed out but its node is %q", nodes["wait"].Status)
	}
	return "", fmt.Sprintf("wait ended %q", w.Status)
}
