package workflow

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/internal/template"
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
			`nodes[0].data.timezone: only used with untilTime`, `nodes[0].data.days: only used with untilTime`,
		}},
		{"template syntax", `{"untilTime": "09:30", "timezone": "@{_trigger.tz"}`, []string{`nodes[0].data.timezone: `}},
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
		`{"untilTime": "09:30"}`,
		`{"untilTime": "09:30", "timezone": "Europe/Berlin", "days": ["mon", "Tuesday", "fri"]}`,
		`{"untilTime": "09:30", "days": "sat,sun"}`,
		// Templates are evaluated when the node runs.
		`{"untilTime": "@{_trigger.at}", "timezone": "@{_trigger.tz}", "days": "@{_trigger.days}"}`,
		`{"for": "@{_vars.delay}"}`,
	} {
		requireValid(t, []byte(timerNode(data)))
	}
}

func TestWaitPlan(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 3, 26, 10, 0, 0, 0, time.UTC) // a Friday
	sc := &template.Scope{
		Trigger: map[string]any{"tz": "America/New_York", "days": []any{"mon"}, "delay": "PT2H", "bad": "Mars/Base"},
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
