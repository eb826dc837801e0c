package consumer

// The fuzz targets live in the package itself: decode and extract are unexported, and
// they are what every record meets first, before any database or broker.

import (
	"bytes"
	"cmp"
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/rendezvous-run/rendezvous/aggregator"
	"github.com/rendezvous-run/rendezvous/internal/dotpath"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/workflow"
)

const (
	fuzzTopic = "orders"
	fuzzExec  = "4f1f8a3c-3f3e-4c1b-9a55-3c9f1d1c2b10"
	fuzzCorr  = "9b2e6c1d-8d7a-4d8e-b1a0-5c6d7e8f9a0b"
	fuzzTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

// decoder is a Consumer with only what decode reads: the limit, the topic's id fields
// and match specs, and the propagator. An empty path means the default, as in a definition; any other is
// kept even when a definition would refuse it, since extraction must survive any path.
func decoder(maxBytes int, execPath, corrPath string) *Consumer {
	fields := []idFields{{exec: cmp.Or(execPath, workflow.DefaultExecutionIDField), corr: cmp.Or(corrPath, workflow.DefaultCorrelationIDField)}}
	if def := (idFields{exec: workflow.DefaultExecutionIDField, corr: workflow.DefaultCorrelationIDField}); fields[0] != def {
		// A second node on the topic with the default fields: a record may carry ids for
		// either, and extract tries both.
		fields = append(fields, def)
	}
	return &Consumer{
		cfg:     Config{MaxRecordBytes: maxBytes}.WithDefaults(),
		fields:  map[string][]idFields{fuzzTopic: fields},
		matches: map[string][]aggregator.MatchSpec{fuzzTopic: fuzzMatches},
	}
}

// fuzzMatches are the payload matches of the fuzzed topic: one on any record, one on
// records of a type.
var fuzzMatches = []aggregator.MatchSpec{{Left: "order.id"}, {Type: "paid", Left: "amount"}}

// FuzzDecode feeds decode arbitrary record values, id headers, id field paths,
// traceparents and size limits. Beyond not panicking, every record ends exactly one
// way — poison with a reason and category, skipped with a reason, or applied as events —
// and the ids of an applied record are exactly those its payload or headers carry.
func FuzzDecode(f *testing.F) {
	ids := `{"execution_id":"` + fuzzExec + `","correlation_id":"` + fuzzCorr + `"}`
	nested := `{"data":{"ids":[{"exec":"` + fuzzExec + `"}],"corr":"` + fuzzCorr + `"}}`
	seeds := []struct {
		value                   string
		hdrExec, hdrCorr, trace string
		execPath, corrPath      string
		maxBytes                uint16
	}{
		{ids, "", "", "", "execution_id", "correlation_id", 0},
		{ids, "", "", fuzzTrace, "execution_id", "correlation_id", 0},
		{`{"status":"done"}`, fuzzExec, fuzzCorr, "", "execution_id", "correlation_id", 0},
		{nested, "", "", "", "data.ids[0].exec", "data.corr", 0},
		{nested, "", "", "", "data.ids.0.exec", "data..corr", 0},
		{`{"execution_id":42,"correlation_id":"` + fuzzCorr + `"}`, fuzzExec, "", "", "execution_id", "correlation_id", 0},
		{`{"execution_id":"nope","correlation_id":"nope"}`, "", "", "", "execution_id", "correlation_id", 0},
		{`{"execution_id":"` + fuzzExec + `"}`, "", "", "", "execution_id", "correlation_id", 0},
		{`["a","b"]`, fuzzExec, fuzzCorr, "garbage", "execution_id", "correlation_id", 0},
		{`{"execution_id":`, "", "", "", "execution_id", "correlation_id", 0},
		{`{"x":"\u0000","execution_id":"` + fuzzExec + `","correlation_id":"` + fuzzCorr + `"}`, "", "", "", "execution_id", "correlation_id", 0},
		{`1e400`, fuzzExec, fuzzCorr, "", "execution_id", "correlation_id", 0},
		{ids, fuzzExec, fuzzCorr, "", "execution_id", "correlation_id", 16},
		{"", fuzzExec, fuzzCorr, "", "execution_id", "correlation_id", 0},
		{ids, "", "", "00-00000000000000000000000000000000-0000000000000000-01", "{" + fuzzExec + "}", "urn:uuid:" + fuzzCorr, 0},
		{`{"order":{"id":"A-1"}}`, "", "", "", "execution_id", "correlation_id", 0},
		{`{"type":"paid","amount":4.20,"order":{"id":7},"execution_id":"` + fuzzExec + `","correlation_id":"` + fuzzCorr + `"}`, "", "", "", "execution_id", "correlation_id", 0},
		{`{"type":"refund","amount":1,"order":{"id":[1]}}`, "", "", "", "execution_id", "correlation_id", 0},
		{`{"type":"paid","order":{"id":9007199254740993}}`, "", "", "", "execution_id", "correlation_id", 0},
	}
	for _, s := range seeds {
		f.Add([]byte(s.value), s.hdrExec, s.hdrCorr, s.trace, s.execPath, s.corrPath, s.maxBytes)
	}
	f.Fuzz(func(t *testing.T, value []byte, hdrExec, hdrCorr, traceparent, execPath, corrPath string, maxBytes uint16) {
		// 0 means the default limit; anything else is a small limit, so that the fuzzer
		// reaches both sides of it.
		c := decoder(int(maxBytes), execPath, corrPath)
		fields := c.fieldsFor(fuzzTopic)
		r := &kgo.Record{Topic: fuzzTopic, Partition: 3, Offset: 77, Value: value}
		for _, h := range []struct{ key, value string }{
			{fields[0].exec, hdrExec}, {fields[0].corr, hdrCorr}, {"traceparent", traceparent},
		} {
			if h.value != "" {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.key, Value: []byte(h.value)})
			}
		}
		it := c.decode(t.Context(), r)
		require.Same(t, r, it.rec)

		// Exactly one outcome.
		outcomes := 0
		for _, b := range []bool{it.poison != "", it.skip != "", it.poison == "" && it.skip == "" && len(it.events) > 0} {
			if b {
				outcomes++
			}
		}
		require.Equal(t, 1, outcomes, "poison %q, skip %q, %d events", it.poison, it.skip, len(it.events))

		tooLarge := len(value) > c.cfg.MaxRecordBytes
		switch {
		case it.poison != "":
			require.Contains(t, []string{poisonTooLarge, poisonNotJSON, poisonUnstorable}, it.poisonCategory)
			require.Equal(t, tooLarge, it.poisonCategory == poisonTooLarge, "a value over the limit is poison for that reason, and only it")
			if !tooLarge && !json.Valid(value) {
				require.Equal(t, poisonNotJSON, it.poisonCategory)
			}
			if it.poisonCategory == poisonUnstorable {
				require.False(t, aggregator.Storable(value))
			}
		case tooLarge:
			t.Fatalf("a value of %d bytes over the %d-byte limit was not poison", len(value), c.cfg.MaxRecordBytes)
		case !json.Valid(value):
			t.Fatalf("invalid JSON %q was not poison", value)
		case it.skip != "":
			require.Contains(t, []DeadLetterReason{ReasonMissingID, ReasonInvalidID}, it.skip)
			require.Empty(t, it.events)
			payload, err := jsonnum.Decode(value)
			require.NoError(t, err)
			require.Empty(t, aggregator.MatchKeys(fuzzTopic, payload, fuzzMatches), "a record holding a match value is not skipped")
			// The reason is true of every configured pair: none yields two UUIDs, and
			// missing_id means no pair had both values at all.
			for _, fp := range fields {
				e, cr := rawID(payload, r, fp.exec), rawID(payload, r, fp.corr)
				_, errE := uuid.Parse(e)
				_, errC := uuid.Parse(cr)
				require.False(t, errE == nil && errC == nil, "pair %v yields UUIDs %q, %q but the record was skipped", fp, e, cr)
				if it.skip == ReasonMissingID {
					require.True(t, e == "" || cr == "", "pair %v has both ids %q, %q, yet missing_id", fp, e, cr)
				}
			}
		default:
			// Applied: each event's ids are what one configured pair names, parsed, and
			// they are distinct; the payload is the record value as sent.
			payload, err := jsonnum.Decode(value)
			require.NoError(t, err)
			link := c.linkOf(r)
			// Its match values, if any, make one last event correlated by them alone.
			byIDs := it.events
			if keys := aggregator.MatchKeys(fuzzTopic, payload, fuzzMatches); len(keys) > 0 {
				m := it.events[len(it.events)-1]
				byIDs = it.events[:len(it.events)-1]
				require.Equal(t, keys, m.MatchKeys)
				require.Equal(t, uuid.Nil, m.ExecutionID)
				require.Equal(t, uuid.Nil, m.CorrelationID)
				require.Empty(t, m.Name)
				require.True(t, bytes.Equal(value, m.Payload))
				require.Equal(t, sourceKind, m.Source.Kind)
				require.Equal(t, fuzzTopic, m.Source.Topic)
				require.Equal(t, int64(77), *m.Source.Offset)
				require.Equal(t, link, m.Link)
			}
			require.LessOrEqual(t, len(byIDs), len(fields))
			for i, ev := range byIDs {
				require.Empty(t, ev.MatchKeys)
				require.True(t, slices.ContainsFunc(fields, func(fp idFields) bool {
					e, err1 := uuid.Parse(rawID(payload, r, fp.exec))
					cr, err2 := uuid.Parse(rawID(payload, r, fp.corr))
					return err1 == nil && err2 == nil && e == ev.ExecutionID && cr == ev.CorrelationID
				}), "event %d ids %s/%s come from no configured pair", i, ev.ExecutionID, ev.CorrelationID)
				for _, other := range byIDs[:i] {
					require.False(t, other.ExecutionID == ev.ExecutionID && other.CorrelationID == ev.CorrelationID, "duplicate candidate")
				}
				require.Empty(t, ev.Name, "the aggregator picks which Kafka event of the wait it is")
				require.True(t, bytes.Equal(value, ev.Payload))
				require.Equal(t, sourceKind, ev.Source.Kind)
				require.Equal(t, fuzzTopic, ev.Source.Topic)
				require.Equal(t, int32(3), *ev.Source.Partition)
				require.Equal(t, int64(77), *ev.Source.Offset)
				require.Equal(t, link, ev.Link)
			}
			if link.IsValid() {
				require.True(t, strings.Contains(strings.ToLower(traceparent), link.TraceID().String()),
					"link %s is not from traceparent %q", link.TraceID(), traceparent)
			}
		}
	})
}

