package db_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// queryName is sqlc's header of a query: "-- name: WaitStateClaimDue :many".
var queryName = regexp.MustCompile(`(?m)^-- name: (\w+) :\w+`)

// TestEveryQueryIsCalled fails when a query of db/queries has no caller outside tests
// and the generated code: a statement nobody runs is kept in step with every migration
// for nothing, and reads as if it mattered.
func TestEveryQueryIsCalled(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "db", "queries", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var queries []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range queryName.FindAllStringSubmatch(string(raw), -1) {
			queries = append(queries, m[1])
		}
	}
	called := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "dbsqlc" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				called[sel.Sel.Name] = true
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	var unused []string
	for _, q := range queries {
		if !called[q] {
			unused = append(unused, q)
		}
	}
	slices.Sort(unused)
	require.Empty(t, unused, "queries in db/queries that no code outside tests calls: delete them (and make generate)")
}
