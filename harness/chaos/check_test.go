package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// scenario is one execution of chaos-all-both-fail whose callback and record both
// arrived well before the deadline, and what a correct service leaves behind for it.
type scenario struct {
	cfg  Config
	plan Plan
	log  RunLog
	obs  Observed
}

func newScenario(t *testing.T) *scenario {
	t.Helper()
	cfg := Config{Seed: 1, Executions: 2}.WithDefaults()
	defs := Definitions(cfg.WaitTimeout)
	def := slices.IndexFunc(defs, func(d Definition) bool { return d.Name == "chaos-all-both-fail" })
	require.GreaterOrEqual(t, def, 0)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	execID, corr := uuid.New(), uuid.New()
	chaosData := func(name string) []byte {
		raw, _ := json.Marshal(map[string]any{"chaos": map[string]any{"execution_id": execID.String(), "correlation_id": corr.String(), "event": name}})
		return raw
	}
	apiPayload, kafkaPayload := chaosData(EventAPI), chaosData(EventKafka)

	s := &scenario{cfg: cfg}
	s.plan = Plan{Seed: 1, Definitions: defs, Executions: []ExecPlan{{Index: 0, Def: def, Events: []EventPlan{
		{Name: EventAPI, Mode: ModeOnTime}, {Name: EventKafka, Mode: ModeOnTime},
	}}}}
	s.log = RunLog{
		Start: t0, End: at(30),
		Execs: []ExecLog{{
			Index: 0, ID: execID,
			Wait: &WaitInfo{CorrelationID: corr, Created: t0, Expires: at(10), Deadlines: map[string]time.Time{EventAPI: at(10), EventKafka: at(10)}},
			Events: []EventLog{
				{Name: EventAPI, Mode: ModeOnTime, Payload: apiPayload, Key: Key(apiPayload), Attempts: []Attempt{
					{Send: 0, Start: at(1), End: at(1.05), Status: http.StatusAccepted},
					{Send: 1, Start: at(1.2), End: at(1.25), Status: http.StatusOK},
				}},
				{Name: EventKafka, Mode: ModeOnTime, Payload: kafkaPayload, Key: Key(kafkaPayload), Records: []Produced{
					{Start: at(2), Ack: at(2.01), Topic: Topic, Partition: 3, Offset: 7},
				}},
			},
		}},
		Lifetimes: []Lifetime{{Sender: "r0.1", Start: t0.Add(-time.Minute)}, {Sender: "r1.1", Start: t0.Add(-time.Minute)}},
	}
	part, off := int32(3), int64(7)
	kafkaReceived := ReceivedEvent{Name: EventKafka, ReceivedAt: at(2.02), Key: Key(kafkaPayload)}
	kafkaReceived.Source.Kind, kafkaReceived.Source.Topic, kafkaReceived.Source.Partition, kafkaReceived.Source.Offset = "kafka", Topic, &part, &off
	resumed := at(2.1)
	s.obs = Observed{
		Executions: []ObservedExecution{{ID: execID, Workflow: defs[def].Name, Status: "completed", Plan: 0}},
		Waits: map[uuid.UUID]ObservedWait{execID: {
			ExecutionID: execID, CorrelationID: corr, Status: "completed", Version: 3,
			Received: []ReceivedEvent{{Name: EventAPI, ReceivedAt: at(1.02), Key: Key(apiPayload)}, kafkaReceived},
			APIData:  apiPayload, KafkaData: kafkaPayload, ResumedAt: &resumed, ResumedBy: "chaos-r0",
			Strategy: "all", OnTimeout: "fail", Required: []string{EventAPI, EventKafka}, Enabled: []string{EventAPI, EventKafka},
		}},
		Nodes: map[uuid.UUID]map[string]ObservedNode{execID: {
			"wait": {Status: "completed"}, NodeSatisfied: {Status: "completed"}, NodeTimedOut: {Status: "skipped"},
		}},
		Calls: []Call{{ExecutionID: execID, CorrelationID: corr, IdempotencyKey: corr.String(), At: at(0.1), Status: http.StatusOK}},
		Continuations: []Continuation{{Kind: KindSatisfied, ExecutionID: execID, CorrelationID: corr,
			IdempotencyKey: execID.String() + ":" + NodeSatisfied, Sender: "r0.1", At: at(2.2)}},
		Lag: map[string]int64{Topic + "/0": 0, Topic + "/3": 0},
	}
	return s
}

