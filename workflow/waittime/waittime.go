// Package waittime computes when a time-based wait node of a workflow fires.
//
// A wait node names its deadline in one of three ways:
//
//	{"for": "90m"}                                  elapsed time, see ParseDuration
//	{"until": "2027-01-31T09:00:00+01:00"}          an instant, see ParseUntil, or
//	{"until": "2027-01-31", "timezone": "…"}        the start of a day, see ParseUntilIn
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
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // zone data for containers without zoneinfo; see the package comment
)

// DurationForms names the forms ParseDuration accepts; every error about a duration ends
// with it, so that whoever typed a bad one learns the good ones.
const DurationForms = `want a Go duration such as 90m or 1h30m, ISO-8601 such as PT90M or P2D, or a number and a unit such as "90 minutes", "1 hour" or "2 days" (second, minute, hour, day or week, singular or plural)`

const durationHint = DurationForms

// ParseDuration parses a duration of a workflow definition — a wait's "for", a
// wait_events timeout, a buffer's time to live — in any of three forms:
//
//   - a Go duration ("90m", "1h30m", "1.5h");
//   - an ISO-8601 duration ("PT90M", "PT1H30M", "P1DT2H", "P2W", "PT0.5S";
//     designators in either case, ',' or '.' before a fraction, which only the last
//     component may have);
//   - a number and a unit in words ("90 seconds", "30 minutes", "1 hour", "2 days",
//     "1.5 weeks"; singular or plural, lower case, one or more spaces between), as
//     Cloudflare Workflows writes them.
//
// It is elapsed time, so a day is 24 hours and a week 7 days whatever the calendar
// does. Years and months have no fixed length and are rejected in every form. Negative
// durations are rejected; zero is allowed. Errors name s and list the accepted forms.
func ParseDuration(s string) (time.Duration, error) {
	if m := wordDuration.FindStringSubmatch(s); m != nil {
		return parseWordDuration(s, m[1], m[2])
	}
	if m := wordCalendar.FindStringSubmatch(s); m != nil {
		return 0, fmt.Errorf("invalid duration %q: %ss are not a fixed length of time; use days or weeks, such as \"30 days\"", s, m[1])
	}
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

// wordDuration is the third form: a decimal number, spaces, a unit in words.
var (
	wordDuration = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?) +(second|minute|hour|day|week)s?$`)
	wordCalendar = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+)? +(month|year)s?$`)
	wordUnits    = map[string]uint64{
		"second": uint64(time.Second), "minute": uint64(time.Minute), "hour": uint64(time.Hour),
		"day": uint64(24 * time.Hour), "week": uint64(7 * 24 * time.Hour),
	}
)

// parseWordDuration computes number × unit exactly, as the ISO form does (a fraction
// truncated to whole nanoseconds).
func parseWordDuration(s, number, unit string) (time.Duration, error) {
	n, frac, fracDigits, rest, ok := scanDecimal(number)
	if !ok || rest != "" {
		return 0, fmt.Errorf("invalid duration %q: %s", s, durationHint)
	}
	length := wordUnits[unit]
	if n > math.MaxInt64/length {
		return 0, fmt.Errorf("invalid duration %q: %s", s, errTooLarge)
	}
	v := n * length
	if fracDigits > 0 {
		hi, lo := bits.Mul64(frac, length)
		q, _ := bits.Div64(hi, lo, pow10[fracDigits])
		v += q
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("invalid duration %q: %s", s, errTooLarge)
	}
	return time.Duration(v), nil
}

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

// ParseUntilIn parses the "until" of a wait as ParseUntil does, and also a date alone,
// "2027-01-31", which means the start of that day in loc: its midnight, or — in a zone
// whose clocks jump over midnight that day — the instant they jump, as NextTimeOfDay
// resolves a wall time that does not exist. An instant with its own offset ignores
// loc. Errors name s and both forms.
func ParseUntilIn(s string, loc *time.Location) (time.Time, error) {
	if len(s) == len(time.DateOnly) && isDateShape(s) {
		d, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("invalid until %q: no such date; want YYYY-MM-DD or an RFC 3339 instant such as 2027-01-31T09:00:00+01:00", s)
		}
		return firstAt(loc, d.Unix()).UTC(), nil
	}
	t, err := ParseUntil(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w (or a date alone, YYYY-MM-DD: the start of that day in the timezone)", err)
	}
	return t, nil
}

// IsDateOnly reports whether an until is a date alone (YYYY-MM-DD), which the wait's
// timezone places; an instant carries its own offset.
func IsDateOnly(s string) bool { return len(s) == len(time.DateOnly) && isDateShape(s) }

func isDateShape(s string) bool {
	for i := 0; i < len(s); i++ {
		if i == 4 || i == 7 {
			if s[i] != '-' {
				return false
			}
		} else if !isDigit(s[i]) {
			return false
		}
	}
	return true
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

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func upperASCII(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}
