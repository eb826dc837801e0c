package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReplaceFiguresKeepsTheTextAround(t *testing.T) {
	met, missed := true, false
	r := results{Stamp: runStamp{Date: time.Date(2026, 12, 7, 15, 4, 0, 0, time.UTC), Commit: "abc123"}, Figures: []figure{
		{Part: "b", Name: "Kafka records/s, of its floor", Value: 0.812, Unit: "×", Target: "≥ 0.8", Met: &met},
		{Part: "b", Name: "an explanation line", Value: 3, Unit: "rows"},
		{Part: "p", Name: "delivery ÷ DBOS | 8 senders", Value: 2.25, Unit: "×", Target: "≥ 3", Met: &missed},
	}}
	r.Baseline.PerSecond = 10441.4
	doc := []byte("# Benchmarks\n\nbefore\n" + docsBegin + "\nthe old table\n" + docsEnd + "\nafter\n")
	out, err := replaceFigures(doc, r)
	require.NoError(t, err)
	s := string(out)
	require.True(t, strings.HasPrefix(s, "# Benchmarks\n\nbefore\n"+docsBegin+"\n"), s)
	require.True(t, strings.HasSuffix(s, docsEnd+"\nafter\n"), s)
	require.NotContains(t, s, "the old table")
	require.NotContains(t, s, "an explanation line", "only figures with a target are listed")
	require.Contains(t, s, "Run of 2026-12-07 15:04 UTC on commit `abc123`; baseline (a) 10441 UPDATEs/s.")
	require.Contains(t, s, "| b | Kafka records/s, of its floor | 0.812 × | ≥ 0.8 | yes |")
	require.Contains(t, s, `| p | delivery ÷ DBOS \| 8 senders | 2.25 × | ≥ 3 | **no** |`)

	again, err := replaceFigures(out, r)
	require.NoError(t, err)
	require.Equal(t, s, string(again), "rewriting is idempotent")

	_, err = replaceFigures([]byte("no markers"), r)
	require.ErrorContains(t, err, "figures:begin")
}

// The docs page has the block the bench rewrites.
func TestBenchmarksPageHasTheFiguresBlock(t *testing.T) {
	raw, err := os.ReadFile("../../docs/benchmarks.md")
	require.NoError(t, err)
	_, err = replaceFigures(raw, results{})
	require.NoError(t, err)
}
