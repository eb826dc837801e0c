package waittime

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func mustInstant(t *testing.T, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return ts
}

func offsetAt(ts time.Time, loc *time.Location) time.Duration {
	_, off := ts.In(loc).Zone()
	return time.Duration(off) * time.Second
}

// TestZoneData pins the transitions the other tests rely on, so that a zone
// database with different rules fails here, by name, instead of as a puzzling
// NextTimeOfDay result.
func TestZoneData(t *testing.T) {
	t.Parallel()
	tests := []struct {
		zone          string
		at            string // UTC instant of the transition
		before, after time.Duration
		localBefore   string // wall clock just before, "2006-01-02 15:04:05"
		localAt       string // wall clock at the transition
	}{
		// Berlin springs forward 02:00 -> 03:00 and falls back 03:00 -> 02:00.
		{"Europe/Berlin", "2027-03-28T01:00:00Z", 1 * time.Hour, 2 * time.Hour, "2027-03-28 01:59:59", "2027-03-28 03:00:00"},
		{"Europe/Berlin", "2027-10-31T01:00:00Z", 2 * time.Hour, 1 * time.Hour, "2027-10-31 02:59:59", "2027-10-31 02:00:00"},
		{"America/New_York", "2027-03-14T07:00:00Z", -5 * time.Hour, -4 * time.Hour, "2027-03-14 01:59:59", "2027-03-14 03:00:00"},
		{"America/New_York", "2027-11-07T06:00:00Z", -4 * time.Hour, -5 * time.Hour, "2027-11-07 01:59:59", "2027-11-07 01:00:00"},
		// Southern hemisphere: autumn in April, spring in October.
		{"Australia/Sydney", "2027-04-03T16:00:00Z", 11 * time.Hour, 10 * time.Hour, "2027-04-04 02:59:59", "2027-04-04 02:00:00"},
		{"Australia/Sydney", "2027-10-02T16:00:00Z", 10 * time.Hour, 11 * time.Hour, "2027-10-03 01:59:59", "2027-10-03 03:00:00"},
		// Lord Howe Island shifts by half an hour.
		{"Australia/Lord_Howe", "2027-04-03T15:00:00Z", 11 * time.Hour, 10*time.Hour + 30*time.Minute, "2027-04-04 01:59:59", "2027-04-04 01:30:00"},
		{"Australia/Lord_Howe", "2027-10-02T15:30:00Z", 10*time.Hour + 30*time.Minute, 11 * time.Hour, "2027-10-03 01:59:59", "2027-10-03 02:30:00"},
		// Chile changes at midnight: Sunday 00:00 does not exist in
		// September, and Saturday 23:00-23:59 happens twice in April.
		{"America/Santiago", "2027-09-05T04:00:00Z", -4 * time.Hour, -3 * time.Hour, "2027-09-04 23:59:59", "2027-09-05 01:00:00"},
		{"America/Santiago", "2027-04-04T03:00:00Z", -3 * time.Hour, -4 * time.Hour, "2027-04-03 23:59:59", "2027-04-03 23:00:00"},
		// Samoa moved across the date line: 2011-12-30 never happened.
		{"Pacific/Apia", "2011-12-30T10:00:00Z", -10 * time.Hour, 14 * time.Hour, "2011-12-29 23:59:59", "2011-12-31 00:00:00"},
		// Alaska joined the American side in 1867: 18 Oct 15:30 to 19 Oct
		// 15:30 happened twice.
		{"America/Sitka", "1867-10-19T00:31:13Z", 14*time.Hour + 58*time.Minute + 47*time.Second, -(9*time.Hour + 1*time.Minute + 13*time.Second), "1867-10-19 15:29:59", "1867-10-18 15:30:00"},
	}
	for _, tt := range tests {
		t.Run(tt.zone+"/"+tt.at, func(t *testing.T) {
			t.Parallel()
			loc := mustLoad(t, tt.zone)
			at := mustInstant(t, tt.at)
			const layout = "2006-01-02 15:04:05"
			require.Equal(t, tt.before, offsetAt(at.Add(-time.Second), loc), "offset before")
			require.Equal(t, tt.after, offsetAt(at, loc), "offset at")
			require.Equal(t, tt.localBefore, at.Add(-time.Second).In(loc).Format(layout))
			require.Equal(t, tt.localAt, at.In(loc).Format(layout))
		})
	}
}

