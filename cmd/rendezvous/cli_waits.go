package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/client"
	"github.com/rendezvous-run/rendezvous/workflow"
)

func waitsGroup() *cliGroup {
	return &cliGroup{
		name:    "waits",
		summary: "see what executions wait for; cancel a wait",
		about: `See what executions wait for — which events arrived, which are missing, the next
deadline — and cancel a wait.`,
		commands: []*cliCommand{waitsList(), waitsGet(), waitsCancel()},
	}
}

func waitsList() *cliCommand {
	return &cliCommand{
		name:    "list",
		summary: "list open waits, longest-waiting first (--all: ended ones too)",
		help: `Lists the open waits (waiting or scheduled), longest-waiting first, following the
pages to the end (or --limit): per wait its execution and node, status, strategy (or
"timer"), the events that arrived and those still missing, the next deadline and the
optimistic-lock version. --all lists ended waits too, --status one status. -o wide adds
the wait id, the workflow, timed-out events and the deadline as a timestamp. Filters
combine.`,
		examples: []string{
			"rendezvous waits list",
			"rendezvous waits list --all --status completed",
			"rendezvous waits list --workflow order-approval --node request_approval -o wide",
			"rendezvous waits list --execution 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f",
			"rendezvous waits list --status waiting -o json | jq -r '.[] | [.execution_id, .missing_events[]] | @tsv'",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var f client.WaitFilter
			var execution string
			var all bool
			fs.BoolVar(&all, "all", false, "ended waits too, not only open ones")
			fs.StringVar(&f.Status, "status", "", "only waits with this status: waiting, scheduled, completed, timeout, failed, cancelled, resumed, error")
			fs.StringVar(&f.Workflow, "workflow", "", "only waits of executions of this workflow")
			fs.StringVar(&f.Node, "node", "", "only waits of this node id")
			fs.StringVar(&execution, "execution", "", "only waits of this execution (id)")
			l := newListing(fs, "waits", 0)
			return func(ctx context.Context, cl *cli, _ []string) error {
				if err := l.check(); err != nil {
					return err
				}
				if execution != "" {
					id, err := parseID("--execution", execution)
					if err != nil {
						return err
					}
					f.Execution = id
				}
				var items []client.WaitState
				var more bool
				var err error
				if all || f.Status != "" {
					items, more, err = client.Collect(ctx, l.limit, func(ctx context.Context, p client.PageRequest) (*client.Page[client.WaitState], error) {
						return cl.api.WaitStates(ctx, f, p)
					})
				} else {
					items, more, err = cl.api.CollectOpenWaits(ctx, f, l.limit)
				}
				if err != nil {
					return err
				}
				raw := func(w *client.WaitState) json.RawMessage { return w.Raw }
				return showListing(cl, l, items, more, raw, func(items []client.WaitState) error {
					return cl.waitTable(items, cl.output == outputWide, false)
				})
			}
		},
	}
}

// waitTable prints waits, one row each. Inside an execution's view the execution column
// would repeat itself, so the correlation id takes its place.
func (cl *cli) waitTable(waits []client.WaitState, wide, inExecution bool) error {
	now := time.Now()
	var header []string
	switch {
	case inExecution:
		header = []string{"WAIT", "STATUS", "STRATEGY", "ARRIVED", "MISSING", "NEXT DEADLINE", "VERSION", "CORRELATION ID"}
	case wide:
		header = []string{"ID", "EXECUTION", "WORKFLOW", "NODE", "STATUS", "STRATEGY", "ARRIVED", "MISSING", "TIMED OUT", "NEXT DEADLINE", "VERSION", "CREATED"}
	default:
		header = []string{"EXECUTION", "NODE", "STATUS", "STRATEGY", "ARRIVED", "MISSING", "NEXT DEADLINE", "VERSION"}
	}
	t := newTable(cl.stdout, header...)
	for _, w := range waits {
		version := strconv.FormatInt(w.Version, 10)
		arrived, missing := joinNames(w.Arrived()), joinNames(w.Missing())
		switch {
		case inExecution:
			t.row(w.NodeID, w.Status, strategy(&w), arrived, missing, nextDeadline(&w, now, false), version, w.CorrelationID.String())
		case wide:
			t.row(w.ID.String(), idOrEmpty(w.ExecutionID), workflowLabel(w.Workflow, w.WorkflowVersion), w.NodeID, w.Status, strategy(&w),
				arrived, missing, joinNames(w.TimedOutEvents), nextDeadline(&w, now, true), version, ago(&w.CreatedAt, now))
		default:
			t.row(idOrEmpty(w.ExecutionID), w.NodeID, w.Status, strategy(&w), arrived, missing, nextDeadline(&w, now, false), version)
		}
	}
	return t.flush()
}

func idOrEmpty(id uuid.UUID) string {
	if id == uuid.Nil {
		return ""
	}
	return id.String()
}

