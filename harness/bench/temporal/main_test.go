package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestRunnerParksAndDelivers runs the runner as the bench does, on a database of its own
// on the test server (DATABASE_URL, else the local one): it answers ready, parks
// workflows that Temporal records as waiting after their first workflow task, touches
// its idle connections, signals each workflow once, and every workflow completes with
// the signal's value, as Temporal's own tables and its visibility table say.
func TestRunnerParksAndDelivers(t *testing.T) {
	server := os.Getenv("DATABASE_URL")
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, server)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rdv_temporal_test_" + hex.EncodeToString(b[:])
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), server)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(server)
	require.NoError(t, err)
	u.Path, u.RawQuery = "/"+name, ""

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- run(u.String(), 4, 2, 4, 4, inR, outW); _ = outW.Close() }()
	answers := bufio.NewScanner(outR)
	answers.Buffer(make([]byte, 1<<20), 1<<20)
	ask := func(cmd string, v any) {
		t.Helper()
		if cmd != "" {
			_, err := io.WriteString(inW, cmd+"\n")
			require.NoError(t, err)
		}
		require.True(t, answers.Scan(), "the runner answers")
		require.NotContains(t, answers.Text(), `"error"`)
		require.NoError(t, json.Unmarshal(answers.Bytes(), v))
	}
	var ready struct{ Ready bool }
	ask("", &ready)
	require.True(t, ready.Ready)

	const workflows = 6
	var parkedIDs struct{ IDs []string }
	ask(`{"op":"park","workflows":6,"senders":3}`, &parkedIDs)
	require.Len(t, parkedIDs.IDs, workflows)

	db, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer db.Close(context.Background())
	// waitFor polls Temporal's tables until query counts every workflow: the runner
	// answers once its calls return, and the history service writes on its own time.
	waitFor := func(what, query string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			var n int
			require.NoError(t, db.QueryRow(ctx, query, parkedIDs.IDs).Scan(&n))
			if n == workflows {
				return
			}
			require.True(t, time.Now().Before(deadline), "%s: %d of %d", what, n, workflows)
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("parked", `SELECT count(*) FROM executions WHERE workflow_id = ANY($1::text[]) AND next_event_id = 5`)

	var touched struct{ Touched int }
	ask(`{"op":"touch"}`, &touched)
	require.Positive(t, touched.Touched, "the server's pools hold idle connections")

	var delivered struct{ Sent, Returned []int64 }
	ask(`{"op":"deliver","senders":3}`, &delivered)
	require.Len(t, delivered.Sent, workflows)
	for i := range delivered.Sent {
		require.LessOrEqual(t, delivered.Sent[i], delivered.Returned[i])
	}
	// Completed (status 2) in the workflow's own row and in visibility, after the signal:
	// the signal, a workflow task scheduled, started and completed, the completion.
	waitFor("completed", `SELECT count(*) FROM current_executions WHERE workflow_id = ANY($1::text[]) AND status = 2`)
	waitFor("visible", `SELECT count(*) FROM executions_visibility WHERE workflow_id = ANY($1::text[]) AND status = 2 AND close_time IS NOT NULL`)
	waitFor("histories", `SELECT count(*) FROM executions WHERE workflow_id = ANY($1::text[]) AND next_event_id = 10`)

	_, err = io.WriteString(inW, `{"op":"nonsense"}`+"\n")
	require.NoError(t, err)
	require.True(t, answers.Scan())
	require.JSONEq(t, `{"error":"unknown op \"nonsense\""}`, answers.Text())

	require.NoError(t, inW.Close())
	select {
	case err := <-done:
		require.NoError(t, err, "the runner stops when its input ends")
	case <-time.After(time.Minute):
		t.Fatal("the runner did not stop")
	}
}
