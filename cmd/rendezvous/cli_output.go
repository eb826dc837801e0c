package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rendezvous-run/rendezvous/client"
)

// table writes aligned columns for people; a cell never breaks its row (newlines and
// tabs become spaces) and an empty one reads "-".
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, cell(c))
	}
	io.WriteString(t.tw, "\n")
}

func (t *table) flush() error { return t.tw.Flush() }

func cell(s string) string {
	if s = oneLine(s); s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' || r == '\t' }), " ")
}

// truncate shortens s to n runes for a column of a listing; the full text is in the
// single-item view and in -o wide.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func joinNames(names []string) string { return strings.Join(names, ",") }

// relative renders t against now as people read a countdown: "in 4m12s", "3h5m ago".
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d == 0:
		return "now"
	case d > 0:
		return "in " + shortDuration(d)
	}
	return shortDuration(-d) + " ago"
}

// shortDuration keeps the two largest units: 42s, 4m12s, 3h5m, 2d3h.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func absolute(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// when is "2026-05-01T10:00:00Z (3m ago)", or "" for no time.
func when(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return absolute(*t) + " (" + relative(*t, now) + ")"
}

// ago is the relative time alone, for list columns; "" for no time.
func ago(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return relative(*t, now)
}

// printJSON writes one JSON value as the server sent it, indented.
func printJSON(w io.Writer, raw json.RawMessage) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return fmt.Errorf("indent the server's JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// printJSONArray writes items as one JSON array, each as the server sent it; an empty
// listing is [].
func printJSONArray(w io.Writer, items []json.RawMessage) error {
	if items == nil {
		items = []json.RawMessage{}
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return fmt.Errorf("encode the server's JSON: %w", err)
	}
	return printJSON(w, raw)
}

// raws picks the Raw of every item.
func raws[T any](items []T, raw func(*T) json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, 0, len(items))
	for i := range items {
		out = append(out, raw(&items[i]))
	}
	return out
}

// showList prints a listing: the server's JSON as one array, or the table people read.
// A word about a cut listing goes to stderr in both cases, one about an empty listing
// only under a table; stdout keeps only data.
func showList[T any](cl *cli, what string, limit int, items []T, more bool, raw func(*T) json.RawMessage, table func() error) error {
	switch {
	case cl.output == outputJSON:
		if err := printJSONArray(cl.stdout, raws(items, raw)); err != nil {
			return err
		}
	case len(items) == 0:
		fmt.Fprintf(cl.stderr, "no %s found\n", what)
		return nil
	default:
		if err := table(); err != nil {
			return err
		}
	}
	if more {
		fmt.Fprintf(cl.stderr, "showing the first %d %s; more follow (raise --limit, or --limit 0 for all)\n", limit, what)
	}
	return nil
}

// listing is what every list command shares: its --limit flag, checked, the pages
// followed to the end or the limit (client.Collect), and the items shown (showList).
type listing struct {
	what  string // "workflows": what the messages about the listing call its items
	limit int
}

// newListing registers --limit, whose default is def, for a listing of what.
func newListing(fs *flag.FlagSet, what string, def int) *listing {
	l := &listing{what: what}
	fs.IntVar(&l.limit, "limit", def, "show at most this many (0: all)")
	return l
}

// check refuses a negative --limit.
func (l *listing) check() error {
	if l.limit < 0 {
		return usagef("--limit: must not be negative")
	}
	return nil
}

// listPages checks --limit, collects the pages and shows the items, as a table by
// table.
func listPages[T any](ctx context.Context, cl *cli, l *listing, pages func(context.Context, client.PageRequest) (*client.Page[T], error),
	raw func(*T) json.RawMessage, table func([]T) error) error {
	if err := l.check(); err != nil {
		return err
	}
	items, more, err := client.Collect(ctx, l.limit, pages)
	if err != nil {
		return err
	}
	return showListing(cl, l, items, more, raw, table)
}

// showListing shows items collected otherwise (after check), as listPages does.
func showListing[T any](cl *cli, l *listing, items []T, more bool, raw func(*T) json.RawMessage, table func([]T) error) error {
	return showList(cl, l.what, l.limit, items, more, raw, func() error { return table(items) })
}
