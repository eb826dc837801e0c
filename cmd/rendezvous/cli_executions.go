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

	"github.com/rendezvous-run/rendezvous/client"
	"github.com/rendezvous-run/rendezvous/vocab"
)

func executionsGroup() *cliGroup {
	return &cliGroup{
		name:    "executions",
		summary: "start, inspect, cancel, redrive and restart executions",
		about:   "Start executions of stored workflows, see their nodes and waits, cancel, redrive and restart them.",
		commands: []*cliCommand{
			executionsStart(), executionsList(), executionsGet(), executionsCancel(), executionsRedrive(), executionsRedriveAll(), executionsRestart(),
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
			fs.StringVar(&f.Status, "status", "", "only executions with this status: running, waiting, completed, failed, cancelled")
			fs.StringVar(&f.Workflow, "workflow", "", "only executions of this workflow")
			fs.StringVar(&f.CorrelationID, "correlation-id", "", "only the execution whose wait has this correlation id")
			l := newListing(fs, "executions", 0)
			return func(ctx context.Context, cl *cli, _ []string) error {
				pages := func(ctx context.Context, p client.PageRequest) (*client.Page[client.ExecutionSummary], error) {
					return cl.api.Executions(ctx, f, p)
				}
				raw := func(e *client.ExecutionSummary) json.RawMessage { return e.Raw }
				return listPages(ctx, cl, l, pages, raw, cl.executionTable)
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
still waits for and its next deadline.

--wait-for STATUS waits, up to --timeout, until the execution has that status before
showing it: an event applied, a wait cancelled or a timer fired moves it on a moment
later, not within the command that caused it. It exits with status 1 when the execution
ends with another status (shown), or --timeout passes.`,
		examples: []string{
			"rendezvous executions get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f",
			"rendezvous executions get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f -o json | jq '.nodes[] | {id, output}'",
			"rendezvous executions get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f --wait-for completed --timeout 1m",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var waitFor string
			fs.StringVar(&waitFor, "wait-for", "", "wait, up to --timeout, until the execution has this `STATUS`: "+statusList(executionStatuses))
			return func(ctx context.Context, cl *cli, args []string) error {
				if err := checkStatus(waitFor, executionStatuses); err != nil {
					return err
				}
				id, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				if waitFor == "" {
					e, err := cl.api.Execution(ctx, id)
					if err != nil {
						return err
					}
					return cl.showExecution(e)
				}
				var e *client.Execution
				ended := false
				err = cl.poll(ctx, func(ctx context.Context) error {
					got, err := cl.api.Execution(ctx, id)
					if err != nil {
						return err
					}
					e = got
					switch {
					case e.Status == waitFor:
						return nil
					case vocab.ExecFinished(vocab.ExecutionStatus(e.Status)):
						ended = true
						return fmt.Errorf("execution %s ended %s, not %s", id, e.Status, waitFor)
					}
					return errStillWaiting{fmt.Sprintf("execution %s is %s, not %s", id, e.Status, waitFor)}
				})
				if err == nil || ended {
					// An execution that ended otherwise is shown too: its error says why.
					if serr := cl.showExecution(e); serr != nil {
						return serr
					}
				}
				return err
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

func executionsRedrive() *cliCommand {
	return &cliCommand{
		name: "redrive", args: "ID", nargs: 1,
		summary: "continue a failed execution from its failed nodes",
		help: `Continues a failed execution from where it failed: completed nodes keep their
outputs, failed nodes run again, and a wait that timed out or failed opens again with
the events it recorded and fresh deadlines (its correlated call is sent again only when
the call was what failed). An execution that is not failed is refused (409, exit
status 1); of two operators redriving at once, one wins. Prints what each node does
now.`,
		examples: []string{
			"rendezvous executions redrive 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f",
			"rendezvous executions list --status failed --workflow order-approval -o json | jq -r '.[].id' | xargs -n1 rendezvous executions redrive",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			return func(ctx context.Context, cl *cli, args []string) error {
				id, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				r, err := cl.api.Redrive(ctx, id)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, r.Raw)
				}
				kv := newTable(cl.stdout)
				kv.row("Execution:", r.ExecutionID.String())
				kv.row("Status:", r.Status)
				kv.row("Redrives:", strconv.Itoa(int(r.RedriveCount)))
				if err := kv.flush(); err != nil {
					return err
				}
				fmt.Fprintln(cl.stdout)
				t := newTable(cl.stdout, "NODE", "ACTION")
				for _, n := range r.Nodes {
					t.row(n.ID, n.Action)
				}
				return t.flush()
			}
		},
	}
}

func executionsRedriveAll() *cliCommand {
	return &cliCommand{
		name:    "redrive-all",
		summary: "redrive every failed execution a filter selects, in batches",
		help: `Redrives every failed execution that matches the filters (all failed executions
when none is given), each as "executions redrive" does, in bounded batches that skip
executions someone else is acting on. It counts first; --dry-run stops there. Each
request redrives at most --limit; the command repeats it until none is left, printing
its progress. Interrupted, run it again: redriven executions no longer match.`,
		examples: []string{
			"rendezvous executions redrive-all --workflow order-approval --error 'status 503' --dry-run",
			"rendezvous executions redrive-all --workflow order-approval --node request_approval --since 2h",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var f client.RedriveFilter
			var since, until string
			fs.StringVar(&f.Workflow, "workflow", "", "only executions of this workflow")
			fs.StringVar(&f.Node, "node", "", "only executions whose node of this id failed")
			fs.StringVar(&f.ErrorContains, "error", "", "only executions whose error contains this text (any case)")
			fs.StringVar(&since, "since", "", "only executions that failed since: a duration back from now (2h) or an RFC 3339 time")
			fs.StringVar(&until, "until", "", "only executions that failed before: a duration back from now or an RFC 3339 time")
			fs.BoolVar(&f.DryRun, "dry-run", false, "count the executions that match; change nothing")
			fs.IntVar(&f.Limit, "limit", 1000, "executions one request redrives at most (1..10000)")
			fs.IntVar(&f.Batch, "batch", 100, "executions one transaction redrives (1..500)")
			return func(ctx context.Context, cl *cli, _ []string) error {
				var err error
				if f.FailedAfter, err = pointInTime("--since", since); err != nil {
					return err
				}
				if f.FailedBefore, err = pointInTime("--until", until); err != nil {
					return err
				}
				if f.FailedBefore == nil {
					// Fixed for the whole run: an execution that fails again is not retried.
					now := time.Now().UTC()
					f.FailedBefore = &now
				}
				total := 0
				for {
					r, err := cl.api.RedriveMany(ctx, f)
					if err != nil {
						return err
					}
					if f.DryRun {
						fmt.Fprintf(cl.stdout, "%d failed executions match; nothing changed (dry run)\n", r.Matched)
						return nil
					}
					total += r.Redriven
					fmt.Fprintf(cl.stdout, "redriven %d (%d in this request, %d batches; %d matched)\n", total, r.Redriven, r.Batches, r.Matched)
					if !r.More {
						return nil
					}
				}
			}
		},
	}
}

// pointInTime reads a duration back from now or an RFC 3339 time; nil when empty.
func pointInTime(flagName, v string) (*time.Time, error) {
	if v == "" {
		return nil, nil
	}
	if d, err := parseDuration(v); err == nil && d > 0 {
		t := time.Now().UTC().Add(-d)
		return &t, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, usagef("%s: %q is neither a duration (2h, PT2H, \"2 hours\") nor an RFC 3339 time", flagName, v)
	}
	return &t, nil
}

func executionsRestart() *cliCommand {
	return &cliCommand{
		name: "restart", args: "ID", nargs: 1,
		summary: "start a new execution in place of an old one",
		help: `Starts a new execution of the workflow of execution ID: the same definition
version (or the latest with --latest), the same input (or --input). The two are linked
both ways. An old execution still running or waiting is cancelled first, with its waits
and unsent calls. An execution is restarted once: again is refused (409, exit status 1).`,
		examples: []string{
			"rendezvous executions restart 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f --latest",
			`rendezvous executions restart 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f --input '{"order": "A-2"}' --reason "wrong order"`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var input, reason string
			var latest bool
			fs.StringVar(&input, "input", "", "new input: JSON, @FILE to read it from a file, @- from stdin (default: the old execution's)")
			fs.BoolVar(&latest, "latest", false, "run the workflow's latest version instead of the old execution's")
			fs.StringVar(&reason, "reason", "", "why, recorded with the old execution if the restart cancels it")
			return func(ctx context.Context, cl *cli, args []string) error {
				id, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				opts := client.RestartOptions{Reason: reason}
				if latest {
					opts.Version = "latest"
				}
				if input != "" {
					raw := []byte(input)
					if path, ok := strings.CutPrefix(input, "@"); ok {
						if raw, err = cl.readInput(path); err != nil {
							return err
						}
					}
					if !json.Valid(raw) {
						var v any
						return usagef("--input is not JSON: %v", json.Unmarshal(raw, &v))
					}
					opts.Input = raw
				}
				r, err := cl.api.Restart(ctx, id, opts)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, r.Raw)
				}
				t := newTable(cl.stdout, "ID", "WORKFLOW", "STATUS", "CREATED", "RESTARTS", "CANCELLED")
				t.row(r.ID.String(), workflowLabel(r.Workflow, r.WorkflowVersion), r.Status, absolute(r.CreatedAt),
					r.RestartedFrom.String(), strconv.FormatBool(r.Cancelled))
				return t.flush()
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
	if e.RedriveCount > 0 {
		kv.row("Redrives:", strconv.Itoa(int(e.RedriveCount))+" (last "+when(e.RedrivenAt, now)+")")
	}
	if e.RestartedFrom != nil {
		kv.row("Restarts:", e.RestartedFrom.String())
	}
	if e.RestartedAs != nil {
		kv.row("Restarted as:", e.RestartedAs.String())
	}
	if err := kv.flush(); err != nil {
		return err
	}

	fmt.Fprintln(cl.stdout)
	nodes := newTable(cl.stdout, "NODE", "STATUS", "ATTEMPTS", "STARTED", "FINISHED", "ERROR")
	for _, n := range e.Nodes {
		problem := n.Error
		if n.Warning != "" {
			// One column for what went wrong: a warning sits on a completed node, which
			// has no error.
			problem = "warning: " + n.Warning
		}
		nodes.row(n.ID, n.Status, strconv.Itoa(int(n.Attempts)), ago(n.StartedAt, now), ago(n.FinishedAt, now), problem)
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
