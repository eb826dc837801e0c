package main

// The operator commands (workflows, executions, waits, events) are clients of a running
// service's HTTP API, never of its database: they work against any replica, through
// any proxy, with nothing but a URL. This file holds what they share: dispatch, flags,
// help, exit status and error lines.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rendezvous-run/rendezvous/client"
	"github.com/rendezvous-run/rendezvous/internal/suggest"
)

// Exit status of the operator commands, so that scripts can tell what failed.
const (
	exitOK = 0
	// exitRefused: the server answered with a 4xx problem (not found, conflict,
	// invalid definition or query).
	exitRefused = 1
	// exitUsage: the command line is wrong, or a file or --input it names cannot be read.
	exitUsage = 2
	// exitUnavailable: no usable answer (unreachable, timed out, 5xx, not the API).
	exitUnavailable = 3
)

const exitStatusHelp = `Exit status:
  0  success
  1  the server refused the request (4xx: not found, conflict, invalid definition or query)
  2  usage: unknown command or flag, wrong arguments, unreadable file or --input
  3  no usable answer: server unreachable, timed out, 5xx, or not a rendezvous API
`

const (
	serverDefault        = "http://127.0.0.1:8080"
	clientTimeoutDefault = 30 * time.Second
)

// Output formats of -o.
const (
	outputTable = "table"
	outputWide  = "wide"
	outputJSON  = "json"
)

// outputLong is the long name of -o.
const outputLong = "output"

const outputHelp = "`FORMAT`: \"table\" (aligned columns), \"wide\" (more columns) or \"json\" (the API's JSON; a list is one array of every item fetched)"

// cliGroup is one operator command (waits) and its subcommands (list, get, cancel).
type cliGroup struct {
	name, summary, about string
	commands             []*cliCommand
}

// cliCommand is one subcommand. setup binds its own flags and returns what runs it
// once the command line is parsed.
type cliCommand struct {
	name string
	// args names the positional arguments in the usage line: "ID", "EXECUTION NODE".
	args string
	// nargs is how many positional arguments the command takes; maxArgs, when not 0,
	// allows more: up to maxArgs, or any number when negative.
	nargs, maxArgs int
	summary, help  string
	examples       []string
	setup          func(fs *flag.FlagSet) func(ctx context.Context, cl *cli, args []string) error
}

// cli is what a running subcommand uses.
type cli struct {
	api            *client.Client
	stdin          io.Reader
	stdout, stderr io.Writer
	output         string
	// timeout bounds each request, and the whole of a --wait-for.
	timeout time.Duration
}

func cliGroups() []*cliGroup {
	return []*cliGroup{workflowsGroup(), executionsGroup(), waitsGroup(), eventsGroup(), tokensGroup(), auditGroup()}
}

