// Package gctune sets how much the Go garbage collector lets the heap grow in a process
// that runs a replica, unless the operator has set it (GOGC, GOMEMLIMIT).
//
// A replica's live heap is small — the waits live in PostgreSQL — while applying a batch
// of events allocates a lot that dies with the batch: the rows read, the documents and
// the statements written. With Go's default (GOGC=100: collect when the heap has grown
// by its live size) a replica applying Kafka records at full speed collected several
// times a second, and the collector took a large share of the process's CPU. Letting
// the heap grow four times its live size before collecting (GOGC=400) cut the replica's
// CPU per record (rendezvous-bench --only kafka, run with GOGC=100 and 400). In exchange the heap may reach about five times its live size, so
// where the process runs under a memory limit (a container's cgroup), a soft limit
// (GOMEMLIMIT) at a share of it makes the collector work harder before the limit is
// reached instead of letting the heap grow past it.
package gctune

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Percent is the GOGC a replica runs with when GOGC is not set.
const Percent = 400

// LimitShare is the share of the container's memory limit set as the soft memory limit
// when GOMEMLIMIT is not set: the rest is left to what the Go heap does not count
// (goroutine stacks, the runtime's own structures, memory not yet returned).
const LimitShare = 0.9

// cgroupLimitFiles hold the memory limit of the process's cgroup: cgroup v2's, then
// v1's.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Settings is what Apply found and set.
type Settings struct {
	// Percent is the GOGC in force; PercentFromEnv reports that GOGC set it.
	Percent        int
	PercentFromEnv bool
	// Limit is the soft memory limit in force in bytes (math.MaxInt64: none);
	// LimitFromEnv reports that GOMEMLIMIT set it; ContainerLimit is the cgroup's limit
	// it was derived from (0: none found).
	Limit          int64
	LimitFromEnv   bool
	ContainerLimit int64
}

// Apply sets GOGC to Percent unless the environment sets it, and the soft memory limit
// to LimitShare of the container's memory limit unless the environment sets GOMEMLIMIT
// or no limit is found. It reports what is in force.
func Apply() Settings {
	return apply(os.Getenv, cgroupLimitFiles)
}

func apply(getenv func(string) string, limitFiles []string) Settings {
	var s Settings
	if getenv("GOGC") != "" {
		// The runtime read it at start: read it back and leave it as it is.
		s.Percent, s.PercentFromEnv = debug.SetGCPercent(-1), true
		debug.SetGCPercent(s.Percent)
	} else {
		debug.SetGCPercent(Percent)
		s.Percent = Percent
	}
	if getenv("GOMEMLIMIT") != "" {
		s.Limit, s.LimitFromEnv = debug.SetMemoryLimit(-1), true // -1 reads it
		return s
	}
	for _, f := range limitFiles {
		if limit, err := readLimit(f); err == nil && limit > 0 {
			s.ContainerLimit = limit
			break
		}
	}
	if s.ContainerLimit > 0 {
		debug.SetMemoryLimit(int64(float64(s.ContainerLimit) * LimitShare))
	}
	s.Limit = debug.SetMemoryLimit(-1)
	return s
}

// readLimit reads a cgroup memory limit file: a number of bytes, or "max" (none, 0). A
// cgroup v1 without a limit shows a number near the largest int64, rounded to pages,
// which is also none.
func readLimit(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if n <= 0 {
		return 0, errors.New(path + ": not a limit")
	}
	if n > math.MaxInt64/2 {
		return 0, nil
	}
	return n, nil
}

// GOGC says the GOGC in force and where it comes from.
func (s Settings) GOGC() string {
	switch {
	case s.PercentFromEnv && s.Percent < 0:
		return "off (GOGC)"
	case s.PercentFromEnv:
		return fmt.Sprintf("%d (GOGC)", s.Percent)
	}
	return fmt.Sprintf("%d (rendezvous' default; GOGC sets another)", s.Percent)
}

// MemoryLimit says the soft memory limit in force and where it comes from.
func (s Settings) MemoryLimit() string {
	switch {
	case s.LimitFromEnv:
		return fmt.Sprintf("%d bytes (GOMEMLIMIT)", s.Limit)
	case s.ContainerLimit > 0:
		return fmt.Sprintf("%d bytes (%.0f%% of the container's %d)", s.Limit, LimitShare*100, s.ContainerLimit)
	}
	return "none (no container memory limit found; GOMEMLIMIT sets one)"
}

// LogAttrs are the settings as the attributes of a log line.
func (s Settings) LogAttrs() []any {
	return []any{slog.String("gogc", s.GOGC()), slog.String("memory_limit", s.MemoryLimit())}
}
