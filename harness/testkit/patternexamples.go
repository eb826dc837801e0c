package testkit

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The integration pattern rendezvous implements is written up in a document kept beside
// the checkout, not in it: CI places ../shared beside the repository, and
// ../shared/seeds/004_* (relative to the repository root) is that document. Its node
// configuration and its five configuration examples are what a new user copies first,
// so tests read them from it as written instead of retyping them.
const patternGlob = "../shared/seeds/004_*"

// PatternExample is one JSON example of the pattern document: the heading it stands
// under and the node configuration, with its // comments removed (they are not JSON).
type PatternExample struct {
	Heading string
	Node    []byte
}

// PatternExamples returns the document's node configuration (heading "Node
// Configuration") and its configuration examples ("Example 1: …" to "Example 5: …"),
// in document order. A test that uses them is skipped, saying why, when the document is
// not beside the checkout.
func PatternExamples(t testing.TB) []PatternExample {
	t.Helper()
	root := repoRoot(t)
	matches, err := filepath.Glob(filepath.Join(root, patternGlob))
	if err != nil || len(matches) == 0 {
		t.Skipf("the pattern document %s is not beside the checkout (%s); its examples cannot be run", patternGlob, filepath.Clean(filepath.Join(root, "..", "shared")))
	}
	raw, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatalf("read %s: %v", matches[0], err)
	}
	var out []PatternExample
	for _, b := range jsonBlocks(string(raw)) {
		if b.Heading == "Node Configuration" || strings.HasPrefix(b.Heading, "Example ") {
			out = append(out, PatternExample{Heading: b.Heading, Node: []byte(StripJSONComments(b.Body))})
		}
	}
	return out
}

type mdBlock struct{ Heading, Body string }

// jsonBlocks returns the ```json fenced blocks of a markdown document, each with the
// text of the last heading before it (without its #s).
func jsonBlocks(doc string) []mdBlock {
	var out []mdBlock
	heading := ""
	var body *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case body != nil && trimmed == "```":
			out = append(out, mdBlock{Heading: heading, Body: body.String()})
			body = nil
		case body != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		case trimmed == "```json":
			body = &strings.Builder{}
		case strings.HasPrefix(trimmed, "#"):
			heading = strings.TrimSpace(strings.TrimLeft(trimmed, "#"))
		}
	}
	return out
}

// StripJSONComments removes // comments, which JSON does not have, from s: from "//"
// outside a string to the end of its line. Strings (with their escapes) are copied
// as they are, so a URL's "//" stays.
func StripJSONComments(s string) string {
	var b strings.Builder
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inString:
			b.WriteByte(c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
			b.WriteByte(c)
		case c == '/' && i+1 < len(s) && s[i+1] == '/':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i < len(s) {
				b.WriteByte('\n')
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// repoRoot is the directory holding go.mod, found upwards from the test's directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the test's directory")
		}
		dir = parent
	}
}
