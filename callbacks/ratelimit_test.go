package callbacks_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/callbacks"
	"github.com/rendezvous-run/rendezvous/harness/dbtest"
	"github.com/rendezvous-run/rendezvous/harness/testkit"
	"github.com/rendezvous-run/rendezvous/harness/testkit/replica"
)

// The limits of the flood tests: the honest source's 200 callbacks fit its burst, the
// flooding source's 10 000 do not.
const (
	floodRate, floodBurst = 50, 250
	honestCallbacks       = 200
	floodCallbacks        = 10_000
)

// clientFrom is an HTTP client whose connections leave from ip: 127.0.0.2 and 127.0.0.3
// are distinct sources to a server on 127.0.0.1.
func clientFrom(tb testing.TB, ip string, conns int) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// floodRig is a replica with the flood tests' limits and n waits parked on correlated
// calls to the fake service.
type floodRig struct {
	base string
	fake *testkit.FakeService
}

func newFloodRig(tb testing.TB) *floodRig {
	schema := dbtest.NewSchema(tb)
	fake := testkit.NewFakeService(tb)
	rc := replica.Config(tb, schema.URL, "flood")
	rc.DBMaxConns = 8
	rc.Callbacks = callbacks.Config{RatePerSource: floodRate, BurstPerSource: floodBurst}
	s := replica.Start(tb, rc)
	r := &floodRig{base: "http://" + s.Addr(), fake: fake}
	def := map[string]any{"name": "api", "nodes": []any{map[string]any{"id": "wait", "type": "wait_events",
		"data": map[string]any{"apiCall": map[string]any{"url": fake.URL + "/process"}}}}}
	resp := testkit.Do(tb, http.MethodPut, r.base+"/api/v1/workflows/api", def, nil)
	require.Equal(tb, http.StatusCreated, resp.Status, string(resp.Raw))
	return r
}

// waits starts n executions and returns their calls' ids, once every call arrived.
func (r *floodRig) waits(tb testing.TB, n int) [][2]string {
	before := r.fake.Count("/process")
	for range n {
		resp := testkit.Do(tb, http.MethodPost, r.base+"/api/v1/workflows/api/executions", map[string]any{"input": map[string]any{}}, nil)
		require.Equal(tb, http.StatusCreated, resp.Status, string(resp.Raw))
	}
	r.fake.AwaitNth(tb, 60*time.Second, "/process", before+n)
	var out [][2]string
	for _, c := range r.fake.Requests("/process")[before:] {
		out = append(out, [2]string{c.Field("execution_id"), c.Field("correlation_id")})
	}
	return out
}

// floodResult is what one run of honest callbacks, with or without a flood, met.
type floodResult struct {
	honest        []time.Duration
	honestStatus  map[int]int
	floodStatus   map[int]int
	floodTook     time.Duration // an upper bound
	badLimited    []string      // 429 answers without Retry-After or the problem's type
	honestOverlap bool          // the flood was still running when the last honest callback was answered
}

func (f floodResult) p99() time.Duration {
	s := slices.Clone(f.honest)
	slices.Sort(s)
	return s[(len(s)*99+99)/100-1]
}