// failed makes the execution end as a wait that timed out under onTimeout fail does.
func (s *scenario) failed() {
	id := s.log.Execs[0].ID
	s.obs.Nodes[id] = map[string]ObservedNode{"wait": {Status: "failed"}, NodeSatisfied: {Status: "pending"}, NodeTimedOut: {Status: "pending"}}
	s.obs.Executions[0].Status = "failed"
	s.obs.Continuations = nil
}

// setWait applies f to the observed wait.
func (s *scenario) setWait(f func(w *ObservedWait)) {
	id := s.log.Execs[0].ID
	w := s.obs.Waits[id]
	f(&w)
	s.obs.Waits[id] = w
}

func TestVerifyPassesACorrectRun(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	rep := Verify(s.cfg, s.plan, s.log, s.obs)
	require.Empty(t, rep.Violations)
	require.Equal(t, 1, rep.Outcomes.Certain[ClassCompleted])
	require.Equal(t, 1, rep.Outcomes.Actual[ClassCompleted])
	require.Equal(t, 1, rep.Kafka.N)
	require.InDelta(t, 20, rep.Kafka.P50, 0.01, "produce at 2.000 s, recorded at 2.020 s")
}

// TestVerifyFindsViolations breaks one promise at a time in an otherwise correct run:
// each must be reported under its invariant, so that a clean run means something.
func TestVerifyFindsViolations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		invariant string
		breakIt   func(s *scenario)
	}{
		{"a second continuation with no fault", InvResumedOnce, func(s *scenario) {
			c := s.obs.Continuations[0]
			c.Sender, c.At = "r1.1", c.At.Add(3*time.Second)
			s.obs.Continuations = append(s.obs.Continuations, c)
		}},
		{"no continuation", InvResumedOnce, func(s *scenario) { s.obs.Continuations = nil }},
		{"the wrong continuation", InvResumedOnce, func(s *scenario) { s.obs.Continuations[0].Kind = KindTimedOut }},
		{"never marked resumed", InvResumedOnce, func(s *scenario) { s.setWait(func(w *ObservedWait) { w.ResumedAt = nil }) }},
		{"a continuation for no wait", InvResumedOnce, func(s *scenario) {
			s.obs.Continuations = append(s.obs.Continuations, Continuation{Kind: KindSatisfied, CorrelationID: uuid.New(), ExecutionID: uuid.New()})
		}},
		{"a foreign record", InvForeign, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { w.Received[1].Key = Key([]byte(`{"someone":"else"}`)) })
		}},
		{"the right payload from a record never produced", InvForeign, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { p := int32(4); w.Received[1].Source.Partition = &p })
		}},
		{"stored data of another execution", InvForeign, func(s *scenario) {
			s.setWait(func(w *ObservedWait) {
				w.APIData = json.RawMessage(fmt.Sprintf(`{"chaos":{"execution_id":%q,"correlation_id":%q}}`, uuid.New(), w.CorrelationID))
			})
		}},
		{"a crossed callback accepted", InvForeign, func(s *scenario) {
			s.plan.Executions[0].Cross = &CrossPlan{Partner: 1, Name: EventAPI}
			s.log.Execs[0].Cross = &EventLog{Name: EventAPI, Mode: "cross", Key: "sha256:x", Attempts: []Attempt{{Status: http.StatusAccepted}}}
		}},
		{"version counts a change too many", InvVersion, func(s *scenario) { s.setWait(func(w *ObservedWait) { w.Version = 4 }) }},
		{"version misses a change", InvVersion, func(s *scenario) { s.setWait(func(w *ObservedWait) { w.Version = 2 }) }},
		{"timed out although both arrived in time", InvOutcome, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { w.Status, w.TimedOut, w.Version = "timeout", []string{EventKafka}, 4 })
			s.failed()
		}},
		{"a recorded event missing", InvRecorded, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { w.Received, w.KafkaData, w.Version = w.Received[:1], nil, 2 })
		}},
		{"an event recorded after the deadline", InvRecorded, func(s *scenario) {
			// The record was produced after the deadline: the wait failed with only the
			// callback, yet the database shows both.
			s.log.Execs[0].Events[1].Records[0].Start = s.log.Execs[0].Wait.Expires.Add(time.Second)
			s.setWait(func(w *ObservedWait) { w.Status, w.TimedOut = "timeout", []string{EventKafka} })
			s.failed()
		}},
		{"the execution status disagrees with the wait", InvOutcome, func(s *scenario) { s.obs.Executions[0].Status = "failed" }},
		{"a completed wait whose node still reads waiting", InvOutcome, func(s *scenario) {
			s.obs.Nodes[s.log.Execs[0].ID]["wait"] = ObservedNode{Status: "waiting_for_events"}
		}},
		{"a warning on a node that completed", InvOutcome, func(s *scenario) {
			s.obs.Nodes[s.log.Execs[0].ID]["wait"] = ObservedNode{Status: "completed", Warning: "timed out; continued with partial data"}
		}},
		{"one body answered 202 twice", InvAnswers, func(s *scenario) {
			s.log.Execs[0].Events[0].Attempts[1].Status = http.StatusAccepted
		}},
		{"answers say late, database says recorded", InvAnswers, func(s *scenario) {
			for i := range s.log.Execs[0].Events[0].Attempts {
				s.log.Execs[0].Events[0].Attempts[i].Status = http.StatusConflict
			}
		}},
		{"a duplicate answer nobody recorded", InvAnswers, func(s *scenario) {
			s.log.Execs[0].Events[0].Attempts[0].Status = http.StatusOK
		}},
		{"no correlated call", InvCalls, func(s *scenario) { s.obs.Calls = nil }},
		{"a call without the correlation id as Idempotency-Key", InvCalls, func(s *scenario) { s.obs.Calls[0].IdempotencyKey = "x" }},
		{"records left uncommitted", InvDrained, func(s *scenario) { s.obs.Lag[Topic+"/3"] = 2 }},
		{"queue rows left", InvDrained, func(s *scenario) { s.obs.RunQueue = 1 }},
		{"sent events left buffered", InvDrained, func(s *scenario) { s.obs.Buffered = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t)
			tc.breakIt(s)
			rep := Verify(s.cfg, s.plan, s.log, s.obs)
			require.NotEmpty(t, rep.Violations)
			require.True(t, slices.ContainsFunc(rep.Violations, func(v Violation) bool { return v.Invariant == tc.invariant }),
				"want a violation of %q, got %v", tc.invariant, rep.Violations)
			row := rep.Rows[slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Invariant == tc.invariant })]
			require.Positive(t, row.Violations)
		})
	}
}

