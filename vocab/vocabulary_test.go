package vocab_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// vocabulary is every value of the state and definition vocabulary, by where it is
// declared: a bare literal of one of these, used as a status, kind, strategy, onTimeout
// or source, belongs in that declaration instead.
var vocabulary = map[string][]string{
	// Execution, node and wait statuses, run-queue kinds, wait types, and the
	// strategies and onTimeout modes a wait's row stores.
	"vocab/vocab.go": {"running", "waiting", "completed", "failed", "cancelled", "pending", "waiting_for_events", "skipped", "run", "resume",
		"timeout", "scheduled", "resumed", "error", "events", "timer", "all", "any", "required_only", "custom", "fail", "continue", "continue_with_partial"},
	// Event sources, buffer modes, record formats.
	"workflow/waitevents.go": {"callback", "kafka", "send", "fifo", "last_write_wins", "auto", "json", "avro", "protobuf", "jsonschema"},
}

// vocabularyTypes are the named types of the vocabulary: a constant of one of them
// declared outside its declaration is a second declaration, like an untyped one.
var vocabularyTypes = []string{"ExecutionStatus", "NodeStatus", "RunKind", "WaitStatus", "WaitType", "Strategy", "OnTimeout", "Source", "BufferMode", "RecordFormat"}

// roles are the names (struct fields, parameters, variables) whose values are of the
// vocabulary: a literal assigned to one, compared with one, or switched on, is a use.
var roles = []string{"Status", "Kind", "WaitType", "AggregationStrategy", "Strategy", "OnTimeout", "NodeStatus", "Buffer",
	"status", "kind", "waitType", "strategy", "onTimeout", "nodeStatus", "buffer"}

// Not product code: test kits, the benchmark and the chaos harness, generated code,
// examples; and the API client, which speaks the wire format without importing the
// server's packages.
var skipDirs = []string{"harness", "cmd/rendezvous-bench",
	"cmd/rendezvous-chaos", "db/dbsqlc", "server/console/web", "node_modules", "examples", "client"}

// otherMeanings are constants whose value is a word of the vocabulary that means
// something else there, by file and value.
var otherMeanings = map[string][]string{
	"executor/cancel.go":              {"fail", "continue"}, // what follows a cancelled wait (ThenFail, ThenContinue)
	"executor/telemetry.go":           {"failed"},           // the result of an outbound call attempt
	"consumer/telemetry.go":           {"timeout"},          // why a dead-letter write failed
	"cmd/rendezvous/cli_run.go":       {"json"},             // the log format
	"internal/telemetry/telemetry.go": {"json"},             // the log format
}

// TestNoBareVocabulary fails when product code uses a bare string of the vocabulary as a
// status, a run kind, a strategy, an onTimeout mode or a source — compared with (==, !=),
// switched on (case), or given to a field or variable of that role — or declares a
// constant of one outside its declaration. Words of the vocabulary that mean something
// else (an event's outcome "completed", a JSON key "timeout", a log message) are not such
// uses, and constants of another named type (aggregator.Outcome) are another vocabulary.
func TestNoBareVocabulary(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	words := map[string]bool{}
	for _, ws := range vocabulary {
		for _, w := range ws {
			words[w] = true
		}
	}
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || slices.ContainsFunc(skipDirs, func(s string) bool { return rel == s }) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		_, declaring := vocabulary[rel]
		report := func(lit *ast.BasicLit, how string) {
			found = append(found, fmt.Sprintf("%s: %s %s", fset.Position(lit.Pos()), lit.Value, how))
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				if n.Tok != token.CONST || declaring {
					return true
				}
				for _, spec := range n.Specs {
					vs := spec.(*ast.ValueSpec)
					if vs.Type != nil && !isIdent(vs.Type, "string") && !slices.Contains(vocabularyTypes, exprName(vs.Type)) {
						continue // another vocabulary, of its own type
					}
					for _, v := range vs.Values {
						if lit := vocabLit(v, words); lit != nil && !slices.Contains(otherMeanings[rel], unquote(lit)) {
							report(lit, "declared again")
						}
					}
				}
				return false
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					for _, side := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
						if lit := vocabLit(side[0], words); lit != nil && hasRole(side[1]) {
							report(lit, "compared")
						}
					}
				}
			case *ast.SwitchStmt:
				if n.Tag == nil || !hasRole(n.Tag) {
					return true
				}
				for _, s := range n.Body.List {
					for _, e := range s.(*ast.CaseClause).List {
						if lit := vocabLit(e, words); lit != nil {
							report(lit, "switched on")
						}
					}
				}
			case *ast.KeyValueExpr:
				if lit := vocabLit(n.Value, words); lit != nil && hasRole(n.Key) {
					report(lit, "given as "+exprName(n.Key))
				}
			case *ast.AssignStmt:
				for i, rhs := range n.Rhs {
					if lit := vocabLit(rhs, words); lit != nil && i < len(n.Lhs) && hasRole(n.Lhs[i]) {
						report(lit, "assigned to "+exprName(n.Lhs[i]))
					}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "use the declared constants (%s) instead of these literals", strings.Join(keys(vocabulary), ", "))
}

// vocabLit is e when it is a string literal of the vocabulary.
func vocabLit(e ast.Expr, words map[string]bool) *ast.BasicLit {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return nil
	}
	v, err := strconv.Unquote(lit.Value)
	if err != nil || !words[v] {
		return nil
	}
	return lit
}

func unquote(lit *ast.BasicLit) string {
	v, _ := strconv.Unquote(lit.Value)
	return v
}

// hasRole reports whether e names a value of the vocabulary's roles: x.Status, status,
// x.row.WaitType, and so on.
func hasRole(e ast.Expr) bool {
	return slices.Contains(roles, exprName(e))
}

// exprName is the last name of an identifier or selector, "" for anything else.
func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