func TestNextTimeOfDay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		zone string
		now  string // RFC 3339, offsets spelled out so the instant is unambiguous
		tod  string
		days []string
		want string // UTC
	}{
		// Around the target, Europe/Berlin in winter (+01:00). 2027-01-27 is a Wednesday.
		{"later today", "Europe/Berlin", "2027-01-27T08:00:00+01:00", "09:00", nil, "2027-01-27T08:00:00Z"},
		{"a second before", "Europe/Berlin", "2027-01-27T08:59:59+01:00", "09:00", nil, "2027-01-27T08:00:00Z"},
		{"a nanosecond before", "Europe/Berlin", "2027-01-27T08:59:59.999999999+01:00", "09:00", nil, "2027-01-27T08:00:00Z"},
		{"at the target is not after it", "Europe/Berlin", "2027-01-27T09:00:00+01:00", "09:00", nil, "2027-01-28T08:00:00Z"},
		{"a nanosecond after", "Europe/Berlin", "2027-01-27T09:00:00.000000001+01:00", "09:00", nil, "2027-01-28T08:00:00Z"},
		{"a second after", "Europe/Berlin", "2027-01-27T09:00:01+01:00", "09:00", nil, "2027-01-28T08:00:00Z"},
		{"with seconds", "Europe/Berlin", "2027-01-27T09:30:14+01:00", "09:30:15", nil, "2027-01-27T08:30:15Z"},
		{"midnight", "Europe/Berlin", "2027-01-27T23:59:59+01:00", "00:00", nil, "2027-01-27T23:00:00Z"},
		{"last second of the day", "Europe/Berlin", "2027-01-27T00:00:00+01:00", "23:59:59", nil, "2027-01-27T22:59:59Z"},
		{"now given in another zone", "Europe/Berlin", "2027-01-27T07:30:00Z", "09:00", nil, "2027-01-27T08:00:00Z"},
		{"into the next year", "Europe/Berlin", "2027-12-31T23:30:00+01:00", "00:00", nil, "2027-12-31T23:00:00Z"},

		// Allowed days.
		{"friday evening, mondays only", "Europe/Berlin", "2027-01-29T20:00:00+01:00", "09:00", []string{"mon"}, "2027-02-01T08:00:00Z"},
		{"sunday to monday across the week", "Europe/Berlin", "2027-01-31T22:00:00+01:00", "09:00", []string{"mon"}, "2027-02-01T08:00:00Z"},
		{"sunday's last second to monday midnight", "Europe/Berlin", "2027-01-31T23:59:59+01:00", "00:00", []string{"monday"}, "2027-01-31T23:00:00Z"},
		{"saturday night, sundays only", "Europe/Berlin", "2027-01-30T23:00:00+01:00", "09:00", []string{"sun"}, "2027-01-31T08:00:00Z"},
		{"only today, still ahead", "Europe/Berlin", "2027-01-27T08:00:00+01:00", "09:00", []string{"wed"}, "2027-01-27T08:00:00Z"},
		{"only today, passed: a week later", "Europe/Berlin", "2027-01-27T10:00:00+01:00", "09:00", []string{"wed"}, "2027-02-03T08:00:00Z"},
		{"only today, at the target: a week later", "Europe/Berlin", "2027-01-27T09:00:00+01:00", "09:00", []string{"wed"}, "2027-02-03T08:00:00Z"},
		{"weekend from wednesday", "Europe/Berlin", "2027-01-27T10:00:00+01:00", "09:00", []string{"sat", "sun"}, "2027-01-30T08:00:00Z"},
		{"all seven listed", "Europe/Berlin", "2027-01-27T10:00:00+01:00", "09:00", []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, "2027-01-28T08:00:00Z"},
		// The weekday is the local date's, not UTC's.
		{"local monday while UTC is sunday", "Australia/Sydney", "2027-01-31T14:00:00Z", "09:00", []string{"mon"}, "2027-01-31T22:00:00Z"},
		{"local sunday while UTC is monday", "America/New_York", "2027-02-01T03:00:00Z", "23:00", []string{"sun"}, "2027-02-01T04:00:00Z"},

		// Europe/Berlin springs forward on Sunday 2027-03-28: 02:00-02:59 do not exist.
		{"berlin gap fires at the jump", "Europe/Berlin", "2027-03-27T12:00:00+01:00", "02:30", nil, "2027-03-28T01:00:00Z"},
		{"berlin gap start", "Europe/Berlin", "2027-03-27T12:00:00+01:00", "02:00", nil, "2027-03-28T01:00:00Z"},
		{"berlin gap end", "Europe/Berlin", "2027-03-27T12:00:00+01:00", "02:59:59", nil, "2027-03-28T01:00:00Z"},
		{"berlin 03:00 after the gap", "Europe/Berlin", "2027-03-27T12:00:00+01:00", "03:00", nil, "2027-03-28T01:00:00Z"},
		{"berlin 01:59:59 before the gap", "Europe/Berlin", "2027-03-27T12:00:00+01:00", "01:59:59", nil, "2027-03-28T00:59:59Z"},
		{"berlin gap, a second before the jump", "Europe/Berlin", "2027-03-28T00:59:59Z", "02:30", nil, "2027-03-28T01:00:00Z"},
		{"berlin gap, now at the jump: next day", "Europe/Berlin", "2027-03-28T01:00:00Z", "02:30", nil, "2027-03-29T00:30:00Z"},
		{"berlin gap on the only allowed day", "Europe/Berlin", "2027-03-26T12:00:00+01:00", "02:30", []string{"sun"}, "2027-03-28T01:00:00Z"},
		{"berlin day after spring forward", "Europe/Berlin", "2027-03-28T12:00:00+02:00", "09:00", nil, "2027-03-29T07:00:00Z"},
		{"berlin mondays across spring forward", "Europe/Berlin", "2027-03-26T10:00:00+01:00", "09:00", []string{"mon"}, "2027-03-29T07:00:00Z"},
		{"berlin same weekday a week later across spring forward", "Europe/Berlin", "2027-03-24T10:00:00+01:00", "09:00", []string{"wed"}, "2027-03-31T07:00:00Z"},

		// Europe/Berlin falls back on Sunday 2027-10-31: 02:00-02:59 happen
		// at 00:00-00:59Z (CEST) and again at 01:00-01:59Z (CET).
		{"berlin overlap fires at the first occurrence", "Europe/Berlin", "2027-10-30T12:00:00+02:00", "02:30", nil, "2027-10-31T00:30:00Z"},
		{"berlin overlap start", "Europe/Berlin", "2027-10-30T12:00:00+02:00", "02:00", nil, "2027-10-31T00:00:00Z"},
		{"berlin overlap end", "Europe/Berlin", "2027-10-30T12:00:00+02:00", "02:59:59", nil, "2027-10-31T00:59:59Z"},
		{"berlin 03:00 after the overlap", "Europe/Berlin", "2027-10-30T12:00:00+02:00", "03:00", nil, "2027-10-31T02:00:00Z"},
		{"berlin overlap, a second before the first", "Europe/Berlin", "2027-10-31T00:29:59Z", "02:30", nil, "2027-10-31T00:30:00Z"},
		{"berlin overlap, at the first: next day", "Europe/Berlin", "2027-10-31T00:30:00Z", "02:30", nil, "2027-11-01T01:30:00Z"},
		{"berlin overlap, between: next day, not the second", "Europe/Berlin", "2027-10-31T01:00:00Z", "02:30", nil, "2027-11-01T01:30:00Z"},
		{"berlin overlap, a second before the second: next day", "Europe/Berlin", "2027-10-31T01:29:59Z", "02:30", nil, "2027-11-01T01:30:00Z"},
		{"berlin overlap, between, sundays only: next week", "Europe/Berlin", "2027-10-31T01:00:00Z", "02:30", []string{"sun"}, "2027-11-07T01:30:00Z"},
		{"berlin mondays across fall back", "Europe/Berlin", "2027-10-29T10:00:00+02:00", "09:00", []string{"mon"}, "2027-11-01T08:00:00Z"},

		// America/New_York: 2027-03-14 02:00 -> 03:00, 2027-11-07 02:00 -> 01:00.
		{"new york gap", "America/New_York", "2027-03-13T12:00:00-05:00", "02:30", nil, "2027-03-14T07:00:00Z"},
		{"new york before the gap", "America/New_York", "2027-03-13T12:00:00-05:00", "01:30", nil, "2027-03-14T06:30:00Z"},
		{"new york overlap", "America/New_York", "2027-11-06T12:00:00-04:00", "01:30", nil, "2027-11-07T05:30:00Z"},
		{"new york overlap, between: next day", "America/New_York", "2027-11-07T06:15:00Z", "01:30", nil, "2027-11-08T06:30:00Z"},
		{"new york fridays across fall back", "America/New_York", "2027-11-05T10:00:00-04:00", "09:00", []string{"fri"}, "2027-11-12T14:00:00Z"},

		// Australia/Sydney: 2027-04-04 03:00 -> 02:00, 2027-10-03 02:00 -> 03:00.
		{"sydney overlap", "Australia/Sydney", "2027-04-03T12:00:00+11:00", "02:30", nil, "2027-04-03T15:30:00Z"},
		{"sydney overlap, between: next day", "Australia/Sydney", "2027-04-03T16:10:00Z", "02:30", nil, "2027-04-04T16:30:00Z"},
		{"sydney gap", "Australia/Sydney", "2027-10-02T12:00:00+10:00", "02:30", nil, "2027-10-02T16:00:00Z"},
		{"sydney gap, at the jump: next day", "Australia/Sydney", "2027-10-02T16:00:00Z", "02:30", nil, "2027-10-03T15:30:00Z"},
		{"sydney sundays across spring forward", "Australia/Sydney", "2027-09-26T10:00:00+10:00", "09:00", []string{"sun"}, "2027-10-02T22:00:00Z"},

		// Australia/Lord_Howe moves by 30 minutes.
		{"lord howe gap", "Australia/Lord_Howe", "2027-10-02T12:00:00+10:30", "02:15", nil, "2027-10-02T15:30:00Z"},
		{"lord howe after the gap", "Australia/Lord_Howe", "2027-10-02T12:00:00+10:30", "02:30", nil, "2027-10-02T15:30:00Z"},
		{"lord howe overlap", "Australia/Lord_Howe", "2027-04-03T12:00:00+11:00", "01:45", nil, "2027-04-03T14:45:00Z"},
		{"lord howe overlap, between: next day", "Australia/Lord_Howe", "2027-04-03T15:00:00Z", "01:45", nil, "2027-04-04T15:15:00Z"},

		// America/Santiago changes at midnight.
		{"santiago missing midnight", "America/Santiago", "2027-09-04T12:00:00-04:00", "00:00", []string{"sun"}, "2027-09-05T04:00:00Z"},
		{"santiago repeated saturday night", "America/Santiago", "2027-04-03T12:00:00-03:00", "23:30", []string{"sat"}, "2027-04-04T02:30:00Z"},
		{"santiago repeated saturday night, between: next saturday", "America/Santiago", "2027-04-04T03:10:00Z", "23:30", []string{"sat"}, "2027-04-11T03:30:00Z"},

		// Pacific/Apia skipped Friday 2011-12-30 entirely: a Friday wait
		// fires when the clocks jump, which is Saturday 00:00 local.
		{"apia skipped date", "Pacific/Apia", "2011-12-29T12:00:00-10:00", "09:30", []string{"fri"}, "2011-12-30T10:00:00Z"},
		{"apia skipped date, every day", "Pacific/Apia", "2011-12-29T12:00:00-10:00", "09:30", nil, "2011-12-30T10:00:00Z"},
		{"apia day after the skipped date", "Pacific/Apia", "2011-12-30T10:00:00Z", "09:30", nil, "2011-12-30T19:30:00Z"},

		// America/Sitka lived 1867-10-18 15:30 to 10-19 15:30 twice. Saturday
		// 19 October 10:00 first happened before now, so the next Saturday
		// is eight local dates away: past the usual eight-day window.
		{"sitka repeated day", "America/Sitka", "1867-10-19T01:01:13Z", "10:00", []string{"sat"}, "1867-10-26T19:01:13Z"},

		{"utc", "UTC", "2027-06-01T08:00:00Z", "09:00", nil, "2027-06-01T09:00:00Z"},
		{"utc at the target: next day", "UTC", "2027-06-01T09:00:00Z", "09:00", nil, "2027-06-02T09:00:00Z"},
		{"utc now given with an offset", "UTC", "2027-06-01T23:30:00-02:00", "09:00", nil, "2027-06-02T09:00:00Z"},

		// Leap day 2028-02-29 is a Tuesday.
		{"leap day next", "UTC", "2028-02-28T10:00:00Z", "09:00", nil, "2028-02-29T09:00:00Z"},
		{"after leap day: march 1", "UTC", "2028-02-29T10:00:00Z", "09:00", nil, "2028-03-01T09:00:00Z"},
		{"tuesdays: leap day", "UTC", "2028-02-27T10:00:00Z", "09:00", []string{"tue"}, "2028-02-29T09:00:00Z"},
		{"wednesdays: across leap day", "UTC", "2028-02-28T10:00:00Z", "09:00", []string{"wed"}, "2028-03-01T09:00:00Z"},
		{"leap day midnight in berlin", "Europe/Berlin", "2028-02-28T23:30:00+01:00", "00:15", nil, "2028-02-28T23:15:00Z"},
		{"no leap day in 2027", "UTC", "2027-02-28T10:00:00Z", "09:00", nil, "2027-03-01T09:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			loc := mustLoad(t, tt.zone)
			tod, err := ParseTimeOfDay(tt.tod)
			require.NoError(t, err)
			days, err := ParseDays(tt.days)
			require.NoError(t, err)
			now := mustInstant(t, tt.now)

			got := NextTimeOfDay(now, tod, loc, days)
			require.Equal(t, tt.want, got.Format(time.RFC3339Nano))
			require.Equal(t, time.UTC, got.Location())
			require.True(t, got.After(now))
		})
	}
}