// run posts a callback for each wait from honestIP, 8 at a time; with flood, 10 000
// callbacks for random ids from 127.0.0.2, 16 at a time, started first and running
// throughout.
func (r *floodRig) run(tb testing.TB, ids [][2]string, honestIP string, flood bool) floodResult {
	url := r.base + "/api/internal/callbacks/partner"
	res := floodResult{honestStatus: map[int]int{}, floodStatus: map[int]int{}}
	var mu sync.Mutex
	var floodDone atomic.Bool
	var floodWG sync.WaitGroup
	started := make(chan struct{})
	var start sync.Once
	var began time.Time
	if flood {
		attacker := clientFrom(tb, "127.0.0.2", 16)
		var next atomic.Int64
		began = time.Now()
		for range 16 {
			floodWG.Add(1)
			go func() {
				defer floodWG.Done()
				for next.Add(1) <= floodCallbacks {
					body := fmt.Sprintf(`{"execution_id":%q,"correlation_id":%q}`, uuid.NewString(), uuid.NewString())
					resp, err := attacker.Post(url, "application/json", bytes.NewBufferString(body))
					if err != nil {
						tb.Errorf("flood: %v", err)
						return
					}
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					mu.Lock()
					res.floodStatus[resp.StatusCode]++
					if resp.StatusCode == http.StatusTooManyRequests {
						var p map[string]any
						_ = json.Unmarshal(raw, &p)
						secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
						if secs < 1 || p["scope"] != "source" || resp.Header.Get("Content-Type") != "application/problem+json" {
							res.badLimited = append(res.badLimited, fmt.Sprintf("%s %s", resp.Header, raw))
						}
					}
					if res.floodStatus[http.StatusTooManyRequests] >= 100 {
						start.Do(func() { close(started) }) // the limit is biting: the honest callbacks start now
					}
					mu.Unlock()
				}
			}()
		}
		go func() { floodWG.Wait(); floodDone.Store(true); start.Do(func() { close(started) }) }()
		<-started
	}
	honest := clientFrom(tb, honestIP, 8)
	work := make(chan [2]string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				body := fmt.Sprintf(`{"execution_id":%q,"correlation_id":%q,"ok":true}`, id[0], id[1])
				sent := time.Now()
				resp, err := honest.Post(url, "application/json", bytes.NewBufferString(body))
				took := time.Since(sent)
				if err != nil {
					tb.Errorf("honest: %v", err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				res.honest = append(res.honest, took)
				res.honestStatus[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	res.honestOverlap = !flood || !floodDone.Load()
	floodWG.Wait()
	if flood {
		res.floodTook = time.Since(began) // at least the flood's time: a bound on what may pass
	}
	return res
}

// TestFloodDoesNotStarveHonestCallbacks: 10 000 callbacks from one address while 200
// honest ones arrive from another. Every honest callback is accepted; the flood meets 429
// with Retry-After as a problem, at most as many passing as the configured limit lets
// through in the time it took; each 429 is counted.
func TestFloodDoesNotStarveHonestCallbacks(t *testing.T) {
	t.Parallel()
	r := newFloodRig(t)
	ids := r.waits(t, honestCallbacks)
	res := r.run(t, ids, "127.0.0.3", true)
	require.Equal(t, map[int]int{http.StatusAccepted: honestCallbacks}, res.honestStatus)
	require.True(t, res.honestOverlap, "the flood ended before the honest callbacks did")
	require.Empty(t, res.badLimited)
	limited := res.floodStatus[http.StatusTooManyRequests]
	passed := floodCallbacks - limited
	require.Equal(t, passed, res.floodStatus[http.StatusNotFound], "what passed the limit met no wait: %v", res.floodStatus)
	allowed := floodBurst + int(float64(floodRate)*res.floodTook.Seconds()) + 1
	require.LessOrEqual(t, passed, allowed, "more passed than the limit lets through in %s", res.floodTook)
	n, _ := testkit.Scrape(t, r.base).First("rendezvous_events_not_applied_total", map[string]string{"source": "callback", "reason": "rate_limited"})
	require.EqualValues(t, limited, n)
	t.Logf("flood: %v in %s; honest p99 %s", res.floodStatus, res.floodTook, res.p99())
}

// TestRateLimitPerExecution: callbacks for one execution beyond its burst meet 429 with
// scope execution, whatever their source; another execution is unaffected.
func TestRateLimitPerExecution(t *testing.T) {
	t.Parallel()
	schema := dbtest.NewSchema(t)
	rc := replica.Config(t, schema.URL, "per-exec")
	rc.Callbacks = callbacks.Config{RatePerExecution: 1, BurstPerExecution: 3}
	s := replica.Start(t, rc)
	url := "http://" + s.Addr() + "/api/internal/callbacks/partner"
	one, other := uuid.NewString(), uuid.NewString()
	post := func(client *http.Client, exec string) *http.Response {
		body := fmt.Sprintf(`{"execution_id":%q,"correlation_id":%q}`, exec, uuid.NewString())
		resp, err := client.Post(url, "application/json", bytes.NewBufferString(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	a, b := clientFrom(t, "127.0.0.4", 1), clientFrom(t, "127.0.0.5", 1)
	for i, c := range []*http.Client{a, b, a} {
		require.Equal(t, http.StatusNotFound, post(c, one).StatusCode, "callback %d", i)
	}
	resp := post(b, one)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, http.StatusNotFound, post(a, other).StatusCode)
}

// BenchmarkHonestCallbacksUnderFlood measures the p99 of 200 honest callbacks from one
// address alone and while another floods 10 000: the figures the limits are for.
//
//	go test ./callbacks -run XXX -bench HonestCallbacksUnderFlood -benchtime 1x
func BenchmarkHonestCallbacksUnderFlood(b *testing.B) {
	r := newFloodRig(b)
	for m, mode := range []struct {
		name  string
		flood bool
	}{{"alone", false}, {"flood", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var res floodResult
			i := 0
			for b.Loop() {
				ids := r.waits(b, honestCallbacks)
				// A source of its own each time: its burst is whole.
				i++
				res = r.run(b, ids, fmt.Sprintf("127.0.%d.%d", m+1, i+2), mode.flood)
			}
			if res.honestStatus[http.StatusAccepted] != honestCallbacks {
				b.Fatalf("honest callbacks: %v", res.honestStatus)
			}
			b.ReportMetric(float64(res.p99().Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(res.floodStatus[http.StatusTooManyRequests]), "flood-429s")
		})
	}
}