// runCLI runs `rendezvous <group> …` and returns the exit status.
func runCLI(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var g *cliGroup
	for _, c := range cliGroups() {
		if c.name == args[0] {
			g = c
		}
	}
	if g == nil {
		fmt.Fprintf(stderr, "error: unknown command %q\n", args[0])
		return exitUsage
	}
	var server, token string
	var timeout time.Duration
	o := cliOptions(g.name, &server, &token, &timeout)
	// The group's help is g.printHelp, with its commands.
	o.help = io.Discard
	err := o.parse(args[1:])
	if errors.Is(err, flag.ErrHelp) {
		g.printHelp(stdout, o)
		return exitOK
	}
	if err != nil {
		return usageFailure(stderr, "rendezvous "+g.name, flagError(o.fs, err))
	}
	if o.fs.NArg() == 0 {
		g.printHelp(stderr, o)
		return usageFailure(stderr, "rendezvous "+g.name, errors.New("missing command"))
	}
	var cmd *cliCommand
	for _, c := range g.commands {
		if c.name == o.fs.Arg(0) {
			cmd = c
		}
	}
	if cmd == nil {
		err := fmt.Errorf("unknown command %q", o.fs.Arg(0))
		if s := suggest.Closest(o.fs.Arg(0), g.commandNames()); s != "" {
			err = fmt.Errorf("%w; did you mean %q?", err, s)
		}
		return usageFailure(stderr, "rendezvous "+g.name, err)
	}
	name := "rendezvous " + g.name + " " + cmd.name

	cl := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	// The group's values are the defaults, so --server works before or after the
	// subcommand and the environment is read once.
	fs.StringVar(&server, "server", server, "base `URL` of the rendezvous HTTP API (env RENDEZVOUS_SERVER)")
	fs.DurationVar(&timeout, "timeout", timeout, "give up on a request after this long (env RENDEZVOUS_CLIENT_TIMEOUT)")
	fs.StringVar(&token, "token", token, "bearer token sent to the API (env RENDEZVOUS_TOKEN; prefer the variable: flags show in process lists)")
	fs.StringVar(&cl.output, "o", outputTable, outputHelp)
	fs.StringVar(&cl.output, outputLong, outputTable, outputHelp)
	run := cmd.setup(fs)
	pos, err := parseInterspersed(fs, o.fs.Args()[1:])
	if errors.Is(err, flag.ErrHelp) {
		cmd.printHelp(stdout, name, fs)
		return exitOK
	}
	if err != nil {
		err = flagError(fs, err)
	}
	if err == nil && !cmd.takes(len(pos)) {
		err = fmt.Errorf("want %s, got %d argument%s", argsWanted(cmd), len(pos), pluralS(len(pos)))
	}
	if err == nil && cl.output != outputTable && cl.output != outputWide && cl.output != outputJSON {
		err = fmt.Errorf("-o: want table, wide or json, not %q", cl.output)
	}
	if err == nil && timeout <= 0 {
		err = errors.New("--timeout: must be positive")
	}
	if err == nil {
		cl.api, err = client.New(server, &http.Client{Timeout: timeout})
		cl.timeout = timeout
	}
	if err == nil {
		cl.api = cl.api.WithToken(token)
	}
	if err != nil {
		return usageFailure(stderr, name, err)
	}
	return report(stderr, name, cl.api.Server(), run(ctx, cl, pos))
}

// cliOptions binds the flags every operator command shares; they are the ones with an
// environment variable, and the only ones the configuration reference lists.
func cliOptions(group string, server, token *string, timeout *time.Duration) *options {
	o := newOptions(group)
	o.positional = true
	o.String(server, "server", "RENDEZVOUS_SERVER", serverDefault, "base URL of the rendezvous HTTP API")
	o.String(token, "token", "RENDEZVOUS_TOKEN", "", "bearer token sent to the API (prefer the variable: flags show in process lists)")
	o.Duration(timeout, "timeout", "RENDEZVOUS_CLIENT_TIMEOUT", clientTimeoutDefault, "give up on a request after this long")
	return o
}

// parseInterspersed parses flags wherever they stand among the positional arguments
// (`waits get ID -o json` as well as `waits get -o json ID`), which the flag package
// alone stops at the first positional one.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

func argsWanted(c *cliCommand) string {
	if c.nargs == 0 && c.maxArgs == 0 {
		return "no arguments"
	}
	return c.args
}

// takes says whether n positional arguments fit the command.
func (c *cliCommand) takes(n int) bool {
	switch {
	case c.maxArgs < 0:
		return n >= c.nargs
	case c.maxArgs > 0:
		return n >= c.nargs && n <= c.maxArgs
	}
	return n == c.nargs
}

// commandNames lists the group's subcommands, in help order.
func (g *cliGroup) commandNames() []string {
	var names []string
	for _, c := range g.commands {
		names = append(names, c.name)
	}
	return names
}

// commandList is the group's subcommands as the usage text shows them: apply|list|get.
func (g *cliGroup) commandList() string { return strings.Join(g.commandNames(), "|") }

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// usageError is a mistake on the command line, or input it names that cannot be read.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// parseID reads a UUID argument; what names it goes into the message.
func parseID(what, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, usagef("%s %q is not a UUID", what, s)
	}
	return id, nil
}

func usageFailure(stderr io.Writer, name string, err error) int {
	fmt.Fprintf(stderr, "error: %s: %v\nRun %q for help.\n", name, err, name+" --help")
	return exitUsage
}

