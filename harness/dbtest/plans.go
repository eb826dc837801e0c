package dbtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Tests of query plans read the statements as db/queries writes them, so that a plan
// checked is the plan of the statement the product runs.

// Queries returns the queries of a file of db/queries by name, comments removed.
func Queries(tb testing.TB, file string) map[string]string {
	tb.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("dbtest: cannot locate db/queries")
	}
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "db", "queries", file))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for _, block := range strings.Split(string(raw), "-- name: ")[1:] {
		name, rest, _ := strings.Cut(block, " ")
		var lines []string
		for _, l := range strings.Split(rest, "\n")[1:] {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		out[name] = strings.Join(lines, "\n")
	}
	return out
}

var sqlcArg = regexp.MustCompile(`sqlc\.narg\((\w+)\)|@(\w+)`)

// Bind writes the arguments (SQL expressions by name; absent ones NULL) into a query,
// which is what a custom plan sees.
func Bind(query string, args map[string]string) string {
	return sqlcArg.ReplaceAllStringFunc(query, func(m string) string {
		sub := sqlcArg.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if v, ok := args[name]; ok {
			return v
		}
		return "NULL"
	})
}

// Positional numbers a query's sqlc parameters $1, $2, … in order of first use, as sqlc
// does, and returns how many there are: the statement a pool prepares, whose generic plan
// cannot see the values.
func Positional(query string) (string, int) {
	index := map[string]int{}
	out := sqlcArg.ReplaceAllStringFunc(query, func(m string) string {
		sub := sqlcArg.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if _, ok := index[name]; !ok {
			index[name] = len(index) + 1
		}
		return fmt.Sprintf("$%d", index[name])
	})
	return out, len(index)
}

// Explain returns the plan PostgreSQL gives statement (anything EXPLAIN takes) on conn,
// flattened by PlanNodes.
func Explain(tb testing.TB, conn *pgx.Conn, statement string) []string {
	tb.Helper()
	var raw []byte
	if err := conn.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+statement).Scan(&raw); err != nil {
		tb.Fatalf("explain: %v", err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(raw, &plans); err != nil {
		tb.Fatalf("explain: %v", err)
	}
	return PlanNodes(plans[0]["Plan"].(map[string]any))
}

// PlanNodes flattens an EXPLAIN (FORMAT JSON) plan into "Node Type on relation using
// index" lines.
func PlanNodes(plan map[string]any) []string {
	line := plan["Node Type"].(string)
	if rel, ok := plan["Relation Name"].(string); ok {
		line += " on " + rel
	}
	if idx, ok := plan["Index Name"].(string); ok {
		line += " using " + idx
	}
	out := []string{line}
	children, _ := plan["Plans"].([]any)
	for _, c := range children {
		out = append(out, PlanNodes(c.(map[string]any))...)
	}
	return out
}
