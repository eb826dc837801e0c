package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// option is one setting with its flag, its environment variable and its default. The
// list of options is the configuration reference: nothing is read from the environment
// that is not declared here.
type option struct {
	Flag    string
	Env     string
	Default string
	Usage   string
	set     func(string) error
}

// options binds flags to fields; values come from the flag, else the environment
// variable, else the default.
type options struct {
	fs   *flag.FlagSet
	opts []*option
	// after converts parsed values that the helpers bind with other types.
	after func()
}

func newOptions(name string) *options {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &options{fs: fs}
}

func (o *options) add(p *option) {
	o.opts = append(o.opts, p)
	o.fs.Func(p.Flag, fmt.Sprintf("%s (env %s, default %q)", p.Usage, p.Env, p.Default), p.set)
}

func (o *options) String(dst *string, flagName, env, def, usage string) {
	*dst = def
	o.add(&option{Flag: flagName, Env: env, Default: def, Usage: usage, set: func(s string) error { *dst = s; return nil }})
}

func (o *options) Strings(dst *[]string, flagName, env, usage string) {
	o.add(&option{Flag: flagName, Env: env, Usage: usage + " (comma-separated)", set: func(s string) error {
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
	o.add(&option{Flag: flagName, Env: env, Default: strconv.Itoa(def), Usage: usage, set: func(s string) error {
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
	o.add(&option{Flag: flagName, Env: env, Default: def.String(), Usage: usage, set: func(s string) error {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("not a duration: %q", s)
		}
		*dst = v
		return nil
	}})
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

// parse applies environment variables first, then the command line.
func (o *options) parse(args []string) error {
	for _, p := range o.opts {
		if v, ok := os.LookupEnv(p.Env); ok && p.Env != "" {
			if err := p.set(v); err != nil {
				return fmt.Errorf("%s: %w", p.Env, err)
			}
		}
	}
	if err := o.fs.Parse(args); err != nil {
		return err
	}
	if o.after != nil {
		o.after()
	}
	return nil
}
