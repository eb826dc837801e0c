package workflow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/workflow/template"
)

// timerNode wraps wait data into a one-node definition.
func timerNode(data string) string {
	return `{"name": "t", "nodes": [{"id": "pause", "type": "wait", "data": ` + data + `}]}`
}

func TestWaitNodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data string
		want []string // every error, in order
	}{
		{"nothing", `{}`, []string{`nodes[0].data: one of for, until or untilTime is required`}},
		{"two modes", `{"for": "1m", "until": "2027-01-31T09:00:00Z"}`, []string{`nodes[0].data: for, until and untilTime are exclusive: give exactly one`}},
		{"unknown field", `{"for": "1m", "delay": 3}`, []string{`nodes[0].data.delay: unknown field`}},
		{"for not a string", `{"for": 90}`, []string{`nodes[0].data.for: must be a string`}},
		{"bad duration", `{"for": "soon"}`, []string{`nodes[0].data.for: invalid duration "soon"`}},
		{"months", `{"for": "P1M"}`, []string{`nodes[0].data.for: `}},
		{"bad instant", `{"until": "tomorrow"}`, []string{`nodes[0].data.until: invalid`}},
		{"bad time", `{"untilTime": "25:00", "timezone": "Europe/Berlin"}`, []string{`nodes[0].data.untilTime: invalid time of day "25:00"`}},
		{"bad zone", `{"untilTime": "09:30", "timezone": "Europe/Berln"}`, []string{`nodes[0].data.timezone: invalid timezone "Europe/Berln"`}},
		{"bad day", `{"untilTime": "09:30", "days": ["mon", "fir"]}`, []string{`nodes[0].data.days[1]: unknown weekday "fir"`}},
		{"day not a string", `{"untilTime": "09:30", "days": ["mon", 2]}`, []string{`nodes[0].data.days[1]: must be a string`}},
		{"days wrong type", `{"untilTime": "09:30", "days": 5}`, []string{`nodes[0].data.days: must be an array of weekday names or a string`}},
		{"zone without untilTime", `{"for": "1m", "timezone": "UTC", "days": ["mon"]}`, []string{
			`nodes[0].data.timezone: only used with untilTime, or with until given as a date`, `nodes[0].data.days: only used with untilTime`,
		}},
		{"template syntax", `{"untilTime": "09:30", "timezone": "@{_trigger.tz"}`, []string{`nodes[0].data.timezone: `}},
		{"bad plain zone candidate", `{"untilTime": "09:30", "timezone": ["@{_trigger.tz}", "Europe/Berln", "UTC"]}`,
			[]string{`nodes[0].data.timezone[1]: invalid timezone "Europe/Berln"`}},
		{"zone candidate template syntax", `{"untilTime": "09:30", "timezone": ["@{_trigger.tz", "UTC"]}`, []string{`nodes[0].data.timezone[0]: `}},
		{"zone candidate not a string", `{"untilTime": "09:30", "timezone": ["UTC", 3]}`, []string{`nodes[0].data.timezone[1]: must be a string`}},
		{"no zone candidates", `{"untilTime": "09:30", "timezone": []}`, []string{`nodes[0].data.timezone: `}},
		{"zone wrong type", `{"untilTime": "09:30", "timezone": 5}`, []string{`nodes[0].data.timezone: must be a zone name or an array of candidate zone names`}},
		{"bad skip date", `{"untilTime": "09:30", "skipDates": ["2026-12-25", "2026-13-01"]}`,
			[]string{`nodes[0].data.skipDates[1]: invalid date "2026-13-01": want YYYY-MM-DD`}},
		{"bad skip date beside a template", `{"untilTime": "09:30", "timezone": "@{_trigger.tz}", "skipDates": ["@{_trigger.holidays}", "25.12.2026"]}`,
			[]string{`nodes[0].data.skipDates[1]: invalid date "25.12.2026"`}},
		{"skip dates wrong type", `{"untilTime": "09:30", "skipDates": 5}`, []string{`nodes[0].data.skipDates: must be an array of dates or a string`}},
		{"skip dates without untilTime", `{"for": "1m", "skipDates": ["2026-12-25"]}`, []string{`nodes[0].data.skipDates: only used with untilTime`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := compileErrs(t, timerNode(tt.data))
			require.Len(t, got, len(tt.want), "%q", got)
			for i := range got {
				require.Contains(t, got[i], tt.want[i])
			}
		})
	}
}

