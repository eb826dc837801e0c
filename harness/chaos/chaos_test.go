package chaos

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/testkit"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// TestMain fails the package when a test leaves a goroutine behind: the harness's
// clients, servers and timers must all be gone when Run returns.
func TestMain(m *testing.M) {
	// Three real replicas per run, and the kill tests beside them: the server is theirs.
	testkit.NeedsWholeServer()
	testkit.VerifyTestMain(m)
}

// EnvSeed replays a TestChaosShort run: RENDEZVOUS_CHAOS_SEED=<seed> go test -run
// TestChaosShort ./harness/chaos.
const EnvSeed = "RENDEZVOUS_CHAOS_SEED"

// TestChaosShort is the short chaos run of `make test`: a few hundred executions over
// three real replicas with one SIGKILL, one SIGTERM and one database cut (through the
// proxy, so other tests on the server are untouched), on a random seed that the log
// names. Every invariant must hold.
func TestChaosShort(t *testing.T) {
	t.Parallel()
	seed := RandomSeed()
	if s := os.Getenv(EnvSeed); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, EnvSeed)
	}
	cfg := Config{
		Seed: seed, Executions: 240, Replicas: 3, DatabaseURL: dbtest.ServerURL(t),
		Kills: 1, Terms: 1, PGRestart: PGRestartProxy,
		MaxDuration: 8 * time.Minute, Quiesce: 3 * time.Minute, Out: t.Output(),
	}
	t.Logf("seed %d; replay with %s=%d go test -run TestChaosShort ./harness/chaos", seed, EnvSeed, seed)
	began := time.Now()
	rep, err := Run(t.Context(), cfg)
	require.NoError(t, err, "seed %d", seed)
	var table bytes.Buffer
	rep.Print(&table)
	t.Log(table.String())
	t.Logf("seed %d: the run took %s", seed, time.Since(began).Round(time.Second))
	require.Empty(t, rep.Violations, "seed %d", seed)

	// The run did what it set out to do, so that no violation means something.
	plan := NewPlan(cfg)
	kinds := map[string]int{}
	for _, f := range rep.Faults {
		require.Empty(t, f.Err, "%s at %s", f.Kind, f.At)
		if f.Kind == FaultTerm {
			require.NotEmpty(t, f.Shutdown, "the stopped replica logged its shutdown's stages")
		}
		kinds[f.Kind]++
	}
	require.Equal(t, map[string]int{FaultKill: 1, FaultTerm: 1, FaultDatabase: 1}, kinds)
	for _, class := range []string{ClassCompleted, ClassContinued, ClassFailed} {
		require.Positive(t, rep.Outcomes.Actual[class], "no execution ended %s", class)
	}
	require.Positive(t, rep.Deliveries.Answers[202], "callbacks recorded")
	require.Positive(t, rep.Deliveries.Answers[200], "second sends answered as duplicates")
	require.Positive(t, rep.Deliveries.Answers[409], "late callbacks refused")
	require.Positive(t, rep.Deliveries.Records)
	require.Positive(t, rep.Deliveries.MatchRecorded, "records matched by payload recorded")
	require.Positive(t, rep.Deliveries.MatchEarly, "records matched by payload, produced before their wait, recorded")
	require.Positive(t, rep.Deliveries.SendAnswers["202 delivered"], "events sent by type delivered")
	require.Positive(t, rep.Deliveries.SendAnswers["200"], "second sends of one id answered as duplicates")
	require.Positive(t, rep.Deliveries.SentRecorded, "events sent by type as records of %s recorded", SentTopic)
	require.Greater(t, rep.Triggers.Records, rep.Triggers.Executions, "trigger keys produced twice")
	require.Equal(t, 20, rep.Triggers.Executions, "one execution per trigger key")
	// Operators redrove failed executions through the API during the faults: some took
	// effect (one of them two at once), some were refused, and every redrive row counted.
	rd := rep.Redrives
	require.Positive(t, rd.Redriven, "executions redriven")
	require.Positive(t, rd.Completed, "redriven executions completed by their held-back callback")
	require.Positive(t, rd.Concurrent, "executions redriven twice at once")
	require.Positive(t, rd.Refused, "redrives refused with 409")
	for _, row := range rep.Rows {
		if slices.Contains(redriveInvariants, row.Invariant) {
			require.Positive(t, row.Checked, row.Invariant)
		}
	}
	crossed := 0
	for _, e := range plan.Executions {
		if e.Cross != nil {
			crossed++
		}
	}
	require.Equal(t, crossed, rep.Deliveries.Crossed, "every planned crossed delivery was sent")
}
