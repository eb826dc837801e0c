package chaos

import (
	"fmt"
	"slices"
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
