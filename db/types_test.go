package db_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/rendezvous-run/rendezvous/harness/dbtest"
)

// TestRegisteredTypes: ids and JSON documents read and written through the registered
// plans are what PostgreSQL holds, as its own text rendering shows, NULL included.
func TestRegisteredTypes(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := context.Background()

	t.Run("uuid", func(t *testing.T) {
		t.Parallel()
		id := uuid.New()
		var text string
		var back uuid.UUID
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid::text, $1::uuid`, id).Scan(&text, &back))
		require.Equal(t, id.String(), text)
		require.Equal(t, id, back)

		var nilID *uuid.UUID
		var isNull bool
		var backPtr = &id
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid IS NULL, $1::uuid`, nilID).Scan(&isNull, &backPtr))
		require.True(t, isNull)
		require.Nil(t, backPtr)
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, &id).Scan(&backPtr))
		require.NotNil(t, backPtr)
		require.Equal(t, id, *backPtr)

		var plain uuid.UUID
		require.Error(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&plain), "NULL into a uuid.UUID")
	})

	t.Run("timestamptz", func(t *testing.T) {
		t.Parallel()
		at := time.Date(2026, 3, 1, 9, 30, 0, 123456000, time.FixedZone("UTC+9", 9*3600))
		var back time.Time
		var backPtr *time.Time
		var backs []time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::timestamptz, $1::timestamptz, ARRAY[$1::timestamptz]`, at).Scan(&back, &backPtr, &backs))
		for _, got := range []time.Time{back, *backPtr, backs[0]} {
			require.True(t, at.Equal(got), "the same instant")
			require.Same(t, time.UTC, got.Location(), "read in UTC, whatever the process's zone")
		}
		var isNull bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::timestamptz IS NULL, NULL::timestamptz`).Scan(&isNull, &backPtr))
		require.True(t, isNull)
		require.Nil(t, backPtr)
	})

	t.Run("uuid array", func(t *testing.T) {
		t.Parallel()
		ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		var texts []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(u::text ORDER BY o) FROM unnest($1::uuid[]) WITH ORDINALITY AS t(u, o)`, ids).Scan(&texts))
		require.Equal(t, []string{ids[0].String(), ids[1].String(), ids[2].String()}, texts)

		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::uuid[])`, []uuid.UUID{}).Scan(&n))
		require.Zero(t, n)
		var isNull bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid[] IS NULL`, []uuid.UUID(nil)).Scan(&isNull))
		require.True(t, isNull)
	})

	t.Run("text array", func(t *testing.T) {
		t.Parallel()
		texts := []string{"waiting_for_events", "", "Grüße, 世界", `a "quoted", {braced} \ text`, "NULL"}
		var back []string
		var first, n int
		var noNull bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text[], length(($1::text[])[3]), array_position($1::text[], NULL) IS NULL,
			cardinality($1::text[])`, texts).Scan(&back, &first, &noNull, &n))
		require.Equal(t, texts, back, "every element as sent, the word NULL and the empty text included")
		require.Equal(t, 9, first, "the elements are text of the server's encoding, not bytes")
		require.True(t, noNull, "no element is NULL")
		require.Equal(t, 5, n)

		require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::text[])`, []string{}).Scan(&n))
		require.Zero(t, n)
		var isNull bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text[] IS NULL`, []string(nil)).Scan(&isNull))
		require.True(t, isNull, "a nil slice is NULL")
		require.Error(t, pool.QueryRow(ctx, `SELECT cardinality($1::text[])`, []string{"ok", "\xff\xfe"}).Scan(&n),
			"the server checks the encoding of what it is sent")
	})

	t.Run("json and timestamptz arrays", func(t *testing.T) {
		t.Parallel()
		docs := []json.RawMessage{json.RawMessage(`{"b": 2,  "a": 1}`), nil, json.RawMessage(`null`), json.RawMessage(`[1, "x"]`)}
		for typ, first := range map[string]string{"jsonb": `{"a": 1, "b": 2}`, "json": `{"b": 2,  "a": 1}`} {
			var texts []*string
			require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(d::text ORDER BY o) FROM unnest($1::`+typ+`[]) WITH ORDINALITY AS t(d, o)`, docs).Scan(&texts))
			require.Len(t, texts, 4, typ)
			require.Equal(t, first, *texts[0], "%s: json keeps the text as sent", typ)
			require.Nil(t, texts[1], "%s: a nil document is NULL", typ)
			require.Equal(t, `null`, *texts[2], typ)
			require.Equal(t, `[1, "x"]`, *texts[3], typ)

			var n int
			var hasNull bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::`+typ+`[]), array_position($1::`+typ+`[]::text[], NULL) IS NOT NULL`,
				[]json.RawMessage{}).Scan(&n, &hasNull))
			require.Zero(t, n, typ)
			require.False(t, hasNull, typ)
			require.NoError(t, pool.QueryRow(ctx, `SELECT $1::`+typ+`[] IS NULL`, []json.RawMessage(nil)).Scan(&hasNull))
			require.True(t, hasNull, "%s: a nil slice is NULL", typ)
			require.Error(t, pool.QueryRow(ctx, `SELECT $1::`+typ+`[]`, []json.RawMessage{json.RawMessage(`{"a":`)}).Scan(&n),
				"%s: the server checks the text it is sent", typ)
		}

		at := time.Date(2026, 3, 1, 9, 30, 0, 123456000, time.FixedZone("UTC+9", 9*3600))
		var backs []time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::timestamptz[]`, []time.Time{at, at.Add(time.Hour)}).Scan(&backs))
		require.Len(t, backs, 2)
		require.True(t, at.Equal(backs[0]) && at.Add(time.Hour).Equal(backs[1]))

		var isNull bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT $1::jsonb[] IS NULL AND $2::timestamptz[] IS NULL`, []json.RawMessage(nil), []time.Time(nil)).Scan(&isNull))
		require.True(t, isNull)
	})

	t.Run("json", func(t *testing.T) {
		t.Parallel()
		for _, typ := range []string{"jsonb", "json"} {
			var raw json.RawMessage
			require.NoError(t, pool.QueryRow(ctx, `SELECT '{"a": [1, "x"], "b": null}'::`+typ).Scan(&raw))
			var text string
			require.NoError(t, pool.QueryRow(ctx, `SELECT ('{"a": [1, "x"], "b": null}'::`+typ+`)::text`).Scan(&text))
			require.Equal(t, text, string(raw), typ)

			raw = json.RawMessage(`{"stale":true}`)
			require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::`+typ).Scan(&raw))
			require.Nil(t, raw, "SQL NULL as %s", typ)

			require.NoError(t, pool.QueryRow(ctx, `SELECT 'null'::`+typ).Scan(&raw))
			require.Equal(t, "null", string(raw), "JSON null as %s", typ)

			// Other targets keep pgx's plans.
			var m map[string]any
			require.NoError(t, pool.QueryRow(ctx, `SELECT '{"k": 2}'::`+typ).Scan(&m))
			require.Equal(t, map[string]any{"k": float64(2)}, m)
		}
	})
}