func TestWaitNodeValid(t *testing.T) {
	t.Parallel()
	for _, data := range []string{
		`{"for": "90m"}`,
		`{"for": "PT1H30M"}`,
		`{"for": "0s"}`,
		`{"until": "2027-01-31T09:00:00+01:00"}`,
		`{"until": "2020-01-01T00:00:00Z"}`,
		`{"until": "2027-01-31"}`,
		`{"until": "2027-01-31", "timezone": "Europe/Berlin"}`,
		`{"until": "@{_trigger.day}", "timezone": ["@{_trigger.tz}", "UTC"]}`,
		`{"for": "90 minutes"}`,
		`{"untilTime": "09:30"}`,
		`{"untilTime": "09:30", "timezone": "Europe/Berlin", "days": ["mon", "Tuesday", "fri"]}`,
		`{"untilTime": "09:30", "days": "sat,sun"}`,
		// Templates are evaluated when the node runs.
		`{"untilTime": "@{_trigger.at}", "timezone": "@{_trigger.tz}", "days": "@{_trigger.days}"}`,
		`{"for": "@{_vars.delay}"}`,
		`{"untilTime": "09:00", "timezone": ["@{_trigger.contact.timezone}", "@{_trigger.account.timezone}", "UTC"]}`,
		`{"untilTime": "09:00", "timezone": ["Europe/Berlin"], "days": ["mon", "tue", "wed", "thu", "fri"], "skipDates": ["2026-12-25", "2026-12-26"]}`,
		`{"untilTime": "09:00", "skipDates": "@{_trigger.holidays}"}`,
		`{"untilTime": "09:00", "skipDates": ["@{_trigger.holidays}", "2026-12-24"]}`,
	} {
		requireValid(t, []byte(timerNode(data)))
	}
}

