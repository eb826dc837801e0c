package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/template"
	"github.com/rendezvous-run/rendezvous/internal/waittime"
)

// TypeWait is the time-based wait node: it resumes after a delay, at an instant, or at
// the next time of day in a timezone.
const TypeWait = "wait"

// Wait is the configuration of a wait node. Exactly one of For, Until and UntilTime is
// set. Every field may hold templates (a per-contact timezone is
// "@{_trigger.timezone}"), so values are only known when the node runs; a definition
// whose values are plain is checked completely when it is stored.
type Wait struct {
	For       string // Go ("90m") or ISO-8601 ("PT90M") duration
	Until     string // RFC 3339 instant; one in the past completes at once
	UntilTime string // "HH:MM" or "HH:MM:SS", wall clock in Timezone
	Timezone  string // IANA zone for UntilTime, default "UTC"
	// Days restricts UntilTime to weekdays: an array of names ("mon" or "monday"), each
	// possibly a template, or one string — a template rendering to such an array, or a
	// comma-separated list. nil means every day.
	Days any
}

// Wait modes, named after the field that selects them.
const (
	WaitFor       = "for"
	WaitUntil     = "until"
	WaitUntilTime = "untilTime"
)

// Mode returns which of For, Until and UntilTime is set.
func (w *Wait) Mode() string {
	switch {
	case w.For != "":
		return WaitFor
	case w.Until != "":
		return WaitUntil
	}
	return WaitUntilTime
}

// ParseWaitNode is the NodeParser for wait nodes; config is a *Wait. The
// data is validated against wait.json first (types, exactly one mode,
// timezone and days only with untilTime); this checks template syntax and
// evaluates plain values.
func ParseWaitNode(data json.RawMessage, path string) (any, []FieldError) {
	var errs errList
	o, ok := parseNodeData(TypeWait, data, path, &errs)
	if !ok {
		return nil, errs
	}
	w := &Wait{
		For:       o.str(WaitFor, ""),
		Until:     o.str(WaitUntil, ""),
		UntilTime: o.str(WaitUntilTime, ""),
		Timezone:  o.str("timezone", ""),
	}
	for _, key := range []string{WaitFor, WaitUntil, WaitUntilTime, "timezone"} {
		if v, ok := o.checkable(key); ok {
			if s, ok := v.(string); ok {
				checkTemplate(&errs, o.p(key), s)
			}
		}
	}
	switch x := o.m["days"].(type) {
	case string:
		w.Days = x
		if _, ok := o.checkable("days"); ok {
			checkTemplate(&errs, o.p("days"), x)
		}
	case []any:
		days := make([]string, 0, len(x))
		for i, e := range x {
			if s, ok := e.(string); ok {
				days = append(days, s)
				if p := indexPath(o.p("days"), i); !o.rejected[p] {
					checkTemplate(&errs, p, s)
				}
			}
		}
		w.Days = days
	}
	if len(errs) > 0 {
		return w, errs
	}
	// Plain values are checked now, so a typo in a zone fails when the definition is
	// stored rather than when an execution reaches the node.
	if !w.templated() {
		if _, err := w.Plan(time.Now(), nil); err != nil {
			var se *SettingError
			if errors.As(err, &se) {
				errs.add(se.path(o.path), "%s", se.Err)
			} else {
				errs.add(path, "%s", err)
			}
		}
	}
	return w, errs
}

// templated reports whether any field holds a template.
func (w *Wait) templated() bool {
	for _, s := range []string{w.For, w.Until, w.UntilTime, w.Timezone} {
		if template.HasTemplates(s) {
			return true
		}
	}
	switch d := w.Days.(type) {
	case string:
		return template.HasTemplates(d)
	case []string:
		for _, s := range d {
			if template.HasTemplates(s) {
				return true
			}
		}
	}
	return false
}

// SettingError is a wait setting that could not be evaluated; Err names the bad value.
// Index is the position of the bad element when Field is a list (days), else -1.
type SettingError struct {
	Field string
	Index int
	Err   error
}

// path is the setting's location relative to the node data, e.g. "days[2]".
func (e *SettingError) path(base string) string {
	p := childPath(base, e.Field)
	if e.Index >= 0 {
		p = indexPath(p, e.Index)
	}
	return p
}