// strategy is the aggregation strategy of an events wait, "timer" for a timer.
func strategy(w *client.WaitState) string {
	if w.WaitType == client.WaitTypeTimer {
		return "timer"
	}
	return w.Strategy
}

// nextDeadline counts down to the next deadline of an open wait (when a timer fires):
// "in 4m12s", with the timestamp when full. An ended wait has none.
func nextDeadline(w *client.WaitState, now time.Time, full bool) string {
	if !w.Open() || w.NextDeadlineAt.IsZero() {
		return ""
	}
	if full {
		return relative(w.NextDeadlineAt, now) + " (" + absolute(w.NextDeadlineAt) + ")"
	}
	return relative(w.NextDeadlineAt, now)
}

func waitsGet() *cliCommand {
	return &cliCommand{
		name: "get", args: "EXECUTION [NODE] | WAIT-ID", nargs: 1, maxArgs: 2,
		summary: "show a wait: events enabled, required, arrived, missing, timed out; deadlines",
		help: `Shows the wait of an execution — of NODE when it has waited at several nodes, else
its open wait or its only one — or a wait by its own id (the ID column of "waits list
-o wide"): its events, enabled, required, arrived (with time and source), missing and
timed out, its deadlines and, once it ended, how.

--wait-for STATUS waits, up to --timeout, until the wait exists and has that status
before showing it: a wait is registered by the executor a moment after the execution
starts (or its node is reached), and a timer is scheduled only once the nodes before it
ran. It exits with status 1 when the wait ends with another status, or --timeout passes.`,
		examples: []string{
			"rendezvous waits get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f",
			"rendezvous waits get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f request_approval -o json | jq .received_events",
			"rendezvous waits get 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f next_business_morning --wait-for scheduled",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var waitFor string
			fs.StringVar(&waitFor, "wait-for", "", "wait, up to --timeout, until the wait exists and has this `STATUS`: "+statusList(waitStatuses))
			return func(ctx context.Context, cl *cli, args []string) error {
				if err := checkStatus(waitFor, waitStatuses); err != nil {
					return err
				}
				id, err := parseID("execution or wait id", args[0])
				if err != nil {
					return err
				}
				node := ""
				if len(args) == 2 {
					node = args[1]
				}
				var w *client.WaitState
				if waitFor == "" {
					w, err = cl.findWait(ctx, id, node)
				} else {
					w, err = cl.waitForWait(ctx, id, node, waitFor)
				}
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, w.Raw)
				}
				return cl.printWait(w)
			}
		},
	}
}

// findWait finds the wait "waits get" shows: id names an execution (its wait at node,
// else its open wait, else its only one) or, failing that, a wait.
func (cl *cli) findWait(ctx context.Context, id uuid.UUID, node string) (*client.WaitState, error) {
	waits, _, err := client.Collect(ctx, 0, func(ctx context.Context, p client.PageRequest) (*client.Page[client.WaitState], error) {
		return cl.api.WaitStates(ctx, client.WaitFilter{Execution: id, Node: node}, p)
	})
	if err != nil {
		return nil, err
	}
	var pick *client.WaitState
	switch open := slices.IndexFunc(waits, func(w client.WaitState) bool { return w.Open() }); {
	case len(waits) == 1:
		pick = &waits[0]
	case node == "" && open >= 0 && !slices.ContainsFunc(waits[open+1:], func(w client.WaitState) bool { return w.Open() }):
		pick = &waits[open]
	case len(waits) > 1:
		var nodes []string
		for _, w := range waits {
			if !slices.Contains(nodes, w.NodeID) {
				nodes = append(nodes, w.NodeID)
			}
		}
		return nil, usagef("execution %s has %d waits (nodes %s); name the node: waits get %s NODE", id, len(waits), strings.Join(nodes, ", "), id)
	}
	if pick != nil {
		// The listing leaves out the events' payloads; the wait itself has them.
		return cl.api.WaitState(ctx, pick.ID)
	}
	if node != "" {
		if _, err := cl.api.Execution(ctx, id); err != nil {
			return nil, err
		}
		return nil, noWaitYet{fmt.Errorf("execution %s has no wait at node %q", id, node)}
	}
	w, err := cl.api.WaitState(ctx, id)
	var aerr *client.Error
	if errors.As(err, &aerr) && aerr.Status == http.StatusNotFound {
		// Not a wait: an execution that has not waited yet says so, anything else is
		// the server's 404.
		if _, eerr := cl.api.Execution(ctx, id); eerr == nil {
			return nil, noWaitYet{fmt.Errorf("execution %s has no wait (yet)", id)}
		}
	}
	return w, err
}

// noWaitYet is findWait's answer for an execution that has not waited (at the node)
// yet, which --wait-for waits through.
type noWaitYet struct{ error }

