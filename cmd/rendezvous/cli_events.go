package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/client"
)

func eventsGroup() *cliGroup {
	return &cliGroup{
		name:    "events",
		summary: "send events to executions; see, replay or dismiss events that reached no wait",
		about: `Send an event to an execution by type, see the events that reached no wait
and why, replay or dismiss them.`,
		commands: []*cliCommand{eventsSend(), eventsUnmatched(), eventsReplay(), eventsDismiss(), eventsDismissAll()},
	}
}

func eventsSend() *cliCommand {
	return &cliCommand{
		name: "send", args: "EXECUTION TYPE", nargs: 2,
		summary: "send an event of a type to an execution",
		help: `Sends an event of type TYPE to execution EXECUTION: every node of the execution
waiting for an event of source send with that type takes it ("delivered"). When none
waits for it yet, it is buffered until one does ("buffered"), or until it expires or
the execution ends. --id deduplicates: the same id sent again is applied once
("duplicate"). A finished execution refuses the event (409, exit status 1).`,
		examples: []string{
			`rendezvous events send 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f approved --payload '{"by": "alice"}'`,
			`rendezvous events send 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f approved --payload @decision.json --id decision-17`,
			`rendezvous events send 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f cancelled -o json | jq -r .outcome`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var payload, id string
			fs.StringVar(&payload, "payload", "", "event payload: JSON, @FILE to read it from a file, @- from stdin (default: null)")
			fs.StringVar(&id, "id", "", "event id: the same id sent to an execution again is applied once")
			return func(ctx context.Context, cl *cli, args []string) error {
				execution, err := parseID("execution id", args[0])
				if err != nil {
					return err
				}
				var raw json.RawMessage
				if payload != "" {
					raw = json.RawMessage(payload)
					if path, ok := strings.CutPrefix(payload, "@"); ok {
						if raw, err = cl.readInput(path); err != nil {
							return err
						}
					}
					if !json.Valid(raw) {
						var v any
						return usagef("--payload is not JSON: %v", json.Unmarshal(raw, &v))
					}
				}
				sent, err := cl.api.SendEvent(ctx, execution, args[1], raw, id)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, sent.Raw)
				}
				return cl.printSent(sent)
			}
		},
	}
}

// printSent shows what a sent event did: its outcome, and per node that was waiting for
// its type what happened there, or until when it is buffered.
func (cl *cli) printSent(s *client.SentEvent) error {
	kv := newTable(cl.stdout)
	kv.row("Outcome:", s.Outcome)
	if s.Outcome == client.SendBuffered {
		kv.row("Buffer ID:", strconv.FormatInt(s.BufferID, 10))
		kv.row("Expires:", when(s.ExpiresAt, time.Now()))
	}
	if err := kv.flush(); err != nil {
		return err
	}
	if len(s.Deliveries) == 0 {
		return nil
	}
	fmt.Fprintln(cl.stdout)
	header := []string{"NODE", "EVENT", "OUTCOME", "WAIT STATUS", "VERSION"}
	if cl.output == outputWide {
		header = append(header, "WAIT")
	}
	t := newTable(cl.stdout, header...)
	for _, d := range s.Deliveries {
		cells := []string{d.NodeID, d.Event, d.Outcome, d.WaitStatus, strconv.FormatInt(d.Version, 10)}
		if cl.output == outputWide {
			cells = append(cells, d.WaitStateID.String())
		}
		t.row(cells...)
	}
	return t.flush()
}

// unmatchedLimitDefault keeps the default listing to what fits a screen: the service
// keeps thousands of unmatched events.
const unmatchedLimitDefault = 50

