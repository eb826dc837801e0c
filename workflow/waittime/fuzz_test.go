package waittime

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{
		"90m", "1h30m", "1.5h", "0", "-5m", "+5m", "PT90M", "PT1H30M", "P1DT2H", "P2W",
		"PT0.5S", "pt1,5h", "P1Y", "P90M", "P1H", "PT1.5H30M", "P106752D", "-PT0S",
		"PT0.1234567890123456789012345M", "P15250W2D", "PT99999999999999999999999H", "",
		"1 hour", "30 minutes", "2 days", "1.5 weeks", "106752 days", "2 months",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("invalid duration %q: ", s)) {
				t.Fatalf("error does not name the value: %v", err)
			}
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %v, negative", s, d)
		}
		// Every accepted value has a Go spelling that reads back the same.
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %v, but %q reads back as %v, %v", s, d, d.String(), back, err)
		}
	})
}

// fuzzZones mixes ordinary DST zones with the odd ones: half-hour shifts,
// changes at midnight, a skipped date, a repeated date and local mean time
// offsets with seconds.
var fuzzZones = []string{
	"UTC", "Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe",
	"America/Santiago", "America/Havana", "Africa/Casablanca", "Pacific/Chatham",
	"Pacific/Apia", "America/Sitka", "Asia/Manila", "Pacific/Kiritimati", "Europe/Dublin",
}

// FuzzNextTimeOfDay checks what holds for any clock: the answer is in UTC,
// after now and within the search window, and it either shows the requested
// time of day on an allowed date or is the instant the clocks jumped over it.
func FuzzNextTimeOfDay(f *testing.F) {
	f.Add(int64(1806145200), uint32(0), uint8(1), uint8(2), uint8(30), uint8(0), uint8(0))           // Berlin, eve of spring forward
	f.Add(int64(1824945000), uint32(0), uint8(1), uint8(2), uint8(30), uint8(0), uint8(0))           // Berlin, between the two 02:30s of fall back
	f.Add(int64(1325196000), uint32(0), uint8(9), uint8(9), uint8(30), uint8(0), uint8(1<<5))        // Apia, before the skipped Friday
	f.Add(int64(-3225221927), uint32(0), uint8(10), uint8(10), uint8(0), uint8(0), uint8(1<<6))      // Sitka, the repeated day
	f.Add(int64(1806145200), uint32(999999999), uint8(4), uint8(23), uint8(59), uint8(59), uint8(0)) // Lord Howe
	f.Fuzz(func(t *testing.T, sec int64, nsec uint32, zone, hour, minute, second, days uint8) {
		// Fold into 1800-01-01 .. 2200-01-01: the local mean time changes of
		// the 1800s, and well past the last transition the database lists.
		const lo, hi = -5364662400, 7258118400
		if sec < lo || sec > hi {
			sec = lo + (sec%(hi-lo)+(hi-lo))%(hi-lo)
		}
		now := time.Unix(sec, int64(nsec%1e9))
		loc, err := LoadLocation(fuzzZones[int(zone)%len(fuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		tod := TimeOfDay{Hour: int(hour) % 24, Minute: int(minute) % 60, Second: int(second) % 60}
		d := Days(days)

		got := NextTimeOfDay(now, tod, loc, d)
		if got.Location() != time.UTC {
			t.Fatalf("result in %s, want UTC", got.Location())
		}
		if !got.After(now) || got.Sub(now) > searchDays*24*time.Hour {
			t.Fatalf("NextTimeOfDay(%s, %s, %s, %07b) = %s: not within the window after now", now.In(loc), tod, loc, d, got.In(loc))
		}
		l := got.In(loc)
		shows := l.Hour() == tod.Hour && l.Minute() == tod.Minute && l.Second() == tod.Second && d.Has(l.Weekday())
		jump := offsetAt(got.Add(-time.Nanosecond), loc) < offsetAt(got, loc)
		if !shows && !jump {
			t.Fatalf("NextTimeOfDay(%s, %s, %s, %07b) = %s: neither the time of day on an allowed day nor a jump", now.In(loc), tod, loc, d, l)
		}
	})
}

// FuzzNextTimeOfDaySkipping skips a run of local dates from near now and checks that
// the answer is after now, no earlier than without the skipped dates, and, when it
// shows the time of day, not on a skipped date (a jump over a whole day, as in Apia,
// belongs to the date it jumped over).
func FuzzNextTimeOfDaySkipping(f *testing.F) {
	f.Add(int64(1806145200), uint8(1), uint8(9), uint8(0), uint8(0b0111110), uint8(0), uint8(3)) // Berlin, weekdays, three days skipped
	f.Add(int64(1325196000), uint8(9), uint8(9), uint8(30), uint8(0), uint8(1), uint8(2))        // Apia, around the skipped Friday
	f.Add(int64(1824945000), uint8(1), uint8(2), uint8(30), uint8(1<<1), uint8(0), uint8(40))    // Berlin, Mondays only, many skipped
	f.Fuzz(func(t *testing.T, sec int64, zone, hour, minute, days, start, count uint8) {
		const lo, hi = -5364662400, 7258118400
		if sec < lo || sec > hi {
			sec = lo + (sec%(hi-lo)+(hi-lo))%(hi-lo)
		}
		now := time.Unix(sec, 0)
		loc, err := LoadLocation(fuzzZones[int(zone)%len(fuzzZones)])
		if err != nil {
			t.Fatal(err)
		}
		tod := TimeOfDay{Hour: int(hour) % 24, Minute: int(minute) % 60}
		d := Days(days)
		skip := Dates{}
		y, m, day := now.In(loc).Date()
		for i := range int(count) % 64 {
			skip[DateOf(time.Date(y, m, day+int(start)%8+i, 0, 0, 0, 0, time.UTC))] = struct{}{}
		}

		got := NextTimeOfDaySkipping(now, tod, loc, d, skip)
		plain := NextTimeOfDay(now, tod, loc, d)
		if got.Location() != time.UTC || !got.After(now) || got.Before(plain) {
			t.Fatalf("NextTimeOfDaySkipping(%s, %s, %s, %07b, %d dates) = %s; without skipping %s", now.In(loc), tod, loc, d, len(skip), got, plain)
		}
		l := got.In(loc)
		shows := l.Hour() == tod.Hour && l.Minute() == tod.Minute && l.Second() == 0 && d.Has(l.Weekday())
		if _, skipped := skip[DateOf(l)]; shows && skipped {
			t.Fatalf("NextTimeOfDaySkipping(%s, %s, %s, %07b) = %s: a skipped date", now.In(loc), tod, loc, d, l)
		}
		if len(skip) == 0 && !got.Equal(plain) {
			t.Fatalf("nothing skipped, yet %s differs from %s", got, plain)
		}
	})
}
