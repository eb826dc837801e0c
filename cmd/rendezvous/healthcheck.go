package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/rendezvous-run/rendezvous/server"
)

// The runtime image is distroless (no shell, curl or wget), so Docker's HEALTHCHECK and
// the compose healthchecks run the binary itself: `rendezvous healthcheck`. Kubernetes
// does not need it; its kubelet probes the routes directly.

const (
	healthcheckPath           = "/healthz"
	healthcheckTimeoutDefault = 2 * time.Second
)

// healthcheckOptions binds the healthcheck flags. --http-addr reads the same variable as
// serve, so in a container whose replica listens on another port the default URL follows
// without being configured twice.
func healthcheckOptions(rawURL, httpAddr *string, timeout *time.Duration) *options {
	o := newOptions("healthcheck")
	o.summary = "Exits 0 when the replica's /healthz answers 200, else 1: the HEALTHCHECK of an image without a shell."
	o.examples = []string{"rendezvous healthcheck", "rendezvous healthcheck --url http://127.0.0.1:8081/healthz --timeout 1s"}
	o.String(rawURL, "url", "RENDEZVOUS_HEALTHCHECK_URL", "", "URL to GET (default: "+healthcheckPath+" on the loopback port of --http-addr)")
	o.String(httpAddr, "http-addr", "RENDEZVOUS_HTTP_ADDR", server.HTTPAddrDefault, "listen address of the replica to check (serve's --http-addr)")
	o.Duration(timeout, "timeout", "RENDEZVOUS_HEALTHCHECK_TIMEOUT", healthcheckTimeoutDefault, "give up after this long")
	return o
}

// healthcheck GETs the URL and succeeds on 200 only: exit 0 healthy, 1 unhealthy, as
// Docker expects.
func healthcheck(ctx context.Context, args []string, stdout io.Writer) error {
	var rawURL, httpAddr string
	var timeout time.Duration
	o := healthcheckOptions(&rawURL, &httpAddr, &timeout)
	o.help = stdout
	if err := o.parse(args); err != nil {
		return err
	}
	target, err := healthcheckURL(rawURL, httpAddr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	// The check is about this container's own process: never through a proxy from the
	// environment.
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", target, resp.Status)
	}
	fmt.Fprintf(stdout, "GET %s: %s\n", target, resp.Status)
	return nil
}

// healthcheckURL is rawURL when set, else /healthz on httpAddr, with an unspecified host
// (":8080", "0.0.0.0:8080", "[::]:8080") replaced by the loopback address.
func healthcheckURL(rawURL, httpAddr string) (string, error) {
	if rawURL != "" {
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("--url: want an http(s) URL, not %q", rawURL)
		}
		return rawURL, nil
	}
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return "", fmt.Errorf("--http-addr: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port), Path: healthcheckPath}).String(), nil
}
