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
