package testkit

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Sample is one line of the Prometheus text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples is one scrape of /metrics.
type Samples []Sample

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// Scrape reads every sample of a running replica's /metrics; addr is its host:port or
// its base URL.
func Scrape(t testing.TB, addr string) Samples {
	t.Helper()
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + addr
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s: %s", base, resp.Status, raw)
	}
	ss, err := ParseSamples(string(raw))
	if err != nil {
		t.Fatalf("scrape %s: %v", base, err)
	}
	return ss
}

// ParseSamples reads the Prometheus text format; comments and blank lines are skipped.
func ParseSamples(text string) (Samples, error) {
	var out Samples
	for _, l := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", l, err)
		}
		s := Sample{Name: m[1], Labels: map[string]string{}, Value: v}
		for _, lm := range labelPair.FindAllStringSubmatch(m[2], -1) {
			s.Labels[lm[1]] = lm[2]
		}
		out = append(out, s)
	}
	return out, nil
}

// HasLabels reports whether the sample has every label of want with its value.
func (s Sample) HasLabels(want map[string]string) bool {
	for k, v := range want {
		if got, ok := s.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Get is the value of the one series of name whose labels include want; ok is false
// when there is none. Several matching series are an error: the selector is ambiguous.
func (ss Samples) Get(name string, want map[string]string) (v float64, ok bool, err error) {
	for _, s := range ss {
		if s.Name != name || !s.HasLabels(want) {
			continue
		}
		if ok {
			return 0, false, fmt.Errorf("%s%v matches several series", name, want)
		}
		v, ok = s.Value, true
	}
	return v, ok, nil
}

// First is the value of the first series of name whose labels include want; ok is false
// when there is none.
func (ss Samples) First(name string, want map[string]string) (v float64, ok bool) {
	for _, s := range ss {
		if s.Name == name && s.HasLabels(want) {
			return s.Value, true
		}
	}
	return 0, false
}

// Sum adds the series of name whose labels include want (every series for nil).
func (ss Samples) Sum(name string, want map[string]string) float64 {
	var sum float64
	for _, s := range ss {
		if s.Name == name && s.HasLabels(want) {
			sum += s.Value
		}
	}
	return sum
}

// Series lists the label sets and values of name, for failure messages.
func (ss Samples) Series(name string) []string {
	var out []string
	for _, s := range ss {
		if s.Name == name {
			out = append(out, fmt.Sprintf("%v=%g", s.Labels, s.Value))
		}
	}
	return out
}
