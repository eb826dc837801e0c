package chaos

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Delivery modes of a planned event.
const (
	// ModeOnTime sends the event at a fraction of its window (registration → its
	// deadline), well before the deadline.
	ModeOnTime = "on_time"
	// ModeLate sends it after its deadline.
	ModeLate = "late"
	// ModeRacing sends it within RacingWindow of its deadline, either side.
	ModeRacing = "racing"
	// ModeNone never sends it.
	ModeNone = "none"
	// ModeEarly produces a payload-match record as soon as its execution is started,
	// before its wait exists (every EventMatch of a definition with Lookback): the wait
	// takes it when it registers, or, when the wait wins the race, it arrives live.
	ModeEarly = "early"
)

// RacingWindow is how close to its deadline a racing event is sent.
const RacingWindow = 150 * time.Millisecond

// Fault kinds.
const (
	FaultKill     = "kill"      // SIGKILL a replica, restart it after Down
	FaultTerm     = "term"      // SIGTERM a replica (its consumer leaves the group), restart it after Down
	FaultDatabase = "db_outage" // cut the database proxy for Down, or restart the cluster
)

// Plan is everything a run does, drawn from the seed alone.
type Plan struct {
	Seed        uint64
	Definitions []Definition
	Executions  []ExecPlan
	Faults      []Fault
	// Spread is when the last execution starts, from the run's start.
	Spread time.Duration
}

// ExecPlan is one execution: its definition, its start, and the fate of each event.
type ExecPlan struct {
	Index int
	// Def indexes Plan.Definitions.
	Def int
	// StartAt is when the start request is sent, from the run's start; Replica receives it.
	StartAt time.Duration
	Replica int
	// Events follow the definition's enabled events, in order.
	Events []EventPlan
	// FailFirstCall makes the fake service answer the wait's first correlated call with
	// 503, so the outbox retries it.
	FailFirstCall bool
	// Cross, when set, sends an extra event carrying this execution's id and the
	// correlation id of another (usually earlier) execution; it must never be applied.
	Cross *CrossPlan
	// Redrive, when set, has an operator redrive the execution once its wait has ended.
	Redrive *RedrivePlan
}

// RedrivePlan is an operator's redrive of one execution (POST
// /api/v1/executions/:id/redrive, with an operator token). Only definitions that fail
// without their callback (onTimeout fail, api_response in the required set) are
// redriven, and their other events arrive on time or never, so that no planned delivery
// races the redrive except the callback that Racing sends on purpose.
type RedrivePlan struct {
	// HoldBack keeps the callback (api_response) back, so the wait times out and the
	// execution fails; the redrive reopens the wait and the callback, sent then, completes
	// it. Without HoldBack the callback arrives in time: unless another required event
	// is missing, the execution does not fail, and the redrive must be refused (409).
	HoldBack bool
	// After is how long after the wait's overall deadline the operator redrives (once
	// the execution shows failed or completed).
	After time.Duration
	// Replicas receive the redrive and, Concurrent, a second one sent at the same moment
	// (two operators pressing the button, or a retry on another replica): one must win,
	// the other get 409.
	Replicas   [2]int
	Concurrent bool
	// Racing sends the held-back callback for the original wait at the moment of the
	// redrive, to Replicas[1]: applied before the redrive commits it is late (409), after
	// it, recorded by the reopened wait. Either way the driver sends it again once the
	// redrive answered, as a producer retrying would, and it is recorded once.
	Racing bool
	// Frac places the callback sent after the redrive in the reopened wait's window for
	// it (0 = the reopen, 1 = the callback's new deadline).
	Frac float64
}

// redrivable reports whether an execution of d can be planned as a redrive: its wait
// fails without the callback.
func (d *Definition) redrivable() bool {
	return d.OnTimeout == "fail" && d.Strategy != "any" && slices.Contains(d.RequiredSet(), EventAPI)
}

// RedriveShare is the share of the executions of redrivable definitions that are
// redriven (more when their redrive falls into a fault).
const RedriveShare = 0.3