// FuzzDecodeSent feeds the events topic's decoding arbitrary values and execution id
// headers. Every record is either dead-lettered with a reason and category, or a sent
// event holding exactly what the value (or, for the execution id, a header) says.
func FuzzDecodeSent(f *testing.F) {
	for _, s := range []struct{ value, hdr string }{
		{`{"execution_id":"` + fuzzExec + `","type":"approved","payload":{"by":"alice"},"id":"e-1"}`, ""},
		{`{"type":"approved"}`, fuzzExec},
		{`{"execution_id":"` + fuzzExec + `","type":"approved","payload":null}`, "not-a-uuid"},
		{`{"execution_id":null,"type":"t","id":null}`, fuzzExec},
		{`{"execution_id":"nope","type":"t"}`, ""},
		{`{"execution_id":"` + fuzzExec + `","type":""}`, ""},
		{`{"execution_id":"` + fuzzExec + `","type":"t","id":7}`, ""},
		{`{"execution_id":"` + fuzzExec + `","type":"t","extra":1}`, ""},
		{`{"execution_id":"","type":"t","id":""}`, fuzzExec},
		{`{"execution_id":"` + fuzzExec + `","type":"a\u0000b"}`, ""},
		{`[1,2]`, fuzzExec},
		{`null`, fuzzExec},
		{`{"type":`, fuzzExec},
		{"", ""},
	} {
		f.Add([]byte(s.value), s.hdr, uint16(0))
	}
	f.Fuzz(func(t *testing.T, value []byte, hdrExec string, maxBytes uint16) {
		c := decoder(int(maxBytes), "", "")
		r := &kgo.Record{Topic: c.cfg.EventsTopic, Partition: 2, Offset: 9, Value: value}
		if hdrExec != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: workflow.DefaultExecutionIDHeader, Value: []byte(hdrExec)})
		}
		it := c.decode(t.Context(), r)
		require.Same(t, r, it.rec)
		require.Empty(t, it.skip, "a sent event is dead-lettered or applied, never skipped")
		require.Empty(t, it.events, "the events topic is never correlated by ids or match")
		require.NotEqual(t, it.poison == "", it.sent == nil, "exactly one of poison %q and a sent event", it.poison)
		if it.poison != "" {
			require.Contains(t, []string{poisonTooLarge, poisonNotJSON, poisonUnstorable, poisonInvalidEvent}, it.poisonCategory)
			require.Equal(t, len(value) > c.cfg.MaxRecordBytes, it.poisonCategory == poisonTooLarge)
			return
		}
		require.LessOrEqual(t, len(value), c.cfg.MaxRecordBytes)
		require.True(t, aggregator.Storable(value))
		var v map[string]any
		require.NoError(t, json.Unmarshal(value, &v))
		for k := range v {
			require.Contains(t, []string{"execution_id", "type", "payload", "id"}, k, "no other member is accepted")
		}
		s := it.sent
		require.NotEmpty(t, s.Type)
		require.LessOrEqual(t, utf8.RuneCountInString(s.Type), aggregator.MaxEventTextLen)
		require.Equal(t, v["type"], s.Type)
		if execText, ok := v["execution_id"].(string); ok {
			require.Equal(t, uuid.MustParse(execText), s.ExecutionID)
		} else {
			require.Equal(t, uuid.MustParse(hdrExec), s.ExecutionID, "from the header when the value has none")
		}
		if id, ok := v["id"].(string); ok {
			require.Equal(t, id, s.ID)
			require.LessOrEqual(t, utf8.RuneCountInString(id), aggregator.MaxEventTextLen)
		} else {
			require.Equal(t, "kafka:"+c.cfg.EventsTopic+"/2/9", s.ID, "identified by its position")
		}
		if p, ok := v["payload"]; ok {
			var got any
			require.NoError(t, json.Unmarshal(s.Payload, &got))
			require.Equal(t, p, got)
		} else {
			require.Nil(t, s.Payload)
		}
		require.Equal(t, sourceKind, s.Source.Kind)
		require.Equal(t, c.cfg.EventsTopic, s.Source.Topic)
		require.Equal(t, int32(2), *s.Source.Partition)
		require.Equal(t, int64(9), *s.Source.Offset)
	})
}

