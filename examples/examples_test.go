package examples_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/examples"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// TestDefinitionsCompile: `rendezvous dev` stores every example at start, so one that no
// longer validates would stop the local run.
func TestDefinitionsCompile(t *testing.T) {
	files, err := fs.Glob(examples.Definitions, "*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		raw, err := fs.ReadFile(examples.Definitions, f)
		require.NoError(t, err)
		wf, err := workflow.Compile(raw, workflow.BuiltinRegistry())
		require.NoError(t, err, f)
		require.Equal(t, f, wf.Definition().Name+".json", "file named after its workflow")
	}
}
