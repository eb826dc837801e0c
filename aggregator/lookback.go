package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/vocab"
)

// Early records for payload matches: the design of the sent-event buffer (send.go)
// carried to Kafka records correlated by payload. A record that reaches no open wait is
// kept in match_lookback under each match key an event with a lookback computes for it,
// for that lookback (at most Config.MaxLookback). A wait that registers with one of those
// keys takes, in the transaction that registers it, the oldest record kept under it
// within its own lookback — the newest with buffer last_write_wins, the older ones then
// dead-lettered as superseded — and decides it exactly as a live record (wait.decide),
// so the strategy, the completion and the continuation are those of a live record, and
// the record's key makes a later redelivery a duplicate.
//
// The race: a record finding no wait while a wait with its key is being registered.
// Under READ COMMITTED each transaction sees only what the other has committed, so the
// record could miss the uncommitted wait and the registration miss the uncommitted kept
// row, and both commit: the record kept, the wait never given it. Both therefore take a
// transaction-scoped advisory lock on the key — the record before it looks a second
// time for waits and keeps itself, the registration before it reads what is kept — so
// whichever takes it second sees what the first committed. A lock and not a row: the
// meeting point must exist before either side has written anything, and an advisory
// lock costs no table write. Both sides take their keys in sorted order, so two
// transactions holding several keys cannot wait for each other in a cycle. A record
// takes the locks only when its first look found no wait (the early case), so records
// that arrive after their waits — the common case — pay nothing for it.
//
// Lock order: a registration takes its keys while holding its execution's row (the
// executor locked it first). A record takes its keys after its first look, and applies
// what its second look finds without continuing (the continuations are queued, not
// run), so it never asks for an execution's row while holding a key. An execution row
// it took before, continuing a wait its first look completed, is one no registration
// holds: that registration would have had to commit first.

// MaxLookbackDefault is the default of Config.MaxLookback.
const MaxLookbackDefault = time.Hour

// Kept: an event correlated by payload reached no open wait and is kept for the
// lookback of the events matching it (Event.Keep), for a wait registering later.
const Kept Outcome = "kept"

// keptStatus is the status of a record kept and not yet taken (match_lookback.status).
const keptStatus = "kept"

// Outcomes of the rendezvous.events.lookback counter.
var lookbackOutcomes = []string{"kept", "taken", "superseded", "expired"}

// KeepFor returns how long a record of topic that reaches no wait is kept under each
// match key MatchKeys computes for it: the longest lookback of the specs yielding the
// key. Keys of specs without a lookback are absent; nil when none has one.
func KeepFor(topic string, payload any, specs []MatchSpec) map[string]time.Duration {
	var keep map[string]time.Duration
	for _, s := range specs {
		if s.Lookback <= 0 {
			continue
		}
		for _, k := range MatchKeys(topic, payload, []MatchSpec{s}) {
			if keep == nil {
				keep = map[string]time.Duration{}
			}
			keep[k] = max(keep[k], s.Lookback)
		}
	}
	return keep
}

// MaxLookback is the longest lookback this aggregator honours (Config.MaxLookback):
// definitions asking for more are refused where they are stored.
func (a *Aggregator) MaxLookback() time.Duration { return a.cfg.MaxLookback }

// lockLookbackKeys takes the advisory lock of each key, in sorted order (see above).
func (a *Aggregator) lockLookbackKeys(ctx context.Context, tx pgx.Tx, keys []string) error {
	keys = slices.Clone(keys)
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		if err := a.q.MatchLookbackLock(ctx, tx, k); err != nil {
			return fmt.Errorf("lock lookback key: %w", err)
		}
	}
	return nil
}

