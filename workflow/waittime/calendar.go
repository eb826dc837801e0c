package waittime

import (
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // zone data for containers without zoneinfo; see the package comment
)

// TimeOfDay is a wall-clock time without a date or zone.
type TimeOfDay struct{ Hour, Minute, Second int }

// String formats t as "09:30", or "09:30:15" when it has seconds, which
// ParseTimeOfDay reads back.
func (t TimeOfDay) String() string {
	if t.Second != 0 {
		return fmt.Sprintf("%02d:%02d:%02d", t.Hour, t.Minute, t.Second)
	}
	return fmt.Sprintf("%02d:%02d", t.Hour, t.Minute)
}

func (t TimeOfDay) valid() bool {
	return t.Hour >= 0 && t.Hour < 24 && t.Minute >= 0 && t.Minute < 60 && t.Second >= 0 && t.Second < 60
}

// ParseTimeOfDay parses the "untilTime" of a wait: "HH:MM" or "HH:MM:SS" on
// a 24-hour clock from 00:00 to 23:59:59. The hour may have one digit
// ("9:30"); minutes and seconds have two. Errors name s.
func ParseTimeOfDay(s string) (TimeOfDay, error) {
	bad := fmt.Errorf("invalid time of day %q: want HH:MM or HH:MM:SS from 00:00 to 23:59:59", s)
	parts := strings.Split(s, ":")
	if len(parts) != 2 && len(parts) != 3 {
		return TimeOfDay{}, bad
	}
	var tod TimeOfDay
	var ok bool
	if tod.Hour, ok = atoi(parts[0], 1, 2); !ok || tod.Hour > 23 {
		return TimeOfDay{}, bad
	}
	if tod.Minute, ok = atoi(parts[1], 2, 2); !ok || tod.Minute > 59 {
		return TimeOfDay{}, bad
	}
	if len(parts) == 3 {
		if tod.Second, ok = atoi(parts[2], 2, 2); !ok || tod.Second > 59 {
			return TimeOfDay{}, bad
		}
	}
	return tod, nil
}

// Days is a set of weekdays: bit i is time.Weekday(i). The zero value means
// every day, and so does a set holding only bits above Saturday, so that
// NextTimeOfDay always has a day to fire on.
type Days uint8

const everyDay Days = 1<<7 - 1

// Has reports whether w is in d; it is true for every w when d is empty.
func (d Days) Has(w time.Weekday) bool {
	if d&everyDay == 0 {
		return true
	}
	return w >= time.Sunday && w <= time.Saturday && d&(1<<w) != 0
}

var weekdayNames = map[string]time.Weekday{
	"sun": time.Sunday, "sunday": time.Sunday,
	"mon": time.Monday, "monday": time.Monday,
	"tue": time.Tuesday, "tuesday": time.Tuesday,
	"wed": time.Wednesday, "wednesday": time.Wednesday,
	"thu": time.Thursday, "thursday": time.Thursday,
	"fri": time.Friday, "friday": time.Friday,
	"sat": time.Saturday, "saturday": time.Saturday,
}

// DayError is a weekday name ParseDays does not know; Index is its position in the list.
type DayError struct {
	Index int
	Name  string
}

func (e *DayError) Error() string {
	return fmt.Sprintf("days[%d]: unknown weekday %q", e.Index, e.Name)
}

// ParseDays parses the "days" of a wait: "mon".."sun" or "monday".."sunday",
// in any ASCII case; duplicates are fine. An empty list is the zero Days,
// every day. An error names the first unknown entry and its index.
func ParseDays(names []string) (Days, error) {
	var d Days
	for i, name := range names {
		// ASCII-only folding: strings.ToLower would map the Kelvin sign or a
		// dotted capital I onto ASCII letters.
		lower := []byte(name)
		for j, c := range lower {
			if c >= 'A' && c <= 'Z' {
				lower[j] = c - 'A' + 'a'
			}
		}
		w, ok := weekdayNames[string(lower)]
		if !ok {
			return 0, &DayError{Index: i, Name: name}
		}
		d |= 1 << w
	}
	return d, nil
}

// LoadLocation loads the "timezone" of a wait by IANA name, such as
// "Europe/Berlin" or "UTC". "" and "Local" are rejected: a wait must fire at
// the same instant whichever server computes it. Errors name name.
func LoadLocation(name string) (*time.Location, error) {
	if name == "" || name == "Local" {
		return nil, fmt.Errorf("invalid timezone %q: name an IANA zone such as Europe/Berlin or UTC; a wait must not depend on the server's zone", name)
	}
	if loc, ok := locations.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("invalid timezone %q", name)
	}
	locations.Store(name, loc)
	return loc, nil
}

// locations caches loaded zones: time.LoadLocation reads and parses the zone file on
// every call, and every wait node with untilTime loads its zone when it runs. A
// *time.Location is immutable and safe to share; the set of zone names is small.
var locations sync.Map

// searchDays bounds the days NextTimeOfDay looks at. Today and the next seven
// hold every weekday, which suffices whenever local dates only move forward.
// The second week covers the one place the zone database moves them back:
// Alaska in 1867 (America/Sitka and neighbours) repeated a whole day, so the
// first occurrence of a date up to a day ahead can lie before now.
const searchDays = 15

// NextTimeOfDay returns the first instant strictly after now at which the
// wall clock in loc reads tod on a date whose weekday days allows. The
// result is in UTC.
//
// If tod does not exist on a date (the clocks jump over it) it fires at the
// instant of the jump. If it occurs twice, only the first occurrence counts:
// when now lies between the two, the answer is on the next allowed day.
//
// It panics if tod is out of range (use ParseTimeOfDay) or loc is nil.
func NextTimeOfDay(now time.Time, tod TimeOfDay, loc *time.Location, days Days) time.Time {
	return NextTimeOfDaySkipping(now, tod, loc, days, nil)
}