// TestVerifyExplainsRedeliveries: an http node called again because its sender died, or
// the database went away, before the node's result was committed is at-least-once
// delivery, counted, not a second resume.
func TestVerifyExplainsRedeliveries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cause func(s *scenario, first, again time.Time)
	}{
		{"sender killed", func(s *scenario, first, again time.Time) {
			s.log.Lifetimes[0].End, s.log.Lifetimes[0].Killed = first.Add(100*time.Millisecond), true
		}},
		{"database outage", func(s *scenario, first, again time.Time) {
			s.log.Faults = append(s.log.Faults, FaultLog{Fault: Fault{Kind: FaultDatabase}, Start: first.Add(50 * time.Millisecond), End: first.Add(3 * time.Second)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScenario(t)
			c := s.obs.Continuations[0]
			again := c
			again.Sender, again.At = "r1.1", c.At.Add(75*time.Second)
			s.obs.Continuations = append(s.obs.Continuations, again)
			tc.cause(s, c.At, again.At)
			rep := Verify(s.cfg, s.plan, s.log, s.obs)
			require.Empty(t, rep.Violations)
			require.Equal(t, 1, rep.Deliveries.Redelivered)
		})
	}
}

func TestVerifyAllowsRaces(t *testing.T) {
	t.Parallel()
	s := newScenario(t)
	// The record was produced 1 ms before the deadline: it may have counted or been
	// late. The service chose late.
	ev := &s.log.Execs[0].Events[1]
	ev.Records[0].Start = s.log.Execs[0].Wait.Expires.Add(-time.Millisecond)
	ev.Records[0].Ack = ev.Records[0].Start.Add(time.Millisecond)
	s.setWait(func(w *ObservedWait) {
		w.Status, w.TimedOut, w.Received, w.KafkaData, w.Version = "timeout", []string{EventKafka}, w.Received[:1], nil, 3
	})
	s.failed()
	rep := Verify(s.cfg, s.plan, s.log, s.obs)
	require.Empty(t, rep.Violations)
	require.Equal(t, 1, rep.Outcomes.EitherOr)
	require.Equal(t, 1, rep.Outcomes.Racing)
}

// TestSendWindow reads the answers to an event sent twice with one id: what they say was
// recorded, when it was decided, and which answers cannot all be true.
func TestSendWindow(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	att := func(start float64, status int, outcome string) Attempt {
		a := Attempt{Start: t0.Add(time.Duration(start * float64(time.Second))), Status: status, Outcome: outcome}
		a.End = a.Start.Add(100 * time.Millisecond)
		a.Unsure = status == 0 || status >= 500
		return a
	}
	yes, no := true, false
	for _, tc := range []struct {
		name     string
		attempts []Attempt
		recorded *bool
		lo       float64
		open     bool
		problem  bool
	}{
		{"delivered, then a duplicate", []Attempt{att(1, 202, "delivered"), att(1.2, 200, "")}, &yes, 1, false, false},
		{"buffered, then a duplicate", []Attempt{att(1, 202, "buffered"), att(1.2, 200, "")}, &no, 1, false, false},
		{"refused twice: the execution had finished", []Attempt{att(1, 409, ""), att(1.2, 409, "")}, &no, 1, false, false},
		{"a duplicate of an unanswered request", []Attempt{att(1, 503, ""), att(1.5, 200, "")}, nil, 1, false, false},
		{"no answer at all", []Attempt{att(1, 0, ""), att(1.5, 503, "")}, nil, 1, true, false},
		{"taken twice", []Attempt{att(1, 202, "delivered"), att(1.2, 202, "buffered")}, &yes, 1, false, true},
		{"taken, then refused", []Attempt{att(1, 202, "buffered"), att(1.2, 409, "")}, &no, 1, false, true},
		{"refused, then a duplicate", []Attempt{att(1, 409, ""), att(1.2, 200, "")}, &no, 1, false, true},
		{"a duplicate nothing could have stored", []Attempt{att(1, 200, ""), att(1.2, 200, "")}, nil, 0, false, true},
		{"an answer no send gets", []Attempt{att(1, 202, "delivered"), att(1.2, 404, "")}, &yes, 1, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w, recorded, _, problems := sendWindow(EventLog{Name: EventSend, Attempts: tc.attempts})
			require.Equal(t, tc.recorded, recorded)
			require.Equal(t, tc.problem, len(problems) > 0, "problems: %v", problems)
			if tc.lo > 0 {
				require.Equal(t, t0.Add(time.Duration(tc.lo*float64(time.Second))), w.Lo)
			}
			require.Equal(t, tc.open, w.Open)
		})
	}
}

