package callbacks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Fixtures. secretOld/secretNew are whsec_ secrets as senders issue them.
const (
	secretOld = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretNew = "whsec_c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24="
	testID    = "msg_p5jXN8AQM9LWM0D4loKWxJek"
)

var (
	testNow  = time.Unix(1614265330, 0)
	testBody = []byte(`{"test": 2432232314}`)
)

// newTestVerifier builds a Verifier whose clock is pinned to now.
func newTestVerifier(t testing.TB, secrets []string, tolerance time.Duration, now time.Time) *Verifier {
	t.Helper()
	v, err := NewVerifier(secrets, tolerance)
	require.NoError(t, err)
	v.now = func() time.Time { return now }
	return v
}

// signedHeaders returns headers for a delivery signed with secret.
func signedHeaders(t testing.TB, secret, id string, ts time.Time, body []byte) http.Header {
	t.Helper()
	sig, err := Sign(secret, id, ts, body)
	require.NoError(t, err)
	return headers(id, strconv.FormatInt(ts.Unix(), 10), sig)
}

func headers(id, ts, sig string) http.Header {
	h := http.Header{}
	if id != "" {
		h.Set(HeaderWebhookID, id)
	}
	if ts != "" {
		h.Set(HeaderWebhookTimestamp, ts)
	}
	if sig != "" {
		h.Set(HeaderWebhookSignature, sig)
	}
	return h
}

// TestSignKnownVector pins the encoding: the literal is the Standard Webhooks
// reference example (and was recomputed independently), and the test also
// recomputes it with crypto/hmac directly.
func TestSignKnownVector(t *testing.T) {
	t.Parallel()

	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	got, err := Sign(secretOld, testID, testNow, testBody)
	require.NoError(t, err)
	require.Equal(t, want, got)

	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secretOld, "whsec_"))
	require.NoError(t, err)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(testID + ".1614265330." + string(testBody)))
	require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)), got)

	// A secret without the prefix is used as raw bytes.
	raw, err := Sign("raw-secret", "evt_1", time.Unix(1700000000, 0), []byte("{}"))
	require.NoError(t, err)
	require.Equal(t, "v1,g7vBJRnSa0SyeYxlr/hL8FVHHDbe/sIdtaXM9pHNOjE=", raw)
}

func TestVerify(t *testing.T) {
	t.Parallel()

	ts := strconv.FormatInt(testNow.Unix(), 10)
	sigOld, err := Sign(secretOld, testID, testNow, testBody)
	require.NoError(t, err)
	sigNew, err := Sign(secretNew, testID, testNow, testBody)
	require.NoError(t, err)
	sigOther, err := Sign("whsec_b3RoZXI=", testID, testNow, testBody)
	require.NoError(t, err)
	// Same MAC under an unknown scheme version must not be accepted.
	sigOldV2 := "v2," + strings.TrimPrefix(sigOld, "v1,")

	tests := []struct {
		name    string
		secrets []string
		h       http.Header
		body    []byte
		wantErr error
	}{
		{name: "valid", secrets: []string{secretOld}, h: headers(testID, ts, sigOld), body: testBody},
		{name: "wrong secret", secrets: []string{secretNew}, h: headers(testID, ts, sigOld), body: testBody, wantErr: ErrSignatureInvalid},
		{name: "rotation accepts old", secrets: []string{secretNew, secretOld}, h: headers(testID, ts, sigOld), body: testBody},
		{name: "rotation accepts new", secrets: []string{secretOld, secretNew}, h: headers(testID, ts, sigNew), body: testBody},
		{
			name: "several listed signatures, one matching", secrets: []string{secretNew},
			h: headers(testID, ts, sigOther+" "+sigOld+" "+sigNew), body: testBody,
		},
		{
			name: "several listed signatures, none matching", secrets: []string{secretOld},
			h: headers(testID, ts, sigOther+" "+sigNew), body: testBody, wantErr: ErrSignatureInvalid,
		},
		{
			name: "signature split over repeated headers", secrets: []string{secretOld},
			h: func() http.Header {
				h := headers(testID, ts, sigOther)
				h.Add(HeaderWebhookSignature, sigOld)
				return h
			}(),
			body: testBody,
		},
		{name: "tampered body", secrets: []string{secretOld}, h: headers(testID, ts, sigOld), body: []byte(`{"test": 2432232315}`), wantErr: ErrSignatureInvalid},
		{name: "tampered id", secrets: []string{secretOld}, h: headers(testID+"x", ts, sigOld), body: testBody, wantErr: ErrSignatureInvalid},
		{
			name: "tampered timestamp", secrets: []string{secretOld},
			h: headers(testID, strconv.FormatInt(testNow.Unix()+1, 10), sigOld), body: testBody, wantErr: ErrSignatureInvalid,
		},
		{name: "other version ignored", secrets: []string{secretOld}, h: headers(testID, ts, sigOldV2), body: testBody, wantErr: ErrSignatureInvalid},
		{name: "missing id", secrets: []string{secretOld}, h: headers("", ts, sigOld), body: testBody, wantErr: ErrSignatureMissing},
		{name: "missing timestamp", secrets: []string{secretOld}, h: headers(testID, "", sigOld), body: testBody, wantErr: ErrSignatureMissing},
		{name: "missing signature", secrets: []string{secretOld}, h: headers(testID, ts, ""), body: testBody, wantErr: ErrSignatureMissing},
		{name: "blank signature", secrets: []string{secretOld}, h: headers(testID, ts, "   "), body: testBody, wantErr: ErrSignatureMissing},
		{name: "no headers", secrets: []string{secretOld}, h: http.Header{}, body: testBody, wantErr: ErrSignatureMissing},
		{name: "non-numeric timestamp", secrets: []string{secretOld}, h: headers(testID, "yesterday", sigOld), body: testBody, wantErr: ErrSignatureTimestamp},
		{name: "huge timestamp", secrets: []string{secretOld}, h: headers(testID, "9223372036854775807", sigOld), body: testBody, wantErr: ErrSignatureTimestamp},
		{name: "tiny timestamp", secrets: []string{secretOld}, h: headers(testID, "-9223372036854775808", sigOld), body: testBody, wantErr: ErrSignatureTimestamp},
		{
			name: "malformed entries skipped", secrets: []string{secretOld},
			h: headers(testID, ts, "garbage v1 v1, v1,!!!notbase64 ,v1 v1a,abc "+sigOld), body: testBody,
		},
		{
			name: "only malformed entries", secrets: []string{secretOld},
			h: headers(testID, ts, "garbage v1 v1, v1,!!!notbase64 v1,"+strings.TrimPrefix(sigOld, "v1,")[:10]), body: testBody,
			wantErr: ErrSignatureInvalid,
		},
		{
			name: "raw secret without prefix", secrets: []string{"raw-secret"},
			h: signedHeaders(t, "raw-secret", testID, testNow, testBody), body: testBody,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newTestVerifier(t, tt.secrets, 0, testNow)
			id, err := v.Verify(tt.h, tt.body)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.Empty(t, id)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.h.Get(HeaderWebhookID), id)
		})
	}
}

