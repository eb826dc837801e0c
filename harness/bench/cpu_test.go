package bench

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// TestCPUMeter: the meter finds the local server, and charges a query that keeps a
// backend busy to PostgreSQL, a busy loop here to this process and the rows a statement
// writes to the server's write-ahead log, per event. Given this process as one of its
// other processes too, it reads the same loop's CPU from /proc.
func TestCPUMeter(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := t.Context()
	m, err := newCPUMeter(ctx, pool)
	require.NoError(t, err, "the test server runs on this machine")
	m.others = []int{os.Getpid()}

	start, err := m.read()
	require.NoError(t, err)
	// A few hundred milliseconds of a backend's CPU.
	_, err = pool.Exec(ctx, `SELECT count(*) FROM generate_series(1, 5000000)`)
	require.NoError(t, err)
	for until := time.Now().Add(200 * time.Millisecond); time.Now().Before(until); {
	}
	// 10,000 rows of over 100 bytes each: more than a megabyte of log.
	_, err = pool.Exec(ctx, `CREATE TABLE wal_probe AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 10000) g`)
	require.NoError(t, err)
	use, err := m.since(start, 10)
	require.NoError(t, err)
	// Per event of 10: the query's CPU over 10 at least 10 ms each, the loop's 20 ms each
	// less what the race detector and a loaded machine take from it.
	require.Greater(t, use.PostgresUS, 10_000.0, "the query's CPU is the server's")
	require.Greater(t, use.ProcessUS, 5_000.0, "the loop's CPU is this process's")
	// /proc counts in ticks of 10 ms: 1 000 µs per event of 10, twice over, and the
	// moments between the two readings.
	require.InDelta(t, use.ProcessUS, use.SubprocessUS, 3_000, "the other process, this one, read from /proc")
	require.InDelta(t, use.PostgresUS+use.ProcessUS+use.SubprocessUS, use.TotalUS(), 1e-9)
	require.Greater(t, use.WALBytes, 100_000.0, "the table's rows are in the log")
}

// TestMedianCPU: every share of a run's CPU use, the log written included, is reported at
// its own median over the runs; a run without a reading leaves none.
func TestMedianCPU(t *testing.T) {
	t.Parallel()
	runs := []*CPUUse{
		{PostgresUS: 3, ProcessUS: 10, SubprocessUS: 40, ProcessAllocs: 7, ProcessAllocBytes: 700, WALBytes: 2000},
		{PostgresUS: 1, ProcessUS: 30, SubprocessUS: 60, ProcessAllocs: 9, ProcessAllocBytes: 500, WALBytes: 3000},
		{PostgresUS: 2, ProcessUS: 20, SubprocessUS: 50, ProcessAllocs: 8, ProcessAllocBytes: 600, WALBytes: 1000},
	}
	got := medianCPU(runs, func(c *CPUUse) *CPUUse { return c })
	require.Equal(t, &CPUUse{PostgresUS: 2, ProcessUS: 20, SubprocessUS: 50, ProcessAllocs: 8, ProcessAllocBytes: 600, WALBytes: 2000}, got)
	require.Nil(t, medianCPU(append(runs, nil), func(c *CPUUse) *CPUUse { return c }))
}