// sentScenario is newScenario on chaos-all-send-fail: the Kafka record, and the event
// sent by type as two records of SentTopic, the first recorded and the copy refused as
// a duplicate.
func sentScenario(t *testing.T) *scenario {
	t.Helper()
	s := newScenario(t)
	def := slices.IndexFunc(s.plan.Definitions, func(d Definition) bool { return d.Name == "chaos-all-send-fail" })
	require.GreaterOrEqual(t, def, 0)
	e := &s.log.Execs[0]
	corr := e.Wait.CorrelationID
	at := func(sec float64) time.Time { return s.log.Start.Add(time.Duration(sec * float64(time.Second))) }
	data, _ := json.Marshal(map[string]any{"decision": "approved", "chaos": map[string]any{"execution_id": e.ID.String(), "correlation_id": corr.String(), "event": EventSend}})
	id := "chaos-" + e.ID.String() + "-" + EventSend
	value, _ := json.Marshal(map[string]any{"execution_id": e.ID.String(), "type": SendType, "id": id, "payload": json.RawMessage(data)})

	s.plan.Executions[0].Def = def
	s.plan.Executions[0].Events = []EventPlan{s.plan.Executions[0].Events[1], {Name: EventSend, Mode: ModeOnTime, AsRecord: true}}
	d := s.plan.Definitions[def]
	own, ok := d.Event(EventSend)
	require.True(t, ok)
	require.Positive(t, own.Timeout)
	e.Wait.Deadlines = map[string]time.Time{EventKafka: e.Wait.Expires, EventSend: e.Wait.Expires.Add(own.Timeout - d.Timeout)}
	e.Events = []EventLog{e.Events[1], {Name: EventSend, Mode: ModeOnTime, Payload: value, Key: "id:" + id, Records: []Produced{
		{Start: at(1), Ack: at(1.01), Topic: SentTopic, Partition: 2, Offset: 5},
		{Start: at(1.3), Ack: at(1.31), Topic: SentTopic, Partition: 2, Offset: 6, Copy: true},
	}}}
	part, off := int32(2), int64(5)
	sent := ReceivedEvent{Name: EventSend, ReceivedAt: at(1.02), Key: "id:" + id}
	sent.Source.Kind, sent.Source.Topic, sent.Source.Partition, sent.Source.Offset = "send", SentTopic, &part, &off
	s.setWait(func(w *ObservedWait) {
		w.Received = []ReceivedEvent{sent, w.Received[1]}
		w.APIData, w.SendData = nil, data
		w.Required, w.Enabled = []string{EventKafka, EventSend}, []string{EventKafka, EventSend}
	})
	s.obs.Executions[0].Workflow = s.plan.Definitions[def].Name
	s.obs.Calls = nil
	s.obs.SentUnmatched = map[string][]string{position(2, 6): {"duplicate"}}
	return s
}

