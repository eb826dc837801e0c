package chaos

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// Outcome classes of an execution, as the workflow sees them.
const (
	// ClassCompleted: the wait was satisfied; the workflow went on through on_satisfied.
	ClassCompleted = "completed"
	// ClassContinued: a deadline ended the wait and onTimeout let the workflow go on
	// through on_timeout.
	ClassContinued = "continued"
	// ClassFailed: a deadline ended the wait and the node and the execution failed.
	ClassFailed = "failed"
)

// WaitSpec is what decides a wait: its strategy and onTimeout, its events with their
// absolute deadlines (fixed at registration), and the overall deadline.
type WaitSpec struct {
	Strategy  string
	OnTimeout string
	Events    []SpecEvent
	// Required is the strategy's required set (all enabled for all, none for any, the
	// required ones for required_only, requiredEvents for custom).
	Required []string
	Expires  time.Time
}

// SpecEvent is one enabled event.
type SpecEvent struct {
	Name     string
	Required bool
	// Deadline is its own deadline, or Expires when it has none.
	Deadline time.Time
}

// Result is a wait's outcome: its class and the events recorded on it.
type Result struct {
	Class    string   `json:"class"`
	Recorded []string `json:"recorded"` // sorted
}

func (r Result) String() string {
	return r.Class + " with [" + strings.Join(r.Recorded, ", ") + "]"
}

// Simulate decides a wait from the moments its events are applied (an event missing
// from at never arrives), following the documented semantics:
//
//   - an event is recorded when it arrives before its own deadline and the overall one,
//     while the wait is still open; an arrival at a deadline is late;
//   - the wait completes as soon as the strategy is satisfied (any: one enabled event;
//     otherwise every event of the required set);
//   - a deadline passing without its event ends the wait when, for any, every enabled
//     event has timed out; for the others, when an event of the required set has; the
//     overall deadline always ends it;
//   - an ended wait continues under continue_with_partial; under continue, for
//     required_only always (with the required events that arrived), for the others only
//     when every event it must have arrived (for all and any those marked required:
//     true, for custom the required set); otherwise it fails.
//
// The wait ends at the moment a deadline dooms it, not when a sweeper gets to it: an
// event arriving after that moment is late.
func Simulate(spec WaitSpec, at map[string]time.Time) Result {
	type point struct {
		t        time.Time
		deadline bool
		name     string // "" for the overall deadline
	}
	var points []point
	for _, e := range spec.Events {
		if t, ok := at[e.Name]; ok {
			points = append(points, point{t: t, name: e.Name})
		}
		if e.Deadline.Before(spec.Expires) {
			points = append(points, point{t: e.Deadline, deadline: true, name: e.Name})
		}
	}
	points = append(points, point{t: spec.Expires, deadline: true})
	// Deadlines before arrivals at the same instant: an arrival at its deadline is late.
	sort.SliceStable(points, func(i, j int) bool {
		if !points[i].t.Equal(points[j].t) {
			return points[i].t.Before(points[j].t)
		}
		return points[i].deadline && !points[j].deadline
	})

	var received, timedOut []string
	pending := func(name string) bool {
		return !slices.Contains(received, name) && !slices.Contains(timedOut, name)
	}
	for _, p := range points {
		if !p.deadline {
			if !pending(p.name) {
				continue // late, or a second arrival
			}
			received = append(received, p.name)
			if spec.satisfied(received) {
				return Result{Class: ClassCompleted, Recorded: sorted(received)}
			}
			continue
		}
		if p.name == "" {
			return Result{Class: spec.afterTimeout(received), Recorded: sorted(received)}
		}
		if !pending(p.name) {
			continue
		}
		timedOut = append(timedOut, p.name)
		if spec.fires(timedOut) {
			return Result{Class: spec.afterTimeout(received), Recorded: sorted(received)}
		}
	}
	// Unreachable: the overall deadline is always a point.
	return Result{Class: spec.afterTimeout(received), Recorded: sorted(received)}
}

