package gctune

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// restore puts the process's collector settings back as they were before the test.
func restore(t *testing.T) {
	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func limitFile(t *testing.T, content string) string {
	p := filepath.Join(t.TempDir(), "memory.max")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestApply(t *testing.T) {
	t.Run("defaults under a container limit", func(t *testing.T) {
		restore(t)
		debug.SetGCPercent(100)
		s := apply(env(nil), []string{filepath.Join(t.TempDir(), "absent"), limitFile(t, "2000000000\n")})
		require.Equal(t, Settings{Percent: Percent, Limit: 1800000000, ContainerLimit: 2000000000}, s)
		require.Equal(t, Percent, debug.SetGCPercent(Percent), "in force")
		require.Equal(t, int64(1800000000), debug.SetMemoryLimit(-1), "in force")
		require.Equal(t, "1800000000 bytes (90% of the container's 2000000000)", s.MemoryLimit())
		require.Equal(t, "400 (rendezvous' default; GOGC sets another)", s.GOGC())
	})
	t.Run("no container limit", func(t *testing.T) {
		restore(t)
		debug.SetMemoryLimit(math.MaxInt64)
		for _, content := range []string{"max\n", "9223372036854771712\n"} { // v2, and v1 unlimited
			s := apply(env(nil), []string{limitFile(t, content)})
			require.Equal(t, Settings{Percent: Percent, Limit: math.MaxInt64}, s, content)
		}
		s := apply(env(nil), []string{limitFile(t, "not a number")})
		require.Equal(t, Settings{Percent: Percent, Limit: math.MaxInt64}, s)
	})
	t.Run("the environment wins", func(t *testing.T) {
		restore(t)
		debug.SetGCPercent(150) // as the runtime would have from GOGC=150
		debug.SetMemoryLimit(1 << 30)
		s := apply(env(map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}), []string{limitFile(t, "2147483648")})
		require.Equal(t, Settings{Percent: 150, PercentFromEnv: true, Limit: 1 << 30, LimitFromEnv: true}, s)
		require.Equal(t, 150, debug.SetGCPercent(150), "left as it was")
		require.Equal(t, int64(1<<30), debug.SetMemoryLimit(-1), "left as it was")

		debug.SetGCPercent(-1) // GOGC=off
		s = apply(env(map[string]string{"GOGC": "off"}), nil)
		require.Equal(t, -1, s.Percent)
		require.Equal(t, "off (GOGC)", s.GOGC())
	})
}