// EventPlan is how one expected event is delivered.
type EventPlan struct {
	Name string
	Mode string
	// Frac places an on-time event in its window (0 = registration, 1 = its deadline).
	Frac float64
	// Offset places a late or racing event relative to its deadline.
	Offset time.Duration

	// Callback (api_response) and sent event (EventSend): two identical sends, the
	// second SecondAfter the first, to Replicas[0] and Replicas[1]; a callback's ids in
	// headers or in the body. A sent event AsRecord is instead produced to SentTopic
	// twice, the copy SecondAfter the first.
	Replicas     [2]int
	SecondAfter  time.Duration
	IDsInHeaders bool
	AsRecord     bool

	// Kafka (kafka_event): Reproduce sends the same record again ReproduceAfter later
	// (1% of records); Noise first sends a record for the same wait that fails the
	// definition's filter (only for definitions with a filter).
	Reproduce      bool
	ReproduceAfter time.Duration
	Noise          bool
}

// CrossPlan is an event sent with a correlation id that belongs to another execution.
type CrossPlan struct {
	// Partner is the execution whose correlation id is used.
	Partner int
	// Name is api_response (a callback) or kafka_event (a record).
	Name string
	// Frac places it in this execution's window.
	Frac    float64
	Replica int
}

// Fault is one planned disruption.
type Fault struct {
	Kind string
	// At is from the run's start.
	At time.Duration
	// Replica is the target of kill and term.
	Replica int
	// Down is how long the replica stays down, or the database is cut.
	Down time.Duration
}

// NewPlan draws a run's plan. It is a pure function of the seed and the configuration,
// so a seed replays the same schedule.
func NewPlan(cfg Config) Plan {
	cfg = cfg.WithDefaults()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	uniform := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Float64()*float64(hi-lo))
	}
	p := Plan{Seed: cfg.Seed, Definitions: Definitions(cfg.WaitTimeout), Spread: cfg.Spread()}
	interval := float64(time.Second) / cfg.Rate
	for i := range cfg.Executions {
		e := ExecPlan{
			Index:   i,
			Def:     rng.IntN(len(p.Definitions)),
			StartAt: time.Duration((float64(i) + rng.Float64()) * interval),
			Replica: rng.IntN(cfg.Replicas),
		}
		def := &p.Definitions[e.Def]
		for _, ev := range def.Events {
			ep := EventPlan{Name: ev.Name}
			switch r := rng.Float64(); {
			case r < 0.60:
				ep.Mode, ep.Frac = ModeOnTime, 0.05+0.45*rng.Float64()
			case r < 0.75:
				ep.Mode, ep.Offset = ModeLate, uniform(300*time.Millisecond, 2*time.Second)
			case r < 0.85:
				ep.Mode, ep.Offset = ModeRacing, uniform(-RacingWindow, RacingWindow)
			default:
				ep.Mode = ModeNone
			}
			if ev.Name == EventMatch && def.Lookback {
				// What these definitions are for; the other match variants cover the
				// other modes.
				ep.Mode, ep.Frac, ep.Offset = ModeEarly, 0, 0
			}
			switch ev.Name {
			case EventAPI, EventSend:
				ep.Replicas = [2]int{rng.IntN(cfg.Replicas), rng.IntN(cfg.Replicas)}
				ep.SecondAfter = uniform(0, 400*time.Millisecond)
				ep.IDsInHeaders = ev.Name == EventAPI && rng.IntN(2) == 0
				ep.AsRecord = ev.Name == EventSend && rng.IntN(2) == 0
			case EventKafka, EventMatch:
				ep.Reproduce = rng.Float64() < 0.01
				ep.ReproduceAfter = uniform(50*time.Millisecond, time.Second)
				ep.Noise = def.Filter && rng.Float64() < 0.1
			}
			e.Events = append(e.Events, ep)
		}
		if _, ok := def.Event(EventAPI); ok {
			e.FailFirstCall = rng.Float64() < 0.03
		}
		if rng.Float64() < 0.02 {
			// The partner started earlier, so its wait exists (or existed) by then; the
			// first execution borrows from the second.
			c := &CrossPlan{Partner: 1, Frac: 0.1 + 0.4*rng.Float64(), Replica: rng.IntN(cfg.Replicas)}
			if i > 0 {
				c.Partner = rng.IntN(i)
			}
			c.Name = EventAPI
			if rng.IntN(2) == 0 {
				c.Name = EventKafka
			}
			e.Cross = c
		}
		p.Executions = append(p.Executions, e)
	}
	p.Faults = planFaults(rng, cfg, p.Spread, uniform)
	planRedrives(rng, &p, cfg, uniform)
	planEarlySends(&p, cfg)
	return p
}