func eventsUnmatched() *cliCommand {
	return &cliCommand{
		name:    "unmatched",
		summary: "list recent events that reached no wait, and why",
		help: `Lists recent events that no wait took — callbacks, Kafka records and sent events —
newest first, with why: no_execution, execution_finished, buffered,
match_value_differs, filter_failed, id_mismatch, duplicate, no_wait, late,
not_expected or already_recorded. -o wide adds the correlation id, the payload
excerpt and the full detail.`,
		examples: []string{
			"rendezvous events unmatched",
			"rendezvous events unmatched --reason no_wait --limit 200 -o wide",
			"rendezvous events unmatched --reason execution_finished -o json | jq -r '.[].execution_id'",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var reason string
			fs.StringVar(&reason, "reason", "", "only events that matched nothing for this reason")
			l := newListing(fs, "unmatched events", unmatchedLimitDefault)
			return func(ctx context.Context, cl *cli, _ []string) error {
				pages := func(ctx context.Context, p client.PageRequest) (*client.Page[client.UnmatchedEvent], error) {
					return cl.api.UnmatchedEvents(ctx, reason, p)
				}
				raw := func(u *client.UnmatchedEvent) json.RawMessage { return u.Raw }
				return listPages(ctx, cl, l, pages, raw, cl.unmatchedTable)
			}
		},
	}
}

func (cl *cli) unmatchedTable(items []client.UnmatchedEvent) error {
	now := time.Now()
	wide := cl.output == outputWide
	header := []string{"WHEN", "REASON", "SOURCE", "EVENT", "EXECUTION", "DETAIL"}
	if wide {
		header = []string{"ID", "CREATED", "REASON", "SOURCE", "EVENT", "EXECUTION", "CORRELATION ID", "DETAIL", "PAYLOAD"}
	}
	t := newTable(cl.stdout, header...)
	for _, u := range items {
		event := u.EventName
		if u.EventType != "" {
			event = strings.TrimPrefix(event+" type "+u.EventType, " ")
		}
		if wide {
			t.row(strconv.FormatInt(u.ID, 10), when(&u.CreatedAt, now), u.Reason, eventSource(u.Source), event,
				uuidOrEmpty(u.ExecutionID), uuidOrEmpty(u.CorrelationID), u.Detail, u.PayloadExcerpt)
			continue
		}
		t.row(ago(&u.CreatedAt, now), u.Reason, eventSource(u.Source), event, uuidOrEmpty(u.ExecutionID), truncate(u.Detail, 60))
	}
	return t.flush()
}

func uuidOrEmpty(id *uuid.UUID) string {
	if id == nil {
		return ""
	}
	return idOrEmpty(*id)
}

// eventRowsArg reads the KIND argument of replay and dismiss.
func eventRowsArg(kind, id string) (client.EventRows, int64, error) {
	var rows client.EventRows
	switch kind {
	case "dead-letter":
		rows = client.DeadLetters
	case "unmatched":
		rows = client.UnmatchedEvents
	default:
		return "", 0, usagef("KIND must be dead-letter or unmatched, not %q", kind)
	}
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil || n <= 0 {
		return "", 0, usagef("ID must be a positive integer, not %q", id)
	}
	return rows, n, nil
}

func eventsReplay() *cliCommand {
	return &cliCommand{
		name: "replay", args: "KIND ID", nargs: 2,
		summary: "replay a dead letter or an unmatched event",
		help: `Applies event ID of KIND (dead-letter: a buffered event no wait took; unmatched:
an event that matched nothing) again, through the path of a live event, to its
execution or to --execution. Duplicates stay duplicates ("duplicate": nothing changed).
Each is replayed once; an event that does nothing at the execution (finished, late, no
wait) is refused and changes nothing (409, exit status 1).`,
		examples: []string{
			"rendezvous events replay dead-letter 42",
			"rendezvous events replay unmatched 1077 --execution 0b6f3c2e-5d1a-4c8e-9f7a-2e4b6d8c0a1f",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var execution string
			fs.StringVar(&execution, "execution", "", "replay into this execution instead of the event's own")
			return func(ctx context.Context, cl *cli, args []string) error {
				rows, id, err := eventRowsArg(args[0], args[1])
				if err != nil {
					return err
				}
				target := uuid.Nil
				if execution != "" {
					if target, err = parseID("--execution", execution); err != nil {
						return err
					}
				}
				r, err := cl.api.Replay(ctx, rows, id, target)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, r.Raw)
				}
				t := newTable(cl.stdout, "ID", "EXECUTION", "OUTCOME")
				t.row(strconv.FormatInt(r.ID, 10), r.ExecutionID.String(), r.Outcome)
				return t.flush()
			}
		},
	}
}

