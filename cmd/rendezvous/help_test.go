package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// helpOf runs the built binary with args ending in --help, as a person pipes it into
// less: the help must be on stdout, with nothing on stderr, and exit 0.
func helpOf(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--help")...)
	cmd.Env = []string{}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "rendezvous %s --help:\n%s", strings.Join(args, " "), stderr.String())
	require.Empty(t, stderr.String(), "rendezvous %s --help wrote to stderr", strings.Join(args, " "))
	require.NotEmpty(t, stdout.String(), "rendezvous %s --help wrote nothing to stdout", strings.Join(args, " "))
	return stdout.String()
}

// commandLine is a command as the top-level help lists it: "  rendezvous NAME …  description".
var commandLine = regexp.MustCompile(`(?m)^  rendezvous (\S+)(.*)$`)

// subcommandLine is a subcommand as its group's help lists it, under "Commands:".
var subcommandLine = regexp.MustCompile(`^  (\S+)`)

// TestHelpTree walks the whole help tree of the built binary — the top level, every
// service command, every operator command and each of its subcommands — and fails on
// help that is not on stdout or on a command listed without a description.
func TestHelpTree(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	top := helpOf(t, bin)
	list, _, ok := strings.Cut(top, "\nExamples:")
	require.True(t, ok, top)
	groups := map[string]*cliGroup{}
	for _, g := range cliGroups() {
		groups[g.name] = g
	}
	walked := 0
	for _, m := range commandLine.FindAllStringSubmatch(list, -1) {
		name, rest := m[1], m[2]
		// A description may go on in the next line, indented; its first line is on the
		// command's own line.
		desc := strings.TrimSpace(rest)
		if g, isGroup := groups[name]; isGroup {
			desc = strings.TrimSpace(strings.TrimPrefix(desc, g.commandList()))
		} else {
			desc = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(desc, "replay "), "[flags]"))
			desc = strings.TrimSpace(strings.TrimPrefix(desc, "[flags]"))
		}
		require.NotEmpty(t, desc, "rendezvous --help lists %q without a description:\n%s", name, m[0])
		walked++
		if name == "version" {
			continue // no flags, no help of its own: it prints the version
		}
		g, isGroup := groups[name]
		if !isGroup {
			help := helpOf(t, bin, name)
			require.Regexp(t, `^Usage: rendezvous `+regexp.QuoteMeta(name)+`( replay)? \[flags\]\n\n\S`, help,
				"rendezvous %s --help: the usage line, then a description", name)
			continue
		}
		help := helpOf(t, bin, name)
		commands, _, ok := strings.Cut(help[strings.Index(help, "\nCommands:\n")+len("\nCommands:\n"):], "\n\n")
		require.True(t, ok, help)
		seen := 0
		for _, line := range strings.Split(commands, "\n") {
			sub := subcommandLine.FindStringSubmatch(line)
			require.NotNil(t, sub, "rendezvous %s --help: %q", name, line)
			c := g.commands[seen]
			require.Equal(t, c.name, sub[1], "rendezvous %s --help lists its commands in order", name)
			desc := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), strings.TrimSpace(c.name+" "+c.args)))
			require.NotEmpty(t, desc, "rendezvous %s --help lists %q without a description", name, c.name)
			subHelp := helpOf(t, bin, name, c.name)
			require.Regexp(t, `^Usage: rendezvous `+name+` `+c.name+` .*\n\n\S`, subHelp,
				"rendezvous %s %s --help: the usage line, then a description", name, c.name)
			seen++
			walked++
		}
		require.Equal(t, len(g.commands), seen, "rendezvous %s --help lists every command", name)
	}
	// Every command the binary dispatches was reached from the top.
	require.Equal(t, len(serviceCommandTable())+1+len(cliGroups())+func() int {
		n := 0
		for _, g := range cliGroups() {
			n += len(g.commands)
		}
		return n
	}(), walked)
}
