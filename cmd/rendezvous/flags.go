package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/suggest"
	"github.com/rendezvous-run/rendezvous/workflow/waittime"
)

// option is one setting with its flag, its environment variable and its default. The
// list of options is the configuration reference: nothing is read from the environment
// that is not declared here.
type option struct {
	Flag    string
	Env     string
	Default string
	Usage   string
	// Section is the topic the option is listed under in -h ("Kafka", "Executor").
	Section string
	// Value names what the flag takes in -h: DURATION, INT, LIST, URL…; "" for a switch.
	Value string
	set   func(string) error
}

// options binds flags to fields; values come from the flag, else the environment
// variable, else the default.
type options struct {
	name string
	fs   *flag.FlagSet
	opts []*option
	// section is what add files new options under; see section.
	section string
	// summary and examples head and close -h.
	summary  string
	examples []string
	// help receives -h: os.Stdout unless a command gives its own writer. Help asked for
	// is output, so that `rendezvous serve --help | less` pages it; only help shown
	// because of a mistake goes to stderr.
	help io.Writer
	// positional lets arguments follow the flags (the operator commands' subcommands);
	// otherwise one is a mistake.
	positional bool
	// after converts parsed values that the helpers bind with other types.
	after func()
}

func newOptions(name string) *options {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// parse reports errors itself, error first and short; the flag package would print
	// the whole help after its own message.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &options{name: name, fs: fs, help: os.Stdout}
}

// setDefault changes the default of the option already bound to flagName: a command
// that shares another's options but not all its defaults (dev, serve's) says its own in
// -h. It panics on a flag never bound, a mistake of the command's code.
func (o *options) setDefault(flagName, def string) {
	for _, p := range o.opts {
		if p.Flag == flagName {
			if err := p.set(def); err != nil {
				panic(fmt.Sprintf("default of --%s: %v", flagName, err))
			}
			p.Default = def
			return
		}
	}
	panic("no option --" + flagName)
}

// inSection files the options added next under a topic of -h.
func (o *options) inSection(title string) { o.section = title }

func (o *options) add(p *option) {
	p.Section = o.section
	o.opts = append(o.opts, p)
	o.fs.Func(p.Flag, p.Usage, p.set)
}

func (o *options) String(dst *string, flagName, env, def, usage string) {
	*dst = def
	value := "STRING"
	switch {
	case strings.HasSuffix(flagName, "-url") || flagName == "url" || flagName == "server":
		value = "URL"
	case strings.HasSuffix(flagName, "-addr"):
		value = "HOST:PORT"
	case strings.HasSuffix(flagName, "-file"):
		value = "FILE"
	}
	o.add(&option{Flag: flagName, Env: env, Default: def, Usage: usage, Value: value, set: func(s string) error { *dst = s; return nil }})
}

func (o *options) Strings(dst *[]string, flagName, env, usage string) {
	o.add(&option{Flag: flagName, Env: env, Usage: usage + " (comma-separated)", Value: "LIST", set: func(s string) error {
		*dst = nil
		for _, part := range strings.Split(s, ",") {
			if part = strings.TrimSpace(part); part != "" {
				*dst = append(*dst, part)
			}
		}
		return nil
	}})
}

func (o *options) Int(dst *int, flagName, env string, def int, usage string) {
	*dst = def
	o.add(&option{Flag: flagName, Env: env, Default: strconv.Itoa(def), Usage: usage, Value: "INT", set: func(s string) error {
		v, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("not an integer: %q", s)
		}
		*dst = v
		return nil
	}})
}

func (o *options) Duration(dst *time.Duration, flagName, env string, def time.Duration, usage string) {
	*dst = def
	o.add(&option{Flag: flagName, Env: env, Default: def.String(), Usage: usage, Value: "DURATION", set: func(s string) error {
		v, err := parseDuration(s)
		if err != nil {
			return err
		}
		*dst = v
		return nil
	}})
}

