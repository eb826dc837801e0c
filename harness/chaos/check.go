package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Invariants the checks count, in the order of the summary table.
const (
	InvOutcome      = "outcome as the plan dictates"
	InvRecorded     = "recorded events = delivered before the end"
	InvResumedOnce  = "resumed exactly once (side effects)"
	InvForeign      = "no event on a foreign execution"
	InvVersion      = "version = 1 + events + deadline writes"
	InvAnswers      = "answers agree with the database"
	InvCalls        = "correlated calls made"
	InvDrained      = "nothing left behind"
	InvInstructions = "run carried out"
)

var invariantOrder = append([]string{InvOutcome, InvRecorded, InvResumedOnce, InvForeign, InvVersion, InvAnswers, InvCalls, InvTriggered, InvDrained, InvInstructions},
	redriveInvariants...)

// RunLog is what the driver did and saw happen.
type RunLog struct {
	Start  time.Time  `json:"start"`
	End    time.Time  `json:"end"`
	Execs  []ExecLog  `json:"executions"`
	Faults []FaultLog `json:"faults"`
	// Dead are group members whose process was stopped; their partitions wait for the
	// group to evict them.
	Dead      []DeadMember `json:"dead_members"`
	Lifetimes []Lifetime   `json:"lifetimes"`
	Notes     []string     `json:"notes,omitempty"`
	// Group holds the consumer group's changes; FinalGroup its last sample.
	Group      []GroupSample `json:"group"`
	FinalGroup GroupSample   `json:"final_group"`
	// Evicted are dead members the broker kept, which the driver removed.
	Evicted []Eviction `json:"evicted,omitempty"`
	// Triggers is what the driver produced to TriggerTopic, by key.
	Triggers []TriggerLog `json:"triggers"`
}

// Violation is one broken promise.
type Violation struct {
	Invariant string `json:"invariant"`
	// Execution is the plan index, -1 for the run as a whole.
	Execution   int    `json:"execution"`
	ExecutionID string `json:"execution_id,omitempty"`
	Detail      string `json:"detail"`
}

func (v Violation) String() string {
	if v.Execution < 0 {
		return fmt.Sprintf("[%s] %s", v.Invariant, v.Detail)
	}
	return fmt.Sprintf("[%s] execution %d (%s): %s", v.Invariant, v.Execution, v.ExecutionID, v.Detail)
}

// Row is one line of the summary table.
type Row struct {
	Invariant  string `json:"invariant"`
	Checked    int    `json:"checked"`
	Violations int    `json:"violations"`
	Note       string `json:"note,omitempty"`
}

// Outcomes counts executions per class.
type Outcomes struct {
	// Certain counts executions whose outcome class the plan fixes, by that class.
	Certain map[string]int `json:"certain"`
	// EitherOr counts executions whose deliveries raced a deadline or a fault, so more
	// than one class is correct.
	EitherOr int `json:"either_or"`
	// Actual counts the classes the service reached.
	Actual map[string]int `json:"actual"`
	// Racing: either-or because a delivery window spans a deadline (or the other
	// event's); Faulted: because a Kafka record was produced while a fault disturbed the
	// consumers.
	Racing  int `json:"racing"`
	Faulted int `json:"faulted"`
}

// Deliveries counts what the driver sent.
type Deliveries struct {
	Callbacks        int         `json:"callbacks"`
	CallbackRequests int         `json:"callback_requests"`
	Answers          map[int]int `json:"answers"`
	ConnectionErrors int         `json:"connection_errors"`
	// Sends are events sent by type (EventSend) through the API, each twice; SendAnswers
	// counts their answers by status and, for 202, outcome. SentAsRecords are those sent
	// as records of SentTopic instead: SentRecords records, SentRecorded of them taken
	// by their wait.
	Sends         int            `json:"sends"`
	SendRequests  int            `json:"send_requests"`
	SendAnswers   map[string]int `json:"send_answers"`
	SentAsRecords int            `json:"sent_as_records"`
	SentRecords   int            `json:"sent_records"`
	SentRecorded  int            `json:"sent_recorded"`
	Records       int            `json:"records"`
	Reproduced    int            `json:"reproduced"`
	Noise         int            `json:"noise"`
	// MatchRecorded counts EventMatch events recorded by their own wait: records
	// correlated by payload alone, by values a float64 cannot tell apart.
	MatchRecorded int `json:"match_recorded"`
	// MatchEarly counts those produced before their wait existed (ModeEarly): kept for
	// the definition's lookback and taken at registration, or delivered live.
	MatchEarly int `json:"match_early"`
	// MatchKept counts the early ones that reached no wait, were kept and then taken by
	// their wait at its registration (the others arrived after it, live).
	MatchKept   int `json:"match_kept"`
	Crossed     int `json:"crossed"`
	Calls       int `json:"calls"`
	CallRetries int `json:"call_retries"`
	// CallsHeld counts waits whose call never left because a fault held its outbox
	// claim past the wait's deadline.
	CallsHeld int `json:"calls_held"`
	// Redelivered continuations: the same http node call again after its sender died or
	// the database went away before the node's result was committed (at-least-once).
	Redelivered int `json:"redelivered"`
}