// NextTimeOfDaySkipping is NextTimeOfDay on a calendar without the dates in
// skip (holidays): "the next business day at 09:00" is days mon…fri with the
// holidays skipped. A date is the local date in loc, so a skipped
// 2026-12-25 in Europe/Berlin is the Berlin day; the rules for skipped and
// repeated wall times are unchanged.
func NextTimeOfDaySkipping(now time.Time, tod TimeOfDay, loc *time.Location, days Days, skip Dates) time.Time {
	if !tod.valid() {
		panic(fmt.Sprintf("waittime: time of day out of range: %02d:%02d:%02d", tod.Hour, tod.Minute, tod.Second))
	}
	y, m, d := now.In(loc).Date()
	secs := int64(tod.Hour*3600 + tod.Minute*60 + tod.Second)
	// Each skipped date can push the answer by at most a week (to the same
	// weekday of the next week), so the search stays bounded and always ends.
	for i := range searchDays + 7*len(skip) {
		// Date arithmetic in UTC, which has no transitions, so d+i is exactly
		// the i-th calendar date after today.
		date := time.Date(y, m, d+i, 0, 0, 0, 0, time.UTC)
		if !days.Has(date.Weekday()) {
			continue
		}
		if _, skipped := skip[DateOf(date)]; skipped {
			continue
		}
		if t := firstAt(loc, date.Unix()+secs); t.After(now) {
			return t.UTC()
		}
	}
	panic(fmt.Sprintf("waittime: no %s in %s within %d days of %s", tod, loc, searchDays, now))
}

// Date is a calendar date without a zone: a day to skip, read in the zone of
// the wait.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf is the calendar date t shows in its own location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{Year: y, Month: m, Day: d}
}

func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Day) }

// Dates is a set of calendar dates.
type Dates map[Date]struct{}

// MaxSkipDates bounds the dates one wait may skip: enough for every day of a
// few years of holidays, and a bound on NextTimeOfDaySkipping's search.
const MaxSkipDates = 1000

// DateError is an entry ParseDates rejects; Index is its position in the list.
type DateError struct {
	Index int
	Value string
}

func (e *DateError) Error() string {
	return fmt.Sprintf("skipDates[%d]: invalid date %q: want YYYY-MM-DD", e.Index, e.Value)
}

// ParseDates parses the "skipDates" of a wait: calendar dates written
// YYYY-MM-DD (2026-12-25); duplicates are fine. An error names the first bad
// entry and its index (a *DateError), or the list's length when it has more
// than MaxSkipDates entries.
func ParseDates(values []string) (Dates, error) {
	if len(values) > MaxSkipDates {
		return nil, fmt.Errorf("%d dates to skip, more than the %d allowed", len(values), MaxSkipDates)
	}
	set := make(Dates, len(values))
	for i, v := range values {
		t, err := time.Parse(time.DateOnly, v)
		if err != nil || len(v) != len(time.DateOnly) {
			return nil, &DateError{Index: i, Value: v}
		}
		set[DateOf(t)] = struct{}{}
	}
	return set, nil
}

// offsetWindow bounds how far from a wall time, read as if it were UTC, the
// instants that show it can lie: the largest offsets in the database are
// about ±16 hours (local mean time in the 1800s).
const offsetWindow = 48 * 60 * 60

// firstAt returns the first instant at which the wall clock in loc reads
// wall, given as seconds since 1970-01-01 00:00 of local wall-clock time, or
// if no instant does, the instant the clocks jump over it.
func firstAt(loc *time.Location, wall int64) time.Time {
	spans := zoneSpans(loc, wall-offsetWindow, wall+offsetWindow)

	// An instant shows wall exactly when wall minus its own offset is that
	// instant. Every such instant lies in the window, so trying each offset
	// in force there finds them all: one normally, two in a fall-back.
	var first time.Time
	found := false
	for _, sp := range spans {
		t := time.Unix(wall-int64(sp.offset), 0)
		if _, off := t.In(loc).Zone(); off == sp.offset && (!found || t.Before(first)) {
			first, found = t, true
		}
	}
	if found {
		return first
	}

	// No instant shows wall: a transition moved the clock from before wall to
	// after it. Its instant is the first one after the gap.
	for k := 1; k < len(spans); k++ {
		jump := spans[k].start
		if jump+int64(spans[k-1].offset) <= wall && wall < jump+int64(spans[k].offset) {
			return time.Unix(jump, 0)
		}
	}

	// Unreachable with consistent zone data: wall either shows or falls in a
	// gap. Fall back to the offset at wall read as an instant rather than
	// fail a wait.
	_, off := time.Unix(wall, 0).In(loc).Zone()
	return time.Unix(wall-int64(off), 0)
}

// span is a stretch of time with one UTC offset.
type span struct {
	start  int64 // Unix seconds of the transition into it; for the first span, the window start
	offset int   // seconds east of UTC
}

// maxSpans guards the walk in zoneSpans; no zone has more than a handful of
// transitions in four days.
const maxSpans = 32

// zoneSpans lists the offsets of loc from the instant from until the last
// transition at or before the instant to, in order.
func zoneSpans(loc *time.Location, from, to int64) []span {
	t := time.Unix(from, 0).In(loc)
	spans := make([]span, 0, 4)
	for range maxSpans {
		_, off := t.Zone()
		spans = append(spans, span{start: t.Unix(), offset: off})
		_, end := t.ZoneBounds()
		if end.IsZero() || end.Unix() > to || !end.After(t) {
			break
		}
		t = end
	}
	return spans
}
