package testkit

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStripJSONComments(t *testing.T) {
	t.Parallel()
	in := "{\n  \"url\": \"https://a.example/x\",  // the service\n  \"q\": \"say \\\"//\\\" here\", // quoted\n  \"n\": 1\n} // end"
	got := StripJSONComments(in)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &v), got)
	require.Equal(t, map[string]any{"url": "https://a.example/x", "q": `say "//" here`, "n": 1.0}, v)
}

// TestPatternExamples: the document's node configuration and its five examples are
// found, each valid JSON once its comments are gone.
func TestPatternExamples(t *testing.T) {
	t.Parallel()
	ex := PatternExamples(t)
	require.Len(t, ex, 6)
	require.Equal(t, "Node Configuration", ex[0].Heading)
	for i, e := range ex {
		var v map[string]any
		require.NoError(t, json.Unmarshal(e.Node, &v), "%s:\n%s", e.Heading, e.Node)
		require.Equal(t, "wait_events", v["type"], e.Heading)
		if i > 0 {
			require.Regexp(t, `^Example \d: `, e.Heading)
		}
	}
}
