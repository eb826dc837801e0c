// Package testsignal lets a test wait for an internal step of a background loop (a
// sweeper's round, say) exactly, instead of polling for its effects or sleeping "long
// enough". Production code calls Signal at the step; in production the signal is never
// initialised and Signal does nothing. A test initialises it (Init) before handing the
// configuration that holds it over, then waits for each step with Wait.
//
// It imports no test code, so product packages may hold signals; waiting needs only
// the two methods of testing.TB that it uses.
package testsignal

import (
	"fmt"
	"time"
)

// Timeout is how long Wait waits for a step by default.
const Timeout = 10 * time.Second

// capacity is how many steps may be signalled before a test takes them; a test that
// initialises a signal and never waits for it fills it, and Signal then panics rather
// than block the loop.
const capacity = 1000

// Signal is one kind of step, carrying a value of type T. Its zero value is inert. A
// copy shares the channel of the signal it was copied from, so a configuration holding
// it may be passed by value once it is initialised.
type Signal[T any] struct {
	ch chan T
}

// Init makes the signal live; call it before the code that signals starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal records that the step happened, with v; a no-op unless the signal is live.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic(fmt.Sprintf("testsignal: %d steps signalled and none waited for", capacity))
	}
}

// TB is the part of testing.TB that Wait needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Wait returns the value of the oldest step not waited for yet, waiting up to Timeout
// for one; it fails the test when none comes.
func (s *Signal[T]) Wait(t TB) T {
	t.Helper()
	return s.WaitFor(t, Timeout)
}

// WaitFor is Wait with a timeout of d.
func (s *Signal[T]) WaitFor(t TB, d time.Duration) T {
	t.Helper()
	if s.ch == nil {
		t.Fatalf("testsignal: waiting on a signal that was never initialised")
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-timer.C:
		var zero T
		t.Fatalf("testsignal: no %T step within %v", zero, d)
		return zero
	}
}

// Drain discards the steps signalled so far and not waited for, so that the next Wait
// returns a step that happens after this call.
func (s *Signal[T]) Drain() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}
