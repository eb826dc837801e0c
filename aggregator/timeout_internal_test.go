package aggregator

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestDecideTimeoutMatrix pins the on-timeout rules for every strategy and policy, with
// api_response required and kafka_event optional, at the overall deadline, for each of:
// nothing arrived, only the optional event arrived, only the required event arrived.
// The expectations are written out, not derived, so a change of rule shows up here.
func TestDecideTimeoutMatrix(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expected := []Expected{
		{Name: EventAPIResponse, Source: SourceCallback, Required: true},
		{Name: EventKafka, Source: SourceKafka, Required: false},
	}
	requiredOf := func(strategy vocab.Strategy) []string {
		r, err := RequiredSet(strategy, expected, []string{EventAPIResponse})
		require.NoError(t, err)
		return r
	}
	const (
		fail = "fail"
		cont = "continue"
		done = "completed before the deadline"
	)
	arrivals := map[string][]string{
		"none":          nil,
		"optional only": {EventKafka},
		"required only": {EventAPIResponse},
	}
	// strategy -> arrival -> onTimeout -> outcome
	want := map[vocab.Strategy]map[string]map[vocab.OnTimeout]string{
		vocab.StrategyAll: {
			"none":          {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: fail, vocab.OnTimeoutContinueWithPartial: cont},
			"optional only": {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: fail, vocab.OnTimeoutContinueWithPartial: cont},
			"required only": {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: cont, vocab.OnTimeoutContinueWithPartial: cont},
		},
		vocab.StrategyAny: {
			"none":          {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: fail, vocab.OnTimeoutContinueWithPartial: cont},
			"optional only": {vocab.OnTimeoutFail: done, vocab.OnTimeoutContinue: done, vocab.OnTimeoutContinueWithPartial: done},
			"required only": {vocab.OnTimeoutFail: done, vocab.OnTimeoutContinue: done, vocab.OnTimeoutContinueWithPartial: done},
		},
		vocab.StrategyRequiredOnly: { // continue goes on with the required events that arrived
			"none":          {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: cont, vocab.OnTimeoutContinueWithPartial: cont},
			"optional only": {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: cont, vocab.OnTimeoutContinueWithPartial: cont},
			"required only": {vocab.OnTimeoutFail: done, vocab.OnTimeoutContinue: done, vocab.OnTimeoutContinueWithPartial: done},
		},
		vocab.StrategyCustom: { // requiredEvents: [api_response]
			"none":          {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: fail, vocab.OnTimeoutContinueWithPartial: cont},
			"optional only": {vocab.OnTimeoutFail: fail, vocab.OnTimeoutContinue: fail, vocab.OnTimeoutContinueWithPartial: cont},
			"required only": {vocab.OnTimeoutFail: done, vocab.OnTimeoutContinue: done, vocab.OnTimeoutContinueWithPartial: done},
		},
	}
	for strategy, byArrival := range want {
		enabled := []string{EventAPIResponse, EventKafka}
		for arrival, byPolicy := range byArrival {
			for policy, outcome := range byPolicy {
				t.Run(string(strategy)+"/"+arrival+"/"+string(policy), func(t *testing.T) {
					received := arrivals[arrival]
					satisfied := Satisfied(strategy, enabled, requiredOf(strategy), received)
					if outcome == done {
						require.True(t, satisfied, "the wait completes when the event arrives; no deadline decides it")
						return
					}
					require.False(t, satisfied)
					d := decideTimeout(strategy, policy, expected, requiredOf(strategy), received, nil, t0, t0)
					require.True(t, d.Fire)
					require.Equal(t, outcome == cont, d.Continue, d.Reason)
					var missing []string
					for _, e := range enabled {
						if !slices.Contains(received, e) {
							missing = append(missing, e)
						}
					}
					require.Equal(t, missing, d.TimedOut)
					if outcome == fail {
						for _, m := range missing {
							require.Contains(t, d.Reason, m)
						}
					} else {
						require.Empty(t, d.Reason)
					}
					require.Equal(t, policy == vocab.OnTimeoutContinueWithPartial, d.Partial)
					if d.Partial {
						require.Equal(t, "timed out; continued with partial data, without "+strings.Join(missing, ", "), d.Warning)
					} else {
						require.Empty(t, d.Warning)
					}
					// api_response is what continue needs under every strategy here
					// (required: true, and the required set of the other two).
					var needed []string
					if !slices.Contains(received, EventAPIResponse) {
						needed = []string{EventAPIResponse}
					}
					require.Equal(t, needed, d.Missing)
				})
			}
		}
	}
}

// TestDecideTimeoutEventDeadlines: an event's own deadline before the overall one ends
// the wait only when the strategy cannot do without that event.
func TestDecideTimeoutEventDeadlines(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	kafkaAt, apiAt, overall := t0.Add(10*time.Second), t0.Add(30*time.Second), t0.Add(60*time.Second)
	expected := []Expected{
		{Name: EventAPIResponse, Required: true, DeadlineAt: &apiAt},
		{Name: EventKafka, Required: false, DeadlineAt: &kafkaAt},
	}
	custom := []string{EventAPIResponse}
	cases := []struct {
		name     string
		strategy vocab.Strategy
		received []string
		now      time.Time
		fire     bool
		timedOut []string
		next     time.Time
	}{
		{"before any deadline", vocab.StrategyAll, nil, t0.Add(5 * time.Second), false, nil, kafkaAt},
		{"all: optional event's deadline ends the wait", vocab.StrategyAll, nil, kafkaAt, true, []string{EventKafka}, overall},
		{"required_only: optional deadline only recorded", vocab.StrategyRequiredOnly, nil, kafkaAt, false, []string{EventKafka}, apiAt},
		{"custom: event outside requiredEvents only recorded", vocab.StrategyCustom, nil, kafkaAt, false, []string{EventKafka}, apiAt},
		{"required_only: required event's deadline ends it", vocab.StrategyRequiredOnly, nil, apiAt, true, []string{EventAPIResponse, EventKafka}, overall},
		{"any: one event timed out, the other can still come", vocab.StrategyAny, nil, kafkaAt, false, []string{EventKafka}, apiAt},
		{"any: every event timed out", vocab.StrategyAny, nil, apiAt, true, []string{EventAPIResponse, EventKafka}, overall},
		{"due deadline of an event that arrived: move on", vocab.StrategyRequiredOnly, []string{EventKafka}, kafkaAt, false, nil, apiAt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			required, err := RequiredSet(c.strategy, expected, custom)
			require.NoError(t, err)
			d := decideTimeout(c.strategy, vocab.OnTimeoutFail, expected, required, c.received, nil, overall, c.now)
			require.Equal(t, c.fire, d.Fire)
			require.ElementsMatch(t, c.timedOut, d.TimedOut)
			require.Equal(t, c.next, d.Next)
		})
	}

	// Already timed-out events stay timed out and are not counted twice.
	required, _ := RequiredSet(vocab.StrategyRequiredOnly, expected, nil)
	d := decideTimeout(vocab.StrategyRequiredOnly, vocab.OnTimeoutContinueWithPartial, expected, required, nil, []string{EventKafka}, overall, apiAt)
	require.True(t, d.Fire)
	require.Equal(t, []string{EventKafka, EventAPIResponse}, d.TimedOut)
	require.True(t, d.Continue)
}