// planEarlySends makes two executions that need an event sent by type send it early in
// its window and away from the faults: one as records of SentTopic, one through the API
// (its second send answered as a duplicate), so that a run delivers one of each
// whatever its faults do to the others. Drawn like the others, either could miss in
// every run: a short run sends about a dozen, most of them around a fault; a partition
// stalls for seconds after a database outage or behind a killed replica until its
// session times out, longer than an event's window; and a send through the API to a
// wait that does not require it is often beaten by the wait's other events (one short
// run delivered none of its eight). Each execution chosen is the first whose send falls
// outside every fault's wake (inFaultWake), or the first of them when none does: about
// one short run in ten has no such execution, one in four no second one for the API's
// send, which a fault only delays (the database away answers 503, a replica down
// refuses the connection; the send is retried either way). It draws nothing, so the
// seed's other draws stay as they were.
func planEarlySends(p *Plan, cfg Config) {
	record := planEarlySend(p, cfg, -1, true)
	planEarlySend(p, cfg, record, false)
}

// planEarlySend chooses, as planEarlySends says, one execution other than skip, and
// makes it send its event by type early, as records or through the API; it returns the
// execution's index, or -1 when none can take it.
func planEarlySend(p *Plan, cfg Config, skip int, asRecord bool) int {
	chosen := -1
	for i := range p.Executions {
		at, ok := p.earlySendAt(&p.Executions[i])
		if !ok || i == skip {
			continue
		}
		if chosen < 0 {
			chosen = i
		}
		if !inFaultWake(p.Faults, at, cfg) {
			chosen = i
			break
		}
	}
	if chosen < 0 {
		return -1
	}
	e := &p.Executions[chosen]
	for k := range e.Events {
		if ep := &e.Events[k]; ep.Name == EventSend {
			ep.Mode, ep.Frac, ep.Offset, ep.AsRecord = ModeOnTime, earlySendFrac, 0, asRecord
		}
	}
	return chosen
}

// earlySendFrac places planEarlySends' sends in their event's window.
const earlySendFrac = 0.05

// earlySendAt is about when, from the run's start, planEarlySends' send would be made
// for e (its wait registers a moment after the start), and whether e can take it: its
// definition requires the sent event, and no redrive reshapes its events.
func (p *Plan) earlySendAt(e *ExecPlan) (time.Duration, bool) {
	def := &p.Definitions[e.Def]
	sent, ok := def.Event(EventSend)
	if !ok || !sent.Required || e.Redrive != nil {
		return 0, false
	}
	return e.StartAt + time.Duration(earlySendFrac*float64(def.eventTimeout(sent))), true
}

// inFaultWake reports whether at falls in a fault, from a second before it until its
// wake has passed: a killed replica's partitions wait for its session to time out, then
// for the group to settle (3 s); a database outage's back off for as long.
func inFaultWake(faults []Fault, at time.Duration, cfg Config) bool {
	wake := cfg.SessionTimeout + 3*time.Second
	return slices.ContainsFunc(faults, func(f Fault) bool { return f.At-time.Second <= at && at <= f.At+f.Down+wake })
}