// TestVerifySentRecords: an event sent by type as records is checked like a Kafka event
// (its window, the record it was recorded from) and every record must leave a trace.
func TestVerifySentRecords(t *testing.T) {
	t.Parallel()
	s := sentScenario(t)
	rep := Verify(s.cfg, s.plan, s.log, s.obs)
	require.Empty(t, rep.Violations)
	require.Equal(t, 1, rep.Outcomes.Certain[ClassCompleted])
	require.Equal(t, 2, rep.Deliveries.SentRecords)
	require.Equal(t, 1, rep.Deliveries.SentRecorded)

	for _, tc := range []struct {
		name      string
		invariant string
		breakIt   func(s *scenario)
	}{
		{"the copy left no trace", InvRecorded, func(s *scenario) { s.obs.SentUnmatched = nil }},
		{"recorded from a position of the other topic", InvForeign, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { w.Received[0].Source.Topic = Topic })
		}},
		{"completed by records produced after the deadline", InvOutcome, func(s *scenario) {
			for i := range s.log.Execs[0].Events[1].Records {
				r := &s.log.Execs[0].Events[1].Records[i]
				r.Start, r.Ack = s.log.Execs[0].Wait.Expires.Add(time.Second), s.log.Execs[0].Wait.Expires.Add(time.Second)
			}
		}},
		{"buffered and never dead-lettered", InvAnswers, func(s *scenario) {
			s.obs.SentUnmatched[position(2, 5)] = []string{"buffered"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := sentScenario(t)
			tc.breakIt(s)
			rep := Verify(s.cfg, s.plan, s.log, s.obs)
			require.True(t, slices.ContainsFunc(rep.Violations, func(v Violation) bool { return v.Invariant == tc.invariant }),
				"want a violation of %q, got %v", tc.invariant, rep.Violations)
		})
	}
}

