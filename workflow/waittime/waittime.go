// Package waittime computes when a time-based wait node of a workflow fires.
//
// A wait node names its deadline in one of three ways:
//
//	{"for": "90m"}                                  elapsed time, see ParseDuration
//	{"until": "2027-01-31T09:00:00+01:00"}          an instant, see ParseUntil
//	{"untilTime": "09:30", "timezone": "Europe/Berlin", "days": ["mon", "fri"],
//	 "skipDates": ["2026-12-25"]}                   a wall-clock time, see NextTimeOfDay
//	                                                and NextTimeOfDaySkipping
//
// The package owns parsing those values and the calendar arithmetic that turns
// them into an instant. It does not know about nodes, JSON, storage or timers:
// callers decide where the values come from and what to do at the instant.
//
// "for" is elapsed time, not calendar time: an ISO-8601 day is exactly 24 hours
// and a week 7 days, so {"for": "P1D"} started at 12:00 the day before a
// daylight-saving change fires at 11:00 or 13:00 local time. Use "untilTime"
// for "same wall-clock time tomorrow".
//
// A wall-clock time belongs to a zone, and twice a year most zones skip or
// repeat an hour. NextTimeOfDay resolves those cases by rule rather than by
// whatever time.Date happens to do (its documentation leaves the choice open,
// and in practice it moves a skipped 02:30 to 03:30 in Europe/Berlin but to
// 01:30 in America/New_York, and a skipped date in Pacific/Apia to the day
// before):
//
//   - A wall time that does not exist that day (spring forward) fires at the
//     first instant after it, the instant the clocks jump: in Europe/Berlin
//     02:30 on 2027-03-28 fires at 03:00 CEST.
//   - A wall time that occurs twice (fall back) fires once, at the first
//     occurrence. Between the two occurrences the next firing is on the next
//     allowed day, never the second occurrence.
//
// The binary embeds the IANA zone database (time/tzdata), so zones load in
// containers without /usr/share/zoneinfo. The time package still prefers
// $ZONEINFO, the system database and a Go installation's copy when they exist
// and only falls back to the embedded one, so hosts with different tzdata
// releases can disagree about zones whose rules changed between them.
package waittime

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // zone data for containers without zoneinfo; see the package comment
)

const durationHint = "want a Go duration such as 90m or ISO-8601 such as PT90M"

// ParseDuration parses the "for" of a wait: a Go duration ("90m", "1h30m",
// "1.5h") or an ISO-8601 duration ("PT90M", "PT1H30M", "P1DT2H", "P2W",
// "PT0.5S"; designators in either case, ',' or '.' before a fraction, which
// only the last component may have).
//
// The wait is elapsed time, so an ISO day is 24 hours and a week 7 days
// whatever the calendar does. Years and months have no fixed length and are
// rejected. Negative durations are rejected; zero is allowed. Errors name s.
func ParseDuration(s string) (time.Duration, error) {
	body := s
	negative := false
	if body != "" && (body[0] == '-' || body[0] == '+') {
		negative = body[0] == '-'
		body = body[1:]
	}
	var d time.Duration
	if body != "" && (body[0] == 'P' || body[0] == 'p') {
		var err error
		d, err = parseISODuration(body[1:])
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: %s", s, err)
		}
		if negative {
			d = -d
		}
	} else {
		var err error
		// time.ParseDuration's own error repeats the value without saying
		// what is expected, so it is replaced rather than wrapped.
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("invalid duration %q: %s", s, durationHint)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must not be negative", s)
	}
	return d, nil
}

// isoUnits lists the ISO-8601 designators in the order the standard requires
// them; those before T (date) first. A zero length marks a designator that
// is valid ISO but has no fixed length.
var isoUnits = [...]struct {
	designator byte
	time       bool
	length     uint64
}{
	{'Y', false, 0},
	{'M', false, 0},
	{'W', false, uint64(7 * 24 * time.Hour)},
	{'D', false, uint64(24 * time.Hour)},
	{'H', true, uint64(time.Hour)},
	{'M', true, uint64(time.Minute)},
	{'S', true, uint64(time.Second)},
}

// maxFractionDigits bounds the digits of a fraction that count: 10^-18 of
// the longest unit (a week) is below a nanosecond.
const maxFractionDigits = 18

