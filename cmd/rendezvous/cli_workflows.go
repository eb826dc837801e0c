package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/client"
)

func workflowsGroup() *cliGroup {
	return &cliGroup{
		name:    "workflows",
		summary: "store and read workflow definitions",
		about:   "Store workflow definitions on a running service and read them back.",
		commands: []*cliCommand{
			workflowsApply(), workflowsList(), workflowsGet(),
		},
	}
}

func workflowsApply() *cliCommand {
	return &cliCommand{
		name: "apply", args: "-f FILE…", maxArgs: -1,
		summary: "store definitions (-f FILE…, globs, - for stdin); each becomes a new version unless unchanged",
		help: `Stores each definition under the "name" it holds: the first version of a name is
"created", a changed definition a new version ("updated"), an equal one is kept
("unchanged"). Files are applied in order; at the first failure the rest are not
applied. An invalid definition is reported with every problem and its JSON path, one
per line. -f takes several files (-f a.json b.json, or -f repeated) and globs that the
shell left alone (-f 'examples/*.json'). --dry-run validates on the server and stores
nothing.
With -o json, prints one array holding the server's answer for each file.`,
		examples: []string{
			"rendezvous workflows apply -f examples/order-approval.json",
			"rendezvous workflows apply -f examples/order-approval.json examples/shipment-kafka.json",
			"rendezvous workflows apply -f 'examples/*.json'",
			"cat def.json | rendezvous workflows apply -f -",
			"rendezvous workflows apply --dry-run -f def.json",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var files repeatedFlag
			var dryRun bool
			fs.Var(&files, "f", "definition `FILE` to store, or a glob; - reads stdin (repeatable; the arguments after it are files too)")
			fs.BoolVar(&dryRun, "dry-run", false, "validate on the server, store nothing")
			return func(ctx context.Context, cl *cli, args []string) error {
				if len(files) == 0 {
					if len(args) > 0 {
						return usagef("name the files with -f: -f %s", strings.Join(args, " "))
					}
					return usagef("-f FILE is required")
				}
				paths, err := expandFiles(append(files, args...))
				if err != nil {
					return err
				}
				return cl.applyWorkflows(ctx, paths, dryRun)
			}
		},
	}
}

// expandFiles expands the globs among the files named on the command line, each in
// sorted order as the shell would; a glob that matches nothing is a mistake, not an
// empty list.
func expandFiles(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		if n == "-" || !strings.ContainsAny(n, "*?[") {
			out = append(out, n)
			continue
		}
		matches, err := filepath.Glob(n)
		if err != nil {
			return nil, usagef("-f %s: %v", n, err)
		}
		if len(matches) == 0 {
			return nil, usagef("-f %s: no file matches", n)
		}
		out = append(out, matches...)
	}
	return out, nil
}

// definitionName reads the "name" a definition is stored under; "" when it has none.
func definitionName(def []byte) string {
	var head struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(def, &head) != nil {
		return ""
	}
	return head.Name
}

// warn prints a definition's warnings to stderr, one a line, so that -o json output
// stays the server's answers alone.
func (cl *cli) warn(label string, warnings []client.FieldError) {
	for _, w := range warnings {
		fmt.Fprintf(cl.stderr, "%s: warning: %s: %s\n", label, w.Path, w.Message)
	}
}

func (cl *cli) applyWorkflows(ctx context.Context, files []string, dryRun bool) error {
	header := []string{"NAME", "VERSION", "RESULT"}
	if dryRun {
		header = []string{"NAME", "RESULT", "NODES"}
	}
	t := newTable(cl.stdout, header...)
	var answers []json.RawMessage
	// What was applied before a failure is still shown; a failure at the first file
	// prints only the error.
	finish := func(err error) error {
		if len(answers) == 0 {
			return err
		}
		if cl.output == outputJSON {
			if perr := printJSONArray(cl.stdout, answers); err == nil {
				err = perr
			}
		} else if ferr := t.flush(); err == nil {
			err = ferr
		}
		return err
	}
	for _, f := range files {
		def, err := cl.readInput(f)
		if err != nil {
			return finish(err)
		}
		label := f
		if f == "-" {
			label = "stdin"
		}
		name := definitionName(def)
		if dryRun || name == "" {
			// Without a name there is no URL to store under; the server's validation
			// still reports every problem at once, the missing name among them.
			v, err := cl.api.ValidateWorkflow(ctx, def)
			if err != nil {
				return finish(inFile{label, err})
			}
			if !dryRun {
				return finish(usagef("%s: the definition has no \"name\"", label))
			}
			answers = append(answers, v.Raw)
			cl.warn(label, v.Warnings)
			t.row(name, "valid", strconv.Itoa(v.Nodes))
			continue
		}
		stored, err := cl.api.PutWorkflow(ctx, name, def)
		if err != nil {
			return finish(inFile{label, err})
		}
		answers = append(answers, stored.Raw)
		cl.warn(label, stored.Warnings)
		result := "updated"
		switch {
		case stored.Created:
			result = "created"
		case stored.Unchanged:
			result = "unchanged"
		}
		t.row(stored.Name, strconv.Itoa(int(stored.Version)), result)
	}
	return finish(nil)
}

