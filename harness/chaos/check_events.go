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