var pow10 = func() (p [maxFractionDigits + 1]uint64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// parseISODuration parses what follows the 'P' of an ISO-8601 duration. Its
// errors complete "invalid duration %q: ".
func parseISODuration(s string) (time.Duration, error) {
	syntax := errors.New(durationHint)
	if s == "" {
		return 0, syntax
	}
	var total uint64
	inTime := false
	last := -1 // index in isoUnits of the previous component: order and uniqueness
	hadFraction := false
	for s != "" {
		if c := s[0]; c == 'T' || c == 't' {
			if inTime || len(s) == 1 {
				return 0, syntax
			}
			inTime = true
			s = s[1:]
			continue
		}
		if hadFraction {
			return 0, errors.New("only the last component may have a fraction")
		}
		n, frac, fracDigits, rest, ok := scanDecimal(s)
		if !ok || rest == "" {
			return 0, syntax
		}
		designator := upperASCII(rest[0])
		unit := -1
		for i, u := range isoUnits {
			if u.designator == designator && u.time == inTime {
				unit = i
				break
			}
		}
		switch {
		case unit < 0 && !inTime && (designator == 'H' || designator == 'S'):
			return 0, errors.New("hours, minutes and seconds go after T, as in PT1H")
		case unit < 0 || unit <= last:
			return 0, syntax
		case isoUnits[unit].designator == 'Y':
			return 0, errors.New("years are not a fixed length of time; use days or weeks, such as P365D")
		case isoUnits[unit].length == 0:
			return 0, errors.New("months are not a fixed length of time; use days such as P30D (90 minutes is PT90M)")
		}
		last = unit
		hadFraction = fracDigits > 0
		length := isoUnits[unit].length
		if n > math.MaxInt64/length {
			return 0, errTooLarge
		}
		v := n * length
		if fracDigits > 0 {
			// frac/10^k of a unit, exactly, truncated to whole nanoseconds.
			// hi < 10^k because length < 2^64/10^5, so Div64 cannot panic.
			hi, lo := bits.Mul64(frac, length)
			q, _ := bits.Div64(hi, lo, pow10[fracDigits])
			v += q
		}
		total += v // both terms are at most MaxInt64, so this cannot wrap
		if total > math.MaxInt64 {
			return 0, errTooLarge
		}
		s = rest[1:]
	}
	return time.Duration(total), nil
}

var errTooLarge = errors.New("too large (the limit is about 292 years)")

// scanDecimal reads digits, optionally followed by '.' or ',' and more
// digits, from the start of s. It returns the integer part, up to
// maxFractionDigits digits of the fraction and how many those are, and the
// rest of s. An integer part too large for a uint64 saturates; the caller's
// range check rejects it.
func scanDecimal(s string) (n, frac uint64, fracDigits int, rest string, ok bool) {
	i := 0
	for ; i < len(s) && isDigit(s[i]); i++ {
		d := uint64(s[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			n = math.MaxUint64
		} else {
			n = n*10 + d
		}
	}
	if i == 0 {
		return 0, 0, 0, "", false
	}
	if i < len(s) && (s[i] == '.' || s[i] == ',') {
		i++
		start := i
		for ; i < len(s) && isDigit(s[i]); i++ {
			if fracDigits < maxFractionDigits {
				frac = frac*10 + uint64(s[i]-'0')
				fracDigits++
			}
		}
		if i == start {
			return 0, 0, 0, "", false
		}
	}
	return n, frac, fracDigits, s[i:], true
}

// ParseUntil parses the "until" of a wait: an RFC 3339 instant with an
// explicit offset or Z, such as "2027-01-31T09:00:00+01:00", optionally with
// fractional seconds. Lower-case 't' and 'z' are accepted, as RFC 3339 allows.
//
// The result is in UTC: the offset only locates the instant, and time.Parse
// would otherwise attach the server's Local zone when the offset happens to
// match it. Errors name s.
func ParseUntil(s string) (time.Time, error) {
	const want = "want an RFC 3339 instant such as 2027-01-31T09:00:00+01:00"
	upper := strings.Map(func(r rune) rune {
		if r == 't' || r == 'z' {
			return r - 'a' + 'A'
		}
		return r
	}, s)
	t, err := time.Parse(time.RFC3339, upper)
	if err != nil {
		if _, localErr := time.Parse("2006-01-02T15:04:05", upper); localErr == nil {
			return time.Time{}, fmt.Errorf("invalid until %q: missing offset; add Z or one such as +01:00", s)
		}
		// time.Parse explains range errors ("day out of range") in Message.
		if pe := (*time.ParseError)(nil); errors.As(err, &pe) && pe.Message != "" {
			return time.Time{}, fmt.Errorf("invalid until %q: %s; %s", s, strings.TrimPrefix(pe.Message, ": "), want)
		}
		return time.Time{}, fmt.Errorf("invalid until %q: %s", s, want)
	}
	if !isRFC3339(upper) {
		return time.Time{}, fmt.Errorf("invalid until %q: %s", s, want)
	}
	return t.UTC(), nil
}

// isRFC3339 reports whether s has the shape RFC 3339 section 5.6 requires.
// time.Parse also takes one-digit hours, ',' before the fraction and offsets
// of 24 hours or more; value ranges are left to it.
func isRFC3339(s string) bool {
	const shape = "0000-00-00T00:00:00"
	if len(s) < len(shape) {
		return false
	}
	for i := 0; i < len(shape); i++ {
		if shape[i] == '0' && !isDigit(s[i]) || shape[i] != '0' && s[i] != shape[i] {
			return false
		}
	}
	rest := s[len(shape):]
	if rest != "" && rest[0] == '.' {
		n := 1
		for n < len(rest) && isDigit(rest[n]) {
			n++
		}
		if n == 1 {
			return false
		}
		rest = rest[n:]
	}
	if rest == "Z" {
		return true
	}
	if len(rest) != 6 || rest[0] != '+' && rest[0] != '-' || rest[3] != ':' {
		return false
	}
	hour, okHour := atoi(rest[1:3], 2, 2)
	minute, okMinute := atoi(rest[4:6], 2, 2)
	return okHour && okMinute && hour < 24 && minute < 60
}

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

// atoi parses between minLen and maxLen ASCII digits (strconv.Atoi would
// also take signs and any length).
func atoi(s string, minLen, maxLen int) (int, bool) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
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

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func upperASCII(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}
