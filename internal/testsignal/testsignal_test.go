package testsignal_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/testkit"
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
