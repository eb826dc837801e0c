package callbacks

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Defaults of the callback rate limits (Config).
const (
	RatePerSourceDefault     = 100
	BurstPerSourceDefault    = 200
	RatePerExecutionDefault  = 20
	BurstPerExecutionDefault = 40
	// RateLimitKeysDefault bounds the sources (and, apart, the executions) whose buckets
	// are kept; see keyedLimiter.
	RateLimitKeysDefault = 100_000
)

// LimitScope says which limit refused a callback: the scope member of the 429 problem.
type LimitScope string

const (
	// LimitSource: too many callbacks from one address.
	LimitSource LimitScope = "source"
	// LimitExecution: too many callbacks for one execution, from wherever.
	LimitExecution LimitScope = "execution"
)

// RejectRateLimited is the reason a refused callback is counted under, in
// rendezvous_events_not_applied_total.
const RejectRateLimited = "rate_limited"

// keyedLimiter is a token bucket per key (a source address, an execution id). It keeps
// at most max buckets: when full, the buckets that have refilled (the same as new ones)
// are dropped, and if that frees too little, all are, so a flood of distinct keys costs
// memory in proportion to max and nothing more.
type keyedLimiter struct {
	limit rate.Limit
	burst int
	max   int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func newKeyedLimiter(perSecond, burst, max int) *keyedLimiter {
	if perSecond < 0 {
		return nil // turned off
	}
	return &keyedLimiter{limit: rate.Limit(perSecond), burst: burst, max: max, buckets: map[string]*rate.Limiter{}}
}

// take takes one token of key's bucket: 0 when it had one, else how long until it will.
func (l *keyedLimiter) take(key string) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Read under the lock: a bucket handed an earlier time than its last one counts the
	// difference again as refill.
	now := time.Now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.max {
			l.prune(now)
		}
		b = rate.NewLimiter(l.limit, l.burst)
		l.buckets[key] = b
	}
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return time.Hour // a burst of 0 never admits; the operator turned the scope shut
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // a refused callback does not spend a later one's token
		return d
	}
	return 0
}

func (l *keyedLimiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= l.max/2 {
		clear(l.buckets)
	}
}

// proxies are the trusted proxies whose X-Forwarded-For is believed.
type proxies []netip.Prefix

func parseProxies(entries []string) (proxies, error) {
	var out proxies
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if !strings.Contains(e, "/") {
			a, err := netip.ParseAddr(e)
			if err != nil {
				return nil, fmt.Errorf("callbacks.trusted_proxies: %q is neither a CIDR nor an address", e)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("callbacks.trusted_proxies: %q: %v", e, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (ps proxies) trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// source names where a callback came from: the peer's address, or, when the peer is a
// trusted proxy, the nearest address in X-Forwarded-For that is not one (the entries a
// client wrote itself sit to the left of those its proxies appended, and are not read).
func (ps proxies) source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || len(ps) == 0 || !ps.trusted(peer) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := strings.TrimSpace(hops[i])
		if hop == "" {
			continue
		}
		a, err := netip.ParseAddr(hop)
		if err != nil {
			return hop // not an address: the client's own words, keyed as they are
		}
		if !ps.trusted(a) {
			return a.Unmap().String()
		}
	}
	return host
}

// limited answers a callback over a limit: 429 with Retry-After (whole seconds, at least
// one), as a problem naming the scope.
func limited(c echo.Context, scope LimitScope, wait time.Duration) *problem.Problem {
	secs := max(1, int(math.Ceil(wait.Seconds())))
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
	what := "from this address"
	if scope == LimitExecution {
		what = "for this execution"
	}
	return problem.New(http.StatusTooManyRequests, fmt.Sprintf("too many callbacks %s; retry after %d s", what, secs)).
		WithType("rate-limited").With("scope", scope).With("retry_after", secs)
}