// keepEarly keeps the events of a batch that reached no wait (NoMatch) and have keys to
// be kept under. Under the keys' locks it first looks for waits again: one registered
// and committed since the batch first looked gets the record as a live one. results are
// updated in place.
func (a *Aggregator) keepEarly(ctx context.Context, tx pgx.Tx, events []Event, results []Result) error {
	var idx []int
	var keys []string
	for i, ev := range events {
		if results[i].Outcome == NoMatch && len(ev.Keep) > 0 {
			idx = append(idx, i)
			keys = append(keys, slices.Collect(maps.Keys(ev.Keep))...)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	if err := a.lockLookbackKeys(ctx, tx, keys); err != nil {
		return err
	}
	subset := make([]Event, len(idx))
	for j, i := range idx {
		subset[j] = events[i]
	}
	expanded, origin, err := a.expandMatches(ctx, tx, subset)
	if err != nil {
		return err
	}
	var again []Result
	if len(expanded) > 0 {
		// Not continuing: it would lock executions while the keys are held.
		if again, err = a.applyBatch(ctx, tx, expanded, false, readBefore{}, nil); err != nil {
			return err
		}
	}
	again = foldMatches(subset, origin, again)

	now := a.now().UTC().Truncate(time.Microsecond)
	p := dbsqlc.MatchLookbackKeepParams{KeptAt: now}
	until := map[string]time.Time{} // by event key
	var keeping []int
	for j, i := range idx {
		if again[j].Outcome != NoMatch {
			results[i] = again[j]
			continue
		}
		ev := events[i]
		src, err := json.Marshal(ev.Source)
		if err != nil {
			return err
		}
		key := ev.key()
		for _, k := range slices.Sorted(maps.Keys(ev.Keep)) {
			exp := now.Add(min(ev.Keep[k], a.cfg.MaxLookback))
			p.Keys = append(p.Keys, k)
			p.EventKeys = append(p.EventKeys, key)
			p.Payloads = append(p.Payloads, ev.Payload)
			p.Sources = append(p.Sources, src)
			p.ExpiresAts = append(p.ExpiresAts, exp)
			if exp.After(until[key]) {
				until[key] = exp
			}
		}
		keeping = append(keeping, i)
	}
	if len(keeping) == 0 {
		return nil
	}
	inserted, err := a.q.MatchLookbackKeep(ctx, tx, p)
	if err != nil {
		return fmt.Errorf("keep early records: %w", err)
	}
	for _, i := range keeping {
		key := events[i].key()
		outcome := Kept
		if !slices.Contains(inserted, key) {
			// Kept (or taken) under every key already: a redelivery, or the same value
			// sent again, which a live wait would also have called a duplicate.
			outcome = Duplicate
		}
		results[i] = Result{Outcome: outcome, KeptUntil: until[key]}
	}
	return nil
}

// takeKept gives a wait being registered (TakeBuffered) the records kept for its payload
// matches with a lookback, deciding them in memory on w. It returns the outcome of the
// last record taken and the name it was taken as (empty when none was), and how many
// were taken and superseded; the caller writes w.
func (a *Aggregator) takeKept(ctx context.Context, tx pgx.Tx, w *wait, now time.Time) (outcome Outcome, name string, taken, superseded int, err error) {
	var keys []string
	for _, e := range w.expected {
		if e.Match != nil && e.LookbackMS > 0 {
			keys = append(keys, matchKey(e.Topic, e.Type, e.Match.Left, e.Match.Value))
		}
	}
	if len(keys) == 0 {
		return "", "", 0, 0, nil
	}
	if err := a.lockLookbackKeys(ctx, tx, keys); err != nil {
		return "", "", 0, 0, err
	}
	var takenIDs []int64
	for _, e := range slices.Clone(w.expected) {
		if e.Match == nil || e.LookbackMS <= 0 || w.row.Status != vocab.WaitWaiting {
			continue
		}
		lookback := min(time.Duration(e.LookbackMS)*time.Millisecond, a.cfg.MaxLookback)
		rows, err := a.q.MatchLookbackList(ctx, tx, dbsqlc.MatchLookbackListParams{
			Key: matchKey(e.Topic, e.Type, e.Match.Left, e.Match.Value), Since: now.Add(-lookback), Now: now})
		if err != nil {
			return "", "", 0, 0, fmt.Errorf("read kept records: %w", err)
		}
		// One record goes to one event, even when two events of the wait share a key.
		rows = slices.DeleteFunc(rows, func(r dbsqlc.MatchLookback) bool { return slices.Contains(takenIDs, r.ID) })
		if e.Buffer == BufferLastWriteWins {
			slices.Reverse(rows)
		}
		for k, r := range rows {
			var src Source
			if err := json.Unmarshal(r.Source, &src); err != nil {
				return "", "", 0, 0, fmt.Errorf("decode kept record source: %w", err)
			}
			ev := Event{ExecutionID: w.row.ExecutionID, CorrelationID: w.row.CorrelationID, Name: e.Name, Payload: r.Payload, Source: src}
			o, _, err := w.decide(ev, r.EventKey, now)
			if err != nil {
				return "", "", 0, 0, err
			}
			if o != Recorded && o != Completed {
				continue // its filter or type refused this one; try the next
			}
			takenIDs = append(takenIDs, r.ID)
			outcome, name = o, e.Name
			if e.Buffer == BufferLastWriteWins && k+1 < len(rows) {
				var older []int64
				for _, r := range rows[k+1:] {
					older = append(older, r.ID)
				}
				n, err := a.q.MatchLookbackSupersede(ctx, tx, dbsqlc.MatchLookbackSupersedeParams{
					Ids: older, WaitStateID: w.row.ID, ExecutionID: w.row.ExecutionID, EventType: e.Type})
				if err != nil {
					return "", "", 0, 0, fmt.Errorf("supersede kept records: %w", err)
				}
				superseded += int(n)
			}
			break
		}
	}
	if len(takenIDs) > 0 {
		if _, err := a.q.MatchLookbackTake(ctx, tx, dbsqlc.MatchLookbackTakeParams{Ids: takenIDs, WaitStateID: w.row.ID}); err != nil {
			return "", "", 0, 0, fmt.Errorf("take kept records: %w", err)
		}
	}
	if len(takenIDs) > 0 || superseded > 0 {
		a.ins.lookback.Add(ctx, int64(len(takenIDs)), metric.WithAttributes(attribute.String("outcome", "taken")))
		a.ins.lookback.Add(ctx, int64(superseded), metric.WithAttributes(attribute.String("outcome", "superseded")))
		a.ins.deadLetters.Add(ctx, int64(superseded), metric.WithAttributes(attribute.String("reason", "superseded")))
	}
	return outcome, name, len(takenIDs), superseded, nil
}

// pruneKept deletes expired kept records in batches of janitorBatch, counting those no
// wait took as expired.
func (a *Aggregator) pruneKept(ctx context.Context) error {
	for {
		statuses, err := a.q.MatchLookbackPrune(ctx, a.pool, dbsqlc.MatchLookbackPruneParams{Now: a.now().UTC(), Max: janitorBatch})
		if err != nil {
			return fmt.Errorf("prune kept records: %w", err)
		}
		expired := 0
		for _, s := range statuses {
			if s == keptStatus {
				expired++
			}
		}
		if expired > 0 {
			a.ins.lookback.Add(ctx, int64(expired), metric.WithAttributes(attribute.String("outcome", "expired")))
		}
		if len(statuses) < janitorBatch {
			return nil
		}
	}
}
