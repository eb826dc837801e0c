package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ReplayCommand is the command line that replays cfg's schedule.
func ReplayCommand(cfg Config) string {
	cfg = cfg.WithDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "go run ./cmd/rendezvous-chaos --seed %d --executions %d --replicas %d --rate %g --wait-timeout %s --kills %d --terms %d --pg-restart %s",
		cfg.Seed, cfg.Executions, cfg.Replicas, cfg.Rate, cfg.WaitTimeout, cfg.Kills, cfg.Terms, cfg.PGRestart)
	if cfg.KafkaLatency != KafkaLatencyDefault {
		fmt.Fprintf(&b, " --kafka-latency %s", cfg.KafkaLatency)
	}
	if cfg.SessionTimeout != SessionTimeoutDefault {
		fmt.Fprintf(&b, " --session-timeout %s", cfg.SessionTimeout)
	}
	return b.String()
}

// Print writes the summary table, the outcomes, the deliveries, the faults and every
// violation.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nchaos run: seed %d, %d executions, %d replicas, database %s, %s\n",
		r.Seed, r.Executions, r.Replicas, r.PGRestart, r.Duration.Round(time.Second))
	fmt.Fprintf(w, "replay:    %s\n\n", r.Replay)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "invariant\tchecked\tviolations\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", row.Invariant, row.Checked, row.Violations, row.Note)
	}
	_ = tw.Flush()

	o := r.Outcomes
	fmt.Fprintf(w, "\noutcomes   completed %d, continued after a timeout %d, failed %d",
		o.Actual[ClassCompleted], o.Actual[ClassContinued], o.Actual[ClassFailed])
	fmt.Fprintf(w, " (certain: %d / %d / %d; either-or: %d)\n",
		o.Certain[ClassCompleted], o.Certain[ClassContinued], o.Certain[ClassFailed], o.EitherOr)
	d := r.Deliveries
	var answers []string
	codes := make([]int, 0, len(d.Answers))
	for code := range d.Answers {
		codes = append(codes, code)
	}
	slices.Sort(codes)
	for _, code := range codes {
		answers = append(answers, fmt.Sprintf("%d×%d", d.Answers[code], code))
	}
	fmt.Fprintf(w, "callbacks  %d events sent twice: %d requests, answers %s, %d connection errors\n",
		d.Callbacks, d.CallbackRequests, strings.Join(answers, " "), d.ConnectionErrors)
	var sendAnswers []string
	for _, k := range slices.Sorted(maps.Keys(d.SendAnswers)) {
		sendAnswers = append(sendAnswers, fmt.Sprintf("%d×%s", d.SendAnswers[k], k))
	}
	fmt.Fprintf(w, "sends      %d events sent by type twice (one id): %d requests, answers %s; %d sent as %d records of %s, %d recorded\n",
		d.Sends, d.SendRequests, strings.Join(sendAnswers, ", "), d.SentAsRecords, d.SentRecords, SentTopic, d.SentRecorded)
	fmt.Fprintf(w, "kafka      %d records (%d re-produced, %d filtered noise, %d matched by payload, %d of them produced before their wait, %d kept until it registered); produce→recorded %s; undisturbed by faults %s\n",
		d.Records, d.Reproduced, d.Noise, d.MatchRecorded, d.MatchEarly, d.MatchKept, r.Kafka, r.KafkaCalm)
	fmt.Fprintf(w, "triggers   %d records of %s (every third key produced twice) started %d executions of %s\n",
		r.Triggers.Records, TriggerTopic, r.Triggers.Executions, TriggerWorkflow)
	fmt.Fprintf(w, "calls      %d correlated calls (%d answered 503 on purpose and retried, %d held past their wait by a fault); %d crossed deliveries; %d continuations redelivered after a fault\n",
		d.Calls, d.CallRetries, d.CallsHeld, d.Crossed, d.Redelivered)
	rd := r.Redrives
	fmt.Fprintf(w, "redrives   %d executions redriven with an operator token (%d of them two at once, %d with a request during a fault): %d requests (%d unanswered), %d took effect, %d refused 409 (%d for an execution that had not failed); after the redrive %d completed, %d failed again; callbacks racing the redrive %d late, %d recorded\n",
		rd.Planned, rd.Concurrent, rd.DuringFault, rd.Requests, rd.Unanswered, rd.Redriven, rd.Refused, rd.NotFailed, rd.Completed, rd.FailedAgain, rd.RacingLate, rd.RacingRecorded)
	g := r.Group
	fmt.Fprintf(w, "group      %d changes of the consumer group, outside Stable for %s in all (longest %s), ended %s with %d members\n",
		g.Changes, g.Unstable.Round(100*time.Millisecond), g.Longest.Round(100*time.Millisecond), g.Final.State, len(g.Final.Members))
	for _, e := range r.Evicted {
		fmt.Fprintf(w, "broker     kept dead member %s (%s, partitions %v) %.0fs after it died; evicted by the driver\n",
			e.MemberID, e.ClientID, e.Partitions, e.EvictedAt.Sub(e.DiedAt).Seconds())
	}
	fmt.Fprintf(w, "faults    ")
	if len(r.Faults) == 0 {
		fmt.Fprint(w, " none")
	}
	for i, f := range r.Faults {
		if i > 0 {
			fmt.Fprint(w, ";")
		}
		switch f.Kind {
		case FaultDatabase:
			fmt.Fprintf(w, " database outage at %.1fs for %.1fs", f.At.Seconds(), f.End.Sub(f.Start).Seconds())
		case FaultTerm:
			fmt.Fprintf(w, " term %s at %.1fs, exited after %.1fs", f.Sender, f.At.Seconds(), f.Stopped.Seconds())
			if f.Shutdown != "" {
				fmt.Fprintf(w, " (shutdown: %s)", f.Shutdown)
			}
			fmt.Fprintf(w, ", back after %.1fs", f.End.Sub(f.Start).Seconds())
		default:
			fmt.Fprintf(w, " %s %s at %.1fs, back after %.1fs", f.Kind, f.Sender, f.At.Seconds(), f.End.Sub(f.Start).Seconds())
		}
		if f.Err != "" {
			fmt.Fprintf(w, " (%s)", f.Err)
		}
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note       %s\n", n)
	}
	if r.OK() {
		fmt.Fprintf(w, "\nOK: no violation\n")
		return
	}
	fmt.Fprintf(w, "\n%d VIOLATION(S):\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "  %s\n", v)
	}
}