// TestNextTimeOfDayOracle checks NextTimeOfDay against a brute-force scan on
// random clocks, many of them close to transitions. The scan needs no zone
// arithmetic: the firing instant for a date is the first instant whose local
// date and time are at or past the requested ones, which is the first
// occurrence of an existing wall time and the jump over a missing one. With
// 15-minute offsets and transitions on 15-minute boundaries, a 15-minute grid
// of instants is exact for times of day on that grid.
func TestNextTimeOfDayOracle(t *testing.T) {
	t.Parallel()
	zones := []struct {
		name     string
		from, to string
	}{
		{"Europe/Berlin", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"America/New_York", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"Australia/Sydney", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"Australia/Lord_Howe", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"America/Santiago", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"America/Havana", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"Africa/Casablanca", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"Pacific/Chatham", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"Asia/Kathmandu", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
		{"Pacific/Apia", "2011-06-01T00:00:00Z", "2012-06-01T00:00:00Z"},
		{"UTC", "2026-12-01T00:00:00Z", "2028-01-01T00:00:00Z"},
	}
	for _, z := range zones {
		t.Run(z.name, func(t *testing.T) {
			t.Parallel()
			loc := mustLoad(t, z.name)
			from, to := mustInstant(t, z.from), mustInstant(t, z.to)

			// Transitions by hourly scan, to aim clocks near them.
			var transitions []time.Time
			for ts := from; ts.Before(to); ts = ts.Add(time.Hour) {
				if offsetAt(ts, loc) != offsetAt(ts.Add(time.Hour), loc) {
					transitions = append(transitions, ts)
				}
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(z.name))))
			for i := range 400 {
				var now time.Time
				if len(transitions) > 0 && i%4 != 0 {
					tr := transitions[rng.IntN(len(transitions))]
					now = tr.Add(time.Duration(rng.Int64N(int64(6*24*time.Hour))) - 3*24*time.Hour)
				} else {
					now = from.Add(time.Duration(rng.Int64N(int64(to.Sub(from)))))
				}
				// Whole quarter hours half the time, so that now can equal a firing.
				if rng.IntN(2) == 0 {
					now = now.Truncate(15 * time.Minute)
				}
				hours := []int{0, 1, 2, 3, 23, rng.IntN(24)}
				tod := TimeOfDay{Hour: hours[rng.IntN(len(hours))], Minute: 15 * rng.IntN(4)}
				days := Days(rng.IntN(1 << 7))

				want := oracleNext(now, tod, loc, days)
				got := NextTimeOfDay(now, tod, loc, days)
				require.Equal(t, want.UTC(), got, "now %s (%s), tod %s, days %07b",
					now.UTC().Format(time.RFC3339), now.In(loc).Format(time.RFC3339), tod, days)
			}
		})
	}
}