// report prints err, if any, as one line on stderr (an invalid definition adds one
// indented line per problem) and returns the exit status it stands for.
func report(stderr io.Writer, name, server string, err error) int {
	if err == nil {
		return exitOK
	}
	var uerr usageError
	var aerr *client.Error
	var terr *client.TransportError
	var rerr *client.ResponseError
	switch {
	case errors.As(err, &uerr):
		return usageFailure(stderr, name, err)
	case errors.As(err, &aerr):
		if len(aerr.Errors) == 0 {
			fmt.Fprintf(stderr, "error: %v\n", err)
		} else {
			var in inFile
			if errors.As(err, &in) {
				fmt.Fprintf(stderr, "error: %s: %s\n", in.label, aerr.Headline())
			} else {
				fmt.Fprintf(stderr, "error: %s\n", aerr.Headline())
			}
			for _, fe := range aerr.Errors {
				fmt.Fprintf(stderr, "  %s\n", oneLine(fe.String()))
			}
		}
		if aerr.Status >= 400 && aerr.Status < 500 {
			return exitRefused
		}
		return exitUnavailable
	case errors.As(err, &terr):
		fmt.Fprintf(stderr, "error: cannot reach rendezvous at %s (--server, env RENDEZVOUS_SERVER): %v\n", server, terr.Err)
		return exitUnavailable
	case errors.As(err, &rerr):
		fmt.Fprintf(stderr, "error: %v (is %s a rendezvous server?)\n", err, server)
		return exitUnavailable
	}
	fmt.Fprintf(stderr, "error: %s: %v\n", name, err)
	return exitRefused
}

func (g *cliGroup) printHelp(w io.Writer, o *options) {
	fmt.Fprintf(w, "Usage: rendezvous %s <command> [flags]\n\n%s\n\nCommands:\n", g.name, g.about)
	width := 0
	for _, c := range g.commands {
		width = max(width, len(c.name+" "+c.args))
	}
	for _, c := range g.commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintf(w, "\nFlags of every %s command (before or after the command, or before %q):\n", g.name, g.name)
	for _, p := range o.opts {
		p.printHelp(w)
	}
	fmt.Fprintf(w, "\n%s\nRun \"rendezvous %s <command> --help\" for a command's flags and examples.\n", exitStatusHelp, g.name)
}

func (c *cliCommand) printHelp(w io.Writer, name string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s", name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, " [flags]\n\n%s\n\nFlags:\n", c.help)
	printFlags(w, fs)
	if len(c.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range c.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "\n%s", exitStatusHelp)
}

// printFlags lists a subcommand's flags as people type them (-o, --server), each with
// what it takes and its default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		switch f.Name {
		case outputLong:
			return // listed with -o
		case "o":
			fmt.Fprintf(w, "  -o, --%s", outputLong)
		default:
			fmt.Fprintf(w, "  %s", dashes(f.Name))
		}
		value, usage := flag.UnquoteUsage(f)
		if value != "" {
			fmt.Fprintf(w, " %s", strings.ToUpper(value))
		}
		fmt.Fprintf(w, "\n%s%s", helpIndent, usage)
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "[]" {
			fmt.Fprintf(w, " (default %q)", def)
		}
		fmt.Fprintln(w)
	})
}

// inFile says which file named on the command line an error is about.
type inFile struct {
	label string
	err   error
}

func (e inFile) Error() string { return e.label + ": " + e.err.Error() }
func (e inFile) Unwrap() error { return e.err }

// repeatedFlag is a flag that may be given several times.
type repeatedFlag []string

func (l *repeatedFlag) String() string { return strings.Join(*l, ",") }
func (l *repeatedFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// readInput reads a file named on the command line; "-" is stdin, read once.
func (cl *cli) readInput(path string) ([]byte, error) {
	if path == "-" {
		if cl.stdin == nil {
			return nil, usagef("stdin: already read")
		}
		b, err := io.ReadAll(cl.stdin)
		cl.stdin = nil
		if err != nil {
			return nil, usagef("reading stdin: %w", err)
		}
		return b, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{err}
	}
	return b, nil
}