func TestWaitPlan(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 3, 26, 10, 0, 0, 0, time.UTC) // a Friday
	sc := &template.Scope{
		Trigger: map[string]any{"tz": "America/New_York", "days": []any{"mon"}, "delay": "PT2H", "bad": "Mars/Base",
			"account": nil, "holidays": []any{"2027-03-29"}},
	}
	tests := []struct {
		name     string
		w        Wait
		at       time.Time
		settings map[string]any
		err      string
	}{
		{"for", Wait{For: "@{_trigger.delay}"}, now.Add(2 * time.Hour), map[string]any{"for": "PT2H"}, ""},
		{"until", Wait{Until: "2027-03-26T12:00:00+01:00"}, time.Date(2027, 3, 26, 11, 0, 0, 0, time.UTC),
			map[string]any{"until": "2027-03-26T12:00:00+01:00"}, ""},
		{"until an instant ignores the zone", Wait{Until: "2027-03-26T12:00:00+01:00", Timezone: "America/New_York"},
			time.Date(2027, 3, 26, 11, 0, 0, 0, time.UTC), map[string]any{"until": "2027-03-26T12:00:00+01:00"}, ""},
		{"until a date, UTC by default", Wait{Until: "2027-04-01"}, time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC),
			map[string]any{"until": "2027-04-01", "timezone": "UTC"}, ""},
		{"until a date in a templated zone", Wait{Until: "2027-04-01", Timezone: "@{_trigger.tz}"}, time.Date(2027, 4, 1, 4, 0, 0, 0, time.UTC),
			map[string]any{"until": "2027-04-01", "timezone": "America/New_York"}, ""},
		{"until a date, zone candidates", Wait{Until: "2027-04-01", Timezones: []string{"@{_trigger.account}", "Europe/Berlin"}},
			time.Date(2027, 3, 31, 22, 0, 0, 0, time.UTC), map[string]any{"until": "2027-04-01", "timezone": "Europe/Berlin", "timezone_candidate": 1,
				"timezone_skipped": []map[string]any{{"index": 0, "candidate": "@{_trigger.account}", "reason": "is null"}}}, ""},
		{"until no such date", Wait{Until: "2027-02-30"}, time.Time{}, nil, `until: invalid until "2027-02-30": no such date`},
		{"for in words", Wait{For: "2 hours"}, now.Add(2 * time.Hour), map[string]any{"for": "2 hours"}, ""},
		// Friday 06:00 in New York; 09:30 on the next Monday, after the US switched to
		// summer time on 14 March: UTC-4.
		{"untilTime templated zone and days", Wait{UntilTime: "09:30", Timezone: "@{_trigger.tz}", Days: "@{_trigger.days}"},
			time.Date(2027, 3, 29, 13, 30, 0, 0, time.UTC),
			map[string]any{"untilTime": "09:30", "timezone": "America/New_York", "days": []string{"mon"}}, ""},
		{"untilTime default zone", Wait{UntilTime: "09:30"}, time.Date(2027, 3, 27, 9, 30, 0, 0, time.UTC),
			map[string]any{"untilTime": "09:30", "timezone": "UTC"}, ""},
		{"days list with templates", Wait{UntilTime: "11:00", Days: []string{"@{_trigger.days.0}", "sun"}},
			time.Date(2027, 3, 28, 11, 0, 0, 0, time.UTC),
			map[string]any{"untilTime": "11:00", "timezone": "UTC", "days": []string{"mon", "sun"}}, ""},
		{"bad zone names the value", Wait{UntilTime: "09:30", Timezone: "@{_trigger.bad}"}, time.Time{}, nil,
			`timezone: invalid timezone "Mars/Base"`},
		{"missing template value", Wait{For: "@{_trigger.nope}"}, time.Time{}, nil, `for: `},
		// Candidates: the contact's zone is missing, the account's null, the next one not
		// a zone; the fourth wins and the fifth is never looked at.
		{"zone candidates", Wait{UntilTime: "09:30", Timezones: []string{
			"@{_trigger.contact.timezone}", "@{_trigger.account}", "@{_trigger.bad}", "@{_trigger.tz}", "Europe/Berlin",
		}}, time.Date(2027, 3, 26, 13, 30, 0, 0, time.UTC), map[string]any{
			"untilTime": "09:30", "timezone": "America/New_York", "timezone_candidate": 3,
			"timezone_skipped": []map[string]any{
				{"index": 0, "candidate": "@{_trigger.contact.timezone}", "reason": `@{_trigger.contact.timezone}: _trigger has no field "contact"`},
				{"index": 1, "candidate": "@{_trigger.account}", "reason": "is null"},
				{"index": 2, "candidate": "@{_trigger.bad}", "reason": `invalid timezone "Mars/Base"`},
			},
		}, ""},
		{"first candidate wins", Wait{UntilTime: "09:30", Timezones: []string{"UTC", "@{_trigger.nope}"}},
			time.Date(2027, 3, 27, 9, 30, 0, 0, time.UTC),
			map[string]any{"untilTime": "09:30", "timezone": "UTC", "timezone_candidate": 0, "timezone_skipped": []map[string]any{}}, ""},
		{"no candidate is a zone", Wait{UntilTime: "09:30", Timezones: []string{"@{_trigger.nope}", "@{_trigger.days}", "@{_trigger.bad}"}},
			time.Time{}, nil, `timezone: no candidate is a valid IANA zone: [0] @{_trigger.nope}: @{_trigger.nope}: _trigger has no field "nope"; ` +
				`[1] @{_trigger.days}: is an array, not a zone name; [2] @{_trigger.bad}: invalid timezone "Mars/Base"`},
		// Friday 10:00 UTC is 11:00 in Berlin, past 09:00: the next business day is
		// Monday 29 March, a holiday here, then Tuesday — after Berlin's switch to
		// summer time on 28 March, so 07:00 UTC.
		{"next business day", Wait{UntilTime: "09:00", Timezones: []string{"Europe/Berlin"},
			Days: []string{"mon", "tue", "wed", "thu", "fri"}, SkipDates: []string{"@{_trigger.holidays}", "2027-03-31"}},
			time.Date(2027, 3, 30, 7, 0, 0, 0, time.UTC), map[string]any{
				"untilTime": "09:00", "timezone": "Europe/Berlin", "timezone_candidate": 0, "timezone_skipped": []map[string]any{},
				"days": []string{"mon", "tue", "wed", "thu", "fri"}, "skipDates": []string{"2027-03-29", "2027-03-31"},
			}, ""},
		{"skip dates as one template", Wait{UntilTime: "09:00", SkipDates: "@{_trigger.holidays}"},
			time.Date(2027, 3, 27, 9, 0, 0, 0, time.UTC),
			map[string]any{"untilTime": "09:00", "timezone": "UTC", "skipDates": []string{"2027-03-29"}}, ""},
		{"bad rendered skip date", Wait{UntilTime: "09:00", SkipDates: []string{"@{_trigger.tz}"}}, time.Time{}, nil,
			`skipDates[0]: invalid date "America/New_York"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			plan, err := tt.w.Plan(now, sc)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				var se *SettingError
				require.ErrorAs(t, err, &se)
				return
			}
			require.NoError(t, err)
			require.True(t, tt.at.Equal(plan.At), "at %s, want %s", plan.At, tt.at)
			require.Equal(t, tt.settings, plan.Settings)
		})
	}
}

// TestWaitZoneWithInstantWarns: a timezone beside an until that is an instant places
// nothing; the definition is valid and says so in a warning. Beside a date, or a
// templated until (a date or an instant once rendered), it is silent.
func TestWaitZoneWithInstantWarns(t *testing.T) {
	t.Parallel()
	wf := requireValid(t, []byte(timerNode(`{"until": "2027-01-31T09:00:00Z", "timezone": "Europe/Berlin"}`)))
	require.Equal(t, []FieldError{{Path: "nodes[0].data.timezone",
		Message: "ignored: until is an instant with its own offset; timezone places only an until given as a date (YYYY-MM-DD) and untilTime"}}, wf.Warnings())
	for _, data := range []string{`{"until": "2027-01-31", "timezone": "Europe/Berlin"}`, `{"until": "@{_trigger.at}", "timezone": "Europe/Berlin"}`} {
		require.Empty(t, requireValid(t, []byte(timerNode(data))).Warnings(), data)
	}
}
