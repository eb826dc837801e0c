package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rendezvous-run/rendezvous/workflow/template"
	"github.com/rendezvous-run/rendezvous/workflow/waittime"
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
	Until     string // RFC 3339 instant, or a date (the start of that day in Timezone); one in the past completes at once
	UntilTime string // "HH:MM" or "HH:MM:SS", wall clock in Timezone
	Timezone  string // IANA zone for UntilTime and a date-only Until, default "UTC"
	// Timezones is timezone given as a list: candidates tried in order (a contact's
	// zone, then the account's, then "UTC"), the first that renders to a valid IANA
	// zone wins. A candidate whose template names a missing or null value, or that
	// renders to no valid zone, is skipped, and the node output says why. nil when
	// timezone is one string (Timezone).
	Timezones []string
	// Days restricts UntilTime to weekdays: an array of names ("mon" or "monday"), each
	// possibly a template, or one string — a template rendering to such an array, or a
	// comma-separated list. nil means every day.
	Days any
	// SkipDates are calendar dates (YYYY-MM-DD, in the zone) UntilTime never fires on,
	// such as holidays: given like Days, and an element may render to an array of dates
	// (holidays from the trigger input). nil skips nothing.
	SkipDates any

	warnings []FieldError // see Warnings
}

// Warnings lists a timezone given beside an until that is an instant: the instant's
// own offset places it, so the zone is ignored. It makes *Wait a Warner.
func (w *Wait) Warnings() []FieldError { return w.warnings }

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
	if list, ok := o.m["timezone"].([]any); ok {
		w.Timezones = o.stringList("timezone", list, &errs, func(s string) error {
			_, err := waittime.LoadLocation(s)
			return err
		})
	}
	w.Days = o.listSetting("days", &errs, nil)
	w.SkipDates = o.listSetting("skipDates", &errs, func(s string) error {
		_, err := waittime.ParseDates([]string{s})
		var de *waittime.DateError
		if errors.As(err, &de) {
			return fmt.Errorf("invalid date %q: want YYYY-MM-DD", s)
		}
		return err
	})
	if len(errs) > 0 {
		return w, errs
	}
	if w.Until != "" && !template.HasTemplates(w.Until) && !waittime.IsDateOnly(w.Until) && (w.Timezone != "" || w.Timezones != nil) {
		w.warnings = append(w.warnings, FieldError{Path: o.p("timezone"),
			Message: "ignored: until is an instant with its own offset; timezone places only an until given as a date (YYYY-MM-DD) and untilTime"})
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

// listSetting reads a setting given as an array of strings or as one string (days,
// skipDates): template syntax is checked for each, and check, when given, is applied to
// the plain elements of an array, so that a typo fails when the definition is stored
// even if another field is a template.
func (o *object) listSetting(key string, errs *errList, check func(string) error) any {
	switch x := o.m[key].(type) {
	case string:
		if _, ok := o.checkable(key); ok {
			checkTemplate(errs, o.p(key), x)
		}
		return x
	case []any:
		return o.stringList(key, x, errs, check)
	}
	return nil
}

// stringList collects the string elements of an array setting, checking the template
// syntax of each and check on those without templates.
func (o *object) stringList(key string, list []any, errs *errList, check func(string) error) []string {
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			continue // the schema named it
		}
		out = append(out, s)
		p := indexPath(o.p(key), i)
		if o.rejected[p] {
			continue
		}
		before := len(*errs)
		checkTemplate(errs, p, s)
		if check != nil && len(*errs) == before && !template.HasTemplates(s) {
			if err := check(s); err != nil {
				errs.add(p, "%s", err)
			}
		}
	}
	return out
}

