package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/server"
)

// probe is one answer of /healthz or /readyz.
type probe struct {
	status int
	body   map[string]string
}

// getProbe asks a probe endpoint; it returns an error rather than failing the test, so
// that it can be polled from require.Eventually.
func getProbe(client *http.Client, url string) (probe, error) {
	resp, err := client.Get(url)
	if err != nil {
		return probe{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return probe{}, err
	}
	p := probe{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &p.body); err != nil {
		return probe{}, err
	}
	return p, nil
}

// TestReadyzFollowsDatabase: /readyz answers 503 while PostgreSQL is unreachable (every
// connection cut, new ones refused) and 200 again once it is back, without a restart;
// /healthz answers 200 throughout, so an orchestrator takes the pod out of service
// rather than restarting it.
func TestReadyzFollowsDatabase(t *testing.T) {
	t.Parallel()
	schema, proxied, proxy := dbtest.ProxiedSchema(t)
	require.Contains(t, proxied, "search_path="+schema.Name, "only host and port are rewritten")
	s := runService(t, server.Config{DatabaseURL: proxied, InstanceID: "readyz", DBMaxConns: 4})
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	readyz, healthz := "http://"+s.Addr()+"/readyz", "http://"+s.Addr()+"/healthz"
	ready := map[string]string{"status": "ready", "database": "ok", "migrations": "ok"}

	healthy := func() {
		t.Helper()
		p, err := getProbe(client, healthz)
		require.NoError(t, err)
		require.Equal(t, probe{http.StatusOK, map[string]string{"status": "ok"}}, p)
	}
	// await polls /readyz until cond holds, checking /healthz at every round.
	await := func(what string, cond func(probe) bool) probe {
		t.Helper()
		var last probe
		var lastErr error
		deadline := time.Now().Add(15 * time.Second)
		for {
			healthy()
			last, lastErr = getProbe(client, readyz)
			if lastErr == nil && cond(last) {
				return last
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz never %s: last %+v (err %v)", what, last, lastErr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	isReady := func(p probe) bool { return p.status == http.StatusOK }

	p := await("ready at start", isReady)
	require.Equal(t, ready, p.body)

	proxy.Cut()
	p = await("unready while the database is cut", func(p probe) bool { return p.status == http.StatusServiceUnavailable })
	require.Equal(t, "unready", p.body["status"])
	require.NotEmpty(t, p.body["database"])
	require.NotEqual(t, "ok", p.body["database"], "the body names the failing database")
	require.NotEqual(t, "ok", p.body["migrations"], "migrations cannot be known without the database")
	t.Logf("unready: %v", p.body)
	// It stays unready for as long as the database is away.
	for range 3 {
		healthy()
		p, err := getProbe(client, readyz)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, p.status, p.body)
	}

	proxy.Restore()
	p = await("ready again after the database came back", isReady)
	require.Equal(t, ready, p.body)
	healthy()
}

// TestReadyzMigrationsPending: a replica started without migrating on a schema that
// lacks this build's newest migration is alive but not ready, and says which versions
// differ; once the migration is recorded, it becomes ready.
func TestReadyzMigrationsPending(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, schema.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// goose's version table (default name) lives in the schema: forget the newest
	// migration, keeping its row to put back.
	var id, version int64
	var applied bool
	var tstamp time.Time
	require.NoError(t, conn.QueryRow(ctx,
		`DELETE FROM goose_db_version WHERE version_id = (SELECT max(version_id) FROM goose_db_version)
		 RETURNING id, version_id, is_applied, tstamp`).Scan(&id, &version, &applied, &tstamp))
	require.Greater(t, version, int64(1))
	// The version the database is left at: the newest remaining migration, not
	// version-1, since migration numbers may leave gaps.
	var previous int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&previous))

	s := runService(t, server.Config{DatabaseURL: schema.URL, InstanceID: "readyz-migrations", DBMaxConns: 4, AutoMigrate: false})
	client := &http.Client{Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	p, err := getProbe(client, "http://"+s.Addr()+"/healthz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.status)
	p, err = getProbe(client, "http://"+s.Addr()+"/readyz")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, p.status, p.body)
	require.Equal(t, "unready", p.body["status"])
	require.Equal(t, "ok", p.body["database"])
	require.True(t, strings.HasPrefix(p.body["migrations"], "pending"), p.body["migrations"])
	require.Contains(t, p.body["migrations"], "needs "+strconv.FormatInt(version, 10), p.body["migrations"])
	require.Contains(t, p.body["migrations"], "at version "+strconv.FormatInt(previous, 10), p.body["migrations"])
	t.Logf("unready: %v", p.body)

	// `rendezvous migrate` having run (here: its record put back), the same replica is
	// ready: a pending result is not cached.
	_, err = conn.Exec(ctx, `INSERT INTO goose_db_version (id, version_id, is_applied, tstamp) VALUES ($1, $2, $3, $4)`,
		id, version, applied, tstamp)
	require.NoError(t, err)
	p, err = getProbe(client, "http://"+s.Addr()+"/readyz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Equal(t, map[string]string{"status": "ready", "database": "ok", "migrations": "ok"}, p.body)
}
