package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/rendezvous-run/rendezvous/client"
)

func tokensGroup() *cliGroup {
	return &cliGroup{
		name:    "tokens",
		summary: "create, list and revoke API tokens (admin only)",
		about: `Create, list and revoke API tokens (admin only). A token is shown once, when it
is created; the service keeps only its SHA-256. A revoked token stops working on every
replica within a few seconds.`,
		commands: []*cliCommand{tokensCreate(), tokensList(), tokensRevoke()},
	}
}

func tokensCreate() *cliCommand {
	return &cliCommand{
		name: "create", args: "NAME", nargs: 1,
		summary: "create a token and print it (once)",
		help: `Creates a token named NAME with --role admin, operator, viewer or sender, and prints
it: the only time it is shown. A sender token may only send events to executions;
--workflow-prefix limits it to workflows whose name starts with the prefix.`,
		examples: []string{
			"rendezvous tokens create ci --role operator",
			"rendezvous tokens create billing-events --role sender --workflow-prefix billing- --expires-in 720h",
			"export RENDEZVOUS_TOKEN=$(rendezvous tokens create ops-viewer --role viewer -o json | jq -r .token)",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var role, prefix string
			var expiresIn time.Duration
			fs.StringVar(&role, "role", "", "admin, operator, viewer or sender (required)")
			fs.StringVar(&prefix, "workflow-prefix", "", "sender only: the workflows (by name prefix) it may send events to")
			fs.DurationVar(&expiresIn, "expires-in", 0, "the token expires after this long (default: never)")
			return func(ctx context.Context, cl *cli, args []string) error {
				if role == "" {
					return usagef("--role: required (admin, operator, viewer or sender)")
				}
				if expiresIn < 0 {
					return usagef("--expires-in: must not be negative")
				}
				req := client.NewToken{Name: args[0], Role: role, WorkflowPrefix: prefix}
				if expiresIn > 0 {
					at := time.Now().Add(expiresIn).UTC().Truncate(time.Second)
					req.ExpiresAt = &at
				}
				t, err := cl.api.CreateToken(ctx, req)
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, t.Raw)
				}
				fmt.Fprintln(cl.stdout, t.Secret)
				fmt.Fprintf(cl.stderr, "token %s (%s) created; it is not shown again\n", t.Name, t.Role)
				return nil
			}
		},
	}
}

func tokensList() *cliCommand {
	return &cliCommand{
		name:    "list",
		summary: "list the tokens (never their secrets)",
		help:    `Lists the tokens by name with their role, prefix, creation, expiry and revocation.`,
		examples: []string{
			"rendezvous tokens list",
			"rendezvous tokens list -o json | jq -r '.[] | select(.revoked_at == null) | .name'",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			l := newListing(fs, "tokens", 0)
			return func(ctx context.Context, cl *cli, _ []string) error {
				raw := func(t *client.Token) json.RawMessage { return t.Raw }
				return listPages(ctx, cl, l, cl.api.Tokens, raw, func(items []client.Token) error {
					now := time.Now()
					t := newTable(cl.stdout, "NAME", "ROLE", "WORKFLOW PREFIX", "CREATED", "EXPIRES", "REVOKED")
					for _, tok := range items {
						expires, revoked := "-", "-"
						if tok.ExpiresAt != nil {
							expires = when(tok.ExpiresAt, now)
						}
						if tok.RevokedAt != nil {
							revoked = ago(tok.RevokedAt, now)
						}
						t.row(tok.Name, tok.Role, tok.WorkflowPrefix, ago(&tok.CreatedAt, now), expires, revoked)
					}
					return t.flush()
				})
			}
		},
	}
}

func tokensRevoke() *cliCommand {
	return &cliCommand{
		name: "revoke", args: "NAME", nargs: 1,
		summary: "revoke a token",
		help: `Revokes the token named NAME. Every replica refuses it within a few seconds
(--auth-cache-ttl of the service). Revoking a revoked token changes nothing.`,
		examples: []string{"rendezvous tokens revoke ci"},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			return func(ctx context.Context, cl *cli, args []string) error {
				t, err := cl.api.RevokeToken(ctx, args[0])
				if err != nil {
					return err
				}
				if cl.output == outputJSON {
					return printJSON(cl.stdout, t.Raw)
				}
				fmt.Fprintf(cl.stdout, "token %s revoked\n", t.Name)
				return nil
			}
		},
	}
}

func auditGroup() *cliGroup {
	return &cliGroup{
		name:    "audit",
		summary: "read the audit log: who changed what through the API (admin only)",
		about: `Read the audit log (admin only): every change made through the API, who made it,
from where, on what, and how it ended.`,
		commands: []*cliCommand{auditList()},
	}
}

// auditLimitDefault keeps the default listing to what fits a screen.
const auditLimitDefault = 50

func auditList() *cliCommand {
	return &cliCommand{
		name:    "list",
		summary: "list the audit log, newest first",
		help: `Lists the audit log, newest first. --principal (token:NAME, oidc:SUBJECT,
bootstrap:bootstrap), --action (workflow.store, execution.start, execution.cancel,
wait.cancel, event.send, token.create, token.revoke) and --target filter it.`,
		examples: []string{
			"rendezvous audit list",
			"rendezvous audit list --action token.revoke --limit 0 -o json",
			"rendezvous audit list --principal token:ci --since 24h",
		},
		setup: func(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
			var f client.AuditFilter
			var since time.Duration
			fs.StringVar(&f.Principal, "principal", "", "only rows of this principal")
			fs.StringVar(&f.Action, "action", "", "only rows of this action")
			fs.StringVar(&f.Target, "target", "", "only rows about this target (workflow/NAME, execution/ID, token/NAME)")
			fs.DurationVar(&since, "since", 0, "only rows of the last this long (default: all)")
			l := newListing(fs, "audit rows", auditLimitDefault)
			return func(ctx context.Context, cl *cli, _ []string) error {
				if l.limit < 0 || since < 0 {
					return usagef("--limit and --since: must not be negative")
				}
				if since > 0 {
					f.Since = time.Now().Add(-since)
				}
				pages := func(ctx context.Context, p client.PageRequest) (*client.Page[client.AuditRow], error) {
					return cl.api.Audit(ctx, f, p)
				}
				raw := func(r *client.AuditRow) json.RawMessage { return r.Raw }
				return listPages(ctx, cl, l, pages, raw, func(items []client.AuditRow) error {
					now := time.Now()
					t := newTable(cl.stdout, "ID", "WHEN", "PRINCIPAL", "FROM", "ACTION", "TARGET", "OUTCOME", "DETAIL")
					for _, r := range items {
						t.row(strconv.FormatInt(r.ID, 10), ago(&r.At, now), r.Principal, r.RemoteAddr, r.Action, r.Target, r.Outcome, truncate(r.Detail, 60))
					}
					return t.flush()
				})
			}
		},
	}
}
