package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinariesLinkNoTestCode: the binaries people run link no test-only code — no test
// framework, no container library, no test kit — and the product binary links none of
// the harnesses either. A test helper imported by mistake from a product package fails
// here, not in production.
func TestBinariesLinkNoTestCode(t *testing.T) {
	t.Parallel()
	testOnly := []string{
		"testing", "github.com/stretchr/testify", "github.com/testcontainers/testcontainers-go",
		"go.uber.org/goleak", "github.com/chromedp/chromedp", "github.com/rendezvous-run/rendezvous/harness/dbtest",
		// The shared test kit (and testkit/replica under it).
		"github.com/rendezvous-run/rendezvous/harness/testkit",
	}
	// The whole harness: chaos, bench, pgproxy and the test kits.
	harnesses := []string{"github.com/rendezvous-run/rendezvous/harness",
		// The peer the bench measures rendezvous against; the service never needs it.
		"github.com/dbos-inc"}
	for cmd, forbidden := range map[string][]string{
		"rendezvous":       slices.Concat(testOnly, harnesses),
		"rendezvous-chaos": testOnly,
		"rendezvous-bench": testOnly,
	} {
		out, err := exec.Command("go", "list", "-deps", "../"+cmd).CombinedOutput()
		require.NoError(t, err, string(out))
		for _, pkg := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if pkg == f || strings.HasPrefix(pkg, f+"/") {
					t.Errorf("cmd/%s links %s (%s)", cmd, pkg, f)
				}
			}
		}
	}
}

// layers are the tree's layers, lowest first, by import-path prefix (module-relative):
// a package may import its own layer and those below it, never one above. The product
// is layers 0–5; the binaries and the harness stand above it, and nothing below them
// imports either (TestBinariesLinkNoTestCode keeps the harness out of the product
// binary).
var layers = [][]string{
	{"internal/"}, // 0: domain-free leaves
	{"vocab"},     // 1: the stored vocabulary
	{"workflow"},  // 2: the definition format
	{"db"},        // 3: storage, the audit trail
	{"outbound", "aggregator", "executor", "consumer", "callbacks", "wireformat"}, // 4: the engine
	{"server", "client"},             // 5: the operator surface, the process, the API client
	{"cmd/", "harness/", "examples"}, // 6: binaries, harness, examples
}

func layerOf(rel string) int {
	for i, prefixes := range layers {
		for _, p := range prefixes {
			if rel == strings.TrimSuffix(p, "/") || strings.HasPrefix(rel, strings.TrimSuffix(p, "/")+"/") {
				return i
			}
		}
	}
	return -1
}

// TestLayers: drawn from the imports, no package imports one of a layer above its own,
// and every package of the module has a layer.
func TestLayers(t *testing.T) {
	t.Parallel()
	const module = "github.com/rendezvous-run/rendezvous/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../../...").CombinedOutput()
	require.NoError(t, err, string(out))
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		own := layerOf(pkg)
		if own < 0 {
			t.Errorf("%s has no layer: add its folder to layers", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			if l := layerOf(strings.TrimPrefix(imp, module)); l > own {
				t.Errorf("%s (layer %d) imports %s (layer %d)", pkg, own, strings.TrimPrefix(imp, module), l)
			}
		}
	}
}

// Limits of the product's pieces: a function longer than this is split into functions
// named after what they do, a file longer than that into files named after what they hold.
const (
	maxFuncLines = 100
	maxFileLines = 600
)

// TestNoLongPieces fails on a product function over maxFuncLines or a product file over
// maxFileLines. Tests, generated code, the harness and its binaries, and the examples
// are not product code.
func TestNoLongPieces(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	notProduct := []string{"harness", "cmd/rendezvous-bench", "cmd/rendezvous-chaos", "examples", "db/dbsqlc", "server/console/web"}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" || slices.Contains(notProduct, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s: %d lines (at most %d)", rel, n, maxFileLines)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch n := n.(type) {
			case *ast.FuncDecl:
				body, name = n.Body, n.Name.Name
			case *ast.FuncLit:
				body = n.Body
			}
			if body != nil {
				if lines := fset.Position(body.End()).Line - fset.Position(n.Pos()).Line + 1; lines > maxFuncLines {
					t.Errorf("%s:%d: %s is %d lines (at most %d)", rel, fset.Position(n.Pos()).Line, name, lines, maxFuncLines)
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
}
