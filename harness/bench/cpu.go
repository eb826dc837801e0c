package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CPUUse is the CPU time a measured phase spent, per event it handled, split between the
// PostgreSQL server and this process (the service under test, and for the Kafka runs the
// embedded broker and the producer beside it). On a machine whose cores the phase keeps
// busy, it is what bounds a rate: a path that needs twice the CPU per event of its floor
// cannot reach more than half the floor's rate, however its work is arranged.
type CPUUse struct {
	// PostgresUS and ProcessUS are microseconds of CPU (user and system) per event.
	PostgresUS float64 `json:"postgres_us_per_event"`
	ProcessUS  float64 `json:"process_us_per_event"`
	// SubprocessUS is the CPU per event of the processes the bench started for the
	// phase's system (Temporal's server, worker, starters and senders, in a process of
	// their own), when it has any; ProcessUS is then the bench's own, the other systems
	// idle meanwhile.
	SubprocessUS float64 `json:"subprocess_us_per_event,omitempty"`
	// ProcessAllocs and ProcessAllocBytes are the heap allocations of this process per
	// event: objects and bytes. Unlike its CPU they do not move with the load of the
	// machine, so two builds' runs compare on them when a difference of a few
	// microseconds is lost in the noise of the CPU.
	ProcessAllocs     float64 `json:"process_allocs_per_event"`
	ProcessAllocBytes float64 `json:"process_alloc_bytes_per_event"`
	// WALBytes is the write-ahead log the server wrote per event: the whole server's,
	// read off its insert position, so that two paths writing the same rows compare on
	// the work of their writes (index entries, full-page images) without the noise of
	// the CPU.
	WALBytes float64 `json:"wal_bytes_per_event"`
}

// TotalUS is the CPU per event of all of them.
func (c CPUUse) TotalUS() float64 { return c.PostgresUS + c.ProcessUS + c.SubprocessUS }

// cpuMeter reads the CPU time of the PostgreSQL server (its postmaster, the live
// processes it started and those it has reaped) and of this process. It only works
// when the server runs on this machine and its processes can be read here, as with the
// bench's default URL; otherwise there is no meter and no CPU figure.
type cpuMeter struct {
	pool       *pgxpool.Pool
	postmaster int
	// others are the processes of SubprocessUS.
	others []int
	tick   float64 // seconds per clock tick of /proc
}

// newCPUMeter finds the server behind pool from one of its backends' process ids.
func newCPUMeter(ctx context.Context, pool *pgxpool.Pool) (*cpuMeter, error) {
	var backend int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return nil, err
	}
	st, err := readStat(backend)
	if err != nil {
		return nil, fmt.Errorf("the server's processes cannot be read here: %w", err)
	}
	if !strings.HasPrefix(st.comm, "postgres") {
		return nil, fmt.Errorf("process %d here is %q, not the server's backend", backend, st.comm)
	}
	// USER_HZ: 100 on every Linux this runs on (sysconf(_SC_CLK_TCK) needs cgo).
	return &cpuMeter{pool: pool, postmaster: st.ppid, tick: 0.01}, nil
}

// startCPU starts reading the CPU of the server behind pool, of this process and of
// the processes others, once the garbage the run's setup left is collected
// (collectGarbage). The function it returns gives the CPU per event spent since, for
// events events, or nil when it cannot be read here.
func startCPU(ctx context.Context, pool *pgxpool.Pool, others ...int) (since func(events int) *CPUUse) {
	collectGarbage()
	none := func(int) *CPUUse { return nil }
	m, err := newCPUMeter(ctx, pool)
	if err != nil {
		return none
	}
	m.others = others
	start, err := m.read()
	if err != nil {
		return none
	}
	return func(events int) *CPUUse {
		use, _ := m.since(start, events)
		return use
	}
}

// cpuReading is a meter's reading: seconds of CPU so far.
type cpuReading struct {
	at                time.Time
	postgres, process float64
	// others is the CPU of the meter's other processes, threads included.
	others float64
	// allocs and allocBytes are this process's heap allocations so far.
	allocs, allocBytes uint64
	// wal is the server's write-ahead log position, in bytes.
	wal int64
}

// read sums the server's CPU so far: its postmaster's own and that of the children it
// has reaped, and that of its live children. A backend that exits between two readings
// moves from the second sum to the first, so nothing is counted twice. It also reads the
// server's write-ahead log position and this process's CPU and heap allocations.
func (m *cpuMeter) read() (cpuReading, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wal int64
	if err := m.pool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&wal); err != nil {
		return cpuReading{}, err
	}
	pm, err := readStat(m.postmaster)
	if err != nil {
		return cpuReading{}, err
	}
	ticks := pm.utime + pm.stime + pm.cutime + pm.cstime
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return cpuReading{}, err
	}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == m.postmaster {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != m.postmaster {
			continue // gone meanwhile, or not the server's
		}
		ticks += st.utime + st.stime
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuReading{}, err
	}
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var others int64
	for _, pid := range m.others {
		st, err := readStat(pid)
		if err != nil {
			return cpuReading{}, err
		}
		others += st.utime + st.stime
	}
	heap := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(heap)
	return cpuReading{at: time.Now(), postgres: float64(ticks) * m.tick, process: self.Seconds(), others: float64(others) * m.tick,
		allocs: heap[0].Value.Uint64(), allocBytes: heap[1].Value.Uint64(), wal: wal}, nil
}

// since is the CPU per event spent from start to now, for events events.
func (m *cpuMeter) since(start cpuReading, events int) (*CPUUse, error) {
	end, err := m.read()
	if err != nil || events == 0 {
		return nil, err
	}
	per := 1e6 / float64(events)
	return &CPUUse{PostgresUS: (end.postgres - start.postgres) * per, ProcessUS: (end.process - start.process) * per,
		SubprocessUS:  (end.others - start.others) * per,
		ProcessAllocs: float64(end.allocs-start.allocs) / float64(events), ProcessAllocBytes: float64(end.allocBytes-start.allocBytes) / float64(events),
		WALBytes: float64(end.wal-start.wal) / float64(events)}, nil
}

// procStat is what the bench reads of /proc/<pid>/stat.
type procStat struct {
	comm                         string
	ppid                         int
	utime, stime, cutime, cstime int64
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name is in parentheses and may hold spaces; the fields follow the
	// last closing one.
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[closing+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state): ppid is field 4, utime…cstime fields 14–17.
	st := procStat{comm: s[open+1 : closing]}
	var errs [5]error
	st.ppid, errs[0] = strconv.Atoi(f[1])
	st.utime, errs[1] = strconv.ParseInt(f[11], 10, 64)
	st.stime, errs[2] = strconv.ParseInt(f[12], 10, 64)
	st.cutime, errs[3] = strconv.ParseInt(f[13], 10, 64)
	st.cstime, errs[4] = strconv.ParseInt(f[14], 10, 64)
	for _, err := range errs {
		if err != nil {
			return procStat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	return st, nil
}

// collectGarbage collects, before a timed window opens, the garbage that what came before
// it left in this process (parking the run's waits, the previous part), as Go's testing
// package does before every benchmark: otherwise a collection of it may fall inside the
// window and be charged to whatever is measured there. The replicas measured, the peer
// and the floors all run in this process.
func collectGarbage() { runtime.GC() }