// templated reports whether any field holds a template.
func (w *Wait) templated() bool {
	for _, s := range append([]string{w.For, w.Until, w.UntilTime, w.Timezone}, w.Timezones...) {
		if template.HasTemplates(s) {
			return true
		}
	}
	for _, list := range []any{w.Days, w.SkipDates} {
		switch d := list.(type) {
		case string:
			if template.HasTemplates(d) {
				return true
			}
		case []string:
			for _, s := range d {
				if template.HasTemplates(s) {
					return true
				}
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
		settings := map[string]any{WaitUntil: s}
		if !waittime.IsDateOnly(s) {
			// An instant carries its own offset; the zone has nothing to place.
			at, err := waittime.ParseUntilIn(s, time.UTC)
			if err != nil {
				return TimerPlan{}, &SettingError{Field: WaitUntil, Index: -1, Err: err}
			}
			return TimerPlan{At: at, Settings: settings}, nil
		}
		loc, err := w.location(sc, settings, render)
		if err != nil {
			return TimerPlan{}, err
		}
		at, err := waittime.ParseUntilIn(s, loc)
		if err != nil {
			return TimerPlan{}, &SettingError{Field: WaitUntil, Index: -1, Err: err}
		}
		return TimerPlan{At: at, Settings: settings}, nil
	}
	s, err := render(WaitUntilTime, w.UntilTime)
	if err != nil {
		return TimerPlan{}, err
	}
	tod, err := waittime.ParseTimeOfDay(s)
	if err != nil {
		return TimerPlan{}, &SettingError{Field: WaitUntilTime, Index: -1, Err: err}
	}
	settings := map[string]any{WaitUntilTime: s}
	loc, err := w.location(sc, settings, render)
	if err != nil {
		return TimerPlan{}, err
	}
	names, err := renderList("days", w.Days, sc, false)
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
	if names != nil {
		settings["days"] = names
	}
	dates, err := renderList("skipDates", w.SkipDates, sc, true)
	if err != nil {
		return TimerPlan{}, err
	}
	skip, err := waittime.ParseDates(dates)
	if err != nil {
		var de *waittime.DateError
		if errors.As(err, &de) {
			return TimerPlan{}, &SettingError{Field: "skipDates", Index: de.Index, Err: fmt.Errorf("invalid date %q: want YYYY-MM-DD", de.Value)}
		}
		return TimerPlan{}, &SettingError{Field: "skipDates", Index: -1, Err: err}
	}
	if dates != nil {
		settings["skipDates"] = dates
	}
	return TimerPlan{At: waittime.NextTimeOfDaySkipping(now, tod, loc, days, skip), Settings: settings}, nil
}

// location is the wait's zone, UTC by default, recorded in settings: the one zone, or the
// first valid of its candidates (resolveZone).
func (w *Wait) location(sc *template.Scope, settings map[string]any, render func(field, s string) (string, error)) (*time.Location, error) {
	if w.Timezones != nil {
		return w.resolveZone(sc, settings)
	}
	zone := "UTC"
	if w.Timezone != "" {
		var err error
		if zone, err = render("timezone", w.Timezone); err != nil {
			return nil, err
		}
	}
	loc, err := waittime.LoadLocation(zone)
	if err != nil {
		return nil, &SettingError{Field: "timezone", Index: -1, Err: err}
	}
	settings["timezone"] = zone
	return loc, nil
}

// resolveZone tries the timezone candidates in order and returns the first valid zone.
// It records in settings the zone (timezone), which candidate gave it
// (timezone_candidate, its index) and why each candidate before it was skipped
// (timezone_skipped); when none is valid, the error names every candidate and why.
func (w *Wait) resolveZone(sc *template.Scope, settings map[string]any) (*time.Location, error) {
	skipped := []map[string]any{}
	reasons := make([]string, 0, len(w.Timezones))
	for i, c := range w.Timezones {
		name, why := zoneCandidate(c, sc)
		if why == "" {
			loc, err := waittime.LoadLocation(name)
			if err == nil {
				settings["timezone"] = name
				settings["timezone_candidate"] = i
				settings["timezone_skipped"] = skipped
				return loc, nil
			}
			why = err.Error()
		}
		skipped = append(skipped, map[string]any{"index": i, "candidate": c, "reason": why})
		reasons = append(reasons, fmt.Sprintf("[%d] %s: %s", i, c, why))
	}
	return nil, &SettingError{Field: "timezone", Index: -1,
		Err: fmt.Errorf("no candidate is a valid IANA zone: %s", strings.Join(reasons, "; "))}
}

// zoneCandidate renders one timezone candidate; why says why it is no zone name.
func zoneCandidate(c string, sc *template.Scope) (name, why string) {
	if sc == nil {
		return c, ""
	}
	v, err := template.Render(c, *sc)
	if err != nil {
		return "", err.Error()
	}
	switch x := v.(type) {
	case nil:
		return "", "is null"
	case string:
		if x == "" {
			return "", "is empty"
		}
		return x, ""
	}
	return "", fmt.Sprintf("is %s, not a zone name", describeValue(v))
}

// describeValue names a JSON value's kind for a message.
func describeValue(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case bool:
		return "a boolean"
	}
	return "a number"
}

// renderList renders a list setting (Days, SkipDates) into its strings; nil when the
// setting is absent. With flatten, an element that renders to an array contributes its
// elements (skipDates ["@{_trigger.holidays}", "2026-12-24"]).
func renderList(field string, setting any, sc *template.Scope, flatten bool) ([]string, error) {
	var v any
	switch d := setting.(type) {
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
			return nil, &SettingError{Field: field, Index: -1, Err: err}
		}
	}
	want := "a weekday name"
	if flatten {
		want = "a date"
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
		names := make([]string, 0, len(x))
		for i, e := range x {
			if inner, ok := e.([]any); ok && flatten {
				for _, ie := range inner {
					s, ok := ie.(string)
					if !ok {
						return nil, &SettingError{Field: field, Index: i, Err: fmt.Errorf("want %s, got %v", want, ie)}
					}
					names = append(names, s)
				}
				continue
			}
			s, ok := e.(string)
			if !ok {
				return nil, &SettingError{Field: field, Index: i, Err: fmt.Errorf("want %s, got %v", want, e)}
			}
			names = append(names, s)
		}
		return names, nil
	}
	return nil, &SettingError{Field: field, Index: -1, Err: fmt.Errorf("want an array of %ss or a comma-separated string, got %v", strings.TrimPrefix(strings.TrimPrefix(want, "a "), "an "), v)}
}
