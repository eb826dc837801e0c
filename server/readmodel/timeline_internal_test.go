package readmodel

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TestTimeline: an execution that waited for two events, got one from Kafka, timed out
// on the other and went on, reads as what happened in that order, from the times its
// rows hold; a wait still waiting has no end.
func TestTimeline(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	at := func(s int) *time.Time { v := t0.Add(time.Duration(s) * time.Second); return &v }
	part, off := int32(2), int64(41)
	boom := "boom"
	v := &ExecutionView{
		ExecutionSummary: ExecutionSummary{ID: uuid.New(), Status: "failed", Error: &boom, CreatedAt: t0, FinishedAt: at(9)},
		Nodes: []NodeView{
			{ID: "wait", Status: "timeout", StartedAt: at(0), FinishedAt: at(6)},
			{ID: "notify", Status: "failed", Error: &boom, StartedAt: at(7), FinishedAt: at(8)},
			{ID: "later", Status: "pending"},
		},
		Waits: []WaitView{{
			NodeID: "wait", WaitType: vocab.WaitTypeEvents, Status: vocab.WaitResumed, CreatedAt: *at(1),
			UpdatedAt: *at(6), ResumedAt: at(6), ResumedBy: new("replica-1"), TimedOutEvents: []string{"callback"},
			ReceivedEvents: []aggregator.Received{{Name: "shipment", ReceivedAt: *at(3),
				Source: aggregator.Source{Kind: "kafka", Topic: "shipments", Partition: &part, Offset: &off}}},
		}, {
			NodeID: "other", WaitType: vocab.WaitTypeTimer, Status: vocab.WaitScheduled, CreatedAt: *at(2), UpdatedAt: *at(2),
		}},
	}
	got := timeline(v)
	type entry struct {
		s      int
		kind   TimelineKind
		node   string
		status string
	}
	var short []entry
	for _, e := range got {
		short = append(short, entry{int(e.At.Sub(t0) / time.Second), e.Kind, e.NodeID, e.Status})
	}
	require.Equal(t, []entry{
		{0, TimelineExecutionStarted, "", ""},
		{0, TimelineNodeStarted, "wait", ""},
		{1, TimelineWaitStarted, "wait", "events"},
		{2, TimelineWaitStarted, "other", "timer"},
		{3, TimelineEventReceived, "wait", ""},
		{6, TimelineNodeFinished, "wait", "timeout"},
		{6, TimelineWaitEnded, "wait", "resumed"},
		{6, TimelineWaitResumed, "wait", ""},
		{7, TimelineNodeStarted, "notify", ""},
		{8, TimelineNodeFinished, "notify", "failed"},
		{9, TimelineExecutionFinished, "", "failed"},
	}, short)
	require.Equal(t, "shipment", got[4].Event)
	require.Equal(t, &aggregator.Source{Kind: "kafka", Topic: "shipments", Partition: &part, Offset: &off}, got[4].Source)
	require.Equal(t, []string{"callback"}, got[6].TimedOutEvents)
	require.Equal(t, "replica-1", got[7].Detail)
	require.Equal(t, "boom", got[9].Detail)
	require.Equal(t, "boom", got[10].Detail)

	// The execution's finish is last even when a clock dated another entry after it
	// (a resume dated by the service a millisecond after the database's finish).
	late := *v
	late.Waits = slices.Clone(v.Waits)
	late.Waits[0].ResumedAt = at(10)
	got = timeline(&late)
	require.Equal(t, TimelineWaitResumed, got[len(got)-2].Kind)
	require.Equal(t, TimelineExecutionFinished, got[len(got)-1].Kind)

	// A redriven execution: its latest redrive, with the count.
	redriven := *v
	redriven.RedrivenAt, redriven.RedriveCount = at(11), 2
	got = timeline(&redriven)
	require.Equal(t, TimelineExecutionRedriven, got[len(got)-2].Kind)
	require.Equal(t, "redrive 2", got[len(got)-2].Detail)

	// A new execution: started, nothing else.
	fresh := timeline(&ExecutionView{ExecutionSummary: ExecutionSummary{CreatedAt: t0, Status: "running"}})
	require.Equal(t, []TimelineEntry{{At: t0, Kind: TimelineExecutionStarted}}, fresh)
}
