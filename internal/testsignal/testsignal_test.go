package testsignal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/internal/testsignal"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// fakeT records a fatal instead of stopping the test.
type fakeT struct{ failed string }

func (f *fakeT) Helper()                        {}
func (f *fakeT) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

func TestSignal(t *testing.T) {
	t.Run("inert until initialised", func(t *testing.T) {
		var s testsignal.Signal[int]
		s.Signal(1) // no panic, no block
		ft := &fakeT{}
		s.WaitFor(ft, time.Millisecond)
		if ft.failed == "" {
			t.Fatal("waiting on an uninitialised signal did not fail")
		}
	})
	t.Run("steps in order, shared by copies", func(t *testing.T) {
		var s testsignal.Signal[int]
		s.Init()
		cp := s
		go func() { cp.Signal(1); cp.Signal(2) }()
		if got := s.Wait(t); got != 1 {
			t.Fatalf("first step %d", got)
		}
		if got := s.Wait(t); got != 2 {
			t.Fatalf("second step %d", got)
		}
	})
	t.Run("times out", func(t *testing.T) {
		var s testsignal.Signal[string]
		s.Init()
		ft := &fakeT{}
		s.WaitFor(ft, 10*time.Millisecond)
		if ft.failed == "" {
			t.Fatal("no step, and no failure")
		}
	})
	t.Run("drain", func(t *testing.T) {
		var s testsignal.Signal[int]
		s.Init()
		s.Signal(1)
		s.Drain()
		s.Signal(2)
		if got := s.Wait(t); got != 2 {
			t.Fatalf("after a drain, step %d", got)
		}
	})
}

func TestMarks(t *testing.T) {
	t.Run("inert until initialised", func(t *testing.T) {
		var m testsignal.Marks[string]
		m.Set("a", 1) // no panic
		if _, ok := m.Get("a"); ok {
			t.Fatal("an inert mark was set")
		}
		ft := &fakeT{}
		m.WaitAtLeastFor(ft, "a", 1, time.Millisecond)
		if ft.failed == "" {
			t.Fatal("waiting on uninitialised marks did not fail")
		}
	})
	t.Run("latest value per key, shared by copies", func(t *testing.T) {
		var m testsignal.Marks[string]
		m.Init()
		cp := m
		cp.Set("a", 3)
		cp.Set("a", 2)
		cp.Set("b", 7)
		if v, ok := m.Get("a"); !ok || v != 2 {
			t.Fatalf("a = %d, %v; want the latest, 2", v, ok)
		}
		if v, _ := m.Get("b"); v != 7 {
			t.Fatalf("b = %d", v)
		}
	})
	t.Run("waits until a key reaches a value", func(t *testing.T) {
		var m testsignal.Marks[string]
		m.Init()
		m.Set("a", 1)
		go func() {
			for i := int64(2); i <= 5; i++ {
				time.Sleep(time.Millisecond)
				m.Set("b", 100) // other keys wake the waiter without satisfying it
				m.Set("a", i)
			}
		}()
		if got := m.WaitAtLeast(t, "a", 5); got != 5 {
			t.Fatalf("returned %d", got)
		}
	})
	t.Run("times out below the value", func(t *testing.T) {
		var m testsignal.Marks[string]
		m.Init()
		m.Set("a", 4)
		ft := &fakeT{}
		m.WaitAtLeastFor(ft, "a", 5, 10*time.Millisecond)
		if ft.failed == "" {
			t.Fatal("mark below the value, and no failure")
		}
		ft = &fakeT{}
		m.WaitAtLeastFor(ft, "never", 0, 10*time.Millisecond)
		if ft.failed == "" {
			t.Fatal("a key never set, and no failure")
		}
	})
}