func oracleNext(now time.Time, tod TimeOfDay, loc *time.Location, days Days) time.Time {
	y, m, d := now.In(loc).Date()
	for i := range 15 {
		date := time.Date(y, m, d+i, 0, 0, 0, 0, time.UTC)
		if !days.Has(date.Weekday()) {
			continue
		}
		// Local date and time expressed as if UTC, so they compare as instants.
		want := date.Add(time.Duration(tod.Hour)*time.Hour + time.Duration(tod.Minute)*time.Minute)
		for ts := want.Add(-20 * time.Hour); ts.Before(want.Add(20 * time.Hour)); ts = ts.Add(15 * time.Minute) {
			l := ts.In(loc)
			wall := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC)
			if !wall.Before(want) {
				if ts.After(now) {
					return ts
				}
				break
			}
		}
	}
	panic("oracle found nothing")
}

func TestNextTimeOfDayPanicsOnInvalidTimeOfDay(t *testing.T) {
	t.Parallel()
	now := mustInstant(t, "2027-01-27T08:00:00Z")
	for _, tod := range []TimeOfDay{{Hour: 24}, {Hour: -1}, {Minute: 60}, {Second: 60}, {Second: -1}} {
		require.Panics(t, func() { NextTimeOfDay(now, tod, time.UTC, 0) }, "%#v", tod)
	}
}

