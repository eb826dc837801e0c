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
	"sync"
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

// Marks holds the latest value of each of a set of keys — a partition's committed
// offset, say — for a step that repeats too often to queue (every poll commits): a test
// waits for a key to reach a value, not for each step on the way. Its zero value is
// inert; a copy shares the marks of the one it was copied from once initialised.
type Marks[K comparable] struct {
	m *marks[K]
}

type marks[K comparable] struct {
	mu sync.Mutex
	v  map[K]int64
	// changed is closed, and replaced, by every Set: a waiter takes it under mu with
	// the values it checked, so no Set after the check goes unnoticed.
	changed chan struct{}
}

// Init makes the marks live; call it before the code that sets them starts.
func (s *Marks[K]) Init() { s.m = &marks[K]{v: map[K]int64{}, changed: make(chan struct{})} }

// Set records v as k's latest value; a no-op unless the marks are live.
func (s *Marks[K]) Set(k K, v int64) {
	if s.m == nil {
		return
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	s.m.v[k] = v
	close(s.m.changed)
	s.m.changed = make(chan struct{})
}

// Get returns k's latest value, and whether it was ever set.
func (s *Marks[K]) Get(k K) (int64, bool) {
	if s.m == nil {
		return 0, false
	}
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	v, ok := s.m.v[k]
	return v, ok
}

// WaitAtLeast waits up to Timeout for k's latest value to be at least v, and returns
// it; it fails the test when it is not.
func (s *Marks[K]) WaitAtLeast(t TB, k K, v int64) int64 {
	t.Helper()
	return s.WaitAtLeastFor(t, k, v, Timeout)
}

// WaitAtLeastFor is WaitAtLeast with a timeout of d.
func (s *Marks[K]) WaitAtLeastFor(t TB, k K, v int64, d time.Duration) int64 {
	t.Helper()
	if s.m == nil {
		t.Fatalf("testsignal: waiting on marks that were never initialised")
		return 0
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		s.m.mu.Lock()
		got, ok := s.m.v[k]
		changed := s.m.changed
		s.m.mu.Unlock()
		if ok && got >= v {
			return got
		}
		select {
		case <-changed:
		case <-timer.C:
			if ok {
				t.Fatalf("testsignal: %v is at %d, not yet %d, after %v", k, got, v, d)
			} else {
				t.Fatalf("testsignal: %v never set within %v (waiting for %d)", k, d, v)
			}
			return got
		}
	}
}
