package dotpath

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path    string
		want    []string
		wantErr string
	}{
		{path: "", want: nil},
		{path: "a", want: []string{"a"}},
		{path: "data.correlation_id", want: []string{"data", "correlation_id"}},
		{path: "items.0.sku", want: []string{"items", "0", "sku"}},
		{path: "items[0].sku", want: []string{"items", "0", "sku"}},
		{path: "m[1][2]", want: []string{"m", "1", "2"}},
		{path: "[0].a", want: []string{"0", "a"}},
		{path: "a-b.c_d", want: []string{"a-b", "c_d"}},
		{path: ".a", wantErr: "empty segment at offset 0"},
		{path: "a.", wantErr: "empty segment at offset 2"},
		{path: "a..b", wantErr: "empty segment at offset 2"},
		{path: "a[0", wantErr: "unbalanced '['"},
		{path: "a]", wantErr: "unbalanced ']'"},
		{path: "a[]", wantErr: "empty index"},
		{path: "a[x]", wantErr: "must be a non-negative integer"},
		{path: "a[-1]", wantErr: "must be a non-negative integer"},
		{path: "a[0]b", wantErr: "expected '.' or '['"},
		{path: "a.[0]", wantErr: "expected a name after '.'"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			got, err := Split(tt.path)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.ErrorIs(t, Validate(tt.path), ErrSyntax)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.NoError(t, Validate(tt.path))
		})
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(`{
		"data": {"correlation_id": "c-1", "n": null},
		"items": [{"sku": "A"}, {"sku": "B"}],
		"0": "zero-key"
	}`), &doc))
	tests := []struct {
		path   string
		want   any
		wantOK bool
	}{
		{path: "", want: doc, wantOK: true},
		{path: "data.correlation_id", want: "c-1", wantOK: true},
		{path: "data.n", want: nil, wantOK: true},
		{path: "items.1.sku", want: "B", wantOK: true},
		{path: "items[0].sku", want: "A", wantOK: true},
		{path: "0", want: "zero-key", wantOK: true},
		{path: "items[2]", wantOK: false},
		{path: "items.x", wantOK: false},
		{path: "data.missing", wantOK: false},
		{path: "data.correlation_id.deeper", wantOK: false},
		{path: "data.n.deeper", wantOK: false},
		{path: "a..b", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			got, ok := Get(doc, tt.path)
			require.Equal(t, tt.wantOK, ok)
			if ok {
				require.Equal(t, tt.want, got)
			}
		})
	}
}

func TestLookupReportsDepth(t *testing.T) {
	t.Parallel()
	doc := map[string]any{"a": map[string]any{"b": []any{"x"}}}
	v, n := Lookup(doc, []string{"a", "b", "3", "c"})
	require.Equal(t, 2, n)
	require.Equal(t, []any{"x"}, v)
}

func TestStepOtherContainers(t *testing.T) {
	t.Parallel()
	v, ok := Get(map[string]string{"Authorization": "x"}, "Authorization")
	require.True(t, ok)
	require.Equal(t, "x", v)
	v, ok = Get(map[string][]int{"a": {1, 2}}, "a.1")
	require.True(t, ok)
	require.Equal(t, 2, v)
	_, ok = Get(map[int]string{1: "x"}, "1")
	require.False(t, ok)
	_, ok = Get(nil, "a")
	require.False(t, ok)
	_, ok = Get(42, "a")
	require.False(t, ok)
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "a.b", "a[0].b", "[", "]", "a..b", "a[99999999999999999999]", "a.0.b", "a.0", ".a", "a.", "a.00.b", "a.-1"} {
		f.Add(s)
	}
	doc := map[string]any{"a": []any{map[string]any{"b": 1}}}
	f.Fuzz(func(t *testing.T, path string) {
		segs, err := Split(path)
		if err == nil {
			for _, s := range segs {
				if s == "" {
					t.Fatalf("empty segment from %q", path)
				}
			}
		}
		// Get walks a plain path without splitting it: it must answer as the split
		// path does.
		got, ok := Get(doc, path)
		var want any
		wantOK := false
		if err == nil {
			want, wantOK = GetSegments(doc, segs)
		}
		if ok != wantOK || (ok && !reflect.DeepEqual(got, want)) {
			t.Fatalf("Get(%q) = %v, %v; split, %v, %v", path, got, ok, want, wantOK)
		}
	})
}
