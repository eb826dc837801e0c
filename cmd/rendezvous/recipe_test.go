package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/consumer"
	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

const (
	recipeBegin = "<!-- recipe:replicas:begin -->"
	recipeEnd   = "<!-- recipe:replicas:end -->"
)

// readmeRecipe is the shell block between the recipe markers of README.md.
func readmeRecipe(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	readme := string(raw)
	begin, end := strings.Index(readme, recipeBegin), strings.Index(readme, recipeEnd)
	require.True(t, begin >= 0 && end > begin, "README.md: %s … %s markers", recipeBegin, recipeEnd)
	block := readme[begin+len(recipeBegin) : end]
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	block = strings.TrimSuffix(block, "```")
	return block
}

// requireTool fails, naming the install command, when a command the test drives is
// missing: a client nobody here wrote is the point of the test, so it never skips.
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed: run `make deps` (or apt-get install %s)", name, name)
	}
}

// TestReplicasRecipe runs the README's multi-replica recipe as a user would, with a
// Kafka client that is not franz-go: the built binary as the broker (dev-kafka) and as
// two serve replicas in one group, kcat producing a poison record and then one record
// per wait behind it on the same partition, on a topic whose dead-letter topic nobody
// created. Every valid record is applied by the time the recipe's own wait ends, and the
// poison record is in the dead-letter topic with its headers. Like the walkthrough's
// blocks, the recipe retries nothing the README does not. The block is taken from
// README.md and changed only where it must be: free ports instead of 9092/8081/8082, the test's own schema as
// the database, and the binary built for the test.
func TestReplicasRecipe(t *testing.T) {
	t.Parallel()
	requireTool(t, "kcat")
	requireTool(t, "jq")
	requireTool(t, "curl")
	bin := buildBinary(t)
	schema := dbtest.NewSchema(t)
	broker := freePort(t)
	_, brokerPort, err := net.SplitHostPort(broker)
	require.NoError(t, err)
	a, b := freePort(t), freePort(t)

	script := readmeRecipe(t)
	for _, r := range [][2]string{
		{"make build\n", ""},
		{"bin/rendezvous", bin},
		{"--port 9092", "--port " + brokerPort},
		{"127.0.0.1:9092", broker},
		{"127.0.0.1:8081", a},
		{"127.0.0.1:8082", b},
		{"postgres://postgres@127.0.0.1:5432/test?sslmode=disable", schema.URL},
	} {
		require.Contains(t, script, r[0], "the README's recipe changed: update this test")
		script = strings.ReplaceAll(script, r[0], r[1])
	}

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = repoRoot
	// Output to a file, not a pipe: the replicas started in the background keep the
	// script's output open after it ends, and Wait would wait for them.
	out, err := os.Create(filepath.Join(t.TempDir(), "recipe.log"))
	require.NoError(t, err)
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	output := func() string { raw, _ := os.ReadFile(out.Name()); return string(raw) }
	// Its own process group: the replicas and the broker it starts in the background
	// are stopped with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		time.Sleep(500 * time.Millisecond)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Logf("the recipe:\n%s", output())
		require.NoError(t, err, "the recipe failed")
	case <-time.After(3 * time.Minute):
		t.Fatalf("the recipe did not finish in 3 minutes:\n%s", output())
	}

	// The recipe waited for its 20 executions itself: by its end they are completed, on
	// either replica. Read once, in the database (the API wants the token the recipe
	// made up).
	pool, err := db.Connect(t.Context(), schema.URL, 2)
	require.NoError(t, err)
	defer pool.Close()
	var completed, all int
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FROM executions WHERE workflow_name = 'shipment-kafka'`).Scan(&completed, &all))
	require.Equal(t, [2]int{20, 20}, [2]int{completed, all}, "completed and all executions:\n%s", output())
	require.Regexp(t, `(?m)^(\S+ +shipment-kafka v1 +completed .*\n){20}`, output(), "the recipe's last listing")

	// The poison record is in the dead-letter topic, with where it came from and why.
	dlq, err := exec.Command("kcat", "-C", "-b", broker, "-t", "shipments.events.dlq", "-o", "beginning", "-e",
		"-f", "%h\n%s\n").CombinedOutput()
	require.NoError(t, err, string(dlq))
	require.Contains(t, string(dlq), consumer.HeaderReason+"=value is not JSON")
	require.Contains(t, string(dlq), consumer.HeaderTopic+"=shipments.events")
	require.Contains(t, string(dlq), consumer.HeaderPartition+"=0")
	require.Contains(t, string(dlq), consumer.HeaderOffset+"=0")
	require.Contains(t, string(dlq), "\nnot json\n")
	require.Equal(t, 1, strings.Count(string(dlq), consumer.HeaderReason), "dead-lettered once: %s", dlq)
}