// redriveScenario is newScenario's execution with its callback held back: the wait
// timed out with the record alone and the execution failed; an operator redrove it twice
// at once (one 200, one 409) while the held-back callback raced the redrive and was late;
// sent again after the redrive answered, the callback completed the reopened wait.
func redriveScenario(t *testing.T) *scenario {
	t.Helper()
	s := newScenario(t)
	e := &s.log.Execs[0]
	at := func(sec float64) time.Time { return s.log.Start.Add(time.Duration(sec * float64(time.Second))) }
	s.plan.Executions[0].Redrive = &RedrivePlan{HoldBack: true, Concurrent: true, Racing: true, Replicas: [2]int{0, 1}, Frac: 0.1}
	s.plan.Executions[0].Events[0].Mode = ModeNone
	api := e.Events[0]
	e.Events[0] = EventLog{Name: EventAPI, Mode: ModeNone}
	w := s.obs.Waits[e.ID]
	kafka := w.Received[1]
	apiReceived := w.Received[0]
	apiReceived.ReceivedAt = at(12.02)
	e.Redrive = &RedriveLog{
		Before: &RedriveSnapshot{At: at(10.9), Status: "failed", WaitNode: "failed", Wait: ObservedWait{
			ExecutionID: e.ID, CorrelationID: w.CorrelationID, Status: "timeout", Version: 3,
			Received: []ReceivedEvent{kafka}, TimedOut: []string{EventAPI}, ResumedAt: w.ResumedAt, ResumedBy: "chaos-r1",
		}},
		Attempts: []Attempt{
			{Send: 0, Replica: 0, Start: at(11), End: at(11.1), Status: http.StatusOK, Outcome: "redriven"},
			{Send: 1, Replica: 1, Start: at(11), End: at(11.12), Status: http.StatusConflict, Outcome: "waiting"},
		},
		Reopened: &WaitInfo{CorrelationID: w.CorrelationID, Created: s.log.Start, Expires: at(21.05),
			Deadlines: map[string]time.Time{EventAPI: at(21.05), EventKafka: at(21.05)}},
		Callback: EventLog{Name: EventAPI, Mode: "redrive", Payload: api.Payload, Key: api.Key, Attempts: []Attempt{
			{Send: 0, Replica: 1, Start: at(11), End: at(11.02), Status: http.StatusConflict},
			{Send: 1, Replica: 0, Start: at(12), End: at(12.05), Status: http.StatusAccepted},
		}},
	}
	s.setWait(func(w *ObservedWait) {
		w.Version = 5 // 3 before the redrive, the reopen, the callback
		w.Received = []ReceivedEvent{kafka, apiReceived}
	})
	s.obs.Executions[0].RedriveCount = 1
	s.obs.Continuations[0].At = at(12.2)
	s.obs.Redrives = map[uuid.UUID]AuditedRedrives{e.ID: {OK: 1, Refused409: 1, Principals: []string{"token:" + OperatorToken}}}
	return s
}

