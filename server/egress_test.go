package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
)

// listener is a real TCP listener on loopback that counts the connections it accepts:
// the target of an attack, which must see none.
type listener struct {
	ln       net.Listener
	accepted atomic.Int64
}

func newListener(t *testing.T) *listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &listener{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return l
}

func (l *listener) port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// TestEgressRefusesSSRF makes the attempts an attacker who can start executions (or
// write a definition) would make to turn a replica's outbound requests on its own
// network: an http node's URL from the execution's input pointed at a real loopback
// listener, at the replica's admin listener (to store a definition through it), at
// cloud metadata, at forms of loopback that dodge a string check, at a name a hostile
// DNS answers with loopback, and a redirect from the one allowed service to loopback.
// Each is refused: the node fails with the reason, the reason is counted, and the
// target receives nothing.
func TestEgressRefusesSSRF(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	fake := testkit.NewFakeService(t)
	target := newListener(t)
	loop := fmt.Sprintf("http://127.0.0.1:%d", target.port())
	fake.On("/redirect", testkit.Always(testkit.Reply{Status: http.StatusFound, Header: map[string]string{"Location": loop + "/stolen"}}))
	dns := testkit.NewResolver(map[string]netip.Addr{
		"rebind.partner.example": netip.MustParseAddr("127.0.0.1"),
		"v6.partner.example":     netip.MustParseAddr("::1"),
	})
	cfg := replica.Config(t, schema.URL, "egress")
	cfg.AdminAddr = "127.0.0.1:0"
	// Only the fake service, by its address and port: loopback otherwise stays refused.
	cfg.Executor.Outbound.Allow = []string{strings.TrimPrefix(fake.URL, "http://")}
	cfg.Executor.Outbound.Resolver = dns.Resolver
	cfg.Executor.NodeMaxAttempts = 3
	r := replica.Start(t, cfg)
	admin := "http://" + r.AdminAddr()

	def := func(name string, data map[string]any) {
		data["url"] = "@{_trigger.url}"
		status, body := testkit.DoJSON(t, http.MethodPut, admin+"/api/v1/workflows/"+name, map[string]any{
			"name": name, "nodes": []any{map[string]any{"id": "call", "type": "http", "data": data}},
		}, nil)
		require.Equal(t, http.StatusCreated, status, body)
	}
	def("get", map[string]any{})
	def("follow", map[string]any{"followRedirects": true})
	def("put", map[string]any{"method": "PUT", "headers": map[string]any{"Content-Type": "application/json"},
		"body": map[string]any{"name": "pwned", "nodes": []any{map[string]any{"id": "w", "type": "wait", "data": map[string]any{"duration": "1h"}}}}})

	attacks := []struct {
		name, workflow, url string
		reason              string // the refusal's reason; "" for an answer that is not followed
		errPart             string
	}{
		{"loopback listener", "get", loop + "/", "loopback", "127.0.0.1:" + fmt.Sprint(target.port()) + " is loopback"},
		{"admin listener", "put", admin + "/api/v1/workflows/pwned", "self", "this replica's own listener"},
		{"cloud metadata", "get", "http://169.254.169.254/latest/meta-data/iam/security-credentials/", "metadata", "never allowed"},
		{"metadata as mapped IPv6", "get", "http://[::ffff:169.254.169.254]/latest/meta-data/", "metadata", "never allowed"},
		{"loopback as mapped IPv6", "get", fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/", target.port()), "loopback", "is loopback"},
		{"unspecified address", "get", fmt.Sprintf("http://0.0.0.0:%d/", target.port()), "unspecified", "unspecified"},
		{"name resolving to loopback", "get", fmt.Sprintf("http://rebind.partner.example:%d/", target.port()), "loopback",
			fmt.Sprintf("rebind.partner.example (127.0.0.1:%d) is loopback", target.port())},
		{"name resolving to ::1", "get", fmt.Sprintf("http://v6.partner.example:%d/", target.port()), "loopback", "is loopback"},
		{"redirect followed to loopback", "follow", fake.URL + "/redirect", "loopback", "is loopback"},
		{"redirect not followed", "get", fake.URL + "/redirect", "", "status 302"},
	}
	ids := map[string]string{}
	for _, a := range attacks {
		status, body := testkit.DoJSON(t, http.MethodPost, admin+"/api/v1/workflows/"+a.workflow+"/executions",
			map[string]any{"input": map[string]any{"url": a.url}}, nil)
		require.Equal(t, http.StatusCreated, status, body)
		ids[a.name] = body["id"].(string)
	}
	for _, a := range attacks {
		var node map[string]any
		require.Eventually(t, func() bool {
			_, body := testkit.DoJSON(t, http.MethodGet, admin+"/api/v1/executions/"+ids[a.name], nil, nil)
			if body["status"] != "failed" {
				return false
			}
			node = body["nodes"].([]any)[0].(map[string]any)
			return true
		}, 20*time.Second, 20*time.Millisecond, a.name)
		msg, _ := node["error"].(string)
		require.Contains(t, msg, a.errPart, a.name)
		if a.reason != "" {
			require.Contains(t, msg, "outbound call refused", a.name)
			require.EqualValues(t, 1, node["attempts"], "%s: a refusal is not retried", a.name)
		}
		t.Logf("%-30s %-10s %s", a.name, a.reason, msg)
	}

	// Counted by reason, once per refused call.
	ss := testkit.Scrape(t, admin)
	want := map[string]float64{}
	for _, a := range attacks {
		if a.reason != "" {
			want[a.reason]++
		}
	}
	for reason, n := range want {
		v, _ := ss.First("rendezvous_outbound_refused_total", map[string]string{"reason": reason})
		require.Equal(t, n, v, reason)
	}
	// Nothing reached a target: no connection to the loopback listener, no definition
	// stored through the admin listener, and the redirect's target was never asked.
	require.Zero(t, target.accepted.Load())
	require.Positive(t, dns.Lookups.Load(), "the names were resolved by the hostile DNS")
	conn, err := pgx.Connect(context.Background(), schema.URL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var stored int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM workflows WHERE name = 'pwned'`).Scan(&stored))
	require.Zero(t, stored)
	require.Len(t, fake.Requests("/redirect"), 2, "the allowed service was asked, once per redirect attempt")
}
