// Package clock is the time a component decides by: deadlines, due times, retention
// cut-offs, buffer lifetimes, lookback windows. Components take a Clock in their Config
// and use Real when none is given; a test hands them a Stub it sets or advances, then
// waits for the step that acts on the new time (package testsignal) instead of sleeping
// until the real clock gets there.
//
// Measurements (latencies, durations in log lines) stay on the time package: a stubbed
// clock would only make them wrong.
package clock

import (
	"slices"
	"sync"
	"time"
)

// Clock tells the time and sleeps by it.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that fires once this clock has moved d on.
	NewTimer(d time.Duration) Timer
}

// Timer fires once on C, like time.Timer; Reset and Stop leave no stale value on C.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

// Real is the time of the operating system.
var Real Clock = realClock{}

// Or returns c, or Real when c is nil: the default of a Config's Clock.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }

// Reset and Stop rely on Go 1.23 timers: neither leaves a stale value on C.
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// Stub is a clock that moves only when told to (Set, Advance). Its timers fire when it
// reaches their time. Safe for concurrent use.
type Stub struct {
	mu     sync.Mutex
	now    time.Time
	timers []*stubTimer // armed, in no order
}

// NewStub returns a stub reading start. Starting from the real time keeps what the
// stubbed component writes comparable with what PostgreSQL stamps with its own clock.
func NewStub(start time.Time) *Stub { return &Stub{now: start} }

// Now returns the stub's time.
func (s *Stub) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Advance moves the stub on by d and fires the timers due by then; it returns the new
// time.
func (s *Stub) Advance(d time.Duration) time.Time {
	if d < 0 {
		panic("clock: a stub does not go back")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = s.now.Add(d)
	s.fireLocked()
	return s.now
}

// Set moves the stub on to t (a time before its own is refused: nothing decided by a
// clock expects it to go back) and fires the timers due by then.
func (s *Stub) Set(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Before(s.now) {
		panic("clock: a stub does not go back")
	}
	s.now = t
	s.fireLocked()
}

func (s *Stub) fireLocked() {
	s.timers = slices.DeleteFunc(s.timers, func(t *stubTimer) bool {
		if t.at.After(s.now) {
			return false
		}
		t.fire(s.now)
		return true
	})
}

// NewTimer returns a timer firing when the stub reaches its time plus d; at once when
// d <= 0.
func (s *Stub) NewTimer(d time.Duration) Timer {
	t := &stubTimer{s: s, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type stubTimer struct {
	s  *Stub
	c  chan time.Time
	at time.Time // guarded by s.mu
}

func (t *stubTimer) C() <-chan time.Time { return t.c }

func (t *stubTimer) Reset(d time.Duration) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.disarmLocked()
	t.at = t.s.now.Add(d)
	if d <= 0 {
		t.fire(t.s.now)
		return
	}
	t.s.timers = append(t.s.timers, t)
}

func (t *stubTimer) Stop() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	t.disarmLocked()
}

// disarmLocked takes the timer off the stub and empties C, as time.Timer does since
// Go 1.23.
func (t *stubTimer) disarmLocked() {
	t.s.timers = slices.DeleteFunc(t.s.timers, func(o *stubTimer) bool { return o == t })
	select {
	case <-t.c:
	default:
	}
}

func (t *stubTimer) fire(now time.Time) {
	select {
	case t.c <- now:
	default:
	}
}
