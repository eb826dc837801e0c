package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/service"
)

// README's configuration reference is generated from the commands' own options, between
// these markers, so that it cannot drift from the code: the test fails when it is out of
// date, and rewrites it with UPDATE_README=1.
const (
	referenceBegin = "<!-- config-reference:begin -->"
	referenceEnd   = "<!-- config-reference:end -->"
	referenceCmd   = "UPDATE_README=1 go test ./cmd/rendezvous -run TestREADMEConfigReference"
)

func TestREADMEConfigReference(t *testing.T) {
	t.Parallel()
	want := configReference(t, releaseBinary(t))
	path := filepath.Join(repoRoot, "README.md")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(raw)
	begin, end := strings.Index(readme, referenceBegin), strings.Index(readme, referenceEnd)
	require.True(t, begin >= 0 && end > begin, "README.md: %s … %s markers", referenceBegin, referenceEnd)
	begin += len(referenceBegin)
	if os.Getenv("UPDATE_README") != "" {
		require.NoError(t, os.WriteFile(path, []byte(readme[:begin]+want+readme[end:]), 0o644))
		return
	}
	if got := readme[begin:end]; got != want {
		t.Fatalf("README.md: the configuration reference is out of date (%s); run\n  %s", firstDifference(want, got), referenceCmd)
	}
}

// firstDifference names the first line where got departs from want.
func firstDifference(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d of the reference: want %q, README has %q", i+1, wl, gl)
		}
	}
	return "identical"
}

// configReference renders every command's options as markdown: serve in full first, then
// the others in usage order; a command with every serve option (dev) lists only its own.
func configReference(t *testing.T, bin string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n<!-- Generated from the commands' options; edit the code, then run %s -->\n", referenceCmd)
	serve := commandHelp(t, bin, "serve")
	order := append([]string{"serve"}, slices.DeleteFunc(commandNames(), func(c string) bool { return c == "serve" })...)
	for _, c := range order {
		opts := commandHelp(t, bin, c)
		fmt.Fprintf(&b, "\n#### `rendezvous %s`\n\n", c)
		if len(opts) == 0 {
			b.WriteString("No flags.\n")
			continue
		}
		if c != "serve" && containsAll(opts, serve) {
			b.WriteString("Every flag of `rendezvous serve`, and:\n\n")
			opts = slices.DeleteFunc(opts, func(o helpOption) bool { return slices.Contains(serve, o) })
		}
		b.WriteString("| flag | env | default | description |\n|---|---|---|---|\n")
		for _, o := range opts {
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", o.Flag, code(o.Env), code(o.Default), markdownText(o.Usage))
		}
	}
	b.WriteString("\n")
	return b.String()
}

func containsAll(set, sub []helpOption) bool {
	for _, o := range sub {
		if !slices.Contains(set, o) {
			return false
		}
	}
	return true
}

func code(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + s + "`"
}

// markdownText escapes what a table cell would otherwise interpret: pipes end the cell,
// <topic> would be taken for an HTML tag.
func markdownText(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// TestHelpMatchesOptions checks commandHelp, on which the reference and the manifest
// checks rest, against the option lists it can also reach in process.
func TestHelpMatchesOptions(t *testing.T) {
	t.Parallel()
	bin := releaseBinary(t)
	asHelp := func(o *options) []helpOption {
		var out []helpOption
		for _, p := range o.opts {
			out = append(out, helpOption{Flag: p.Flag, Env: p.Env, Default: p.Default, Usage: p.Usage})
		}
		return out
	}
	var cfg service.Config
	var c common
	var noMigrate bool
	require.ElementsMatch(t, asHelp(serveOptions(&cfg, &c, &noMigrate)), commandHelp(t, bin, "serve"))
	var rawURL, addr string
	var timeout time.Duration
	require.ElementsMatch(t, asHelp(healthcheckOptions(&rawURL, &addr, &timeout)), commandHelp(t, bin, "healthcheck"))
}
