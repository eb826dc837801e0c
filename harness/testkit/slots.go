package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// The suite's packages run side by side (go test -p), and every one of them opens
// connections to the one local PostgreSQL, whose max_connections (100) they share. A
// package's TestMain takes a share of the server before its tests run: one slot, or
// every slot for a package whose tests start several replicas at once (NeedsWholeServer).
// The slots are lock files, so the budget holds across the test processes go test
// starts, and a process that dies gives its slots back.
//
// SlotsEnv sets the number of slots (default 2, the -p of make test); 0 turns the budget
// off.
const SlotsEnv = "RENDEZVOUS_TEST_SLOTS"

const slotsDefault = 2

var wholeServer atomic.Bool

// NeedsWholeServer declares, in a package's TestMain before VerifyTestMain, that the
// package's tests use about as many connections as the server allows, so it runs with no
// other package's tests beside it.
func NeedsWholeServer() { wholeServer.Store(true) }

// takeSlots blocks until the package holds its share of the server, and returns the
// function that gives it back.
func takeSlots() (release func(), err error) {
	n := slotsDefault
	if v := os.Getenv(SlotsEnv); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			return nil, fmt.Errorf("testkit: %s=%q: want a number of slots, 0 for none", SlotsEnv, v)
		}
	}
	if n == 0 {
		return func() {}, nil
	}
	return lockSlots(filepath.Join(os.TempDir(), "rendezvous-test-slots"), n, wholeServer.Load())
}

// lockSlots takes one of the n slot files in dir, or every one of them when whole, and
// returns the function that gives them back.
func lockSlots(dir string, n int, whole bool) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("testkit: slots: %w", err)
	}
	var held []*os.File
	release = func() {
		for _, f := range held {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			_ = f.Close()
		}
	}
	open := func(i int) (*os.File, error) {
		return os.OpenFile(filepath.Join(dir, "slot-"+strconv.Itoa(i)), os.O_CREATE|os.O_RDONLY, 0o666)
	}
	if whole {
		// Every slot, in order, each waited for: two such packages cannot deadlock, and
		// a one-slot package never waits while holding one.
		for i := range n {
			f, err := open(i)
			if err != nil {
				release()
				return nil, err
			}
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
				_ = f.Close()
				release()
				return nil, fmt.Errorf("testkit: lock slot %d: %w", i, err)
			}
			held = append(held, f)
		}
		return release, nil
	}
	for {
		for i := range n {
			f, err := open(i)
			if err != nil {
				return nil, err
			}
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				held = append(held, f)
				return release, nil
			}
			_ = f.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
}
