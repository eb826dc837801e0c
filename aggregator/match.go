package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
)

// Payload match: a Kafka event may be correlated by a value in its payload
// instead of by rendezvous ids. The value the wait expects is resolved when the wait is
// registered and stored as a key in match_keys; an incoming record computes the same key
// from its payload and finds its waits through a GIN index on that column. A key names
// the topic, the type, the dot path and the value, so records of one topic matched on
// different fields, or of different types, never meet.

// keySep separates the parts of a match key; it cannot occur in a topic, and a type, a
// dot path or a JSON value containing it only makes a key that nothing else produces.
const keySep = "\x1f"

// MatchSpec is how one expected event of a topic is matched: the record's type field (if
// the event names a type) and the dot path whose value is compared.
type MatchSpec struct {
	Type string
	Left string
	// Lookback is how long a record matching the spec that reaches no wait is kept for
	// a wait registering later (KeepFor); 0 keeps none.
	Lookback time.Duration
}

// MatchValue is the canonical form of a scalar for matching: its JSON for strings and
// booleans; for numbers, one form per exact value (jsonnum), so 42, 42.0 and 4.2e1 are
// one value while 9007199254740992 and 9007199254740993 stay two, and a record never
// reaches the wait of another execution through a rounded id. A number written the way
// its float64 is (most numbers) keeps the form keys always had, the shortest JSON of
// that float64, so waits registered before stay matched; any other number (beyond 2^53,
// more digits than a float64 holds, beyond its range) is "#" and its exact digits and
// exponent, a form no other value produces. Objects, arrays and null match nothing.
func MatchValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		b, _ := json.Marshal(x)
		return string(b), true
	case bool:
		return strconv.FormatBool(x), true
	}
	n, ok := jsonnum.Of(v)
	if !ok {
		return "", false
	}
	if f, exact := n.Float64(); exact {
		b, err := json.Marshal(f) // zero comes back as 0, never -0
		if err != nil {
			return "", false
		}
		return string(b), true
	}
	return "#" + n.String(), true
}

// matchKey is the lookup key of one (topic, type, path, value).
func matchKey(topic, typ, left, value string) string {
	return "v" + keySep + topic + keySep + typ + keySep + left + keySep + value
}

// TypeKey names the waiters of one match type: the admission limit counts them.
func TypeKey(topic, typ string) string {
	return "t" + keySep + topic + keySep + typ
}

// MatchKeys computes the lookup keys of a Kafka record on topic for the match specs its
// topic has: one per spec whose type the record carries and whose path holds a scalar.
func MatchKeys(topic string, payload any, specs []MatchSpec) []string {
	var keys []string
	for _, s := range specs {
		if s.Type != "" {
			if t, ok := dotpath.Get(payload, "type"); !ok || t != s.Type {
				continue
			}
		}
		v, ok := dotpath.Get(payload, s.Left)
		if !ok {
			continue
		}
		val, ok := MatchValue(v)
		if !ok {
			continue
		}
		if k := matchKey(topic, s.Type, s.Left, val); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// registrationKeys are the match_keys of a wait: its match keys, then the type keys.
func registrationKeys(expected []Expected) (keys, typeKeys []string) {
	for _, e := range expected {
		if e.Match == nil {
			continue
		}
		k := matchKey(e.Topic, e.Type, e.Match.Left, e.Match.Value)
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		if tk := TypeKey(e.Topic, e.Type); !slices.Contains(typeKeys, tk) {
			typeKeys = append(typeKeys, tk)
		}
	}
	return keys, typeKeys
}

// expandMatches replaces each event correlated by payload (MatchKeys set) with one event
// per expected event of every open wait holding one of its keys, named and addressed
// like any other; events with ids pass unchanged. origin[i] is the input index expanded
// event i came from. One query finds the waits of the whole batch.
func (a *Aggregator) expandMatches(ctx context.Context, tx pgx.Tx, events []Event) (out []Event, origin []int, err error) {
	var keys []string
	for _, ev := range events {
		keys = append(keys, ev.MatchKeys...)
	}
	var rows []dbsqlc.ExecutionWaitState
	if len(keys) > 0 {
		slices.Sort(keys)
		keys = slices.Compact(keys)
		if rows, err = a.q.WaitStateListByMatchKeys(ctx, tx, keys); err != nil {
			return nil, nil, fmt.Errorf("look up match keys: %w", err)
		}
	}
	type holder struct {
		row      dbsqlc.ExecutionWaitState
		expected []Expected
	}
	byKey := map[string][]*holder{}
	// An event correlated by ids is one decision, as are most matched ones: growing out
	// by appending would copy a batch's events several times over.
	out, origin = make([]Event, 0, len(events)), make([]int, 0, len(events))
	for _, row := range rows {
		h := &holder{row: row}
		if err := json.Unmarshal(row.ExpectedEvents, &h.expected); err != nil {
			return nil, nil, fmt.Errorf("decode expected_events of wait %s: %w", row.ID, err)
		}
		for _, k := range row.MatchKeys {
			byKey[k] = append(byKey[k], h)
		}
	}
	for i, ev := range events {
		if len(ev.MatchKeys) == 0 {
			out = append(out, ev)
			origin = append(origin, i)
			continue
		}
		seen := map[uuid.UUID]bool{}
		for _, k := range ev.MatchKeys {
			for _, h := range byKey[k] {
				if seen[h.row.ID] {
					continue
				}
				seen[h.row.ID] = true
				for _, e := range h.expected {
					if e.Match == nil || !slices.Contains(ev.MatchKeys, matchKey(e.Topic, e.Type, e.Match.Left, e.Match.Value)) {
						continue
					}
					d := ev
					d.MatchKeys = nil
					d.ExecutionID, d.CorrelationID, d.Name = h.row.ExecutionID, h.row.CorrelationID, e.Name
					out = append(out, d)
					origin = append(origin, i)
				}
			}
		}
	}
	return out, origin, nil
}

// foldMatches turns the results of expanded events back into one result per input
// event. An event that reached waits reports the most advanced outcome among them and
// every delivery; one that reached none is NoMatch.
func foldMatches(events []Event, origin []int, expanded []Result) []Result {
	results := make([]Result, len(events))
	reached := make([]bool, len(events))
	for j, res := range expanded {
		i := origin[j]
		if len(events[i].MatchKeys) == 0 {
			results[i] = res
			continue
		}
		r := &results[i]
		r.Deliveries = append(r.Deliveries, res)
		if !reached[i] || rank(res.Outcome) > rank(r.Outcome) {
			deliveries := r.Deliveries
			*r = res
			r.Deliveries = deliveries
			r.Expired = nil // each deadline written stays with its delivery, announced once
		}
		reached[i] = true
	}
	for i, ev := range events {
		if len(ev.MatchKeys) > 0 && !reached[i] {
			results[i] = Result{Outcome: NoMatch}
		}
	}
	return results
}

// rank orders outcomes by how far they got, for a match reaching several waits.
func rank(o Outcome) int {
	switch o {
	case Completed:
		return 9
	case Recorded:
		return 8
	case Duplicate:
		return 7
	case AlreadyRecorded:
		return 6
	case Late:
		return 5
	case FilterMismatch:
		return 4
	}
	return 0
}