// waitForWait finds the wait as findWait does, again and again until it has status want.
// A wait that ends with another status is an error at once: it will not change again.
func (cl *cli) waitForWait(ctx context.Context, id uuid.UUID, node, want string) (*client.WaitState, error) {
	var w *client.WaitState
	err := cl.poll(ctx, func(ctx context.Context) error {
		var err error
		w, err = cl.findWait(ctx, id, node)
		var none noWaitYet
		switch {
		case errors.As(err, &none):
			return errStillWaiting{none.Error()}
		case err != nil:
			return err
		case w.Status == want:
			return nil
		case !w.Open():
			return fmt.Errorf("the wait at node %s ended %s, not %s", w.NodeID, w.Status, want)
		}
		return errStillWaiting{fmt.Sprintf("the wait at node %s is %s, not %s", w.NodeID, w.Status, want)}
	})
	return w, err
}

func (cl *cli) printWait(w *client.WaitState) error {
	now := time.Now()
	kv := newTable(cl.stdout)
	kv.row("ID:", w.ID.String())
	kv.row("Execution:", idOrEmpty(w.ExecutionID))
	kv.row("Workflow:", workflowLabel(w.Workflow, w.WorkflowVersion))
	kv.row("Node:", w.NodeID)
	kv.row("Correlation ID:", w.CorrelationID.String())
	kv.row("Type:", w.WaitType)
	if w.WaitType == client.WaitTypeTimer {
		kv.row("Timer:", compactJSON(w.Timer))
	} else {
		kv.row("Strategy:", w.Strategy)
	}
	kv.row("Status:", w.Status)
	kv.row("Version:", strconv.FormatInt(w.Version, 10))
	if w.WaitType != client.WaitTypeTimer {
		kv.row("Enabled:", joinNames(w.EnabledEvents))
		kv.row("Required:", joinNames(w.RequiredEvents))
		kv.row("Arrived:", joinNames(w.Arrived()))
		kv.row("Missing:", joinNames(w.Missing()))
		kv.row("Timed out:", joinNames(w.TimedOutEvents))
	}
	kv.row("Next deadline:", nextDeadline(w, now, true))
	kv.row("Expires:", when(&w.ExpiresAt, now))
	kv.row("Created:", when(&w.CreatedAt, now))
	kv.row("Updated:", when(&w.UpdatedAt, now))
	if w.ResumedAt != nil {
		kv.row("Resumed:", when(w.ResumedAt, now)+" by "+w.ResumedBy)
	}
	if w.Error != "" {
		kv.row("Error:", w.Error)
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(w.ReceivedEvents) == 0 {
		return nil
	}
	fmt.Fprintln(cl.stdout)
	t := newTable(cl.stdout, "EVENT", "RECEIVED", "SOURCE", "KEY")
	for _, r := range w.ReceivedEvents {
		t.row(r.Name, when(&r.ReceivedAt, now), eventSource(r.Source), r.Key)
	}
	return t.flush()
}

// eventSource says where an event came from: "callback approvals",
// "kafka shipments.events/3@42" (topic/partition@offset), "send" (sent to the execution
// through the API); as the server sent it otherwise.
func eventSource(raw json.RawMessage) string {
	var s struct {
		Kind           workflow.Source
		Service, Topic string
		Partition      *int32
		Offset         *int64
	}
	if json.Unmarshal(raw, &s) == nil {
		switch {
		case s.Kind == workflow.SourceCallback && s.Service != "":
			return "callback " + s.Service
		case s.Kind == workflow.SourceKafka && s.Topic != "" && s.Partition != nil && s.Offset != nil:
			return fmt.Sprintf("kafka %s/%d@%d", s.Topic, *s.Partition, *s.Offset)
		case s.Kind == workflow.SourceSend && s.Service == "" && s.Topic == "":
			return "send"
		}
	}
	return compactJSON(raw)
}

func waitsCancel() *cliCommand {
	return &cliCommand{
		name: "cancel", args: "EXECUTION NODE", nargs: 2,
		summary: "cancel the open wait of a node; --then fail (default) or continue",
		help: `Cancels the open wait of NODE in execution EXECUTION. --then fail (the default)
fails the node and the execution; --then continue completes the node with what arrived
so far and the workflow goes on. A wait that already ended cannot be cancelled (409,
exit status 1). Prints the execution afterwards.`,
		examples: []string{
			"rendezvous waits cancel 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f request_approval",
			`rendezvous waits cancel 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f request_approval --then continue --reason "approved by phone"`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var then, reason string
			fs.StringVar(&then, "then", client.ThenFail, "what the execution does next: fail or continue")
			fs.StringVar(&reason, "reason", "", "why, recorded with the wait")
			return func(ctx context.Context, cl *cli, args []string) error {
				if then != client.ThenFail && then != client.ThenContinue {
					return usagef("--then: want fail or continue, not %q", then)
				}
				id, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				e, err := cl.api.CancelWait(ctx, id, args[1], then, reason)
				if err != nil {
					return err
				}
				return cl.showExecution(e)
			}
		},
	}
}
