package clock_test

import (
	"testing"
	"time"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/internal/clock"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func fired(tm clock.Timer) bool {
	select {
	case <-tm.C():
		return true
	default:
		return false
	}
}

func TestStub(t *testing.T) {
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	t.Run("moves only when told", func(t *testing.T) {
		s := clock.NewStub(start)
		if got := s.Now(); !got.Equal(start) {
			t.Fatalf("now %v, want %v", got, start)
		}
		if got := s.Advance(time.Minute); !got.Equal(start.Add(time.Minute)) || !s.Now().Equal(got) {
			t.Fatalf("advanced to %v, now %v", got, s.Now())
		}
		s.Set(start.Add(time.Hour))
		if got := s.Now(); !got.Equal(start.Add(time.Hour)) {
			t.Fatalf("set to %v", got)
		}
	})
	t.Run("refuses to go back", func(t *testing.T) {
		s := clock.NewStub(start)
		defer func() {
			if recover() == nil {
				t.Fatal("Set to an earlier time did not panic")
			}
		}()
		s.Set(start.Add(-time.Second))
	})
	t.Run("timer fires when the stub reaches it", func(t *testing.T) {
		s := clock.NewStub(start)
		tm := s.NewTimer(time.Minute)
		s.Advance(59 * time.Second)
		if fired(tm) {
			t.Fatal("fired a second early")
		}
		s.Advance(time.Second)
		if !fired(tm) {
			t.Fatal("did not fire at its time")
		}
		s.Advance(time.Hour)
		if fired(tm) {
			t.Fatal("fired twice")
		}
	})
	t.Run("a timer due already fires at once", func(t *testing.T) {
		s := clock.NewStub(start)
		if !fired(s.NewTimer(0)) {
			t.Fatal("a zero timer did not fire")
		}
		tm := s.NewTimer(time.Hour)
		tm.Reset(-time.Second)
		if !fired(tm) {
			t.Fatal("reset to the past did not fire")
		}
	})
	t.Run("reset and stop leave nothing stale", func(t *testing.T) {
		s := clock.NewStub(start)
		tm := s.NewTimer(time.Second)
		s.Advance(time.Second) // fired, not received
		tm.Reset(time.Minute)
		if fired(tm) {
			t.Fatal("reset kept the earlier firing")
		}
		s.Advance(30 * time.Second)
		tm.Stop()
		s.Advance(time.Hour)
		if fired(tm) {
			t.Fatal("a stopped timer fired")
		}
	})
	t.Run("a blocked receiver wakes on Advance", func(t *testing.T) {
		s := clock.NewStub(start)
		tm := s.NewTimer(time.Hour)
		got := make(chan time.Time)
		go func() { got <- <-tm.C() }()
		s.Advance(time.Hour)
		select {
		case at := <-got:
			if !at.Equal(start.Add(time.Hour)) {
				t.Fatalf("fired with %v", at)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("receiver not woken")
		}
	})
}

func TestReal(t *testing.T) {
	if clock.Or(nil) != clock.Real {
		t.Fatal("Or(nil) is not Real")
	}
	s := clock.NewStub(time.Now())
	if clock.Or(s) != clock.Clock(s) {
		t.Fatal("Or(stub) is not the stub")
	}
	before := time.Now()
	if now := clock.Real.Now(); now.Before(before) || now.After(time.Now()) {
		t.Fatalf("real now %v outside [%v, now]", now, before)
	}
	tm := clock.Real.NewTimer(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(5 * time.Second):
		t.Fatal("a real timer did not fire")
	}
}