// TestVerifyRedrives: a redriven execution is judged in two lives — the first by the
// snapshot taken before the redrive, the second by the final rows against the reopened
// deadlines — and every broken promise of a redrive is reported in its own row.
func TestVerifyRedrives(t *testing.T) {
	t.Parallel()
	s := redriveScenario(t)
	at := func(sec float64) time.Time { return s.log.Start.Add(time.Duration(sec * float64(time.Second))) }
	rep := Verify(s.cfg, s.plan, s.log, s.obs)
	require.Empty(t, rep.Violations)
	require.Equal(t, 1, rep.Outcomes.Certain[ClassFailed], "the first life fails without its callback")
	require.Equal(t, Redrives{Planned: 1, Requests: 2, Redriven: 1, Refused: 1, Concurrent: 1, RacingLate: 1, Completed: 1}, rep.Redrives)
	for _, inv := range redriveInvariants {
		row := rep.Rows[slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Invariant == inv })]
		require.Equal(t, 1, row.Checked, inv)
	}

	// A request answered 503 while the database was away, retried: its audit row, written
	// once the database was back, says so, and is no violation.
	s = redriveScenario(t)
	rl := s.log.Execs[0].Redrive
	rl.Attempts = append([]Attempt{{Send: 1, Replica: 2, Start: at(10.95), End: at(11), Status: http.StatusServiceUnavailable, Unsure: true}}, rl.Attempts...)
	s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{OK: 1, Refused409: 1, Unavailable: 1, Principals: []string{"token:" + OperatorToken}}
	rep = Verify(s.cfg, s.plan, s.log, s.obs)
	require.Empty(t, rep.Violations)
	require.Equal(t, 3, rep.Redrives.Requests)
	require.Equal(t, 1, rep.Redrives.Unanswered)

	for _, tc := range []struct {
		name      string
		invariant string
		breakIt   func(s *scenario)
	}{
		{"a double continuation", InvRedriveOnce, func(s *scenario) {
			c := s.obs.Continuations[0]
			c.Sender, c.At = "r1.1", c.At.Add(3*time.Second)
			s.obs.Continuations = append(s.obs.Continuations, c)
		}},
		{"a continuation before the redrive", InvRedriveOnce, func(s *scenario) {
			c := s.obs.Continuations[0]
			c.At = s.log.Execs[0].Redrive.Attempts[0].Start.Add(-time.Second)
			s.obs.Continuations = append([]Continuation{c}, s.obs.Continuations...)
		}},
		{"both concurrent redrives took effect", InvRedriveOnce, func(s *scenario) {
			rl := s.log.Execs[0].Redrive
			rl.Attempts[1].Status, rl.Attempts[1].Outcome = http.StatusOK, "redriven"
			s.obs.Executions[0].RedriveCount = 2
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{OK: 2, Principals: []string{"token:" + OperatorToken}}
			s.setWait(func(w *ObservedWait) { w.Version = 6 })
		}},
		{"a redrive audited as failed with the database away, though every request was answered", InvRedriveAnswers, func(s *scenario) {
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{OK: 1, Refused409: 1, Unavailable: 1, Principals: []string{"token:" + OperatorToken}}
		}},
		{"a redrive audited as an internal error, though a request went unanswered", InvRedriveAnswers, func(s *scenario) {
			rl := s.log.Execs[0].Redrive
			rl.Attempts = append(rl.Attempts, Attempt{Send: 1, Replica: 2, Start: at(11), End: at(11.05), Err: "connection reset by peer", Unsure: true})
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{OK: 1, Refused409: 1, Other: []string{"failed 500"}, Principals: []string{"token:" + OperatorToken}}
		}},
		{"a redrive without its audit row", InvRedriveOnce, func(s *scenario) {
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{Refused409: 1, Principals: []string{"token:" + OperatorToken}}
		}},
		{"a redrive that lost a recorded event", InvRedriveEvents, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { w.Received, w.KafkaData, w.Version = w.Received[1:], nil, 4 })
		}},
		{"the racing callback recorded as well as its retry", InvRedriveEvents, func(s *scenario) {
			s.setWait(func(w *ObservedWait) { w.Received, w.Version = append(w.Received, w.Received[1]), 6 })
		}},
		{"a callback refused as late after the redrive answered", InvRedriveEvents, func(s *scenario) {
			cb := &s.log.Execs[0].Redrive.Callback
			cb.Attempts = append(cb.Attempts, Attempt{Start: cb.Attempts[1].End.Add(time.Second), End: cb.Attempts[1].End.Add(1100 * time.Millisecond), Status: http.StatusConflict})
		}},
		{"failed again though the callback arrived in time", InvRedriveOutcome, func(s *scenario) {
			s.setWait(func(w *ObservedWait) {
				w.Status, w.Received, w.APIData, w.TimedOut, w.Version = "timeout", w.Received[:1], nil, []string{EventAPI}, 5
			})
			id := s.log.Execs[0].ID
			s.obs.Nodes[id] = map[string]ObservedNode{"wait": {Status: "failed"}, NodeSatisfied: {Status: "pending"}, NodeTimedOut: {Status: "pending"}}
			s.obs.Executions[0].Status = "failed"
			s.obs.Continuations = nil
		}},
		{"version misses the redrive's write", InvRedriveVersion, func(s *scenario) { s.setWait(func(w *ObservedWait) { w.Version = 4 }) }},
		{"a failed execution refused with 409 naming failed", InvRedriveAnswers, func(s *scenario) {
			s.log.Execs[0].Redrive.Attempts[1].Outcome = "failed"
		}},
		{"redriven with another role's token", InvRedriveAnswers, func(s *scenario) {
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{OK: 1, Refused409: 1, Principals: []string{"token:bootstrap"}}
		}},
		{"the failed execution never redriven", InvRedriveOnce, func(s *scenario) {
			rl := s.log.Execs[0].Redrive
			rl.Attempts = rl.Attempts[1:]
			rl.Reopened = nil
			s.obs.Executions[0].RedriveCount = 0
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{Refused409: 1, Principals: []string{"token:" + OperatorToken}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redriveScenario(t)
			tc.breakIt(s)
			rep := Verify(s.cfg, s.plan, s.log, s.obs)
			require.True(t, slices.ContainsFunc(rep.Violations, func(v Violation) bool { return v.Invariant == tc.invariant }),
				"want a violation of %q, got %v", tc.invariant, rep.Violations)
			row := rep.Rows[slices.IndexFunc(rep.Rows, func(r Row) bool { return r.Invariant == tc.invariant })]
			require.Positive(t, row.Violations)
		})
	}
}