func eventsDismiss() *cliCommand {
	return &cliCommand{
		name: "dismiss", args: "KIND ID", nargs: 2,
		summary: "dismiss a dead letter or an unmatched event, with why",
		help: `Marks event ID of KIND (dead-letter or unmatched) dismissed with --reason: it stays
listed, resolved, until retention purges it. Each is resolved once (409, exit status 1).`,
		examples: []string{
			`rendezvous events dismiss dead-letter 42 --reason "order cancelled by phone"`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var reason string
			fs.StringVar(&reason, "reason", "", "why (required)")
			return func(ctx context.Context, cl *cli, args []string) error {
				rows, id, err := eventRowsArg(args[0], args[1])
				if err != nil {
					return err
				}
				if strings.TrimSpace(reason) == "" {
					return usagef("--reason: must say why")
				}
				if err := cl.api.Dismiss(ctx, rows, id, reason); err != nil {
					return err
				}
				fmt.Fprintf(cl.stdout, "%s %d dismissed\n", args[0], id)
				return nil
			}
		},
	}
}

func eventsDismissAll() *cliCommand {
	return &cliCommand{
		name:    "dismiss-all",
		summary: "dismiss every dead letter a filter selects, in batches",
		help: `Dismisses with --reason every unresolved dead letter that matches the filters
(all of them when none is given), oldest first, in bounded batches. It counts first;
--dry-run stops there. Each request dismisses at most --limit; the command repeats it
until none is left. Interrupted, run it again.`,
		examples: []string{
			"rendezvous events dismiss-all --workflow order-approval --type reminder --dry-run",
			`rendezvous events dismiss-all --dead-letter-reason expired --until 24h --reason "stale reminders"`,
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var f client.DismissFilter
			var execution, since, until string
			fs.StringVar(&execution, "execution", "", "only dead letters of this execution")
			fs.StringVar(&f.Workflow, "workflow", "", "only dead letters of executions of this workflow")
			fs.StringVar(&f.EventType, "type", "", "only events of this type")
			fs.StringVar(&f.DeadLetterReason, "dead-letter-reason", "", "only events dead-lettered for this reason: expired, superseded, execution_finished")
			fs.StringVar(&since, "since", "", "only dead letters since: a duration back from now (2h) or an RFC 3339 time")
			fs.StringVar(&until, "until", "", "only dead letters before: a duration back from now or an RFC 3339 time")
			fs.StringVar(&f.Reason, "reason", "", "why they are dismissed (required unless --dry-run)")
			fs.BoolVar(&f.DryRun, "dry-run", false, "count the dead letters that match; change nothing")
			fs.IntVar(&f.Limit, "limit", 1000, "dead letters one request dismisses at most (1..10000)")
			fs.IntVar(&f.Batch, "batch", 100, "dead letters one statement dismisses (1..500)")
			return func(ctx context.Context, cl *cli, _ []string) error {
				var err error
				if execution != "" {
					id, err := parseID("--execution", execution)
					if err != nil {
						return err
					}
					f.ExecutionID = &id
				}
				if f.CreatedAfter, err = pointInTime("--since", since); err != nil {
					return err
				}
				if f.CreatedBefore, err = pointInTime("--until", until); err != nil {
					return err
				}
				if f.CreatedBefore == nil {
					now := time.Now().UTC()
					f.CreatedBefore = &now
				}
				if !f.DryRun && strings.TrimSpace(f.Reason) == "" {
					return usagef("--reason: must say why (or --dry-run)")
				}
				total := 0
				for {
					r, err := cl.api.DismissDeadLetters(ctx, f)
					if err != nil {
						return err
					}
					if f.DryRun {
						fmt.Fprintf(cl.stdout, "%d dead letters match; nothing changed (dry run)\n", r.Matched)
						return nil
					}
					total += r.Dismissed
					fmt.Fprintf(cl.stdout, "dismissed %d (%d in this request, %d batches; %d matched)\n", total, r.Dismissed, r.Batches, r.Matched)
					if !r.More {
						return nil
					}
				}
			}
		},
	}
}