func (spec WaitSpec) satisfied(received []string) bool {
	if spec.Strategy == "any" {
		return len(received) > 0
	}
	for _, r := range spec.Required {
		if !slices.Contains(received, r) {
			return false
		}
	}
	return true
}

func (spec WaitSpec) fires(timedOut []string) bool {
	if spec.Strategy == "any" {
		return len(timedOut) == len(spec.Events)
	}
	return slices.ContainsFunc(spec.Required, func(n string) bool { return slices.Contains(timedOut, n) })
}

func (spec WaitSpec) afterTimeout(received []string) string {
	switch spec.OnTimeout {
	case "continue_with_partial":
		return ClassContinued
	case "continue":
		if spec.Strategy == "required_only" {
			return ClassContinued
		}
		var must []string
		if spec.Strategy == "all" || spec.Strategy == "any" {
			for _, e := range spec.Events {
				if e.Required {
					must = append(must, e.Name)
				}
			}
		} else {
			must = spec.Required
		}
		for _, m := range must {
			if !slices.Contains(received, m) {
				return ClassFailed
			}
		}
		return ClassContinued
	}
	return ClassFailed
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// Window is when an event may have been applied, as far as the sender can tell.
type Window struct {
	// Lo is the earliest moment: the send of the attempt that decided it.
	Lo time.Time
	// Hi is the latest moment; Open means there is none (a record produced while a
	// fault disturbed the consumers may be applied any time later, or after the wait
	// ended).
	Hi   time.Time
	Open bool
}

// epsilon separates "just before" from "just after" a critical moment.
const epsilon = time.Microsecond

// Allowed returns every outcome consistent with the delivery windows: each event is
// placed at the edges of its window, just before and just after every deadline and every
// edge of the other events' windows inside it, and — for an open window — never. An
// event without a window never arrives. One result means the outcome is certain; more
// mean the deliveries raced a deadline (or each other) and any of them is correct.
func Allowed(spec WaitSpec, windows map[string]Window) []Result {
	var critical []time.Time
	for _, e := range spec.Events {
		critical = append(critical, e.Deadline)
	}
	critical = append(critical, spec.Expires)
	for _, w := range windows {
		critical = append(critical, w.Lo)
		if !w.Open {
			critical = append(critical, w.Hi)
		}
	}
	type candidates struct {
		name  string
		times []*time.Time // nil: never arrives
	}
	var all []candidates
	for _, e := range spec.Events {
		w, ok := windows[e.Name]
		if !ok {
			continue
		}
		c := candidates{name: e.Name}
		add := func(t time.Time) {
			if t.Before(w.Lo) || (!w.Open && t.After(w.Hi)) {
				return
			}
			if slices.ContainsFunc(c.times, func(x *time.Time) bool { return x != nil && x.Equal(t) }) {
				return
			}
			c.times = append(c.times, &t)
		}
		add(w.Lo)
		if !w.Open {
			add(w.Hi)
		}
		for _, t := range critical {
			add(t.Add(-epsilon))
			add(t)
			add(t.Add(epsilon))
		}
		if w.Open {
			c.times = append(c.times, nil)
		}
		all = append(all, c)
	}
	seen := map[string]bool{}
	var out []Result
	var walk func(i int, at map[string]time.Time)
	walk = func(i int, at map[string]time.Time) {
		if i == len(all) {
			r := Simulate(spec, at)
			if k := r.String(); !seen[k] {
				seen[k] = true
				out = append(out, r)
			}
			return
		}
		for _, t := range all[i].times {
			next := make(map[string]time.Time, len(at)+1)
			for k, v := range at {
				next[k] = v
			}
			if t != nil {
				next[all[i].name] = *t
			}
			walk(i+1, next)
		}
	}
	walk(0, map[string]time.Time{})
	slices.SortFunc(out, func(a, b Result) int { return strings.Compare(a.String(), b.String()) })
	return out
}