func workflowsList() *cliCommand {
	return &cliCommand{
		name:    "list",
		summary: "list workflow names with their latest version",
		help:    "Lists every stored workflow name, ordered by name, following the pages to the end (or --limit).",
		examples: []string{
			"rendezvous workflows list",
			"rendezvous workflows list -o json | jq -r '.[].name'",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			l := newListing(fs, "workflows", 0)
			return func(ctx context.Context, cl *cli, _ []string) error {
				raw := func(w *client.WorkflowSummary) json.RawMessage { return w.Raw }
				return listPages(ctx, cl, l, cl.api.Workflows, raw, cl.workflowTable)
			}
		},
	}
}

func (cl *cli) workflowTable(items []client.WorkflowSummary) error {
	now := time.Now()
	header := []string{"NAME", "LATEST", "VERSIONS", "UPDATED"}
	if cl.output == outputWide {
		header = append(header, "CREATED")
	}
	t := newTable(cl.stdout, header...)
	for _, w := range items {
		row := []string{w.Name, "v" + strconv.Itoa(int(w.LatestVersion)), strconv.Itoa(int(w.Versions)), ago(&w.UpdatedAt, now)}
		if cl.output == outputWide {
			row = append(row, when(&w.CreatedAt, now))
		}
		t.row(row...)
	}
	return t.flush()
}

// definitionShape is what the table view shows of a definition: its graph.
type definitionShape struct {
	Nodes []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	} `json:"nodes"`
	Edges []struct {
		Source    string `json:"source"`
		Target    string `json:"target"`
		Condition string `json:"condition"`
	} `json:"edges"`
}

func workflowsGet() *cliCommand {
	return &cliCommand{
		name: "get", args: "NAME", nargs: 1,
		summary: "show a workflow: its versions, nodes and edges (-o json: with the definition)",
		help: `Shows the latest version of a workflow (or --version N): its versions, nodes and
edges. -o json prints the server's answer, the whole definition included, e.g. to edit
and apply it again.`,
		examples: []string{
			"rendezvous workflows get order-approval",
			"rendezvous workflows get order-approval --version 1 -o json | jq .definition > v1.json",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var version int
			fs.IntVar(&version, "version", 0, "version to show (0: the latest)")
			return func(ctx context.Context, cl *cli, args []string) error {
				if version < 0 {
					return usagef("--version: must not be negative")
				}
				w, err := cl.api.Workflow(ctx, args[0], version)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, w.Raw)
				}
				return cl.printWorkflow(w)
			}
		},
	}
}

func (cl *cli) printWorkflow(w *client.Workflow) error {
	var shape definitionShape
	if err := json.Unmarshal(w.Definition, &shape); err != nil {
		return &client.ResponseError{Method: "GET", URL: "/api/v1/workflows/" + w.Name, Status: 200, Err: errors.New("definition is not a workflow: " + err.Error())}
	}
	now := time.Now()
	kv := newTable(cl.stdout)
	kv.row("Name:", w.Name)
	kv.row("Version:", fmt.Sprintf("v%d (latest v%d)", w.Version, w.LatestVersion))
	for i, v := range w.Versions {
		label := ""
		if i == 0 {
			label = "Versions:"
		}
		kv.row(label, fmt.Sprintf("v%d  %s", v.Version, when(&v.CreatedAt, now)))
	}
	if err := kv.flush(); err != nil {
		return err
	}
	fmt.Fprintln(cl.stdout)
	nodes := newTable(cl.stdout, "NODE", "TYPE")
	for _, n := range shape.Nodes {
		nodes.row(n.ID, n.Type)
	}
	if err := nodes.flush(); err != nil {
		return err
	}
	if len(shape.Edges) == 0 {
		return nil
	}
	fmt.Fprintln(cl.stdout)
	edges := newTable(cl.stdout, "FROM", "TO", "CONDITION")
	for _, e := range shape.Edges {
		edges.row(e.Source, e.Target, e.Condition)
	}
	return edges.flush()
}