// planRedrives picks the executions an operator redrives: a share of those whose
// definition fails without its callback, every one whose redrive falls into a fault (a
// replica down, the database away), and always the first of them, as a held-back
// callback redriven twice at once, so that even a short run has a redrive that must win
// and one that must be refused. It runs after the faults are drawn, so the earlier draws
// of a seed stay as they were.
func planRedrives(rng *rand.Rand, p *Plan, cfg Config, uniform func(lo, hi time.Duration) time.Duration) {
	first := true
	for i := range p.Executions {
		e := &p.Executions[i]
		def := &p.Definitions[e.Def]
		if !def.redrivable() {
			continue
		}
		rd := &RedrivePlan{
			HoldBack: rng.Float64() < 0.75, After: uniform(300*time.Millisecond, 2*time.Second),
			Replicas:   [2]int{rng.IntN(cfg.Replicas), rng.IntN(cfg.Replicas)},
			Concurrent: rng.Float64() < 0.3, Racing: rng.Float64() < 0.5, Frac: 0.05 + 0.3*rng.Float64(),
		}
		// Roughly when the redrive is sent: the wait registers a moment after the start.
		at := e.StartAt + def.Timeout + rd.After + 300*time.Millisecond
		inFault := slices.ContainsFunc(p.Faults, func(f Fault) bool { return f.At-time.Second <= at && at <= f.At+f.Down+3*time.Second })
		if !first && !inFault && rng.Float64() >= RedriveShare {
			continue
		}
		if first {
			rd.HoldBack, rd.Concurrent, first = true, true, false
		}
		if rd.Replicas[1] == rd.Replicas[0] {
			rd.Replicas[1] = (rd.Replicas[0] + 1) % cfg.Replicas
		}
		for k := range e.Events {
			ep := &e.Events[k]
			switch {
			case ep.Name == EventAPI && rd.HoldBack:
				ep.Mode = ModeNone
			case ep.Name == EventAPI:
				ep.Mode, ep.Frac = ModeOnTime, 0.05+0.45*rng.Float64()
			case ep.Mode == ModeLate || ep.Mode == ModeRacing:
				// Nothing but the racing callback may race the redrive.
				ep.Mode, ep.Frac, ep.Offset = ModeOnTime, 0.05+0.45*rng.Float64(), 0
			}
		}
		e.Redrive = rd
	}
}

// planFaults spreads the kills and terms over the middle of the run, each on a replica
// the plan believes is up at that moment, and cuts the database once.
func planFaults(rng *rand.Rand, cfg Config, spread time.Duration, uniform func(lo, hi time.Duration) time.Duration) []Fault {
	var faults []Fault
	lo, hi := spread/10, spread*8/10
	for range cfg.Kills {
		faults = append(faults, Fault{Kind: FaultKill, At: uniform(lo, hi), Down: uniform(time.Second, 4*time.Second)})
	}
	for range max(cfg.Terms, 0) {
		faults = append(faults, Fault{Kind: FaultTerm, At: uniform(lo, hi), Down: uniform(500*time.Millisecond, 3*time.Second)})
	}
	byTime := func(a, b Fault) int { return int(a.At - b.At) }
	slices.SortStableFunc(faults, byTime)
	// A replica is back some seconds after its restart, and a stopped one takes a while
	// to exit after SIGTERM (its shutdown sequence): the plan leaves room for both, so it
	// never picks a replica that may still be down.
	const back, termExit = 10 * time.Second, 10 * time.Second
	downUntil := make([]time.Duration, cfg.Replicas)
	out := []Fault{{Kind: FaultDatabase, At: uniform(spread*3/10, spread*7/10), Down: uniform(2*time.Second, 5*time.Second)}}
	for len(faults) > 0 {
		f := faults[0]
		faults = faults[1:]
		var up []int
		for r, until := range downUntil {
			if until <= f.At {
				up = append(up, r)
			}
		}
		if len(up) < 2 {
			// Never take the last replica away: move the fault to when a second one is
			// back, and take it in turn again.
			back := slices.Sorted(slices.Values(downUntil))
			f.At = back[1] + time.Second
			faults = append(faults, f)
			slices.SortStableFunc(faults, byTime)
			continue
		}
		f.Replica = up[rng.IntN(len(up))]
		downUntil[f.Replica] = f.At + f.Down + back
		if f.Kind == FaultTerm {
			downUntil[f.Replica] += termExit
		}
		out = append(out, f)
	}
	slices.SortStableFunc(out, byTime)
	return out
}