// Latency summarises produce → recorded for the Kafka events that were recorded.
type Latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func (l Latency) String() string {
	if l.N == 0 {
		return "(none)"
	}
	return fmt.Sprintf("p50 %.0f ms, p99 %.0f ms, max %.0f ms (%d)", l.P50, l.P99, l.Max, l.N)
}

// Report is the result of a run.
type Report struct {
	Seed       uint64        `json:"seed"`
	Replay     string        `json:"replay"`
	Executions int           `json:"executions"`
	Replicas   int           `json:"replicas"`
	PGRestart  string        `json:"pg_restart"`
	Duration   time.Duration `json:"duration_ns"`
	Rows       []Row         `json:"summary"`
	Outcomes   Outcomes      `json:"outcomes"`
	Deliveries Deliveries    `json:"deliveries"`
	Redrives   Redrives      `json:"redrives"`
	Kafka      Latency       `json:"kafka_latency"`
	// KafkaCalm is Kafka for the records no fault disturbed: what Config.KafkaLatency
	// must bound.
	KafkaCalm Latency    `json:"kafka_latency_calm"`
	Faults    []FaultLog `json:"faults"`
	Group     GroupStats `json:"consumer_group"`
	Evicted   []Eviction `json:"evicted,omitempty"`
	// Triggers counts the trigger stream: records produced, executions they started.
	Triggers struct {
		Records    int `json:"records"`
		Executions int `json:"executions"`
	} `json:"triggers"`
	Notes      []string    `json:"notes,omitempty"`
	Violations []Violation `json:"violations"`
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// add records a violation found outside Verify, counting it in its row.
func (r *Report) add(v Violation) {
	r.Violations = append(r.Violations, v)
	for i := range r.Rows {
		if r.Rows[i].Invariant == v.Invariant {
			r.Rows[i].Violations++
		}
	}
}

// checker accumulates checks and violations.
type checker struct {
	cfg    Config
	plan   Plan
	log    RunLog
	obs    Observed
	report *Report
	counts map[string]*Row
	// disturbed is when Kafka delivery to which partitions had no latency bound.
	disturbed []Interval
}

func (c *checker) checked(inv string, n int) { c.counts[inv].Checked += n }

func (c *checker) violate(inv string, exec int, id uuid.UUID, format string, args ...any) {
	v := Violation{Invariant: inv, Execution: exec, Detail: fmt.Sprintf(format, args...)}
	if id != uuid.Nil {
		v.ExecutionID = id.String()
	}
	c.report.Violations = append(c.report.Violations, v)
	c.counts[inv].Violations++
}

// owner is the delivery a payload key belongs to.
type owner struct {
	exec    int
	name    string
	crossed bool
}

// Verify checks a run: the plan and configuration say what should have happened, the
// log what the driver did and when, obs what the service ended with.
func Verify(cfg Config, plan Plan, log RunLog, obs Observed) *Report {
	cfg = cfg.WithDefaults()
	rep := &Report{
		Seed: plan.Seed, Replay: ReplayCommand(cfg), Executions: len(plan.Executions), Replicas: cfg.Replicas,
		PGRestart: cfg.PGRestart, Duration: log.End.Sub(log.Start), Faults: log.Faults, Notes: log.Notes,
		Outcomes:   Outcomes{Certain: map[string]int{}, Actual: map[string]int{}},
		Deliveries: Deliveries{Answers: map[int]int{}, SendAnswers: map[string]int{}, MatchKept: obs.KeptTaken},
		Violations: []Violation{},
	}
	c := &checker{cfg: cfg, plan: plan, log: log, obs: obs, report: rep, counts: map[string]*Row{}, disturbed: disturbances(log)}
	for _, inv := range invariantOrder {
		c.counts[inv] = &Row{Invariant: inv}
	}

	owners := map[string]owner{}
	for _, e := range log.Execs {
		for _, ev := range e.Events {
			if ev.Key != "" {
				owners[ev.Key] = owner{exec: e.Index, name: ev.Name}
			}
		}
		if e.Cross != nil && e.Cross.Key != "" {
			owners[e.Cross.Key] = owner{exec: e.Index, name: e.Cross.Name, crossed: true}
		}
		if e.Redrive != nil && e.Redrive.Callback.Key != "" {
			owners[e.Redrive.Callback.Key] = owner{exec: e.Index, name: EventAPI}
		}
	}
	byCorr := map[uuid.UUID][]Continuation{}
	for _, k := range obs.Continuations {
		byCorr[k.CorrelationID] = append(byCorr[k.CorrelationID], k)
	}
	callsByCorr := map[uuid.UUID][]Call{}
	for _, k := range obs.Calls {
		callsByCorr[k.CorrelationID] = append(callsByCorr[k.CorrelationID], k)
	}
	executions := map[uuid.UUID]ObservedExecution{}
	planned := map[uuid.UUID]int{}
	for _, e := range obs.Executions {
		executions[e.ID] = e
	}
	var all, calm []float64
	for i := range log.Execs {
		e := &log.Execs[i]
		if e.ID != uuid.Nil {
			planned[e.ID] = e.Index
		}
		a, cm := c.execution(&plan.Executions[e.Index], e, executions, owners, byCorr, callsByCorr)
		all, calm = append(all, a...), append(calm, cm...)
	}
	c.global(planned, owners, byCorr, callsByCorr)
	c.triggered()
	rep.Group, rep.Evicted = groupStats(log.Group, log.FinalGroup, log.End), log.Evicted
	rep.Kafka, rep.KafkaCalm = summarize(all), summarize(calm)
	if bound := float64(cfg.KafkaLatency.Milliseconds()); rep.KafkaCalm.Max > bound {
		rep.Notes = append(rep.Notes, fmt.Sprintf("a record took %.0f ms to apply while no fault disturbed its partition, over the assumed bound of %s: raise --kafka-latency on this machine",
			rep.KafkaCalm.Max, cfg.KafkaLatency))
	}
	for _, inv := range invariantOrder {
		rep.Rows = append(rep.Rows, *c.counts[inv])
	}
	c.notes()
	return rep
}

// execution checks one planned execution and returns the produce → recorded latencies
// of its Kafka events in milliseconds: all, and those no fault disturbed. An execution
// that was redriven is judged in two lives: up to the redrive by the snapshot the
// operator took before it (firstLife), after it by the final rows (redriven).
func (c *checker) execution(p *ExecPlan, e *ExecLog, executions map[uuid.UUID]ObservedExecution, owners map[string]owner,
	byCorr map[uuid.UUID][]Continuation, callsByCorr map[uuid.UUID][]Call,
) (latencies, calm []float64) {
	def := &c.plan.Definitions[p.Def]
	c.checked(InvInstructions, 1)
	c.countDeliveries(e)
	if e.ID == uuid.Nil {
		c.violate(InvInstructions, p.Index, uuid.Nil, "never started: %s", e.StartErr)
		return nil, nil
	}
	ex, ok := executions[e.ID]
	w, wok := c.obs.Waits[e.ID]
	if !ok || !wok || e.Wait == nil {
		c.violate(InvOutcome, p.Index, e.ID, "no execution or wait row (execution found %v, wait found %v, discovered %v)", ok, wok, e.Wait != nil)
		return nil, nil
	}
	nodes := c.obs.Nodes[e.ID]
	spec := c.waitSpec(p, e, def, w)
	windows, answered, faulted := c.deliveryWindows(p, e)
	first := c.firstLife(e, ex, w, nodes)
	if actual := c.outcome(p, e, def, spec, windows, faulted, first); actual != "" && !first.redriven {
		c.continuation(InvResumedOnce, p, e, w, actual, nodes, byCorr[w.CorrelationID])
	}
	c.answers(p, e, def, first.wait, answered, callsByCorr[w.CorrelationID])
	latencies, calm = c.ownDeliveries(p, e, w, windows, owners)
	c.version(p, e, first.wait)
	if p.Redrive != nil {
		c.redriven(p, e, def, ex, w, nodes, first, windows, byCorr[w.CorrelationID])
	}
	return latencies, calm
}

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
			win, recorded, ok, problems := read(ev)
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

// answers checks the answers to callbacks and sent events against the database, what
// became of an event sent by type that no wait took, and the wait's correlated calls.
func (c *checker) answers(p *ExecPlan, e *ExecLog, def *Definition, w ObservedWait, answered map[string]bool, calls []Call) {
	recorded := receivedNames(w.Received)
	for name, rec := range answered {
		c.checked(InvAnswers, 1)
		if rec != slices.Contains(recorded, name) {
			c.violate(InvAnswers, p.Index, e.ID, "%s: answers say recorded=%v, received_events say %v", name, rec, recorded)
		}
	}
	// A sent event no wait took is kept: buffered, then dead-lettered when the execution
	// finished. One a wait took is not.
	if ev := eventLog(e, EventSend); ev != nil && ev.Key != "" {
		id := strings.TrimPrefix(ev.Key, "id:")
		reason, lettered := c.obs.DeadLetters[id]
		buffered := slices.ContainsFunc(ev.Attempts, func(a Attempt) bool { return a.Status == http.StatusAccepted && a.Outcome == "buffered" })
		if sentAsRecords(*ev) {
			buffered = c.sentRecords(p, e, w, ev)
		}
		switch {
		case slices.Contains(recorded, EventSend) && lettered:
			c.violate(InvAnswers, p.Index, e.ID, "sent event recorded and dead-lettered (%s)", reason)
		case buffered && reason != "execution_finished":
			c.violate(InvAnswers, p.Index, e.ID, "sent event buffered, then not dead-lettered when the execution finished (dead letter: %q)", reason)
		}
	}
	if _, ok := def.Event(EventAPI); ok {
		c.calls(p, e, w, calls)
	}
}

// ownDeliveries checks that every recorded event, and every payload stored, is this
// execution's own delivery, and returns the produce → recorded latencies of its Kafka
// events in milliseconds: all, and those no fault disturbed.
func (c *checker) ownDeliveries(p *ExecPlan, e *ExecLog, w ObservedWait, windows map[string]Window, owners map[string]owner) (latencies, calm []float64) {
	recorded := receivedNames(w.Received)
	c.checked(InvForeign, len(w.Received))
	for _, r := range w.Received {
		o, known := owners[r.Key]
		switch {
		case !known:
			c.violate(InvForeign, p.Index, e.ID, "%s recorded with key %s, which no delivery had", r.Name, r.Key)
		case o.crossed:
			c.violate(InvForeign, p.Index, e.ID, "%s recorded from the crossed delivery of execution %d (another execution's correlation id)", r.Name, o.exec)
		case o.exec != p.Index || o.name != r.Name:
			c.violate(InvForeign, p.Index, e.ID, "%s recorded with the payload of execution %d's %s", r.Name, o.exec, o.name)
		}
		if r.Name == EventMatch && known && !o.crossed && o.exec == p.Index {
			c.report.Deliveries.MatchRecorded++
			if eventLog(e, EventMatch).Mode == ModeEarly {
				c.report.Deliveries.MatchEarly++
			}
		}
		if ev := eventLog(e, r.Name); ev != nil && (kafkaSourced(r.Name) || sentAsRecords(*ev)) && known && !o.crossed && o.exec == p.Index {
			if r.Source.Partition == nil || r.Source.Offset == nil || !slices.ContainsFunc(ev.Records, func(x Produced) bool {
				return x.Err == "" && x.Topic == r.Source.Topic && x.Partition == *r.Source.Partition && x.Offset == *r.Source.Offset
			}) {
				c.violate(InvForeign, p.Index, e.ID, "%s recorded from a record (%s/%v/%v) not produced for it", r.Name, r.Source.Topic, deref(r.Source.Partition), deref(r.Source.Offset))
			} else if len(ev.Records) > 0 {
				if r.Name == EventSend {
					c.report.Deliveries.SentRecorded++
				}
				ms := float64(r.ReceivedAt.Sub(ev.Records[0].Start).Microseconds()) / 1000
				latencies = append(latencies, ms)
				if w, ok := windows[r.Name]; ok && !w.Open {
					calm = append(calm, ms)
				}
			}
		}
	}
	for name, data := range map[string]json.RawMessage{EventAPI: w.APIData, EventKafka: w.KafkaData, EventMatch: w.MatchData, EventSend: w.SendData} {
		if len(data) == 0 || string(data) == "null" {
			continue
		}
		var v struct {
			Chaos struct {
				ExecutionID   string `json:"execution_id"`
				CorrelationID string `json:"correlation_id"`
			} `json:"chaos"`
		}
		_ = json.Unmarshal(data, &v)
		// An early record was produced before its wait existed: it names the execution
		// only.
		early := name == EventMatch && v.Chaos.CorrelationID == uuid.Nil.String() && eventLog(e, name).Mode == ModeEarly
		if v.Chaos.ExecutionID != e.ID.String() || (v.Chaos.CorrelationID != w.CorrelationID.String() && !early) {
			c.violate(InvForeign, p.Index, e.ID, "%s data was sent for execution %s / wait %s", name, v.Chaos.ExecutionID, v.Chaos.CorrelationID)
		}
		if !slices.Contains(recorded, name) {
			c.violate(InvRecorded, p.Index, e.ID, "%s data stored without the event in received_events", name)
		}
	}
	if e.Cross != nil {
		c.checkCross(p, e)
	}
	return latencies, calm
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

// calls checks the wait's correlated calls at the fake service.
func (c *checker) calls(p *ExecPlan, e *ExecLog, w ObservedWait, calls []Call) {
	c.checked(InvCalls, 1)
	ok := false
	for _, k := range calls {
		c.report.Deliveries.Calls++
		if k.ExecutionID != e.ID || k.IdempotencyKey != w.CorrelationID.String() {
			c.violate(InvCalls, p.Index, e.ID, "call for wait %s carried execution %s and Idempotency-Key %q", w.CorrelationID, k.ExecutionID, k.IdempotencyKey)
		}
		if k.Status == http.StatusOK {
			ok = true
		} else {
			c.report.Deliveries.CallRetries++
		}
	}
	switch {
	case ok:
		if p.FailFirstCall && (len(calls) < 2 || calls[0].Status != http.StatusServiceUnavailable) {
			c.violate(InvCalls, p.Index, e.ID, "the first call should have been answered 503 and retried; calls: %d", len(calls))
		}
	case w.Status == "completed" && !slices.ContainsFunc(w.Received, func(r ReceivedEvent) bool { return r.Name == EventAPI }):
		// The wait ended by its Kafka record before the outbox sent the call; an unsent
		// call of a finished wait is dropped on purpose.
	case c.faultDuring(e.Wait.Created, e.Wait.Expires):
		// A claim of the outbox row by a replica that died, or whose claim's answer was
		// lost to the database outage, holds the call for a lease (longer than the wait):
		// documented, and the wait's deadline still ends it.
		c.report.Deliveries.CallsHeld++
	default:
		c.violate(InvCalls, p.Index, e.ID, "the wait (%s) never had its call answered 200 (%d attempts)", w.Status, len(calls))
	}
}

// faultDuring reports whether a fault overlapped [from, to].
func (c *checker) faultDuring(from, to time.Time) bool {
	return slices.ContainsFunc(c.log.Faults, func(f FaultLog) bool { return !f.Start.After(to) && !f.End.Before(from) })
}

// checkCross checks that an event sent with another execution's correlation id was
// refused.
func (c *checker) checkCross(p *ExecPlan, e *ExecLog) {
	c.checked(InvForeign, 1)
	if e.Cross.Name != EventAPI {
		return // a recorded crossed record is found by its key on whichever wait took it
	}
	var final int
	for _, a := range e.Cross.Attempts {
		if a.Status != 0 && a.Status < 500 {
			final = a.Status
		}
	}
	if final != http.StatusNotFound {
		c.violate(InvForeign, p.Index, e.ID, "callback with execution %s and execution %d's correlation id answered %d, not 404", e.ID, p.Cross.Partner, final)
	}
}

// global checks what belongs to no single execution.
func (c *checker) global(planned map[uuid.UUID]int, owners map[string]owner, byCorr map[uuid.UUID][]Continuation, callsByCorr map[uuid.UUID][]Call) {
	known := map[uuid.UUID]bool{}
	for _, w := range c.obs.Waits {
		known[w.CorrelationID] = true
	}
	for _, e := range c.obs.Executions {
		if _, ok := planned[e.ID]; ok || e.Workflow == TriggerWorkflow {
			continue // the trigger stream's are checked by triggered
		}
		// A start whose answer was lost and that the driver retried after the database
		// showed nothing yet: an extra execution nobody delivers to. It must still not
		// have taken anyone's event.
		c.report.Notes = append(c.report.Notes, fmt.Sprintf("extra execution %s (plan %d, %s): a start request applied after its retry", e.ID, e.Plan, e.Status))
		if w, ok := c.obs.Waits[e.ID]; ok && len(w.Received) > 0 {
			c.violate(InvForeign, -1, e.ID, "extra execution %s recorded %d events", e.ID, len(w.Received))
		}
	}
	for corr, conts := range byCorr {
		if !known[corr] {
			c.violate(InvResumedOnce, -1, uuid.Nil, "%d continuation call(s) for correlation id %s, which no wait has", len(conts), corr)
		}
	}
	for corr, calls := range callsByCorr {
		if !known[corr] {
			c.violate(InvCalls, -1, uuid.Nil, "%d call(s) for correlation id %s, which no wait has", len(calls), corr)
		}
	}
	for _, m := range c.obs.Malformed {
		c.violate(InvCalls, -1, uuid.Nil, "malformed request at the fake service: %s", m)
	}
	c.checked(InvDrained, 1)
	var lagging []string
	for p, l := range c.obs.Lag {
		if l != 0 {
			lagging = append(lagging, fmt.Sprintf("%s: %d", p, l))
		}
	}
	slices.Sort(lagging)
	if c.obs.LagErr != "" {
		c.violate(InvDrained, -1, uuid.Nil, "could not read the consumer group's offsets: %s", c.obs.LagErr)
	}
	if len(lagging) > 0 {
		c.violate(InvDrained, -1, uuid.Nil, "records not committed by the consumer group: %s", strings.Join(lagging, ", "))
	}
	if c.obs.RunQueue != 0 || c.obs.Outbox != 0 {
		c.violate(InvDrained, -1, uuid.Nil, "%d run-queue rows and %d outbox rows left", c.obs.RunQueue, c.obs.Outbox)
	}
	if c.obs.Buffered != 0 {
		c.violate(InvDrained, -1, uuid.Nil, "%d events sent by type still buffered, though every execution finished", c.obs.Buffered)
	}
	for _, f := range c.log.Faults {
		c.checked(InvInstructions, 1)
		if f.Err != "" {
			c.violate(InvInstructions, -1, uuid.Nil, "%s at %s: %s", f.Kind, f.At, f.Err)
		}
	}
}

func (c *checker) countDeliveries(e *ExecLog) {
	d := &c.report.Deliveries
	count := func(ev *EventLog) {
		if ev.Name == EventSend {
			if len(ev.Attempts) > 0 {
				d.Sends++
			}
			if sentAsRecords(*ev) {
				d.SentAsRecords++
			}
			for _, r := range ev.Records {
				if r.Err == "" {
					d.SentRecords++
				}
			}
			for _, a := range ev.Attempts {
				d.SendRequests++
				switch {
				case a.Status == 0:
					d.ConnectionErrors++
				case a.Outcome != "":
					d.SendAnswers[fmt.Sprintf("%d %s", a.Status, a.Outcome)]++
				default:
					d.SendAnswers[strconv.Itoa(a.Status)]++
				}
			}
			return
		}
		if len(ev.Attempts) > 0 {
			d.Callbacks++
		}
		for _, a := range ev.Attempts {
			d.CallbackRequests++
			if a.Status != 0 {
				d.Answers[a.Status]++
			} else {
				d.ConnectionErrors++
			}
		}
		for _, r := range ev.Records {
			if r.Err == "" {
				d.Records++
				if r.Copy {
					d.Reproduced++
				}
			}
		}
		d.Noise += len(ev.Noise)
	}
	for i := range e.Events {
		count(&e.Events[i])
	}
	if e.Cross != nil {
		d.Crossed++
	}
}

// notes explains the counts behind some rows.
func (c *checker) notes() {
	o, d := c.report.Outcomes, c.report.Deliveries
	for i := range c.report.Rows {
		row := &c.report.Rows[i]
		switch row.Invariant {
		case InvOutcome:
			row.Note = fmt.Sprintf("certain %d, either-or %d (%d racing a deadline, %d Kafka during a fault)",
				o.Certain[ClassCompleted]+o.Certain[ClassContinued]+o.Certain[ClassFailed], o.EitherOr, o.Racing, o.Faulted)
		case InvResumedOnce:
			row.Note = fmt.Sprintf("%d redelivered after a fault (same Idempotency-Key)", d.Redelivered)
		case InvForeign:
			row.Note = fmt.Sprintf("recorded events and %d crossed deliveries", d.Crossed)
		default:
			row.Note = c.redriveNote(row.Invariant)
		}
	}
}

// callbackWindow derives, from a callback's attempts, when the service decided it and
// whether it recorded it (nil when no answer says), and any answer that is wrong by
// itself.
func callbackWindow(ev EventLog) (w Window, recorded *bool, ok bool, problems []string) {
	atts := slices.Clone(ev.Attempts)
	sort.SliceStable(atts, func(i, j int) bool { return atts[i].Start.Before(atts[j].Start) })
	yes, no := true, false
	var accepted, dup, late *Attempt
	for i := range atts {
		a := &atts[i]
		switch a.Status {
		case http.StatusAccepted:
			if accepted != nil {
				problems = append(problems, "recorded twice: two 202 answers for one body")
			} else {
				accepted = a
			}
		case http.StatusOK:
			if dup == nil || a.End.Before(dup.End) {
				dup = a
			}
		case http.StatusConflict:
			if late == nil {
				late = a
			}
		case 0:
		default:
			if a.Status < 500 {
				problems = append(problems, fmt.Sprintf("answered %d", a.Status))
			}
		}
	}
	firstUnsure := func(before time.Time) *Attempt {
		for i := range atts {
			if atts[i].Unsure && atts[i].Start.Before(before) {
				return &atts[i]
			}
		}
		return nil
	}
	switch {
	case accepted != nil:
		if late != nil {
			// A 409 for the very body that was recorded: once recorded, the same body is a
			// duplicate (200) whatever the wait's status.
			problems = append(problems, "the same body was answered 202 and 409")
		}
		return Window{Lo: accepted.Start, Hi: accepted.End}, &yes, true, problems
	case dup != nil:
		u := firstUnsure(dup.End)
		if u == nil {
			problems = append(problems, "answered 200 duplicate, but no earlier request could have recorded it")
			return Window{Lo: dup.Start, Hi: dup.End}, &yes, true, problems
		}
		if late != nil {
			problems = append(problems, "the same body was answered 200 and 409")
		}
		return Window{Lo: u.Start, Hi: dup.End}, &yes, true, problems
	case late != nil:
		return Window{Lo: late.Start, Hi: late.End}, &no, true, problems
	}
	if u := firstUnsure(time.Now().Add(time.Hour)); u != nil {
		return Window{Lo: u.Start, Open: true}, nil, true, problems
	}
	return Window{}, nil, false, problems
}

// sendWindow derives, from the attempts of an event sent by type, when the service
// decided it and whether a wait recorded it (nil when no answer says), and any answer
// that is wrong by itself. Both sends carry one id. The first the service takes is
// delivered (202 delivered, recorded) or, its wait having ended, buffered (202
// buffered); either stores the id, so every later one is a duplicate (200). Once the
// execution has finished, one it never took is refused (409), every time.
func sendWindow(ev EventLog) (w Window, recorded *bool, ok bool, problems []string) {
	atts := slices.Clone(ev.Attempts)
	sort.SliceStable(atts, func(i, j int) bool { return atts[i].Start.Before(atts[j].Start) })
	yes, no := true, false
	var taken []*Attempt
	var refused, dup *Attempt
	for i := range atts {
		a := &atts[i]
		switch {
		case a.Status == http.StatusAccepted && (a.Outcome == "delivered" || a.Outcome == "buffered"):
			taken = append(taken, a)
		case a.Status == http.StatusConflict:
			if refused == nil {
				refused = a
			}
		case a.Status == http.StatusOK:
			if dup == nil || a.End.Before(dup.End) {
				dup = a
			}
		case a.Status == 0 || a.Status >= 500:
		default:
			problems = append(problems, fmt.Sprintf("answered %d %s", a.Status, a.Outcome))
		}
	}
	switch {
	case len(taken) > 1:
		problems = append(problems, fmt.Sprintf("one id taken twice: answered 202 %s and 202 %s", taken[0].Outcome, taken[1].Outcome))
	case len(taken) == 1 && refused != nil:
		problems = append(problems, fmt.Sprintf("one id answered 202 %s and 409", taken[0].Outcome))
	case refused != nil && dup != nil:
		problems = append(problems, "one id answered 409 and 200 duplicate")
	}
	if len(taken) > 0 {
		a := taken[0]
		if a.Outcome == "delivered" {
			return Window{Lo: a.Start, Hi: a.End}, &yes, true, problems
		}
		return Window{Lo: a.Start, Hi: a.End}, &no, true, problems
	}
	if refused != nil {
		return Window{Lo: refused.Start, Hi: refused.End}, &no, true, problems
	}
	var unsure *Attempt
	for i := range atts {
		if atts[i].Unsure && (dup == nil || atts[i].Start.Before(dup.End)) {
			unsure = &atts[i]
			break
		}
	}
	switch {
	case dup != nil && unsure == nil:
		problems = append(problems, "answered 200 duplicate, but no earlier request could have sent it")
		return Window{}, nil, false, problems
	case dup != nil:
		// The unanswered request took it, delivered or buffered: before the dup's end.
		return Window{Lo: unsure.Start, Hi: dup.End}, nil, true, problems
	case unsure != nil:
		return Window{Lo: unsure.Start, Open: true}, nil, true, problems
	}
	return Window{}, nil, false, problems
}

// kafkaWindow is when a produced event may have been applied: from its first produce
// to KafkaLatency after the broker acknowledged it — or any time later (open) when a
// fault disturbed the consumer of its partition meanwhile.
func kafkaWindow(ev EventLog, latency time.Duration, disturbed []Interval) (w Window, ok bool, faulted bool) {
	i := slices.IndexFunc(ev.Records, func(p Produced) bool { return p.Err == "" })
	if i < 0 {
		return Window{}, false, false
	}
	first := ev.Records[i]
	w = Window{Lo: first.Start, Hi: first.Ack.Add(latency)}
	for _, d := range disturbed {
		partitions := d.Partitions
		if first.Topic == SentTopic {
			partitions = d.Sent
		}
		if d.Partitions != nil && !slices.Contains(partitions, first.Partition) {
			continue
		}
		if d.From.Before(w.Hi) && d.To.After(w.Lo) {
			w.Open = true
			return w, true, true
		}
	}
	return w, true, false
}

// sentAsRecords reports whether ev is an event sent by type as records of SentTopic.
func sentAsRecords(ev EventLog) bool { return ev.Name == EventSend && len(ev.Records) > 0 }

// sentRecords checks that every record of an event sent as records left a trace: the
// wait recorded it, or unmatched_events says why not (the service answers a record
// with nothing else). It reports whether one was buffered: a reason other than the
// refusals of a finished execution or a duplicate id.
func (c *checker) sentRecords(p *ExecPlan, e *ExecLog, w ObservedWait, ev *EventLog) (buffered bool) {
	for _, r := range ev.Records {
		if r.Err != "" {
			continue
		}
		c.checked(InvRecorded, 1)
		took := slices.ContainsFunc(w.Received, func(x ReceivedEvent) bool {
			return x.Name == EventSend && x.Source.Topic == r.Topic && x.Source.Partition != nil && *x.Source.Partition == r.Partition &&
				x.Source.Offset != nil && *x.Source.Offset == r.Offset
		})
		reasons := c.obs.SentUnmatched[position(r.Partition, r.Offset)]
		if !took && len(reasons) == 0 {
			c.violate(InvRecorded, p.Index, e.ID, "sent record %s/%d/%d left no trace: not recorded, not in unmatched_events", r.Topic, r.Partition, r.Offset)
		}
		buffered = buffered || slices.ContainsFunc(reasons, func(reason string) bool {
			return reason != "execution_finished" && reason != "duplicate"
		})
	}
	return buffered
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

func receivedNames(rs []ReceivedEvent) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

func eventLog(e *ExecLog, name string) *EventLog {
	for i := range e.Events {
		if e.Events[i].Name == name {
			return &e.Events[i]
		}
	}
	return &EventLog{}
}

func resultList(rs []Result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "one of {" + strings.Join(parts, "; ") + "}"
}

// describeWindows says, for a violation, where each delivery fell relative to the
// deadlines (times from registration).
func describeWindows(ws map[string]Window, spec WaitSpec) string {
	base := spec.Expires
	var parts []string
	for _, e := range spec.Events {
		d := fmt.Sprintf("%s deadline %+.3fs", e.Name, e.Deadline.Sub(base).Seconds())
		if w, ok := ws[e.Name]; ok {
			hi := "open"
			if !w.Open {
				hi = fmt.Sprintf("%+.3fs", w.Hi.Sub(base).Seconds())
			}
			d += fmt.Sprintf(", applied in [%+.3fs, %s]", w.Lo.Sub(base).Seconds(), hi)
		} else {
			d += ", not delivered"
		}
		parts = append(parts, d)
	}
	return "(relative to the overall deadline) " + strings.Join(parts, "; ")
}

func sameSet(a, b []string) bool {
	return slices.Equal(sorted(a), sorted(b))
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

func deref[T any](p *T) any {
	if p == nil {
		return "none"
	}
	return *p
}

func summarize(ms []float64) Latency {
	if len(ms) == 0 {
		return Latency{}
	}
	slices.Sort(ms)
	at := func(q float64) float64 { return ms[min(len(ms)-1, int(q*float64(len(ms))))] }
	return Latency{N: len(ms), P50: at(0.5), P99: at(0.99), Max: ms[len(ms)-1]}
}