func TestDaysHas(t *testing.T) {
	t.Parallel()
	all := []time.Weekday{time.Sunday, time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday, time.Saturday}
	for _, w := range all {
		require.True(t, Days(0).Has(w), "zero Days has %s", w)
		require.True(t, Days(1<<7).Has(w), "a set with no weekday bits means every day: %s", w)
		require.Equal(t, w == time.Monday, Days(1<<time.Monday).Has(w), w.String())
		require.Equal(t, w == time.Sunday || w == time.Saturday, Days(1<<time.Sunday|1<<time.Saturday).Has(w), w.String())
	}
	require.False(t, Days(1<<time.Monday).Has(time.Weekday(7)))
	require.False(t, Days(1<<time.Monday).Has(time.Weekday(-1)))
}

func TestParseDays(t *testing.T) {
	t.Parallel()
	valid := []struct {
		names []string
		want  Days
	}{
		{nil, 0},
		{[]string{}, 0},
		{[]string{"mon"}, 1 << time.Monday},
		{[]string{"MON", "Monday", "mOn"}, 1 << time.Monday},
		{[]string{"sun", "saturday"}, 1<<time.Sunday | 1<<time.Saturday},
		{[]string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, everyDay},
		{[]string{"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}, everyDay},
		{[]string{"FRIDAY", "fri"}, 1 << time.Friday},
	}
	for _, tt := range valid {
		got, err := ParseDays(tt.names)
		require.NoError(t, err, "%q", tt.names)
		require.Equal(t, tt.want, got, "%q", tt.names)
	}

	invalid := []struct {
		names   []string
		wantErr string
	}{
		{[]string{"mon", "tue", "fir"}, `days[2]: unknown weekday "fir"`},
		{[]string{""}, `days[0]: unknown weekday ""`},
		{[]string{"mo"}, `days[0]: unknown weekday "mo"`},
		{[]string{"tues"}, `days[0]: unknown weekday "tues"`},
		{[]string{"mon", " mon"}, `days[1]: unknown weekday " mon"`},
		{[]string{"ſun"}, `days[0]: unknown weekday "ſun"`},       // folds to "sun" under Unicode rules
		{[]string{"FRİDAY"}, `days[0]: unknown weekday "FRİDAY"`}, // lowers to "friday" under Unicode rules
		{[]string{"1"}, `days[0]: unknown weekday "1"`},
		{[]string{"bad", "worse"}, `days[0]: unknown weekday "bad"`},
	}
	for _, tt := range invalid {
		_, err := ParseDays(tt.names)
		require.EqualError(t, err, tt.wantErr)
	}
}

func TestParseTimeOfDay(t *testing.T) {
	t.Parallel()
	valid := []struct {
		in         string
		want       TimeOfDay
		wantString string
	}{
		{"09:30", TimeOfDay{9, 30, 0}, "09:30"},
		{"9:30", TimeOfDay{9, 30, 0}, "09:30"},
		{"00:00", TimeOfDay{0, 0, 0}, "00:00"},
		{"0:00", TimeOfDay{0, 0, 0}, "00:00"},
		{"23:59", TimeOfDay{23, 59, 0}, "23:59"},
		{"23:59:59", TimeOfDay{23, 59, 59}, "23:59:59"},
		{"09:30:15", TimeOfDay{9, 30, 15}, "09:30:15"},
		{"09:30:00", TimeOfDay{9, 30, 0}, "09:30"},
		{"12:00", TimeOfDay{12, 0, 0}, "12:00"},
	}
	for _, tt := range valid {
		got, err := ParseTimeOfDay(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
		require.Equal(t, tt.wantString, got.String())
		back, err := ParseTimeOfDay(got.String())
		require.NoError(t, err)
		require.Equal(t, got, back)
	}

	for _, in := range []string{
		"", "9", "09", "0930", "24:00", "23:60", "23:59:60", "25:00", "09:5", "09:300",
		"009:30", "09:30:5", "-1:30", "+9:30", "09:30:00:00", " 09:30", "09:30 ", "09-30",
		"09:30:", ":30", "9:30am", "T09:30", "०९:३०", "09.30", "1e1:00",
	} {
		_, err := ParseTimeOfDay(in)
		require.Error(t, err, "%q", in)
		require.ErrorContains(t, err, fmt.Sprintf("invalid time of day %q: want HH:MM or HH:MM:SS", in))
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	valid := []struct {
		in   string
		want time.Duration
	}{
		// Go durations.
		{"0", 0},
		{"0s", 0},
		{"90m", 90 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"1.5h", 90 * time.Minute},
		{"300ms", 300 * time.Millisecond},
		{"+5m", 5 * time.Minute},
		{"-0s", 0},
		// ISO-8601.
		{"PT90M", 90 * time.Minute},
		{"PT1H30M", 90 * time.Minute},
		{"P1DT2H", 26 * time.Hour},
		{"P2W", 14 * 24 * time.Hour},
		{"PT0.5S", 500 * time.Millisecond},
		{"pt90m", 90 * time.Minute},
		{"p1dt2h", 26 * time.Hour},
		{"Pt1h", time.Hour},
		{"P1W2D", 9 * 24 * time.Hour},
		{"P1D", 24 * time.Hour},
		{"PT24H", 24 * time.Hour},
		{"PT36H", 36 * time.Hour},
		{"PT0S", 0},
		{"P0D", 0},
		{"-PT0S", 0},
		{"+PT1H", time.Hour},
		{"P1.5D", 36 * time.Hour},
		{"PT1,5H", 90 * time.Minute},
		{"PT1H0.5S", time.Hour + 500*time.Millisecond},
		{"P1DT1H1M1S", 25*time.Hour + time.Minute + time.Second},
		{"PT0.000000001S", time.Nanosecond},
		{"PT0.0000000019S", time.Nanosecond}, // truncated below a nanosecond
		{"P0.000001W", 604800 * time.Microsecond},
		{"PT0.1234567890123456789012345M", 7407407340 * time.Nanosecond},
		{"PT0001M", time.Minute},
		{"P106751D", 106751 * 24 * time.Hour},
		{"PT2562047H", 2562047 * time.Hour},
		// A number and a unit in words.
		{"1 hour", time.Hour},
		{"30 minutes", 30 * time.Minute},
		{"2 days", 48 * time.Hour},
		{"90 seconds", 90 * time.Second},
		{"1 second", time.Second},
		{"1 minutes", time.Minute},
		{"3 weeks", 21 * 24 * time.Hour},
		{"1.5 hours", 90 * time.Minute},
		{"0.5 day", 12 * time.Hour},
		{"0 seconds", 0},
		{"10  minutes", 10 * time.Minute},
		{"106751 days", 106751 * 24 * time.Hour},
	}
	for _, tt := range valid {
		got, err := ParseDuration(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}

	invalid := []struct {
		in      string
		wantErr string
	}{
		{"", `want a Go duration such as 90m or 1h30m, ISO-8601 such as PT90M or P2D, or a number and a unit such as "90 minutes"`},
		{"abc", "(second, minute, hour, day or week, singular or plural)"},
		{"90", "want a Go duration"},
		{"1d", "want a Go duration"},
		{" 90m", "want a Go duration"},
		{"90m ", "want a Go duration"},
		{"10000000h", "want a Go duration"}, // overflows time.Duration
		{"1 fortnight", "want a Go duration"},
		{"1 Hour", "want a Go duration"},
		{"1hour", "want a Go duration"},
		{"hour", "want a Go duration"},
		{"-1 hour", "want a Go duration"},
		{" 1 hour", "want a Go duration"},
		{"1 hour ", "want a Go duration"},
		{"1 hour 30 minutes", "want a Go duration"},
		{"1. hour", "want a Go duration"},
		{"2 months", "months are not a fixed length"},
		{"1 year", "years are not a fixed length"},
		{"106752 days", "too large"},
		{"99999999999999999999 weeks", "too large"},
		{"-5m", "must not be negative"},
		{"-1ns", "must not be negative"},
		{"-PT1M", "must not be negative"},
		{"-P1D", "must not be negative"},
		{"P1Y", "years are not a fixed length"},
		{"P1Y2D", "years are not a fixed length"},
		{"P1M", "months are not a fixed length"},
		{"P90M", "90 minutes is PT90M"},
		{"P1H", "hours, minutes and seconds go after T, as in PT1H"},
		{"P30S", "go after T"},
		{"P", "want a Go duration"},
		{"PT", "want a Go duration"},
		{"P1DT", "want a Go duration"},
		{"PT1D", "want a Go duration"},
		{"PT1M1H", "want a Go duration"},
		{"P1D1D", "want a Go duration"},
		{"P1D1W", "want a Go duration"},
		{"PT1HT1M", "want a Go duration"},
		{"PT1H30", "want a Go duration"},
		{"PT.5S", "want a Go duration"},
		{"PT5.S", "want a Go duration"},
		{"PT-1H", "want a Go duration"},
		{"P-1D", "want a Go duration"},
		{"PT1H ", "want a Go duration"},
		{"PT1X", "want a Go duration"},
		{"P1DT2H3", "want a Go duration"},
		{"PT1.5H30M", "only the last component may have a fraction"},
		{"P106752D", "too large"},
		{"PT2562048H", "too large"},
		{"P15250W2D", "too large"},
		{"PT99999999999999999999999H", "too large"},
		{"--5m", "want a Go duration"},
		{"+-PT1H", "want a Go duration"},
	}
	for _, tt := range invalid {
		_, err := ParseDuration(tt.in)
		require.Error(t, err, tt.in)
		require.ErrorContains(t, err, fmt.Sprintf("invalid duration %q: ", tt.in))
		require.ErrorContains(t, err, tt.wantErr, tt.in)
	}
	_, err := ParseDuration("abc")
	require.EqualError(t, err, `invalid duration "abc": `+DurationForms)
}

func TestParseUntil(t *testing.T) {
	t.Parallel()
	valid := []struct {
		in   string
		want string // UTC, RFC 3339 with nanoseconds
	}{
		{"2027-01-31T09:00:00+01:00", "2027-01-31T08:00:00Z"},
		{"2027-01-31T08:00:00Z", "2027-01-31T08:00:00Z"},
		{"2027-01-31T08:00:00.5Z", "2027-01-31T08:00:00.5Z"},
		{"2027-01-31T08:00:00.123456789Z", "2027-01-31T08:00:00.123456789Z"},
		{"2027-01-31T09:00:00-05:30", "2027-01-31T14:30:00Z"},
		{"2027-01-31T09:00:00-00:00", "2027-01-31T09:00:00Z"},
		{"2027-01-31t09:00:00+01:00", "2027-01-31T08:00:00Z"},
		{"2027-01-31T08:00:00z", "2027-01-31T08:00:00Z"},
		{"2027-01-01T00:30:00+01:00", "2026-12-31T23:30:00Z"},
	}
	for _, tt := range valid {
		got, err := ParseUntil(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got.Format(time.RFC3339Nano), tt.in)
		require.Equal(t, time.UTC, got.Location(), tt.in)
	}

	invalid := []struct {
		in      string
		wantErr string
	}{
		{"", "want an RFC 3339 instant such as 2027-01-31T09:00:00+01:00"},
		{"tomorrow", "want an RFC 3339 instant"},
		{"1801731600", "want an RFC 3339 instant"},
		{"2027-01-31", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00", "missing offset; add Z or one such as +01:00"},
		{"2027-01-31T09:00:00.5", "missing offset"},
		{"2027-01-31T09:00Z", "want an RFC 3339 instant"},
		{"2027-01-31 09:00:00Z", "want an RFC 3339 instant"},
		{"2027-01-31T9:00:00Z", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00,5Z", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00.Z", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00+0100", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00+01", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00+24:00", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00+01:60", "want an RFC 3339 instant"},
		{"2027-01-31T09:00:00+01:00 ", "want an RFC 3339 instant"},
		{"2027-02-29T09:00:00Z", "day out of range"},
		{"2027-13-01T09:00:00Z", "month out of range"},
		{"2027-01-31T24:00:00Z", "hour out of range"},
		{"2027-01-31T23:59:60Z", "second out of range"},
	}
	for _, tt := range invalid {
		_, err := ParseUntil(tt.in)
		require.Error(t, err, tt.in)
		require.ErrorContains(t, err, fmt.Sprintf("invalid until %q: ", tt.in))
		require.ErrorContains(t, err, tt.wantErr, tt.in)
	}
}

// TestLeapDay covers all three wait forms around 2028-02-29.
func TestLeapDay(t *testing.T) {
	t.Parallel()
	until, err := ParseUntil("2028-02-29T09:00:00+01:00")
	require.NoError(t, err)
	require.Equal(t, "2028-02-29T08:00:00Z", until.Format(time.RFC3339))

	// "for" two days from noon on the 28th crosses the 29th into March.
	d, err := ParseDuration("P2D")
	require.NoError(t, err)
	start := mustInstant(t, "2028-02-28T12:00:00Z")
	require.Equal(t, "2028-03-01T12:00:00Z", start.Add(d).Format(time.RFC3339))

	// untilTime on every day steps 28 -> 29 -> 1 in Berlin.
	loc := mustLoad(t, "Europe/Berlin")
	tod := TimeOfDay{Hour: 9}
	now := mustInstant(t, "2028-02-28T10:00:00+01:00")
	var got []string
	for range 2 {
		now = NextTimeOfDay(now, tod, loc, 0)
		got = append(got, now.In(loc).Format(time.RFC3339))
	}
	require.Equal(t, []string{"2028-02-29T09:00:00+01:00", "2028-03-01T09:00:00+01:00"}, got)
}

func TestLoadLocation(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Kathmandu", "Etc/GMT+5"} {
		loc, err := LoadLocation(name)
		require.NoError(t, err, name)
		require.Equal(t, name, loc.String())
	}

	invalid := []struct {
		name    string
		wantErr string
	}{
		{"", `invalid timezone "": name an IANA zone such as Europe/Berlin or UTC; a wait must not depend on the server's zone`},
		{"Local", `invalid timezone "Local": name an IANA zone`},
		{"Europe/Berln", `invalid timezone "Europe/Berln"`},
		{"Berlin", `invalid timezone "Berlin"`},
		{" UTC", `invalid timezone " UTC"`},
		{"../etc/passwd", `invalid timezone "../etc/passwd"`},
		{"/etc/localtime", `invalid timezone "/etc/localtime"`},
		{"+01:00", `invalid timezone "+01:00"`},
	}
	for _, tt := range invalid {
		_, err := LoadLocation(tt.name)
		require.Error(t, err, tt.name)
		require.ErrorContains(t, err, tt.wantErr)
	}
	_, err := LoadLocation("Europe/Berln")
	require.EqualError(t, err, `invalid timezone "Europe/Berln"`)
}

func TestParseDates(t *testing.T) {
	t.Parallel()
	d, err := ParseDates([]string{"2026-12-25", "2026-12-26", "2026-12-25", "2028-02-29"})
	require.NoError(t, err)
	require.Len(t, d, 3, "duplicates collapse")
	require.Contains(t, d, Date{2028, time.February, 29})
	require.Equal(t, "2028-02-29", Date{2028, time.February, 29}.String())

	for i, bad := range []string{"2026-13-01", "2027-02-29", "2026-1-05", "25.12.2026", "", " 2026-12-25", "2026-12-25T00:00:00Z"} {
		_, err := ParseDates([]string{"2026-12-24", bad})
		var de *DateError
		require.ErrorAs(t, err, &de, "%d: %q", i, bad)
		require.Equal(t, 1, de.Index)
		require.Equal(t, bad, de.Value)
	}
	_, err = ParseDates(make([]string, MaxSkipDates+1))
	require.ErrorContains(t, err, "more than the 1000 allowed")
	empty, err := ParseDates(nil)
	require.NoError(t, err)
	require.Empty(t, empty)
}

func TestNextTimeOfDaySkipping(t *testing.T) {
	t.Parallel()
	berlin := mustLoad(t, "Europe/Berlin")
	weekdays, err := ParseDays([]string{"mon", "tue", "wed", "thu", "fri"})
	require.NoError(t, err)
	dates := func(s ...string) Dates {
		d, err := ParseDates(s)
		require.NoError(t, err)
		return d
	}
	tests := []struct {
		name string
		now  string
		days Days
		skip Dates
		want string
	}{
		{"nothing skipped: as NextTimeOfDay", "2026-12-23T12:00:00+01:00", weekdays, nil, "2026-12-24T09:00:00+01:00"},
		{"holidays and a weekend", "2026-12-23T12:00:00+01:00", weekdays, dates("2026-12-24", "2026-12-25"), "2026-12-28T09:00:00+01:00"},
		{"today is skipped although 09:00 is ahead", "2026-12-24T08:00:00+01:00", weekdays, dates("2026-12-24"), "2026-12-25T09:00:00+01:00"},
		{"a past date changes nothing", "2026-12-23T12:00:00+01:00", weekdays, dates("2025-12-24"), "2026-12-24T09:00:00+01:00"},
		// Friday 27 March 2026 after 09:00: Monday 30 skipped, Tuesday 31 is CEST.
		{"across the DST change", "2026-03-27T10:00:00+01:00", weekdays, dates("2026-03-30"), "2026-03-31T09:00:00+02:00"},
		// The date is Berlin's: 2026-12-24 09:00 Berlin is 08:00 UTC on the same date,
		// and 23:30 UTC on the 23rd is already the 24th in Berlin.
		{"dates are local", "2026-12-23T23:30:00Z", weekdays, dates("2026-12-24"), "2026-12-25T09:00:00+01:00"},
		// Only Mondays, and four Mondays in a row skipped: a week each.
		{"one weekday, many skipped", "2026-01-01T00:00:00+01:00", 1 << time.Monday,
			dates("2026-01-05", "2026-01-12", "2026-01-19", "2026-01-26"), "2026-02-02T09:00:00+01:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := NextTimeOfDaySkipping(mustInstant(t, tt.now), TimeOfDay{Hour: 9}, berlin, tt.days, tt.skip)
			require.True(t, mustInstant(t, tt.want).Equal(got), "got %s, want %s", got.In(berlin), tt.want)
			require.Equal(t, time.UTC, got.Location())
		})
	}

	// Every day of a whole year skipped but one: the search reaches it.
	var all []string
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 365 {
		if d := start.AddDate(0, 0, i); d.Format(time.DateOnly) != "2026-11-17" {
			all = append(all, d.Format(time.DateOnly))
		}
	}
	got := NextTimeOfDaySkipping(start, TimeOfDay{Hour: 9}, time.UTC, 0, dates(all...))
	require.Equal(t, time.Date(2026, 11, 17, 9, 0, 0, 0, time.UTC), got)
}

// TestParseUntilIn: a date alone is the start of that day in the zone — its midnight,
// or the instant the clocks jump over it — and an instant ignores the zone.
func TestParseUntilIn(t *testing.T) {
	t.Parallel()
	berlin, err := LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	santiago, err := LoadLocation("America/Santiago")
	require.NoError(t, err)
	for _, tt := range []struct {
		in   string
		loc  *time.Location
		want string
	}{
		{"2027-01-31", time.UTC, "2027-01-31T00:00:00Z"},
		{"2027-01-31", berlin, "2027-01-30T23:00:00Z"},
		{"2027-07-31", berlin, "2027-07-30T22:00:00Z"},
		// Chile moves its clocks from 00:00 to 01:00 on 2026-09-06: that day starts at 01:00.
		{"2026-09-06", santiago, "2026-09-06T04:00:00Z"},
		{"2027-01-31T09:00:00+01:00", berlin, "2027-01-31T08:00:00Z"},
		{"2027-01-31T09:00:00Z", santiago, "2027-01-31T09:00:00Z"},
	} {
		got, err := ParseUntilIn(tt.in, tt.loc)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got.Format(time.RFC3339), "%s in %s", tt.in, tt.loc)
		require.Equal(t, time.UTC, got.Location())
	}
	for _, tt := range []struct{ in, wantErr string }{
		{"2027-02-30", `invalid until "2027-02-30": no such date; want YYYY-MM-DD or an RFC 3339 instant`},
		{"2027-1-31", `invalid until "2027-1-31": want an RFC 3339 instant such as 2027-01-31T09:00:00+01:00 (or a date alone, YYYY-MM-DD`},
		{"2027-01-31T09:00:00", "missing offset"},
	} {
		_, err := ParseUntilIn(tt.in, berlin)
		require.ErrorContains(t, err, tt.wantErr, tt.in)
	}
	require.True(t, IsDateOnly("2027-01-31"))
	require.False(t, IsDateOnly("2027-01-31T00:00:00Z"))
	require.False(t, IsDateOnly("2027/01/31"))
}