func TestVerifyTimestampWindow(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name      string
		tolerance time.Duration
		offset    time.Duration // signed timestamp minus our clock
		wantErr   bool
	}{
		{name: "now", offset: 0},
		{name: "just inside past", offset: -SignatureToleranceDefault},
		{name: "just inside future", offset: SignatureToleranceDefault},
		{name: "just outside past", offset: -SignatureToleranceDefault - time.Second, wantErr: true},
		{name: "just outside future", offset: SignatureToleranceDefault + time.Second, wantErr: true},
		{name: "custom tolerance inside", tolerance: time.Minute, offset: -time.Minute},
		{name: "custom tolerance outside", tolerance: time.Minute, offset: -time.Minute - time.Second, wantErr: true},
		{name: "negative tolerance means default", tolerance: -1, offset: -4 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := newTestVerifier(t, []string{secretOld}, tt.tolerance, testNow)
			h := signedHeaders(t, secretOld, testID, testNow.Add(tt.offset), testBody)
			id, err := v.Verify(h, testBody)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrSignatureTimestamp)
				return
			}
			require.NoError(t, err)
			require.Equal(t, testID, id)
		})
	}
}

func TestNewVerifier(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		secrets []string
		wantErr string // substring; "" means success
	}{
		{name: "whsec", secrets: []string{secretOld}},
		{name: "unpadded whsec", secrets: []string{strings.TrimRight(secretNew, "=")}},
		{name: "raw", secrets: []string{"plain"}},
		{name: "none", secrets: nil, wantErr: "no secrets"},
		{name: "empty entry", secrets: []string{secretOld, " "}, wantErr: "secret #1"},
		{name: "bad base64", secrets: []string{secretOld, secretNew, "whsec_not*base64!"}, wantErr: "secret #2"},
		{name: "empty after prefix", secrets: []string{"whsec_"}, wantErr: "secret #0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewVerifier(tt.secrets, 0)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, SignatureToleranceDefault, v.tolerance)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			for _, s := range tt.secrets {
				if rest := strings.TrimPrefix(strings.TrimSpace(s), "whsec_"); rest != "" {
					require.NotContains(t, err.Error(), rest, "error must not echo a secret")
				}
			}
		})
	}
}

func TestSignInvalidSecret(t *testing.T) {
	t.Parallel()
	_, err := Sign("whsec_@@@", testID, testNow, testBody)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "@@@")
}

func FuzzVerify(f *testing.F) {
	sig, err := Sign(secretOld, testID, testNow, testBody)
	require.NoError(f, err)
	f.Add(testID, "1614265330", sig, testBody)
	f.Add("", "", "", []byte(nil))
	f.Add("id", "-1", "v1, v1,=== v2,abc ,,,", []byte("x"))
	f.Add(testID, "+1614265330", sig+" "+sig, testBody)

	v := newTestVerifier(f, []string{secretOld, secretNew}, 0, testNow)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, sig)
		got, err := v.Verify(h, body)
		if err == nil {
			require.Equal(t, h.Get(HeaderWebhookID), got)
			require.NotEmpty(t, got)
		} else {
			require.Empty(t, got)
			// Every refusal is one of the three documented causes.
			require.True(t, errors.Is(err, ErrSignatureMissing) || errors.Is(err, ErrSignatureTimestamp) ||
				errors.Is(err, ErrSignatureInvalid), "unclassified error %v", err)
		}
	})
}
