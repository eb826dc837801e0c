package auth

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseBearer(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]string{
		"Bearer abc":             "abc",
		"bearer abc":             "abc",
		"BEARER   rdv_x-y.z~+/=": "rdv_x-y.z~+/=",
		"Bearer a.b.c":           "a.b.c",
		"Bearer abc==":           "abc==",
	} {
		got, err := ParseBearer(header)
		require.NoError(t, err, header)
		require.Equal(t, want, got, header)
	}
	_, err := ParseBearer("")
	require.ErrorIs(t, err, ErrNoCredential)
	for _, header := range []string{
		"Bearer", "Bearer ", "Basic YWRtaW46YWRtaW4=", "Bearerabc", "Bearer a b", "Bearer =abc", "Bearer ab=c",
		"Bearer abc\n", "Bearer\tabc", "Token abc", "Bearer ä", "Bearer " + strings.Repeat("a", maxHeaderToken+1),
	} {
		_, err := ParseBearer(header)
		require.ErrorIs(t, err, ErrMalformed, "%q", header)
	}
}

// FuzzParseBearer: whatever the header, the parser does not panic, and what it accepts
// is a non-empty b64token that a header built from it parses back to.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x=", "Basic x", "", "Bearer a b", "Bearer ==", "Bearer a.b.c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		tok, err := ParseBearer(header)
		if err != nil {
			require.Empty(t, tok)
			return
		}
		require.NotEmpty(t, tok)
		require.True(t, strings.HasPrefix(strings.ToLower(header), "bearer "), "%q", header)
		trimmed := strings.TrimRight(tok, "=")
		require.NotEmpty(t, trimmed)
		for i := 0; i < len(trimmed); i++ {
			require.True(t, isTokenChar(trimmed[i]), "%q", tok)
		}
		again, err := ParseBearer("Bearer " + tok)
		require.NoError(t, err)
		require.Equal(t, tok, again)
	})
}
