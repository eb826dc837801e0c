package aggregator

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/vocab"
)

// WarningPartialData is the reason the rendezvous.nodes.warnings metric counts a wait
// that continued after events timed out (onTimeout continue_with_partial): its node
// completed, and its record carries the warning.
const WarningPartialData = "partial_data"

// timeoutDecision is what a passed deadline does to a waiting state.
type timeoutDecision struct {
	// TimedOut lists every event that timed out so far, in expected order.
	TimedOut []string
	// Fire: the wait ends now with status timeout. Otherwise it keeps waiting until Next.
	Fire bool
	Next time.Time
	// Continue: the node completes (output timeout: true) and the workflow goes on;
	// otherwise the node and the execution fail with Reason.
	Continue bool
	// Partial: continued although events timed out (continue_with_partial); the node
	// carries Warning.
	Partial bool
	Warning string
	// Missing lists the events continue needs that did not arrive (missingRequired);
	// under required_only it is what the node continued without.
	Missing []string
	Reason  string
}

// decideTimeout applies the deadlines that have passed at now to a waiting state. It is a
// pure function of the stored row (strategy, expected events with their deadlines, the
// overall deadline, what arrived and what already timed out), so every pod decides alike.
//
// When a deadline fires:
//   - all: any enabled event timing out ends the wait — it can no longer be satisfied.
//   - any: the wait ends when every enabled event has timed out (or the overall deadline).
//   - required_only, custom: an event the strategy requires timing out ends the wait;
//     an optional event's timeout is only recorded (it no longer counts if it arrives).
//
// What an ended wait does is the node's onTimeout:
//   - fail: the node and the execution fail, naming every event that did not arrive.
//   - continue: the node continues, with null data for what is missing, when every event
//     it must have arrived — for all and any those marked required: true (the schema's
//     "must receive to continue"), for custom the strategy's required set; otherwise it
//     fails as with fail. Under required_only it continues with the required events that
//     arrived, whatever is missing: that strategy already names what matters, and
//     requiring all of it at a timeout would make continue another name for fail.
//   - continue_with_partial: the node continues with whatever arrived, and carries a
//     warning naming the events that timed out.
//
// Missing always lists the events continue needs that did not arrive (under
// required_only, its required set), so the node output can say what it went on without.
func decideTimeout(strategy vocab.Strategy, onTimeout vocab.OnTimeout, expected []Expected, required, received, timedOut []string,
	expiresAt, now time.Time,
) timeoutDecision {
	d := timeoutDecision{TimedOut: slices.Clone(timedOut)}
	overall := !now.Before(expiresAt)
	pending := 0
	var next time.Time
	for _, e := range expected {
		if slices.Contains(received, e.Name) || slices.Contains(d.TimedOut, e.Name) {
			continue
		}
		if overall || (e.DeadlineAt != nil && !now.Before(*e.DeadlineAt)) {
			d.TimedOut = append(d.TimedOut, e.Name)
			continue
		}
		pending++
		if e.DeadlineAt != nil && (next.IsZero() || e.DeadlineAt.Before(next)) {
			next = *e.DeadlineAt
		}
	}
	switch {
	case overall:
		d.Fire = true
	case strategy == vocab.StrategyAny:
		d.Fire = pending == 0 && len(expected) > 0
	default:
		d.Fire = slices.ContainsFunc(required, func(name string) bool { return slices.Contains(d.TimedOut, name) })
	}
	if !d.Fire {
		if next.IsZero() || expiresAt.Before(next) {
			next = expiresAt
		}
		d.Next = next
		return d
	}
	d.Next = expiresAt

	missing := missingRequired(strategy, expected, required, received)
	d.Missing = missing
	switch onTimeout {
	case vocab.OnTimeoutContinueWithPartial:
		d.Continue = true
		d.Partial = len(d.TimedOut) > 0
		if d.Partial {
			d.Warning = "timed out; continued with partial data, without " + strings.Join(d.TimedOut, ", ")
		}
	case vocab.OnTimeoutContinue:
		d.Continue = len(missing) == 0 || strategy == vocab.StrategyRequiredOnly
	}
	if !d.Continue {
		var absent []string
		for _, e := range expected {
			if !slices.Contains(received, e.Name) {
				absent = append(absent, e.Name)
			}
		}
		what := "timed out waiting for " + strings.Join(absent, ", ")
		if onTimeout == vocab.OnTimeoutContinue {
			d.Reason = fmt.Sprintf("%s (onTimeout continue needs %s, which did not arrive)", what, strings.Join(missing, ", "))
		} else {
			d.Reason = what
		}
	}
	return d
}

// missingRequired lists the events onTimeout continue needs that are not among
// received, in order: for all and any those marked required: true (the schema's "must
// receive to continue"), for required_only and custom the strategy's required set.
func missingRequired(strategy vocab.Strategy, expected []Expected, required, received []string) []string {
	var mustHave []string
	switch strategy {
	case vocab.StrategyAll, vocab.StrategyAny:
		for _, e := range expected {
			if e.Required {
				mustHave = append(mustHave, e.Name)
			}
		}
	default:
		mustHave = required
	}
	var missing []string
	for _, name := range mustHave {
		if !slices.Contains(received, name) {
			missing = append(missing, name)
		}
	}
	return missing
}

// eventPastDeadline reports whether an event of this name arriving at now no longer
// counts: it timed out already, or its own or the overall deadline has passed (the
// sweeper may not have got to it yet; the arrival is late either way).
func (w *wait) eventPastDeadline(name string, now time.Time) bool {
	if slices.Contains(w.timedOut, name) {
		return true
	}
	if now.Before(w.row.NextDeadlineAt) {
		return false // nothing is due yet: the common case, without decoding expected
	}
	if !now.Before(w.row.ExpiresAt) {
		return true
	}
	if err := w.decodeExpected(); err != nil {
		return false
	}
	i := slices.IndexFunc(w.expected, func(e Expected) bool { return e.Name == name })
	return i >= 0 && w.expected[i].DeadlineAt != nil && !now.Before(*w.expected[i].DeadlineAt)
}

// endedByDeadline reports whether the deadlines passed at now have ended the wait
// although no sweeper has recorded it yet (under all, another event timed out; under
// required_only or custom, a required one did). An event arriving then is late, exactly
// as if the sweeper had been on time: neither the answer to the event nor the node's
// output depends on when the sweeper runs.
func (w *wait) endedByDeadline(now time.Time) bool {
	if now.Before(w.row.NextDeadlineAt) {
		return false // nothing is due yet: the common case, without decoding expected
	}
	if err := w.decodeExpected(); err != nil {
		return false
	}
	return decideTimeout(w.row.AggregationStrategy, w.row.OnTimeout, w.expected, w.required, w.receivedNames(),
		w.timedOut, w.row.ExpiresAt, now).Fire
}

// notePassedDeadlines adds to the timed-out list the events that have not arrived and
// whose own deadline has passed at now, as the sweeper would have. A wait completing
// before the sweeper got to such a deadline reports the same timed_out_events as one
// completing after: the output does not depend on when the sweeper ran.
func (w *wait) notePassedDeadlines(now time.Time) error {
	if now.Before(w.row.NextDeadlineAt) {
		return nil
	}
	if err := w.decodeExpected(); err != nil {
		return err
	}
	for _, e := range w.expected {
		if e.DeadlineAt == nil || now.Before(*e.DeadlineAt) || slices.Contains(w.timedOut, e.Name) ||
			slices.Contains(w.receivedNames(), e.Name) {
			continue
		}
		w.timedOut = append(w.timedOut, e.Name)
	}
	return nil
}
