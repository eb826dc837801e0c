package chaos

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlowestShutdownStage: the report names the stage, and the loop within it, that
// held a replica's last shutdown, from the lines serve logs, not an earlier shutdown's
// of the same log; of a shutdown the replica did not finish, the last stage it did.
func TestSlowestShutdownStage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "replica-0.log")
	write := func(lines string) {
		require.NoError(t, os.WriteFile(path, []byte(lines), 0o644))
	}
	first := `{"msg":"shutting down"}
{"msg":"shutdown stage done","stage":"http","duration":9000000000}
{"msg":"stopped","duration":9000000000}
`
	second := `{"msg":"rendezvous serving"}
not json at all
{"msg":"shutting down"}
{"msg":"shutdown stage done","stage":"http","duration":1000000}
{"msg":"shutdown stage done","stage":"intake","duration":65900000000,"loops":{"kafka consumer":65900000000}}
{"msg":"shutdown stage done","stage":"work","duration":200000000,"loops":{"run queue workers":150000000,"outbox sender":200000000}}
{"msg":"shutdown stage done","stage":"database pool","duration":3000000}
{"msg":"stopped","duration":66100000000}
`
	write(first + second)
	got, err := slowestShutdownStage(path)
	require.NoError(t, err)
	require.Equal(t, "slowest intake 65.9s, kafka consumer 65.9s", got)

	write(first + `{"msg":"shutting down"}
{"msg":"shutdown stage done","stage":"http","duration":1000000}
`)
	got, err = slowestShutdownStage(path)
	require.NoError(t, err)
	require.Equal(t, "unfinished after http", got, "killed before it stopped: the stage after http held it")

	write(first + `{"msg":"shutting down"}
`)
	got, err = slowestShutdownStage(path)
	require.NoError(t, err)
	require.Equal(t, "unfinished, no stage done", got)

	write(`{"msg":"rendezvous serving"}
`)
	got, err = slowestShutdownStage(path)
	require.NoError(t, err)
	require.Empty(t, got, "no shutdown in the log")
}
