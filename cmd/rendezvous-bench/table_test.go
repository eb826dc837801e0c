package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/bench"
)

// TestPeerTargetsReadTheBestPeer: each target of (p) is rendezvous against the better
// of DBOS and Temporal on that figure — the faster delivery and parking, the shorter
// p99 — and against DBOS alone when Temporal was left out.
func TestPeerTargetsReadTheBestPeer(t *testing.T) {
	side := func(events, parked float64, p99 time.Duration) bench.PeerSide {
		return bench.PeerSide{EventsPerSecond: events, ParkedPerSecond: parked,
			SendToCompletion: bench.Latencies{P50: p99 / 2, P99: p99}, RowsPerParked: 3, RowsPerEvent: 3}
	}
	// Temporal parks faster than DBOS here, DBOS delivers faster and sooner.
	temporal := side(100, 500, 400*time.Millisecond)
	m := bench.PeerRound{Senders: 8, Rendezvous: side(1200, 1000, 40*time.Millisecond),
		DBOS: side(300, 300, 200*time.Millisecond), Temporal: &temporal}
	targets := func(r results) map[string]figure {
		out := map[string]figure{}
		for _, f := range figures(options{}, r) {
			if f.Target != "" {
				out[f.Name] = f
			}
		}
		return out
	}

	var r results
	r.Peer.Medians = []bench.PeerRound{m}
	got := targets(r)
	delivery := got["delivery events/s, rendezvous ÷ the best peer (DBOS), 8 senders"]
	require.InDelta(t, 4.0, delivery.Value, 1e-9)
	require.Equal(t, "≥ 3.00×", delivery.Target)
	require.True(t, *delivery.Met)
	p99 := got["send → completion p99, rendezvous ÷ the best peer (DBOS), 8 senders"]
	require.InDelta(t, 0.2, p99.Value, 1e-9)
	require.True(t, *p99.Met, "0.2 meets ≤ 0.2")
	parked := got["parked/s, rendezvous ÷ the best peer (Temporal), 8 senders"]
	require.InDelta(t, 2.0, parked.Value, 1e-9)
	require.Equal(t, "≥ 2.50×", parked.Target)
	require.False(t, *parked.Met)

	m.Temporal = nil
	r.Peer.Medians = []bench.PeerRound{m}
	got = targets(r)
	parked = got["parked/s, rendezvous ÷ the best peer (DBOS), 8 senders"]
	require.InDelta(t, 1000.0/300, parked.Value, 1e-9)
	require.True(t, *parked.Met)
	for name := range got {
		require.NotContains(t, name, "Temporal")
	}
}

// TestRetiredTargetsPrintNoVerdict: the first targets of (b), (c), (d) and (e), against
// the versioned UPDATE loop and absolute latencies, are gone; their figures stay.
func TestRetiredTargetsPrintNoVerdict(t *testing.T) {
	var r results
	r.Baseline.PerSecond = 1000
	r.Baseline.Latency = bench.Latencies{P50: time.Millisecond, P99: 2 * time.Millisecond}
	r.Kafka = bench.KafkaResult{Records: 10, PerSecond: 500}
	r.Callbacks = bench.CallbackResult{Waits: 10, PerSecond: 400}
	r.KafkaLatency = bench.LatencyResult{Events: 10, OfferedRate: 250}
	r.CallbackLatency = bench.LatencyResult{Events: 10, OfferedRate: 200}
	r.Deadlines = bench.DeadlineResult{Due: 10, PerSecond: 900, Lateness: bench.Latencies{P99: 3 * time.Second}}
	seen := map[string]bool{}
	for _, f := range figures(options{}, r) {
		seen[f.Part] = seen[f.Part] || f.Part != ""
		require.Empty(t, f.Target, f.Name)
	}
	for _, part := range []string{"b", "c", "d", "e"} {
		require.True(t, seen[part], "(%s) still prints its figures", part)
	}
}
