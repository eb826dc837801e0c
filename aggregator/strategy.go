package aggregator

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/vocab"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// Expected is one event a wait expects.
type Expected struct {
	Name     string          `json:"name"`
	Source   workflow.Source `json:"source"` // SourceCallback, SourceKafka or SourceSend
	Topic    string          `json:"topic,omitempty"`
	Required bool            `json:"required"`
	// TimeoutMS is the event's own timeout, relative to registration (0: none but the
	// node's overall one).
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// DeadlineAt is the event's own deadline, set at registration from TimeoutMS: an
	// event that has not arrived by then times out, and no longer counts if it arrives.
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
	// Filter lists payload fields (dot paths) that must equal the given values for an
	// event to count as this one.
	Filter Filter `json:"filter,omitempty"`
	// Type is a send event's type, or the top-level type field a Kafka record must carry.
	Type string `json:"type,omitempty"`
	// Match, for a Kafka event correlated by its payload: the dot path and the value
	// (canonical JSON, resolved at registration) it must hold.
	Match *ExpectedMatch `json:"match,omitempty"`
	// Buffer is the buffer policy of a send event, or of a payload match with a
	// lookback: fifo (default) or last_write_wins.
	Buffer workflow.BufferMode `json:"buffer,omitempty"`
	// LookbackMS, for a payload match: how old a record kept because it reached no wait
	// may be for this wait to take it at registration (0: none is taken).
	LookbackMS int64 `json:"lookback_ms,omitempty"`
}

// Filter maps dot paths to the scalars a payload must hold there. It reads its numbers
// exact (see jsonnum): stored with the wait as written in the definition, a filter on
// 9007199254740993 must not be read back as 9007199254740992 and accept that id too.
type Filter map[string]any

// UnmarshalJSON reads a filter with its numbers as json.Number.
func (f *Filter) UnmarshalJSON(b []byte) error {
	v, err := jsonnum.Decode(b)
	if err != nil {
		return err
	}
	switch m := v.(type) {
	case nil:
		*f = nil
	case map[string]any:
		*f = m
	default:
		return fmt.Errorf("filter is %T, not an object", v)
	}
	return nil
}

var _ json.Unmarshaler = (*Filter)(nil)

// ExpectedMatch is a payload match resolved at registration.
type ExpectedMatch struct {
	Left  string `json:"left"`
	Value string `json:"value"` // canonical JSON of the scalar (MatchValue)
}

// Event sources an expected event can have (and Source.Kind of an event); declared by
// the definition format.
const (
	SourceCallback = workflow.SourceCallback
	SourceKafka    = workflow.SourceKafka
	SourceSend     = workflow.SourceSend
)

// Buffer policies of send events; declared by the definition format.
const (
	BufferFIFO          = workflow.BufferFIFO
	BufferLastWriteWins = workflow.BufferLastWriteWins
)

// RequiredSet returns the events a strategy waits for, which is what is stored in
// required_events. For "any" it is empty: any one enabled event satisfies it.
func RequiredSet(strategy vocab.Strategy, expected []Expected, custom []string) ([]string, error) {
	var out []string
	switch strategy {
	case vocab.StrategyAll:
		for _, e := range expected {
			out = append(out, e.Name)
		}
	case vocab.StrategyAny:
	case vocab.StrategyRequiredOnly:
		for _, e := range expected {
			if e.Required {
				out = append(out, e.Name)
			}
		}
	case vocab.StrategyCustom:
		for _, name := range custom {
			if !slices.ContainsFunc(expected, func(e Expected) bool { return e.Name == name }) {
				return nil, fmt.Errorf("custom strategy requires %q, which is not an enabled event", name)
			}
		}
		out = slices.Clone(custom)
	default:
		return nil, fmt.Errorf("unknown aggregation strategy %q", strategy)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}

// Satisfied reports whether the received events complete a wait. It is a pure function
// of what the wait state row stores, so every pod reaches the same answer.
func Satisfied(strategy vocab.Strategy, enabled, required, received []string) bool {
	if strategy == vocab.StrategyAny {
		for _, r := range received {
			if slices.Contains(enabled, r) {
				return true
			}
		}
		return false
	}
	for _, r := range required {
		if !slices.Contains(received, r) {
			return false
		}
	}
	return true
}