// parseDuration reads a duration as definitions do (waittime.ParseDuration: "90s",
// "PT90M", "90 minutes"), so that one spelling works everywhere. A negative value, which
// some settings take to mean "off" (--retention), is read in the Go form.
func parseDuration(s string) (time.Duration, error) {
	if strings.HasPrefix(s, "-") {
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
	}
	d, err := waittime.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration: %w", err)
	}
	return d, nil
}

func (o *options) Bool(dst *bool, flagName, env string, def bool, usage string) {
	*dst = def
	o.add(&option{Flag: flagName, Env: env, Default: strconv.FormatBool(def), Usage: usage, set: func(s string) error {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("not a boolean: %q", s)
		}
		*dst = v
		return nil
	}})
	// Let "--flag" alone mean true, as with flag.Bool.
	f := o.fs.Lookup(flagName)
	f.Value = boolValue{f.Value}
}

type boolValue struct{ flag.Value }

func (boolValue) IsBoolFlag() bool { return true }

// String tolerates the zero boolValue that flag.PrintDefaults makes to find defaults.
func (b boolValue) String() string {
	if b.Value == nil {
		return ""
	}
	return b.Value.String()
}

// parse applies environment variables first, then the command line. -h prints the help
// to o.help and returns flag.ErrHelp; a command-line mistake returns a one-line error
// that names the flag, suggests the closest one and points at -h.
func (o *options) parse(args []string) error {
	for _, p := range o.opts {
		if v, ok := os.LookupEnv(p.Env); ok && p.Env != "" {
			if err := p.set(v); err != nil {
				return fmt.Errorf("%s: %w", p.Env, err)
			}
		}
	}
	if err := o.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			o.printHelp(o.help)
			return err
		}
		return fmt.Errorf("%w (run \"rendezvous %s --help\" for its flags)", flagError(o.fs, err), o.name)
	}
	if o.fs.NArg() > 0 && !o.positional {
		return fmt.Errorf("unexpected argument %q; run \"rendezvous %s --help\" for its flags", o.fs.Arg(0), o.name)
	}
	if o.after != nil {
		o.after()
	}
	return nil
}

// flagError rewords the flag package's errors with double dashes and adds the closest
// flag to a misspelled one.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		msg = "unknown flag " + dashes(name)
		if s := suggest.Closest(name, names); s != "" {
			msg += "; did you mean " + dashes(s) + "?"
		}
	} else if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		msg = dashes(name) + " needs a value"
	} else if rest, ok := strings.CutPrefix(msg, "invalid value "); ok {
		// invalid value "x" for flag -name: reason
		if i := strings.Index(rest, " for flag -"); i >= 0 {
			name, reason, _ := strings.Cut(rest[i+len(" for flag -"):], ": ")
			msg = dashes(name) + ": " + reason
		}
	}
	return errors.New(msg)
}

// dashes writes a flag as people type it: -o, --server.
func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// printHelp writes the command's help: summary, flags grouped by section with their
// environment variables and defaults, examples.
func (o *options) printHelp(w io.Writer) {
	fmt.Fprintf(w, "Usage: rendezvous %s [flags]\n", o.name)
	if o.summary != "" {
		fmt.Fprintf(w, "\n%s\n", o.summary)
	}
	var sections []string
	for _, p := range o.opts {
		if !slices.Contains(sections, p.Section) {
			sections = append(sections, p.Section)
		}
	}
	for _, s := range sections {
		title := s
		if title == "" {
			title = "Flags"
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, p := range o.opts {
			if p.Section == s {
				p.printHelp(w)
			}
		}
	}
	if len(o.examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range o.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "\nEvery flag may also be set by its environment variable; a flag wins over it.\n")
}

// helpIndent starts the usage line of an option in -h; commandHelp in the tests reads it.
const helpIndent = "        "

func (p *option) printHelp(w io.Writer) {
	fmt.Fprintf(w, "  --%s", p.Flag)
	if p.Value != "" {
		fmt.Fprintf(w, " %s", p.Value)
	}
	fmt.Fprintf(w, "\n%s%s (env %s, default %q)\n", helpIndent, p.Usage, p.Env, p.Default)
}