// rawID is the text an id field yields: a string at its path in the payload, else the
// header named like the path.
func rawID(payload any, r *kgo.Record, path string) string {
	if v, ok := dotpath.Get(payload, path); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	for _, h := range r.Headers {
		if h.Key == path {
			return string(h.Value)
		}
	}
	return ""
}

// TestDecodeOversizedIsNotParsed checks that memory stays bounded by the limit, not by
// the record: a value far over MaxRecordBytes — a 32 MiB JSON string, which parsing
// would copy — is dead-lettered without being parsed, so decoding it allocates next to
// nothing, while its ids are still read from the headers for the log line.
func TestDecodeOversizedIsNotParsed(t *testing.T) {
	c := decoder(1<<10, workflow.DefaultExecutionIDField, workflow.DefaultCorrelationIDField)
	value := []byte(`"` + strings.Repeat("a", 32<<20) + `"`)
	r := &kgo.Record{Topic: fuzzTopic, Value: value, Headers: []kgo.RecordHeader{
		{Key: workflow.DefaultExecutionIDField, Value: []byte(fuzzExec)},
		{Key: workflow.DefaultCorrelationIDField, Value: []byte(fuzzCorr)},
	}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	it := c.decode(t.Context(), r)
	runtime.ReadMemStats(&after)

	require.Equal(t, poisonTooLarge, it.poisonCategory)
	require.Contains(t, it.poison, "exceeds 1024")
	require.Len(t, it.events, 1, "the ids in the headers name the wait in the log line")
	require.Equal(t, uuid.MustParse(fuzzCorr), it.events[0].CorrelationID)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<10),
		"decoding a %d-byte poison record allocated %d bytes", len(value), after.TotalAlloc-before.TotalAlloc)
}
