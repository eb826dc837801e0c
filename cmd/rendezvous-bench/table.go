package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/harness/bench"
)

// figure is one line of the table (and of the JSON file's figures).
type figure struct {
	// Part is the part's letter, a to f (m: payload match, p: the peers, DBOS and Temporal), on the figures that have a target or define a
	// part; lines that explain a part leave it empty.
	Part string `json:"part,omitempty"`
	Name string `json:"name"`
	// Value is in Unit: "/s" (per second), "ms", "%", "×", "rows" (tuples written),
	// "tx" (transactions), "trips" (round trips to PostgreSQL), "stmts" (statements run on
	// it), "µs" (of CPU), "allocs"
	// (heap objects allocated) or "B" (heap bytes allocated).
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Ratio is Value against the baseline's figure of the same kind: its updates per
	// second for a rate, its UPDATE latency at the same percentile for a latency.
	Ratio  *float64 `json:"ratio_to_baseline,omitempty"`
	Target string   `json:"target,omitempty"`
	Met    *bool    `json:"met,omitempty"`
}

// kafkaFloorTarget is the share of its floor's rate the Kafka path is to reach.
const kafkaFloorTarget = 0.8

// figures lays out the results that were measured, targets checked.
func figures(o options, r results) []figure {
	base := r.Baseline
	var out []figure
	rate := func(part, name string, v float64) *figure {
		ratio := v / base.PerSecond
		out = append(out, figure{Part: part, Name: name, Value: v, Unit: "/s", Ratio: &ratio})
		return &out[len(out)-1]
	}
	// latency reports d against the baseline's UPDATE at percentile p (0.5 or 0.99).
	latency := func(part, name string, d time.Duration, p float64) *figure {
		ref := base.Latency.P99
		if p == 0.5 {
			ref = base.Latency.P50
		}
		ratio := float64(d) / float64(ref)
		out = append(out, figure{Part: part, Name: name, Value: ms(d), Unit: "ms", Ratio: &ratio})
		return &out[len(out)-1]
	}
	plain := func(part, name string, v float64, unit string) *figure {
		out = append(out, figure{Part: part, Name: name, Value: v, Unit: unit})
		return &out[len(out)-1]
	}
	target := func(f *figure, text string, met bool) { f.Target, f.Met = text, &met }
	// The first targets of (b), (c), (d) and (e) — against the versioned UPDATE loop,
	// and absolute latencies — were set below what this machine's cores allow; each
	// path's figure is now read against its floor or the peers, and (a) is printed
	// beside them only as the machine's measure.

	peerFigures(r, plain, target)

	rate("a", "baseline versioned UPDATEs/s", base.PerSecond)
	latency("", "baseline UPDATE p50", base.Latency.P50, 0.5)
	latency("", "baseline UPDATE p99", base.Latency.P99, 0.99)

	if k := r.Kafka; k.Records > 0 {
		rate("b", fmt.Sprintf("kafka records applied/s (median of %d)", len(r.KafkaRuns)), k.PerSecond)
		if r.KafkaUntraced.Records > 0 {
			rate("", "kafka records applied/s, no trace exporter (spans not recorded)", r.KafkaUntraced.PerSecond)
			plain("", "tracing cost (1 − on/off)", 100*r.TracingCost, "%")
			if on, off := k.CPU, r.KafkaUntraced.CPU; on != nil && off != nil {
				plain("", "tracing CPU per record: replica (traced less untraced)", on.ProcessUS-off.ProcessUS, "µs")
			}
		}
		if f := r.KafkaFloor; f.Events > 0 {
			rate("", fmt.Sprintf("floor: bare writes, %d a statement, %d at once%s", f.Batch, f.Workers, medianOfRuns(f)), f.PerSecond)
			v := k.PerSecond / f.PerSecond
			target(plain("b", "kafka records applied/s, of its floor", v, "×"), fmt.Sprintf("≥ %.2f×", kafkaFloorTarget), v >= kafkaFloorTarget)
			// The floor records no spans, and neither does a replica without an exporter
			// (serve's default): the same ratio, for the run that records none either.
			if u := r.KafkaUntraced; u.Records > 0 {
				plain("b", "kafka records applied/s, no trace exporter, of its floor", u.PerSecond/f.PerSecond, "×")
			}
			if k.CPU != nil && f.CPU != nil {
				plain("", "kafka CPU per record: PostgreSQL", k.CPU.PostgresUS, "µs")
				plain("", "kafka CPU per record: replica, broker, producer", k.CPU.ProcessUS, "µs")
				plain("", "kafka heap allocated per record: replica, broker, producer", k.CPU.ProcessAllocs, "allocs")
				plain("", "kafka heap allocated per record: replica, broker, producer", k.CPU.ProcessAllocBytes, "B")
				plain("", "floor CPU per record", f.CPU.TotalUS(), "µs")
				plain("", "kafka WAL per record", k.CPU.WALBytes, "B")
				plain("", "floor WAL per record", f.CPU.WALBytes, "B")
				// What the CPU per record allows: the rate at which it would keep every core
				// of this machine busy, the database's and the broker's work included, of
				// the floor's rate. The service cannot go faster than that, however its
				// work is arranged, unless it spends less per record.
				ceiling := float64(runtime.NumCPU()) * 1e6 / k.CPU.TotalUS()
				plain("", "kafka of its floor at most, every core busy", ceiling/f.PerSecond, "×")
			}
			// Three more floors, each the bare writes with more of what the Kafka run does:
			// the reads, the broker, both. Their PostgreSQL CPU is set against the run's.
			secondFloor := func(p bench.FloorResult, name, detail, most string) {
				if p.Events == 0 {
					return
				}
				rate("", name+": "+detail+medianOfRuns(p), p.PerSecond)
				if p.CPU != nil {
					plain("", name+" CPU per record: PostgreSQL", p.CPU.PostgresUS, "µs")
					plain("", name+" CPU per record", p.CPU.TotalUS(), "µs")
					plain("", name+" WAL per record", p.CPU.WALBytes, "B")
				}
				plain("b", name+", of the bare-writes floor ("+most+")", p.PerSecond/f.PerSecond, "×")
				plain("b", "kafka records applied/s, of the "+name, k.PerSecond/p.PerSecond, "×")
			}
			// The bare SQL of the path as the service sends it: the same writes, and the
			// rows its decisions and continuations are made from. A path that decides from
			// the wait's state in the replica reaches no more of the bare-writes floor than
			// this, however little its own work costs.
			secondFloor(r.KafkaReadsFloor, "floor with the reads", "waits, executions locked, nodes",
				"most a replica deciding from them reaches")
			// The bare writes with what every Kafka run here carries besides them: the
			// broker and the producer on the same cores, every record fetched. No Kafka
			// path can reach more of the bare-writes floor than this on this machine.
			secondFloor(r.KafkaPipelineFloor, "floor with the broker", "bare consumer, bare writes",
				"most any Kafka run reaches")
			// Both: the bare SQL of the path as the service sends it, fed by the bare
			// consumer. What a Kafka run reaches of it is what the replica's own work —
			// decoding, deciding, continuing, tracing — leaves of it.
			secondFloor(r.KafkaPipelineReadsFloor, "floor with the reads and the broker", "bare consumer, waits, executions locked, nodes",
				"most a replica deciding from the rows it reads reaches")
			// What the target leaves the replica's own work: the CPU per record at which
			// 0.8 of the floor's rate keeps every core busy, less what the floor with the
			// reads and the broker spends per record on the same cores (the database, the
			// broker, the producer, a bare consumer). Set against what the replica's own
			// work takes in the run, it says how far the target is from this machine.
			if p := r.KafkaPipelineReadsFloor; p.CPU != nil && k.CPU != nil {
				budget := float64(runtime.NumCPU())*1e6/(kafkaFloorTarget*f.PerSecond) - p.CPU.TotalUS()
				plain("", "kafka: CPU per record the target leaves the replica's own work, every core busy", budget, "µs")
				plain("", "kafka: the replica's own CPU per record (the run's less the floor with the reads and the broker's)",
					k.CPU.TotalUS()-p.CPU.TotalUS(), "µs")
			}
		}
		latency("", "kafka burst: produce → state p99", k.ToState.P99, 0.99)
		latency("", "kafka burst: produce → continuation p99", k.ToContinuation.P99, 0.99)
	}
	if c := r.Callbacks; c.Waits > 0 {
		rate("c", "callbacks correlated/s (202 answered)", c.PerSecond)
		rate("", "callbacks: continuations committed/s", c.ResumedPerSecond)
		callbackFloor(r.CallbacksFloor, c, rate, plain)
		latency("", "callbacks burst: callback → continuation p99", c.ToContinuation.P99, 0.99)
		latency("", "callbacks burst: HTTP round trip p99", c.Response.P99, 0.99)
		plain("", "round trips to PostgreSQL per callback", c.RoundTripsPerCallback, "trips")
		plain("", "statements run on PostgreSQL per callback", c.StatementsPerCallback, "stmts")
	}
	if c := r.CallbacksWide; c.Waits > 0 {
		rate("", fmt.Sprintf("callbacks correlated/s, %d clients", c.Concurrency), c.PerSecond)
		for _, m := range r.Peer.Medians {
			if m.Senders == c.Concurrency && m.DBOS.EventsPerSecond > 0 {
				v := c.PerSecond / m.DBOS.EventsPerSecond
				target(plain("c", fmt.Sprintf("callbacks/s at %d clients ÷ DBOS delivery at %d (p)", c.Concurrency, m.Senders), v, "×"),
					"≥ 3.00×", v >= 3.0)
			}
		}
		latency("", fmt.Sprintf("callbacks burst: HTTP round trip p99, %d clients", c.Concurrency), c.Response.P99, 0.99)
		target(plain("c", fmt.Sprintf("round trips to PostgreSQL per callback, %d clients", c.Concurrency), c.RoundTripsPerCallback, "trips"),
			"≤ 3", c.RoundTripsPerCallback <= 3)
		plain("", fmt.Sprintf("statements run on PostgreSQL per callback, %d clients", c.Concurrency), c.StatementsPerCallback, "stmts")
		callbackFloor(r.CallbacksWideFloor, c, rate, plain)
	}
	if kl, cl := r.KafkaLatency, r.CallbackLatency; kl.Events > 0 {
		share := ""
		if o.latencyRate <= 0 {
			share = fmt.Sprintf(", %.2f of (b)", o.latencyLoad)
		}
		rate("d", "kafka offered rate, open loop"+share, kl.OfferedRate)
		latency("d", "kafka produce → continuation p50", kl.ToContinuation.P50, 0.5)
		latency("d", "kafka produce → continuation p99", kl.ToContinuation.P99, 0.99)
		latency("", "kafka produce → state p99", kl.ToState.P99, 0.99)
		latency("", "kafka load generator send lag p99", kl.SendLag.P99, 0.99)
		if cl.Events > 0 {
			share := ""
			if o.latencyRate <= 0 {
				share = ", " + r.CallbackLatencyOffered
			}
			rate("d", "callbacks offered rate, open loop"+share, cl.OfferedRate)
			latency("d", "callback → continuation p50", cl.ToContinuation.P50, 0.5)
			latency("d", "callback → continuation p99", cl.ToContinuation.P99, 0.99)
			latency("", "callback load generator send lag p99", cl.SendLag.P99, 0.99)
		}
	}
	if d := r.Deadlines; d.Due > 0 {
		rate("e", fmt.Sprintf("deadlines timed out/s (%d due at once)", d.Due), d.PerSecond)
		latency("e", fmt.Sprintf("deadline → timeout committed p99 (median of %d)", len(r.DeadlineRuns)), d.Lateness.P99, 0.99)
		latency("", "deadline → timeout committed max", d.Lateness.Max, 0.99)
		plain("", fmt.Sprintf("floor: bare writes of the decisions, %d a statement, %d at once", d.Batch, d.Workers),
			d.FloorSeconds*1000, "ms")
		if d.FloorSeconds > 0 {
			v := d.Lateness.P99.Seconds() / d.FloorSeconds
			target(plain("e", "deadline → timeout committed p99, of its floor", v, "×"), "≤ 1.50×", v <= 1.5)
			if d.CPU != nil && d.FloorCPU != nil {
				plain("", "deadline CPU per wait: PostgreSQL", d.CPU.PostgresUS, "µs")
				plain("", "deadline CPU per wait: sweeper", d.CPU.ProcessUS, "µs")
				plain("", "deadline heap allocated per wait: sweeper", d.CPU.ProcessAllocs, "allocs")
				plain("", "deadline heap allocated per wait: sweeper", d.CPU.ProcessAllocBytes, "B")
				plain("", "floor CPU per wait", d.FloorCPU.TotalUS(), "µs")
				plain("", "deadline WAL per wait", d.CPU.WALBytes, "B")
				plain("", "floor WAL per wait", d.FloorCPU.WALBytes, "B")
				// What the CPU per wait allows: the time the sweep takes with every core of
				// this machine busy, the database's work included, of the floor's time. The
				// last wait cannot time out sooner, unless the sweep spends less per wait.
				least := float64(d.Due) * d.CPU.TotalUS() / 1e6 / float64(runtime.NumCPU())
				plain("", "deadline p99 of its floor at least, every core busy", least/d.FloorSeconds, "×")
			}
			// The bare SQL the sweeper sends: its claims, the rows received and not
			// decided on, then the same writes. A sweeper deciding from the rows it claims
			// ends no sooner than this, however little its own work costs.
			if c := d.ClaimFloorSeconds; c > 0 {
				plain("", "floor with the claims: due waits claimed, then the same writes", c*1000, "ms")
				if d.ClaimFloorCPU != nil {
					plain("", "floor with the claims CPU per wait: PostgreSQL", d.ClaimFloorCPU.PostgresUS, "µs")
					plain("", "floor with the claims WAL per wait", d.ClaimFloorCPU.WALBytes, "B")
				}
				plain("e", "floor with the claims, of the bare-writes floor (least a sweeper deciding from them takes)", c/d.FloorSeconds, "×")
				plain("e", "deadline → timeout committed p99, of the floor with the claims", d.Lateness.P99.Seconds()/c, "×")
			}
		}
	}
	if t := r.Timers; t.Due > 0 {
		rate("", fmt.Sprintf("timers resumed/s (%d due at once)", t.Due), t.PerSecond)
		latency("", "timer → resume committed p99", t.Lateness.P99, 0.99)
	}
	if f := r.KafkaFilled; f.Records > 0 {
		rate("f", fmt.Sprintf("kafka records applied/s, %d other waits (median of %d)", f.OtherWaits, len(r.KafkaFilledRuns)), f.PerSecond)
		fig := plain("f", "(f) ÷ (b)", r.FilledToKafka, "×")
		target(fig, "≥ 0.80", r.FilledToKafka >= 0.8)
	}
	if m, l := r.MatchSmall, r.MatchLarge; m.Matched > 0 {
		rate("m", fmt.Sprintf("payload-matched events/s, %d waiting", m.Waiting), m.PerSecond)
		latency("", fmt.Sprintf("match lookup p50, %d waiting", m.Waiting), m.Lookup.P50, 0.5)
		latency("", fmt.Sprintf("match lookup p99, %d waiting", m.Waiting), m.Lookup.P99, 0.99)
		if l.Matched > 0 {
			rate("m", fmt.Sprintf("payload-matched events/s, %d waiting", l.Waiting), l.PerSecond)
			latency("", fmt.Sprintf("match lookup p50, %d waiting", l.Waiting), l.Lookup.P50, 0.5)
			latency("", fmt.Sprintf("match lookup p99, %d waiting", l.Waiting), l.Lookup.P99, 0.99)
			plain("m", "matched/s, large ÷ small table", r.MatchLargeToSmall, "×")
		}
		if lb := r.MatchSmallLookback; lb.Matched > 0 {
			rate("m", fmt.Sprintf("payload-matched events/s, %d waiting, lookback %s", lb.Waiting, lb.Lookback), lb.PerSecond)
			plain("m", "matched/s, lookback on ÷ off", r.LookbackToPlain, "×")
			if e := lb.Early; e != nil {
				rate("", fmt.Sprintf("early records kept/s (%d, no wait yet)", e.Records), e.KeptPerSecond)
				rate("", fmt.Sprintf("waits registered, nothing kept for them/s (%d)", e.Records), e.RegisteredPerSecond)
				rate("", fmt.Sprintf("waits registered taking a kept record/s (%d)", e.Records), e.TakenPerSecond)
			}
		}
	}
	return out
}