func (e *SettingError) Error() string { return e.path("") + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// TimerPlan is a wait node evaluated at one moment: when it resumes, and its settings as
// rendered (stored with the wait and shown in the node output).
type TimerPlan struct {
	At       time.Time
	Settings map[string]any
}

// Plan renders the node's templates with sc (nil: values are used as they are) and
// computes when the wait resumes, seen from now. An error is a *SettingError naming the
// field and its bad value, or a template error.
func (w *Wait) Plan(now time.Time, sc *template.Scope) (TimerPlan, error) {
	render := func(field, s string) (string, error) {
		if sc == nil {
			return s, nil
		}
		out, err := template.RenderString(s, *sc)
		if err != nil {
			return "", &SettingError{Field: field, Index: -1, Err: err}
		}
		return out, nil
	}
	switch w.Mode() {
	case WaitFor:
		s, err := render(WaitFor, w.For)
		if err != nil {
			return TimerPlan{}, err
		}
		d, err := waittime.ParseDuration(s)
		if err != nil {
			return TimerPlan{}, &SettingError{Field: WaitFor, Index: -1, Err: err}
		}
		return TimerPlan{At: now.Add(d), Settings: map[string]any{WaitFor: s}}, nil
	case WaitUntil:
		s, err := render(WaitUntil, w.Until)
		if err != nil {
			return TimerPlan{}, err
		}
		at, err := waittime.ParseUntil(s)
		if err != nil {
			return TimerPlan{}, &SettingError{Field: WaitUntil, Index: -1, Err: err}
		}
		return TimerPlan{At: at, Settings: map[string]any{WaitUntil: s}}, nil
	}
	s, err := render(WaitUntilTime, w.UntilTime)
	if err != nil {
		return TimerPlan{}, err
	}
	tod, err := waittime.ParseTimeOfDay(s)
	if err != nil {
		return TimerPlan{}, &SettingError{Field: WaitUntilTime, Index: -1, Err: err}
	}
	zone := "UTC"
	if w.Timezone != "" {
		if zone, err = render("timezone", w.Timezone); err != nil {
			return TimerPlan{}, err
		}
	}
	loc, err := waittime.LoadLocation(zone)
	if err != nil {
		return TimerPlan{}, &SettingError{Field: "timezone", Index: -1, Err: err}
	}
	names, err := w.dayNames(sc)
	if err != nil {
		return TimerPlan{}, err
	}
	days, err := waittime.ParseDays(names)
	if err != nil {
		var de *waittime.DayError
		if errors.As(err, &de) {
			return TimerPlan{}, &SettingError{Field: "days", Index: de.Index, Err: fmt.Errorf("unknown weekday %q", de.Name)}
		}
		return TimerPlan{}, &SettingError{Field: "days", Index: -1, Err: err}
	}
	settings := map[string]any{WaitUntilTime: s, "timezone": zone}
	if names != nil {
		settings["days"] = names
	}
	return TimerPlan{At: waittime.NextTimeOfDay(now, tod, loc, days), Settings: settings}, nil
}

// dayNames renders Days into weekday names; nil when no days are given.
func (w *Wait) dayNames(sc *template.Scope) ([]string, error) {
	var v any
	switch d := w.Days.(type) {
	case nil:
		return nil, nil
	case string:
		v = d
	case []string:
		arr := make([]any, len(d))
		for i, s := range d {
			arr[i] = s
		}
		v = arr
	}
	if sc != nil {
		var err error
		if v, err = template.Render(v, *sc); err != nil {
			return nil, &SettingError{Field: "days", Index: -1, Err: err}
		}
	}
	switch x := v.(type) {
	case string:
		var names []string
		for _, part := range strings.Split(x, ",") {
			if part = strings.TrimSpace(part); part != "" {
				names = append(names, part)
			}
		}
		return names, nil
	case []any:
		names := make([]string, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, &SettingError{Field: "days", Index: i, Err: fmt.Errorf("want a weekday name, got %v", e)}
			}
			names[i] = s
		}
		return names, nil
	}
	return nil, &SettingError{Field: "days", Index: -1, Err: fmt.Errorf("want an array of weekday names or a comma-separated string, got %v", v)}
}
