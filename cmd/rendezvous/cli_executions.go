package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/client"
)

func executionsGroup() *cliGroup {
	return &cliGroup{
		name:  "executions",
		about: "Start executions of stored workflows, see their nodes and waits, cancel them.",
		commands: []*cliCommand{
			executionsStart(), executionsList(), executionsGet(), executionsCancel(),
		},
	}
}

func executionsStart() *cliCommand {
	return &cliCommand{
		name: "start", args: "WORKFLOW", nargs: 1,
		summary: "start an execution of the latest version of a workflow",
		help: `Starts an execution of the latest version of WORKFLOW with --input as its trigger
(@{_trigger.…} in templates).`,
		examples: []string{
			`rendezvous executions start order-approval --input '{"order": "A-1", "amount": 120}'`,
			`rendezvous executions start order-approval --input @order.json`,
			`id=$(rendezvous executions start shipment-kafka --input '{"shipment": "S-1"}' -o json | jq -r .id)`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var input string
			fs.StringVar(&input, "input", "{}", "execution input: JSON, @FILE to read it from a file, @- from stdin")
			return func(ctx context.Context, cl *cli, args []string) error {
				raw := []byte(input)
				if path, ok := strings.CutPrefix(input, "@"); ok {
					var err error
					if raw, err = cl.readInput(path); err != nil {
						return err
					}
				}
				if !json.Valid(raw) {
					var v any
					return usagef("--input is not JSON: %v", json.Unmarshal(raw, &v))
				}
				started, err := cl.api.StartExecution(ctx, args[0], raw)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, started.Raw)
				}
				t := newTable(cl.stdout, "ID", "WORKFLOW", "STATUS", "CREATED")
				t.row(started.ID.String(), workflowLabel(started.Workflow, started.WorkflowVersion), started.Status, absolute(started.CreatedAt))
				return t.flush()
			}
		},
	}
}

func workflowLabel(name string, version int32) string {
	if name == "" {
		return ""
	}
	return name + " v" + strconv.Itoa(int(version))
}

func executionsList() *cliCommand {
	return &cliCommand{
		name:    "list",
		summary: "list executions, newest first",
		help:    "Lists executions, newest first, following the pages to the end (or --limit).",
		examples: []string{
			"rendezvous executions list --status waiting",
			"rendezvous executions list --workflow order-approval --limit 20",
			"rendezvous executions list --status failed -o json | jq -r '.[].id'",
			"rendezvous executions list --correlation-id 01a21302-9c3e-7f41-b2a5-3d1c0e6f8a90",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var f client.ExecutionFilter
			var limit int
			fs.StringVar(&f.Status, "status", "", "only executions with this status: running, waiting, completed, failed, cancelled")
			fs.StringVar(&f.Workflow, "workflow", "", "only executions of this workflow")
			fs.StringVar(&f.CorrelationID, "correlation-id", "", "only the execution whose wait has this correlation id")
			fs.IntVar(&limit, "limit", 0, "show at most this many (0: all)")
			return func(ctx context.Context, cl *cli, _ []string) error {
				if limit < 0 {
					return usagef("--limit: must not be negative")
				}
				items, more, err := client.Collect(ctx, limit, func(ctx context.Context, p client.PageRequest) (*client.Page[client.ExecutionSummary], error) {
					return cl.api.Executions(ctx, f, p)
				})
				if err != nil {
					return err
				}
				raw := func(e *client.ExecutionSummary) json.RawMessage { return e.Raw }
				return showList(cl, "executions", limit, items, more, raw, func() error {
					return cl.executionTable(items)
				})
			}
		},
	}
}

func (cl *cli) executionTable(items []client.ExecutionSummary) error {
	now := time.Now()
	wide := cl.output == outputWide
	header := []string{"ID", "WORKFLOW", "STATUS", "CREATED", "ERROR"}
	if wide {
		header = []string{"ID", "WORKFLOW", "STATUS", "CREATED", "UPDATED", "FINISHED", "ERROR"}
	}
	t := newTable(cl.stdout, header...)
	for _, e := range items {
		label := workflowLabel(e.Workflow, e.WorkflowVersion)
		if wide {
			t.row(e.ID.String(), label, e.Status, when(&e.CreatedAt, now), when(&e.UpdatedAt, now), when(e.FinishedAt, now), e.Error)
			continue
		}
		t.row(e.ID.String(), label, e.Status, ago(&e.CreatedAt, now), truncate(e.Error, 60))
	}
	return t.flush()
}

func executionsGet() *cliCommand {
	return &cliCommand{
		name: "get", args: "ID", nargs: 1,
		summary: "show an execution with its nodes and waits",
		help: `Shows an execution, the status of each of its nodes, and its waits: what each
still waits for and its next deadline.`,
		examples: []string{
			"rendezvous executions get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f",
			"rendezvous executions get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f -o json | jq '.nodes[] | {id, output}'",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			return func(ctx context.Context, cl *cli, args []string) error {
				id, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				e, err := cl.api.Execution(ctx, id)
				if err != nil {
					return err
				}
				return cl.showExecution(e)
			}
		},
	}
}

func executionsCancel() *cliCommand {
	return &cliCommand{
		name: "cancel", args: "ID", nargs: 1,
		summary: "cancel an execution, its open waits and unfinished nodes",
		help: `Cancels an execution: it becomes "cancelled", and so do its open waits and its
unfinished nodes. Cancelling a cancelled execution changes nothing; a completed or
failed one cannot be cancelled (409, exit status 1). Prints the execution afterwards.`,
		examples: []string{
			`rendezvous executions cancel 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f --reason "order withdrawn"`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var reason string
			fs.StringVar(&reason, "reason", "", "why, recorded with the execution")
			return func(ctx context.Context, cl *cli, args []string) error {
				id, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				e, err := cl.api.CancelExecution(ctx, id, reason)
				if err != nil {
					return err
				}
				return cl.showExecution(e)
			}
		},
	}
}

// showExecution prints an execution: JSON as the server sent it, or its fields, a
// table of its nodes and one of its waits.
func (cl *cli) showExecution(e *client.Execution) error {
	if cl.output == outputJSON {
		return printJSON(cl.stdout, e.Raw)
	}
	now := time.Now()
	kv := newTable(cl.stdout)
	kv.row("ID:", e.ID.String())
	kv.row("Workflow:", workflowLabel(e.Workflow, e.WorkflowVersion))
	kv.row("Status:", e.Status)
	if e.Error != "" {
		kv.row("Error:", e.Error)
	}
	kv.row("Created:", when(&e.CreatedAt, now))
	kv.row("Updated:", when(&e.UpdatedAt, now))
	if e.FinishedAt != nil {
		kv.row("Finished:", when(e.FinishedAt, now))
	}
	kv.row("Input:", compactJSON(e.Input))
	if err := kv.flush(); err != nil {
		return err
	}

	fmt.Fprintln(cl.stdout)
	nodes := newTable(cl.stdout, "NODE", "STATUS", "ATTEMPTS", "STARTED", "FINISHED", "ERROR")
	for _, n := range e.Nodes {
		nodes.row(n.ID, n.Status, strconv.Itoa(int(n.Attempts)), ago(n.StartedAt, now), ago(n.FinishedAt, now), n.Error)
	}
	if err := nodes.flush(); err != nil {
		return err
	}
	if len(e.Waits) == 0 {
		return nil
	}
	fmt.Fprintln(cl.stdout)
	return cl.waitTable(e.Waits, false, true)
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