func printTable(w io.Writer, figs []figure) {
	const row = "%-3s %-58s %12s %10s %10s  %s\n"
	fmt.Fprintf(w, row, "", "figure", "value", "× (a)", "target", "")
	fmt.Fprintln(w, strings.Repeat("─", 101))
	for _, f := range figs {
		part := ""
		if f.Part != "" {
			part = "(" + f.Part + ")"
		}
		ratio := ""
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.2f", *f.Ratio)
		}
		verdict := ""
		if f.Met != nil {
			verdict = "missed"
			if *f.Met {
				verdict = "met"
			}
		}
		fmt.Fprintf(w, row, part, f.Name, formatValue(f), ratio, f.Target, verdict)
	}
}

func formatValue(f figure) string {
	switch f.Unit {
	case "ms":
		return fmt.Sprintf("%.2f ms", f.Value)
	case "%":
		return fmt.Sprintf("%.1f %%", f.Value)
	case "×":
		return fmt.Sprintf("%.2f", f.Value)
	case "rows", "tx", "trips", "stmts":
		return fmt.Sprintf("%.2f %s", f.Value, f.Unit)
	case "µs":
		return fmt.Sprintf("%.0f µs", f.Value)
	case "allocs":
		return fmt.Sprintf("%.1f allocs", f.Value)
	case "B":
		return fmt.Sprintf("%.0f B", f.Value)
	default:
		return fmt.Sprintf("%.0f", f.Value)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printStages shows where (d)'s time goes, step by step.
func printStages(w io.Writer, runs ...bench.LatencyResult) {
	for _, r := range runs {
		if len(r.Stages) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n(d) %s at %.0f/s, step by step       p50        p99\n", r.Path, r.OfferedRate)
		for _, s := range r.Stages {
			fmt.Fprintf(w, "    %-66s %8.2f ms %8.2f ms\n", s.Name, ms(s.Latency.P50), ms(s.Latency.P99))
		}
	}
}

// medianOfRuns says how many runs a floor is the median of, when more than one.
func medianOfRuns(f bench.FloorResult) string {
	if f.Runs < 2 {
		return ""
	}
	return fmt.Sprintf(" (median of %d)", f.Runs)
}

// callbackFloor lays out a callbacks run's floor and the run's share of it.
func callbackFloor(f bench.FloorResult, c bench.CallbackResult, rate func(part, name string, v float64) *figure,
	plain func(part, name string, v float64, unit string) *figure) {
	if f.Events == 0 {
		return
	}
	rate("", fmt.Sprintf("floor: bare writes, %d a statement, %d at once", f.Batch, f.Workers), f.PerSecond)
	plain("c", fmt.Sprintf("callbacks correlated/s, %d clients, of its floor", c.Concurrency), c.PerSecond/f.PerSecond, "×")
}

// Targets of (p): rendezvous against the best peer measured in the same run, figure by
// figure (the faster delivery and parking, the shorter p99, of DBOS and Temporal).
const (
	peerDeliveryTarget = 3.0
	peerP99Target      = 0.2
	peerParkedTarget   = 2.5
)

// peerFigures lays out (p): per number of senders, each system's medians, rendezvous'
// ratio to each peer, and its ratio to the best peer with the targets.
func peerFigures(r results, plain func(part, name string, v float64, unit string) *figure, target func(*figure, string, bool)) {
	for _, m := range r.Peer.Medians {
		rdv := m.Rendezvous
		at := fmt.Sprintf(", %d senders", m.Senders)
		peers := []struct {
			name string
			side bench.PeerSide
		}{{"DBOS", m.DBOS}}
		if m.Temporal != nil {
			peers = append(peers, struct {
				name string
				side bench.PeerSide
			}{"Temporal", *m.Temporal})
		}
		// best is the peer whose figure f is best: the highest, or the lowest when low.
		best := func(f func(bench.PeerSide) float64, low bool) (string, float64) {
			name, v := peers[0].name, f(peers[0].side)
			for _, p := range peers[1:] {
				if w := f(p.side); (low && w < v) || (!low && w > v) {
					name, v = p.name, w
				}
			}
			return name, v
		}

		events := func(s bench.PeerSide) float64 { return s.EventsPerSecond }
		plain("p", "rendezvous delivered events/s"+at, rdv.EventsPerSecond, "/s")
		for _, p := range peers {
			plain("", p.name+" delivered events/s"+at, p.side.EventsPerSecond, "/s")
		}
		floor, measured := sendFloor(r, m.Senders)
		if measured {
			plain("", fmt.Sprintf("floor: bare writes, %d a statement, %d at once", floor.Batch, floor.Workers), floor.PerSecond, "/s")
			plain("p", "rendezvous delivered events/s, of its floor"+at, rdv.EventsPerSecond/floor.PerSecond, "×")
		}
		for _, p := range peers {
			plain("", "delivery events/s, rendezvous ÷ "+p.name+at, rdv.EventsPerSecond/p.side.EventsPerSecond, "×")
		}
		name, v := best(events, false)
		v = rdv.EventsPerSecond / v
		target(plain("p", "delivery events/s, rendezvous ÷ the best peer ("+name+")"+at, v, "×"),
			fmt.Sprintf("≥ %.2f×", peerDeliveryTarget), v >= peerDeliveryTarget)

		p50 := func(s bench.PeerSide) float64 { return ms(s.SendToCompletion.P50) }
		p99 := func(s bench.PeerSide) float64 { return ms(s.SendToCompletion.P99) }
		plain("", "rendezvous send → completion p50"+at, p50(rdv), "ms")
		for _, p := range peers {
			plain("", p.name+" send → completion p50"+at, p50(p.side), "ms")
		}
		plain("", "rendezvous send → completion p99"+at, p99(rdv), "ms")
		for _, p := range peers {
			plain("", p.name+" send → completion p99"+at, p99(p.side), "ms")
		}
		for _, p := range peers {
			plain("", "send → completion p99, rendezvous ÷ "+p.name+at, p99(rdv)/p99(p.side), "×")
		}
		name, v = best(p99, true)
		v = p99(rdv) / v
		target(plain("p", "send → completion p99, rendezvous ÷ the best peer ("+name+")"+at, v, "×"),
			fmt.Sprintf("≤ %.2f×", peerP99Target), v <= peerP99Target)

		parked := func(s bench.PeerSide) float64 { return s.ParkedPerSecond }
		plain("p", "rendezvous parked workflows/s"+at, rdv.ParkedPerSecond, "/s")
		for _, p := range peers {
			plain("", p.name+" parked workflows/s"+at, p.side.ParkedPerSecond, "/s")
		}
		for _, p := range peers {
			plain("", "parked/s, rendezvous ÷ "+p.name+at, rdv.ParkedPerSecond/p.side.ParkedPerSecond, "×")
		}
		name, v = best(parked, false)
		v = rdv.ParkedPerSecond / v
		target(plain("p", "parked/s, rendezvous ÷ the best peer ("+name+")"+at, v, "×"),
			fmt.Sprintf("≥ %.2f×", peerParkedTarget), v >= peerParkedTarget)

		target(plain("p", "rendezvous rows written per parked workflow"+at, rdv.RowsPerParked, "rows"), "≤ 4", rdv.RowsPerParked <= 4)
		for _, p := range peers {
			plain("", p.name+" rows written per parked workflow"+at, p.side.RowsPerParked, "rows")
		}
		target(plain("p", "rendezvous rows written per delivered event"+at, rdv.RowsPerEvent, "rows"), "≤ 3", rdv.RowsPerEvent <= 3)
		for _, p := range peers {
			plain("", p.name+" rows written per delivered event"+at, p.side.RowsPerEvent, "rows")
		}
		if measured {
			// The two rows of every floor and the audit row of a change made through the
			// API, written in its transaction: fewer rows would drop a guarantee.
			plain("p", "floor rows written per delivered event, its audit row included"+at, floor.RowsPerEvent, "rows")
		}
		plain("", "rendezvous transactions per parked workflow"+at, rdv.TransactionsPerParked, "tx")
		plain("", "    … per delivered event"+at, rdv.TransactionsPerEvent, "tx")
		for _, p := range peers {
			plain("", p.name+" transactions per parked workflow"+at, p.side.TransactionsPerParked, "tx")
			plain("", "    … per delivered event"+at, p.side.TransactionsPerEvent, "tx")
		}
		// What each system spends per workflow and per event, beside its rate, tells a
		// rate bound by this machine's cores from one bound by waiting.
		cpus := []struct {
			name       string
			park, send *bench.CPUUse
		}{{"rendezvous", rdv.ParkCPU, rdv.EventCPU}}
		for _, p := range peers {
			cpus = append(cpus, struct {
				name       string
				park, send *bench.CPUUse
			}{p.name, p.side.ParkCPU, p.side.EventCPU})
		}
		for _, c := range cpus {
			if c.park == nil || c.send == nil {
				continue
			}
			for _, phase := range []struct {
				what string
				use  *bench.CPUUse
			}{{"parked workflow", c.park}, {"delivered event", c.send}} {
				plain("", c.name+" CPU per "+phase.what+": PostgreSQL"+at, phase.use.PostgresUS, "µs")
				plain("", "    … this process"+at, phase.use.ProcessUS, "µs")
				if c.name == "Temporal" {
					plain("", "    … Temporal's process (server, worker, starters, senders)"+at, phase.use.SubprocessUS, "µs")
				}
			}
		}
	}
}

// sendFloor is the floor of the sent events of senders concurrent senders, when it was
// measured.
func sendFloor(r results, senders int) (bench.FloorResult, bool) {
	for _, f := range r.SendFloors {
		if f.Batch == groupBatch(senders) && f.Events > 0 {
			return f, true
		}
	}
	return bench.FloorResult{}, false
}
