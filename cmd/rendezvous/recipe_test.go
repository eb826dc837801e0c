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
// created. Every valid record is applied within seconds, and the poison record is in the
// dead-letter topic with its headers. The block is taken from README.md and changed
// only where it must be: free ports instead of 9092/8081/8082, the test's own schema as
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
		require.NoError(t, err, "the recipe failed:\n%s", output())
	case <-time.After(3 * time.Minute):
		t.Fatalf("the recipe did not finish in 3 minutes:\n%s", output())
	}

	// Every one of the 20 executions completes, on either replica, within seconds: read
	// in the database (the API wants the token the recipe made up).
	pool, err := db.Connect(t.Context(), schema.URL, 2)
	require.NoError(t, err)
	defer pool.Close()
	var statuses map[string]int
	require.Eventually(t, func() bool {
		rows, err := pool.Query(t.Context(), `SELECT status, count(*) FROM executions WHERE workflow_name = 'shipment-kafka' GROUP BY 1`)
		if err != nil {
			return false
		}
		defer rows.Close()
		statuses = map[string]int{}
		for rows.Next() {
			var st string
			var n int
			if rows.Scan(&st, &n) == nil {
				statuses[st] = n
			}
		}
		return statuses["completed"] == 20
	}, 30*time.Second, 100*time.Millisecond, "executions by status: %v\n%s", statuses, output())

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
