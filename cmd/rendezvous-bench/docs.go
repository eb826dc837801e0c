package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// The block of docs/benchmarks.md that --write-docs rewrites; the text around it is
// written by hand.
const (
	docsBegin = "<!-- figures:begin -->"
	docsEnd   = "<!-- figures:end -->"
)

// runStamp is when a run started and on which code: the figures table names both.
type runStamp struct {
	Date   time.Time `json:"date"`
	Commit string    `json:"commit"`
}

// stampNow dates a run and names its commit (with "-dirty" when the tree has changes),
// or "unknown" outside a git checkout.
func stampNow() runStamp {
	s := runStamp{Date: time.Now().UTC().Truncate(time.Second), Commit: "unknown"}
	if out, err := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12").Output(); err == nil {
		s.Commit = strings.TrimSpace(string(out))
	}
	return s
}

// writeDocs rewrites the figures block of the markdown file at path from the results
// file resultsPath, which a run with --json wrote.
func writeDocs(path, resultsPath string) error {
	raw, err := os.ReadFile(resultsPath)
	if err != nil {
		return fmt.Errorf("read results: %w", err)
	}
	var r results
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("decode %s: %w", resultsPath, err)
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceFigures(doc, r)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// replaceFigures returns doc with the text between its figures markers replaced by the
// table of r's figures that have a target.
func replaceFigures(doc []byte, r results) ([]byte, error) {
	begin, end := bytes.Index(doc, []byte(docsBegin)), bytes.Index(doc, []byte(docsEnd))
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("no %s … %s block", docsBegin, docsEnd)
	}
	var b bytes.Buffer
	b.Write(doc[:begin+len(docsBegin)])
	b.WriteString("\n")
	b.WriteString(figuresMarkdown(r))
	b.Write(doc[end:])
	return b.Bytes(), nil
}

// figuresMarkdown is the table of a run's figures that have a target, headed by the
// run's date, commit and baseline.
func figuresMarkdown(r results) string {
	var b strings.Builder
	date := "an undated run"
	if !r.Stamp.Date.IsZero() {
		date = r.Stamp.Date.Format("2006-01-02 15:04 UTC")
	}
	commit := r.Stamp.Commit
	if commit == "" {
		commit = "unknown"
	}
	fmt.Fprintf(&b, "Run of %s on commit `%s`; baseline (a) %s UPDATEs/s.\n\n", date, commit, strconv.FormatFloat(r.Baseline.PerSecond, 'f', 0, 64))
	b.WriteString("| part | figure | value | target | met |\n|---|---|---|---|---|\n")
	for _, f := range r.Figures {
		if f.Target == "" {
			continue
		}
		met := "—"
		if f.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*f.Met]
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s | %s | %s |\n", f.Part, mdCell(f.Name), strconv.FormatFloat(f.Value, 'g', 4, 64), f.Unit, mdCell(f.Target), met)
	}
	return b.String()
}

// mdCell escapes the one character that would end a table cell.
func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
