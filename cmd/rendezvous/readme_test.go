package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/server"
)

// The configuration reference (docs/configuration.md) is generated from the commands'
// own options, between these markers, so that it cannot drift from the code: the test
// fails when it is out of date, and rewrites it with UPDATE_DOCS=1.
const (
	referenceFile  = "docs/configuration.md"
	referenceBegin = "<!-- config-reference:begin -->"
	referenceEnd   = "<!-- config-reference:end -->"
	referenceCmd   = "UPDATE_DOCS=1 go test ./cmd/rendezvous -run TestConfigReference"
)

func TestConfigReference(t *testing.T) {
	t.Parallel()
	want := configReference(t, releaseBinary(t))
	path := filepath.Join(repoRoot, referenceFile)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(raw)
	begin, end := strings.Index(doc, referenceBegin), strings.Index(doc, referenceEnd)
	require.True(t, begin >= 0 && end > begin, "%s: %s … %s markers", referenceFile, referenceBegin, referenceEnd)
	begin += len(referenceBegin)
	if os.Getenv("UPDATE_DOCS") != "" {
		require.NoError(t, os.WriteFile(path, []byte(doc[:begin]+want+doc[end:]), 0o644))
		return
	}
	if got := doc[begin:end]; got != want {
		t.Fatalf("%s: the configuration reference is out of date (%s); run\n  %s", referenceFile, firstDifference(want, got), referenceCmd)
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
// the others in usage order; a command with every serve flag (dev) lists only its own and
// those it defaults differently.
func configReference(t *testing.T, bin string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n<!-- Generated from the commands' options; edit the code, then run %s -->\n", referenceCmd)
	serve := commandHelp(t, bin, "serve")
	order := append([]string{"serve"}, slices.DeleteFunc(commandNames(), func(c string) bool { return c == "serve" })...)
	for _, c := range order {
		opts := commandHelp(t, bin, c)
		fmt.Fprintf(&b, "\n## `rendezvous %s`\n\n", c)
		if len(opts) == 0 {
			b.WriteString("No flags.\n")
			continue
		}
		if c != "serve" && hasEveryFlag(opts, serve) {
			b.WriteString("Every flag of `rendezvous serve`. Below: its own, and those whose default differs from serve's.\n\n")
			opts = slices.DeleteFunc(opts, func(o helpOption) bool { return slices.Contains(serve, o) })
		}
		// One table per topic of -h, in its order, titled when there are several.
		var sections []string
		for _, o := range opts {
			if !slices.Contains(sections, o.Section) {
				sections = append(sections, o.Section)
			}
		}
		for i, sec := range sections {
			if len(sections) > 1 {
				if i > 0 {
					b.WriteString("\n")
				}
				fmt.Fprintf(&b, "**%s**\n\n", sec)
			}
			b.WriteString("| flag | env | default | description |\n|---|---|---|---|\n")
			for _, o := range opts {
				if o.Section == sec {
					fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", o.Flag, code(o.Env), code(o.Default), markdownText(o.Usage))
				}
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

// hasEveryFlag says whether set has every flag of sub, whatever their defaults.
func hasEveryFlag(set, sub []helpOption) bool {
	for _, o := range sub {
		if !slices.ContainsFunc(set, func(s helpOption) bool { return s.Flag == o.Flag }) {
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
			out = append(out, helpOption{Flag: p.Flag, Env: p.Env, Default: p.Default, Usage: p.Usage, Section: p.Section})
		}
		return out
	}
	var cfg server.Config
	var c common
	var noMigrate bool
	require.ElementsMatch(t, asHelp(serveOptions(&cfg, &c, &noMigrate)), commandHelp(t, bin, "serve"))
	var rawURL, addr string
	var timeout time.Duration
	require.ElementsMatch(t, asHelp(healthcheckOptions(&rawURL, &addr, &timeout)), commandHelp(t, bin, "healthcheck"))
}

// The README's walkthrough is run as written: every sh block between these markers, in
// order, each in a shell of its own as a reader pastes it into a terminal, against a dev
// process, so that a change of the CLI, the examples or dev that breaks it fails here
// rather than for a newcomer. Nothing is retried: where a command must wait for the
// service, the README says how (--wait-for), or the reader would not know to.
const (
	walkthroughBegin = "<!-- walkthrough:begin"
	walkthroughEnd   = "<!-- walkthrough:end -->"
)

// walkthroughBlocks returns the sh blocks of the README's walkthrough, as written.
func walkthroughBlocks(t *testing.T, readme string) []string {
	t.Helper()
	begin, end := strings.Index(readme, walkthroughBegin), strings.Index(readme, walkthroughEnd)
	require.True(t, begin >= 0 && end > begin, "README.md: %s … %s markers", walkthroughBegin, walkthroughEnd)
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(readme[begin:end], -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

func TestREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	blocks := walkthroughBlocks(t, string(raw))
	require.Len(t, blocks, 5, "the walkthrough's blocks")
	// What the README asks a reader to install; missing, the test fails rather than
	// passing without having run the walkthrough.
	for _, tool := range []string{"bash", "jq", "kcat", "curl"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the README's walkthrough uses %s: install it with `make deps` (Debian)", tool)
	}
	d := startDev(t)

	// The blocks run from a folder holding what a checkout holds after make build:
	// bin/rendezvous and the examples. This dev listens on ports of its own, so the
	// addresses differ, as the README tells a reader whose ports are taken: the CLI
	// reads RENDEZVOUS_SERVER, and curl and kcat are given the ports.
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.Symlink(d.bin, filepath.Join(dir, "bin", "rendezvous")))
	examplesDir, err := filepath.Abs(filepath.Join(repoRoot, "examples"))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(examplesDir, filepath.Join(dir, "examples")))
	host := strings.TrimPrefix(d.server, "http://")
	addrs := strings.NewReplacer("127.0.0.1:9092", d.broker, "localhost:8080", host, "127.0.0.1:8080", host)

	var outputs []string
	starts := 0
	for i, block := range blocks {
		block = addrs.Replace(block)
		// -e: a command that fails fails the block, as its error would stop a reader;
		// -v: the log shows each line before its output.
		cmd := exec.Command("bash", "-v", "-e", "-o", "pipefail", "-c", block)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "RENDEZVOUS_SERVER="+d.server)
		out, err := cmd.CombinedOutput()
		t.Logf("block %d:\n%s", i+1, out)
		require.NoError(t, err, "block %d of the walkthrough failed:\n%s\ndev:\n%s", i+1, out, d.logs.String())
		outputs = append(outputs, string(out))
		starts += strings.Count(block, "bin/rendezvous executions start ")
	}

	// What the walkthrough says happens, read once: each execution it started has run to
	// its end — completed, or cancelled by the last block — by the time its block ended.
	var execs []struct{ ID, Workflow, Status string }
	d.cliJSON(t, &execs, "executions", "list")
	require.Len(t, execs, starts)
	byStatus := map[string]int{}
	for _, e := range execs {
		byStatus[e.Status]++
	}
	require.Equal(t, map[string]int{"completed": starts - 1, "cancelled": 1}, byStatus, "%+v", execs)
	for i, out := range outputs[:4] {
		require.Regexp(t, `(?m)^Status:\s+completed$`, out, "block %d ends with its execution completed", i+1)
	}
	// The callback's answer ends its line (a problem body has no newline of its own; curl
	// -w adds one), so the next command's output starts on a line of its own.
	require.Regexp(t, `(?m)^\{.*\}\n\n?bin/rendezvous executions get `, outputs[1], "curl -w '\\n'")
}