// TestVerifyRedriveOfACompletedExecution: a redrive of an execution that did not fail is
// refused with 409 naming its status, audited as refused, and changes nothing.
func TestVerifyRedriveOfACompletedExecution(t *testing.T) {
	t.Parallel()
	setup := func() *scenario {
		s := newScenario(t)
		e := &s.log.Execs[0]
		at := func(sec float64) time.Time { return s.log.Start.Add(time.Duration(sec * float64(time.Second))) }
		s.plan.Executions[0].Redrive = &RedrivePlan{Replicas: [2]int{2, 0}}
		w := s.obs.Waits[e.ID]
		e.Redrive = &RedriveLog{
			Before:   &RedriveSnapshot{At: at(10.9), Status: "completed", WaitNode: "completed", Wait: w},
			Attempts: []Attempt{{Replica: 2, Start: at(11), End: at(11.1), Status: http.StatusConflict, Outcome: "completed"}},
		}
		s.obs.Redrives = map[uuid.UUID]AuditedRedrives{e.ID: {Refused409: 1, Principals: []string{"token:" + OperatorToken}}}
		return s
	}
	s := setup()
	rep := Verify(s.cfg, s.plan, s.log, s.obs)
	require.Empty(t, rep.Violations)
	require.Equal(t, Redrives{Planned: 1, Requests: 1, Refused: 1, NotFailed: 1}, rep.Redrives)

	for _, tc := range []struct {
		name      string
		invariant string
		breakIt   func(s *scenario)
	}{
		{"a completed execution redriven", InvRedriveAnswers, func(s *scenario) {
			rl := s.log.Execs[0].Redrive
			rl.Attempts[0].Status, rl.Attempts[0].Outcome = http.StatusOK, "redriven"
			s.obs.Executions[0].RedriveCount = 1
			s.obs.Redrives[s.log.Execs[0].ID] = AuditedRedrives{OK: 1, Principals: []string{"token:" + OperatorToken}}
		}},
		{"409 naming another status", InvRedriveAnswers, func(s *scenario) { s.log.Execs[0].Redrive.Attempts[0].Outcome = "running" }},
		{"a refusal not audited", InvRedriveAnswers, func(s *scenario) { s.obs.Redrives = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup()
			tc.breakIt(s)
			rep := Verify(s.cfg, s.plan, s.log, s.obs)
			require.True(t, slices.ContainsFunc(rep.Violations, func(v Violation) bool { return v.Invariant == tc.invariant }),
				"want a violation of %q, got %v", tc.invariant, rep.Violations)
		})
	}
}
