package readmodel

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// TimelineKind says what a timeline entry records.
type TimelineKind string

// The kinds of timeline entries.
const (
	TimelineExecutionStarted  TimelineKind = "execution_started"
	TimelineNodeStarted       TimelineKind = "node_started"
	TimelineNodeFinished      TimelineKind = "node_finished"
	TimelineWaitStarted       TimelineKind = "wait_started"
	TimelineEventReceived     TimelineKind = "event_received"
	TimelineWaitEnded         TimelineKind = "wait_ended"
	TimelineWaitResumed       TimelineKind = "wait_resumed"
	TimelineExecutionFinished TimelineKind = "execution_finished"
	// TimelineExecutionRedriven is the execution's latest redrive (its count in Detail);
	// what failed before it is no longer stored.
	TimelineExecutionRedriven TimelineKind = "execution_redriven"
)

// TimelineEntry is one thing that happened to an execution.
type TimelineEntry struct {
	At   time.Time    `json:"at"`
	Kind TimelineKind `json:"kind"`
	// NodeID names the node of node and wait entries.
	NodeID string `json:"node_id,omitempty"`
	// Status is the node's, the wait's or the execution's status an entry ended in.
	Status string `json:"status,omitempty"`
	// Event and Source: the expected event an event_received entry recorded, and where it
	// came from.
	Event  string             `json:"event,omitempty"`
	Source *aggregator.Source `json:"source,omitempty"`
	// TimedOutEvents: the events a wait_ended entry gave up on.
	TimedOutEvents []string `json:"timed_out_events,omitempty"`
	// Detail is the error or the resuming instance, for people.
	Detail string `json:"detail,omitempty"`
}

// timeline derives an execution's history from what its view already holds: the
// execution's, nodes' and waits' own timestamps and each received event's arrival. No
// separate history is stored, so the timeline cannot disagree with the state it explains.
// A wait's end is dated by its last update, which is the update that ended it: a wait
// that stopped waiting is not updated again but to record its resume, which has its own
// entry.
func timeline(v *ExecutionView) []TimelineEntry {
	out := []TimelineEntry{{At: v.CreatedAt, Kind: TimelineExecutionStarted}}
	for _, n := range v.Nodes {
		if n.StartedAt != nil {
			out = append(out, TimelineEntry{At: *n.StartedAt, Kind: TimelineNodeStarted, NodeID: n.ID})
		}
		if n.FinishedAt != nil {
			e := TimelineEntry{At: *n.FinishedAt, Kind: TimelineNodeFinished, NodeID: n.ID, Status: string(n.Status)}
			if n.Error != nil {
				e.Detail = *n.Error
			}
			out = append(out, e)
		}
	}
	for _, w := range v.Waits {
		out = append(out, TimelineEntry{At: w.CreatedAt, Kind: TimelineWaitStarted, NodeID: w.NodeID, Status: string(w.WaitType)})
		for _, r := range w.ReceivedEvents {
			out = append(out, TimelineEntry{At: r.ReceivedAt, Kind: TimelineEventReceived, NodeID: w.NodeID, Event: r.Name, Source: &r.Source})
		}
		if w.Status != vocab.WaitWaiting && w.Status != vocab.WaitScheduled {
			end := TimelineEntry{At: w.UpdatedAt, Kind: TimelineWaitEnded, NodeID: w.NodeID, Status: string(w.Status), TimedOutEvents: w.TimedOutEvents}
			if w.ResumedAt != nil && w.Status == vocab.WaitResumed {
				// The update that ended the wait was overwritten by its resume; the resume
				// is the latest the wait can have ended.
				end.At = *w.ResumedAt
			}
			if w.Error != nil {
				end.Detail = *w.Error
			}
			out = append(out, end)
		}
		if w.ResumedAt != nil {
			e := TimelineEntry{At: *w.ResumedAt, Kind: TimelineWaitResumed, NodeID: w.NodeID}
			if w.ResumedBy != nil {
				e.Detail = *w.ResumedBy
			}
			out = append(out, e)
		}
	}
	if v.RedrivenAt != nil {
		out = append(out, TimelineEntry{At: *v.RedrivenAt, Kind: TimelineExecutionRedriven,
			Detail: fmt.Sprintf("redrive %d", v.RedriveCount)})
	}
	if v.FinishedAt != nil {
		e := TimelineEntry{At: *v.FinishedAt, Kind: TimelineExecutionFinished, Status: string(v.Status)}
		if v.Error != nil {
			e.Detail = *v.Error
		}
		out = append(out, e)
	}
	// By time; at the same instant, in the order above (the execution before its nodes,
	// a wait's start before its events), which is the order they happened in. The times
	// come from the database's clock (a transaction's start) and the service's (an
	// event's arrival, a resume), so entries of one transaction can be a few
	// milliseconds out of order; the execution's start and finish, which bound
	// everything else by definition, are kept first and last.
	rank := func(k TimelineKind) int {
		switch k {
		case TimelineExecutionStarted:
			return 0
		case TimelineExecutionFinished:
			return 2
		}
		return 1
	}
	slices.SortStableFunc(out, func(a, b TimelineEntry) int {
		return cmp.Or(cmp.Compare(rank(a.Kind), rank(b.Kind)), cmp.Compare(a.At.UnixNano(), b.At.UnixNano()))
	})
	return out
}
