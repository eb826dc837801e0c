package chaos

import (
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Invariants of the redriven class, each a row of the summary table after the others.
const (
	// InvRedriveAnswers: a redrive of a failed execution takes effect once (200), one of
	// an execution that had not failed is refused with 409 naming its status, and the
	// audit log holds a row for each, made with the operator's token; a request that
	// failed because the database was away may have a row of its own ("failed 503"),
	// and no request fails for any other reason.
	InvRedriveAnswers = "redrive answered as the execution stood"
	// InvRedriveOnce: one redrive that took effect, one continuation after it (none
	// before), the nodes as the second life ended.
	InvRedriveOnce = "redriven: one continuation per redrive"
	// InvRedriveEvents: every event recorded before the redrive kept, every event
	// recorded once, a callback racing the redrive late before it and recorded after.
	InvRedriveEvents = "redriven: events kept and recorded once"
	// InvRedriveOutcome: the second life ended as its deliveries dictate.
	InvRedriveOutcome = "redriven: outcome as the plan dictates"
	// InvRedriveVersion: the version counts the first life's changes, the redrive's
	// write, and the second life's events and deadline writes.
	InvRedriveVersion = "version = 1 + events + deadline writes + redrives"
)

var redriveInvariants = []string{InvRedriveAnswers, InvRedriveOnce, InvRedriveEvents, InvRedriveOutcome, InvRedriveVersion}

// Redrives counts what the operator did and what became of it.
type Redrives struct {
	// Planned executions had a redrive in the plan; Requests is how many redrive
	// requests were sent for them (a retry after a lost answer counts), Unanswered how
	// many got no answer (a replica killed, the database away).
	Planned    int `json:"planned"`
	Requests   int `json:"requests"`
	Unanswered int `json:"unanswered"`
	// Redriven executions took a redrive (redrive_count 1); Refused requests were
	// answered 409, NotFailed of them for an execution that had not failed (the others
	// lost to a concurrent redrive, or came after a lost answer).
	Redriven  int `json:"redriven"`
	Refused   int `json:"refused"`
	NotFailed int `json:"not_failed"`
	// Concurrent executions were redriven by two requests at once; DuringFault had a
	// redrive request in flight while a fault was on.
	Concurrent  int `json:"concurrent"`
	DuringFault int `json:"during_fault"`
	// RacingLate counts callbacks that raced the redrive and were late (before it
	// committed), RacingRecorded those the reopened wait recorded.
	RacingLate     int `json:"racing_late"`
	RacingRecorded int `json:"racing_recorded"`
	// Completed and FailedAgain are the second lives' outcomes.
	Completed   int `json:"completed"`
	FailedAgain int `json:"failed_again"`
}

// redriven checks an execution planned with a redrive: the answers and audit rows of
// the redrive requests against the execution as the operator found it, and, when the
// redrive took effect, the wait's second life — the events of the first kept, the
// second decided by its own deliveries against the reopened deadlines, one continuation,
// a version that counts every change. first is the first life (see firstLife), windows1
// its delivery windows, conts the continuation calls of the wait.
func (c *checker) redriven(p *ExecPlan, e *ExecLog, def *Definition, ex ObservedExecution, w ObservedWait, nodes map[string]ObservedNode,
	first life, windows1 map[string]Window, conts []Continuation,
) {
	st := &c.report.Redrives
	st.Planned++
	c.checked(InvRedriveAnswers, 1)
	rl := e.Redrive
	if rl == nil || rl.Before == nil {
		why := "the driver never got to it"
		if rl != nil {
			why = rl.Err
		}
		c.violate(InvInstructions, p.Index, e.ID, "planned redrive not sent: %s", why)
		return
	}
	won, refused, unsure := c.redriveAnswers(p, e, rl)
	n := ex.RedriveCount
	wasFailed := rl.Before.Status == "failed"
	switch {
	case wasFailed && n != 1:
		c.violate(InvRedriveOnce, p.Index, e.ID, "the failed execution was redriven %d times by %d requests (%d answered 200, %d 409, %d unanswered)",
			n, len(rl.Attempts), won, refused, unsure)
	case !wasFailed && n != 0:
		c.violate(InvRedriveAnswers, p.Index, e.ID, "the execution was %s, yet redriven %d times", rl.Before.Status, n)
	}
	if n < won || n > won+unsure {
		c.violate(InvRedriveOnce, p.Index, e.ID, "redrive_count %d, but %d requests answered 200 and %d went unanswered", n, won, unsure)
	}
	audited := c.obs.Redrives[e.ID]
	if audited.OK != n {
		c.violate(InvRedriveOnce, p.Index, e.ID, "%d audit rows of a redrive that took effect; redrive_count %d", audited.OK, n)
	}
	if audited.Refused409 < refused || audited.Refused409 > refused+unsure {
		c.violate(InvRedriveAnswers, p.Index, e.ID, "%d audit rows of a refused redrive; %d requests answered 409 and %d went unanswered",
			audited.Refused409, refused, unsure)
	}
	if audited.Unavailable > unsure {
		c.violate(InvRedriveAnswers, p.Index, e.ID, "%d audit rows of a redrive that failed with the database away; %d requests went unanswered or were answered 5xx",
			audited.Unavailable, unsure)
	}
	if len(audited.Other) > 0 {
		c.violate(InvRedriveAnswers, p.Index, e.ID, "audit rows of redrives with outcomes %v", audited.Other)
	}
	if slices.ContainsFunc(audited.Principals, func(pr string) bool { return pr != "token:"+OperatorToken }) {
		c.violate(InvRedriveAnswers, p.Index, e.ID, "redrives audited as made by %v; the driver redrives as token:%s", audited.Principals, OperatorToken)
	}
	if !wasFailed {
		st.NotFailed += refused
		return
	}
	if !first.redriven {
		return // reported above: a failed execution not redriven
	}
	st.Redriven++
	c.secondLife(p, e, def, ex.Status, w, nodes, first.wait, windows1, conts, n)
}

// redriveAnswers checks each answer to a redrive request by itself and counts them.
func (c *checker) redriveAnswers(p *ExecPlan, e *ExecLog, rl *RedriveLog) (won, refused, unsure int) {
	st := &c.report.Redrives
	sends := map[int]bool{}
	during := false
	for _, a := range rl.Attempts {
		st.Requests++
		sends[a.Send] = true
		during = during || c.faultDuring(a.Start, a.End)
		switch {
		case a.Status == http.StatusOK:
			won++
		case a.Status == http.StatusConflict:
			refused++
			st.Refused++
			// Only a failed execution is redriven: a 409 naming failed refused one that
			// should have been, and one for an execution that had not failed names the
			// status it had (a finished execution keeps it).
			if a.Outcome == "failed" || (rl.Before.Status != "failed" && a.Outcome != rl.Before.Status) {
				c.violate(InvRedriveAnswers, p.Index, e.ID, "redrive refused with 409 naming status %q; the execution was %s before it", a.Outcome, rl.Before.Status)
			}
		case a.Unsure:
			unsure++
			st.Unanswered++
		case a.Status != 0:
			c.violate(InvRedriveAnswers, p.Index, e.ID, "redrive answered %d: %s", a.Status, a.Err)
		}
	}
	if won > 1 {
		c.violate(InvRedriveOnce, p.Index, e.ID, "%d redrive requests answered 200: the execution was continued more than once", won)
	}
	if len(sends) > 1 {
		st.Concurrent++
	}
	if during {
		st.DuringFault++
	}
	return won, refused, unsure
}

// secondLife checks the wait after the redrive that took effect (redrives of them);
// status is the execution's final status.
func (c *checker) secondLife(p *ExecPlan, e *ExecLog, def *Definition, status string, w ObservedWait, nodes map[string]ObservedNode,
	before ObservedWait, windows1 map[string]Window, conts []Continuation, redrives int,
) {
	st := &c.report.Redrives
	rl := e.Redrive
	// InvRedriveOnce is counted by continuation.
	for _, inv := range []string{InvRedriveEvents, InvRedriveOutcome, InvRedriveVersion} {
		c.checked(inv, 1)
	}
	if rl.Reopened == nil {
		c.violate(InvRedriveOutcome, p.Index, e.ID, "redriven, but the driver never read the reopened wait (%s)", rl.Err)
		return
	}
	// The redrive committed between the first request's start and the end of the one
	// that won (or, when its answer was lost, of the last one).
	from, to := rl.Attempts[0].Start, rl.Attempts[len(rl.Attempts)-1].End
	if i := slices.IndexFunc(rl.Attempts, func(a Attempt) bool { return a.Status == http.StatusOK }); i >= 0 {
		to = rl.Attempts[i].End
	}

	// Every event of the first life is kept as it was; no event is recorded twice.
	for _, b := range before.Received {
		if !slices.ContainsFunc(w.Received, func(r ReceivedEvent) bool {
			return r.Name == b.Name && r.Key == b.Key && r.ReceivedAt.Equal(b.ReceivedAt)
		}) {
			c.violate(InvRedriveEvents, p.Index, e.ID, "%s, recorded before the redrive (key %s), is gone after it", b.Name, b.Key)
		}
	}
	names, keys := map[string]int{}, map[string]int{}
	for _, r := range w.Received {
		names[r.Name]++
		keys[r.Key]++
	}
	for name, k := range names {
		if k > 1 {
			c.violate(InvRedriveEvents, p.Index, e.ID, "%s recorded %d times", name, k)
		}
	}
	for key, k := range keys {
		if k > 1 {
			c.violate(InvRedriveEvents, p.Index, e.ID, "one delivery (key %s) recorded %d times", key, k)
		}
	}

	// The reopened wait: fresh deadlines at the definition's distances, from the moment
	// of the reopen.
	reopenedAt := rl.Reopened.Expires.Add(-def.Timeout)
	if reopenedAt.Before(from.Add(-time.Second)) || reopenedAt.After(to.Add(time.Second)) {
		c.violate(InvRedriveOutcome, p.Index, e.ID, "the wait was reopened at %s, outside the redrive requests [%s, %s]",
			reopenedAt.Format(time.StampMilli), from.Format(time.StampMilli), to.Format(time.StampMilli))
	}
	for _, d := range deadlineDistances(def, rl.Reopened) {
		c.violate(InvRedriveOutcome, p.Index, e.ID, "reopened: %s", d)
	}
	spec := specOf(def, rl.Reopened)

	// The second life's deliveries: what the first recorded, at the reopen; a delivery of
	// the first life that may still have been applied after the reopen; the held-back
	// callback.
	windows := map[string]Window{}
	for _, b := range before.Received {
		windows[b.Name] = Window{Lo: reopenedAt, Hi: reopenedAt}
	}
	for name, w1 := range windows1 {
		if _, kept := windows[name]; kept || (!w1.Open && w1.Hi.Before(from)) {
			continue
		}
		if w1.Lo.Before(to) {
			// Sent before the redrive surely committed (a wait discovered late has its
			// deliveries sent late, as its redrive): it may have been applied before the
			// reopen, late for the first life and gone, or after it.
			w1 = Window{Lo: from, Open: true}
		}
		windows[name] = w1
	}
	if _, kept := windows[EventAPI]; !kept && len(rl.Callback.Attempts) > 0 {
		if win, ok := c.redriveCallback(p, e, rl, from, to); ok {
			windows[EventAPI] = win
		}
	}
	allowed := Allowed(spec, windows)
	actual, why := actualClass(w, nodes)
	if actual == "" {
		c.violate(InvRedriveOutcome, p.Index, e.ID, "after the redrive: %s (expected %s)", why, resultList(allowed))
		return
	}
	if actual == ClassFailed {
		st.FailedAgain++
	} else {
		st.Completed++
	}
	got := Result{Class: actual, Recorded: sorted(receivedNames(w.Received))}
	switch {
	case !slices.ContainsFunc(allowed, func(r Result) bool { return r.Class == actual }):
		c.violate(InvRedriveOutcome, p.Index, e.ID, "%s after the redrive: got %s, expected %s; deliveries %s", def.Name, got, resultList(allowed), describeWindows(windows, spec))
	case !slices.ContainsFunc(allowed, func(r Result) bool { return r.String() == got.String() }):
		c.violate(InvRedriveEvents, p.Index, e.ID, "%s after the redrive: got %s, expected %s; deliveries %s", def.Name, got, resultList(allowed), describeWindows(windows, spec))
	}
	if want := executionStatus(actual); status != want {
		c.violate(InvRedriveOutcome, p.Index, e.ID, "the wait ended %s after the redrive, but the execution is %s", actual, status)
	}

	// One continuation, after the redrive: the first life failed and made none.
	if slices.ContainsFunc(conts, func(k Continuation) bool { return k.At.Before(from) }) {
		c.violate(InvRedriveOnce, p.Index, e.ID, "a continuation call arrived before the redrive, from a wait that had failed")
	}
	c.continuation(InvRedriveOnce, p, e, w, actual, nodes, conts)

	// The version: the first life's (checked on its own by version), the reopen's write
	// per redrive, then the second life's events and deadline writes.
	lo, hi := deadlineWrites(w)
	added := len(w.Received) - len(before.Received)
	if extra := int(w.Version) - int(before.Version) - redrives - added; extra < lo || extra > hi {
		c.violate(InvRedriveVersion, p.Index, e.ID, "version %d after the redrive: %d before it, %d redrive(s), %d events recorded and %d timed out since (%s): expected %d to %d",
			w.Version, before.Version, redrives, added, len(w.TimedOut), w.Status,
			int(before.Version)+redrives+added+lo, int(before.Version)+redrives+added+hi)
	}
}

// redriveCallback reads the held-back callback's answers: one racing the redrive is late
// (409) for the first life when sent before the redrive answered, and recorded (202) only
// if it was answered after the redrive was sent; the same body sent again after the
// redrive is recorded, or a duplicate of the racing one — never both recorded and
// refused. It returns the callback's window in the second life.
func (c *checker) redriveCallback(p *ExecPlan, e *ExecLog, rl *RedriveLog, from, to time.Time) (Window, bool) {
	st := &c.report.Redrives
	var second []Attempt
	for _, a := range rl.Callback.Attempts {
		switch a.Status {
		case http.StatusConflict:
			if !a.Start.After(to) {
				// Late for the first life, not a delivery into the second. One sent after
				// the redrive answered is: late only past the reopened wait's end, which
				// the model decides from its window.
				st.RacingLate++
				continue
			}
		case http.StatusAccepted:
			if a.End.Before(from) {
				c.violate(InvRedriveEvents, p.Index, e.ID, "the callback was recorded (202) before the redrive was sent, by a wait that had failed")
			}
			if a.Start.Before(to) {
				st.RacingRecorded++
			}
		}
		second = append(second, a)
	}
	win, _, ok, problems := callbackWindow(EventLog{Name: EventAPI, Attempts: second})
	for _, pr := range problems {
		c.violate(InvRedriveEvents, p.Index, e.ID, "callback after the redrive: %s", pr)
	}
	return win, ok
}

// redriveNote explains the counts behind the redrive rows.
func (c *checker) redriveNote(inv string) string {
	r := c.report.Redrives
	switch inv {
	case InvRedriveAnswers:
		return fmt.Sprintf("%d executions (%d two at once, %d during a fault), %d requests (%d unanswered), %d refused 409 (%d: had not failed)",
			r.Planned, r.Concurrent, r.DuringFault, r.Requests, r.Unanswered, r.Refused, r.NotFailed)
	case InvRedriveOnce:
		return fmt.Sprintf("%d redriven: %d completed, %d failed again", r.Redriven, r.Completed, r.FailedAgain)
	case InvRedriveEvents:
		return fmt.Sprintf("callbacks racing the redrive: %d late before it, %d recorded after", r.RacingLate, r.RacingRecorded)
	}
	return ""
}
