package aggregator_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/vocab"
)

const (
	api   = aggregator.EventAPIResponse
	kafka = aggregator.EventKafka
)

// expectBoth returns the apiCall and kafkaEvent events, with the given required flags.
func expectBoth(apiRequired, kafkaRequired bool) []aggregator.Expected {
	return []aggregator.Expected{
		{Name: api, Source: "callback", Required: apiRequired},
		{Name: kafka, Source: "kafka", Topic: "orders", Required: kafkaRequired},
	}
}

func expectAPIOnly() []aggregator.Expected {
	return []aggregator.Expected{{Name: api, Source: "callback", Required: true}}
}

func TestRequiredSet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		strategy vocab.Strategy
		expected []aggregator.Expected
		custom   []string
		want     []string
		wantErr  string
	}{
		{name: "all/both required", strategy: vocab.StrategyAll, expected: expectBoth(true, true), want: []string{api, kafka}},
		{name: "all ignores required flags", strategy: vocab.StrategyAll, expected: expectBoth(false, false), want: []string{api, kafka}},
		{name: "all/api only", strategy: vocab.StrategyAll, expected: expectAPIOnly(), want: []string{api}},
		{name: "all/nothing expected", strategy: vocab.StrategyAll, expected: nil, want: []string{}},
		{name: "any/both required", strategy: vocab.StrategyAny, expected: expectBoth(true, true), want: []string{}},
		{name: "any/none required", strategy: vocab.StrategyAny, expected: expectBoth(false, false), want: []string{}},
		{name: "required_only/both", strategy: vocab.StrategyRequiredOnly, expected: expectBoth(true, true), want: []string{api, kafka}},
		{name: "required_only/kafka optional", strategy: vocab.StrategyRequiredOnly, expected: expectBoth(true, false), want: []string{api}},
		{name: "required_only/api optional", strategy: vocab.StrategyRequiredOnly, expected: expectBoth(false, true), want: []string{kafka}},
		{name: "required_only/none required", strategy: vocab.StrategyRequiredOnly, expected: expectBoth(false, false), want: []string{}},
		{name: "custom/api", strategy: vocab.StrategyCustom, expected: expectBoth(false, false), custom: []string{api}, want: []string{api}},
		{name: "custom/kafka", strategy: vocab.StrategyCustom, expected: expectBoth(true, true), custom: []string{kafka}, want: []string{kafka}},
		{name: "custom/both keeps order", strategy: vocab.StrategyCustom, expected: expectBoth(false, false), custom: []string{kafka, api}, want: []string{kafka, api}},
		{name: "custom/empty list", strategy: vocab.StrategyCustom, expected: expectBoth(true, true), custom: []string{}, want: []string{}},
		{name: "custom/nil list", strategy: vocab.StrategyCustom, expected: expectBoth(true, true), custom: nil, want: []string{}},
		{name: "custom/names disabled event", strategy: vocab.StrategyCustom, expected: expectAPIOnly(), custom: []string{kafka},
			wantErr: `custom strategy requires "kafka_event", which is not an enabled event`},
		{name: "custom/names unknown event", strategy: vocab.StrategyCustom, expected: expectBoth(true, true), custom: []string{api, "sms"},
			wantErr: `custom strategy requires "sms", which is not an enabled event`},
		{name: "custom/nothing enabled", strategy: vocab.StrategyCustom, expected: nil, custom: []string{api},
			wantErr: `custom strategy requires "api_response", which is not an enabled event`},
		{name: "unknown strategy", strategy: "most", expected: expectBoth(true, true), wantErr: `unknown aggregation strategy "most"`},
		{name: "empty strategy", strategy: "", expected: expectBoth(true, true), wantErr: `unknown aggregation strategy ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := aggregator.RequiredSet(tt.strategy, tt.expected, tt.custom)
			if tt.wantErr != "" {
				require.EqualError(t, err, tt.wantErr)
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			// Never nil: it is stored as a JSON array, and null is not an array.
			require.NotNil(t, got)
			require.Equal(t, tt.want, got)
		})
	}
}

// The custom list is copied: the caller's slice may change afterwards.
func TestRequiredSetCustomIsCopied(t *testing.T) {
	t.Parallel()
	custom := []string{api, kafka}
	got, err := aggregator.RequiredSet(vocab.StrategyCustom, expectBoth(false, false), custom)
	require.NoError(t, err)
	custom[0] = "changed"
	require.Equal(t, []string{api, kafka}, got)
}

func TestSatisfied(t *testing.T) {
	t.Parallel()
	both := []string{api, kafka}
	tests := []struct {
		name     string
		strategy vocab.Strategy
		enabled  []string
		required []string
		received []string
		want     bool
	}{
		{"all/nothing", vocab.StrategyAll, both, both, nil, false},
		{"all/api", vocab.StrategyAll, both, both, []string{api}, false},
		{"all/kafka", vocab.StrategyAll, both, both, []string{kafka}, false},
		{"all/api,kafka", vocab.StrategyAll, both, both, []string{api, kafka}, true},
		{"all/kafka,api", vocab.StrategyAll, both, both, []string{kafka, api}, true},
		{"all/api-only wait", vocab.StrategyAll, []string{api}, []string{api}, []string{api}, true},

		{"any/nothing", vocab.StrategyAny, both, []string{}, nil, false},
		{"any/api", vocab.StrategyAny, both, []string{}, []string{api}, true},
		{"any/kafka", vocab.StrategyAny, both, []string{}, []string{kafka}, true},
		{"any/both", vocab.StrategyAny, both, []string{}, []string{kafka, api}, true},
		{"any/only a not-enabled event", vocab.StrategyAny, []string{api}, []string{}, []string{kafka}, false},
		{"any/not-enabled then enabled", vocab.StrategyAny, []string{api}, []string{}, []string{kafka, api}, true},

		{"required_only api/nothing", vocab.StrategyRequiredOnly, both, []string{api}, nil, false},
		{"required_only api/kafka", vocab.StrategyRequiredOnly, both, []string{api}, []string{kafka}, false},
		{"required_only api/api", vocab.StrategyRequiredOnly, both, []string{api}, []string{api}, true},
		{"required_only api/kafka,api", vocab.StrategyRequiredOnly, both, []string{api}, []string{kafka, api}, true},
		{"required_only kafka/api", vocab.StrategyRequiredOnly, both, []string{kafka}, []string{api}, false},
		{"required_only kafka/kafka", vocab.StrategyRequiredOnly, both, []string{kafka}, []string{kafka}, true},
		{"required_only both/api", vocab.StrategyRequiredOnly, both, both, []string{api}, false},
		{"required_only both/kafka", vocab.StrategyRequiredOnly, both, both, []string{kafka}, false},
		{"required_only both/both", vocab.StrategyRequiredOnly, both, both, []string{kafka, api}, true},
		// Workflow validation rejects required_only without a required event; should such a
		// row exist anyway, the first event completes it rather than waiting forever.
		{"required_only none/kafka", vocab.StrategyRequiredOnly, both, []string{}, []string{kafka}, true},

		{"custom api/nothing", vocab.StrategyCustom, both, []string{api}, nil, false},
		{"custom api/kafka", vocab.StrategyCustom, both, []string{api}, []string{kafka}, false},
		{"custom api/api", vocab.StrategyCustom, both, []string{api}, []string{api}, true},
		{"custom kafka/api", vocab.StrategyCustom, both, []string{kafka}, []string{api}, false},
		{"custom kafka/api,kafka", vocab.StrategyCustom, both, []string{kafka}, []string{api, kafka}, true},
		{"custom both/api", vocab.StrategyCustom, both, both, []string{api}, false},
		{"custom both/kafka,api", vocab.StrategyCustom, both, both, []string{kafka, api}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, aggregator.Satisfied(tt.strategy, tt.enabled, tt.required, tt.received))
		})
	}
}

// Satisfied agrees with RequiredSet for every strategy and every subset of events, so the
// value stored at registration is all a pod needs to decide.
func TestSatisfiedFromRequiredSet(t *testing.T) {
	t.Parallel()
	subsets := [][]string{nil, {api}, {kafka}, {api, kafka}, {kafka, api}}
	type config struct {
		strategy vocab.Strategy
		expected []aggregator.Expected
		custom   []string
		// needs reports whether a received set satisfies the strategy, as docs/definitions.md has it.
		needs func(got map[string]bool) bool
	}
	configs := map[string]config{
		"all":                          {vocab.StrategyAll, expectBoth(true, false), nil, func(g map[string]bool) bool { return g[api] && g[kafka] }},
		"any":                          {vocab.StrategyAny, expectBoth(true, true), nil, func(g map[string]bool) bool { return g[api] || g[kafka] }},
		"required_only/kafka optional": {vocab.StrategyRequiredOnly, expectBoth(true, false), nil, func(g map[string]bool) bool { return g[api] }},
		"required_only/api optional":   {vocab.StrategyRequiredOnly, expectBoth(false, true), nil, func(g map[string]bool) bool { return g[kafka] }},
		"required_only/both":           {vocab.StrategyRequiredOnly, expectBoth(true, true), nil, func(g map[string]bool) bool { return g[api] && g[kafka] }},
		"custom/api":                   {vocab.StrategyCustom, expectBoth(false, true), []string{api}, func(g map[string]bool) bool { return g[api] }},
		"custom/both":                  {vocab.StrategyCustom, expectBoth(false, false), []string{api, kafka}, func(g map[string]bool) bool { return g[api] && g[kafka] }},
	}
	for name, c := range configs {
		required, err := aggregator.RequiredSet(c.strategy, c.expected, c.custom)
		require.NoError(t, err, name)
		enabled := []string{api, kafka}
		for _, received := range subsets {
			got := map[string]bool{}
			for _, r := range received {
				got[r] = true
			}
			require.Equal(t, c.needs(got), aggregator.Satisfied(c.strategy, enabled, required, received), "%s with %v", name, received)
		}
	}
}
