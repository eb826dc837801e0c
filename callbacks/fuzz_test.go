package callbacks

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// secretUnknown signs deliveries the verifier has no key for.
const secretUnknown = "whsec_dW5rbm93bi1zZW5kZXI="

// FuzzVerifySigned signs arbitrary deliveries — any webhook-id, body and clock skew,
// with a configured secret or a foreign one, the signature listed among arbitrary other
// entries — and checks the verdict both ways: a delivery is accepted exactly when its id
// is present, its timestamp within tolerance and its secret configured; and an accepted
// delivery with one byte of its body, its id or its timestamp changed is refused. FuzzVerify
// covers arbitrary headers, which almost never carry a valid signature; this target
// starts from valid ones.
func FuzzVerifySigned(f *testing.F) {
	f.Add(testID, testBody, int64(0), uint8(0), "", uint32(0))
	f.Add(testID, testBody, int64(0), uint8(1), "v1a,abc v2,xyz", uint32(5))
	f.Add(testID, testBody, int64(0), uint8(2), "", uint32(0))
	f.Add("", []byte(`{}`), int64(0), uint8(0), "", uint32(0))
	f.Add("msg_1", []byte(nil), int64(300), uint8(0), "v1,=== v1,", uint32(0))
	f.Add("msg_1", []byte(`{"a":1}`), int64(-301), uint8(1), "", uint32(1))
	f.Add("msg.with.dots", []byte("not json at all \x00\xff"), int64(-300), uint8(0), "  ,,  v1  ", uint32(9))

	v := newTestVerifier(f, []string{secretOld, secretNew}, 0, testNow)
	tolerance := int64(SignatureToleranceDefault / time.Second)
	f.Fuzz(func(t *testing.T, id string, body []byte, skew int64, which uint8, extra string, tamper uint32) {
		secret := []string{secretOld, secretNew, secretUnknown}[which%3]
		// Any skew a timestamp header can express without overflowing time arithmetic.
		skew %= 1 << 40
		ts := strconv.FormatInt(testNow.Unix()+skew, 10)
		sig, err := Sign(secret, id, time.Unix(testNow.Unix()+skew, 0), body)
		require.NoError(t, err)

		deliver := func(id, ts string, body []byte) (string, error) {
			h := http.Header{}
			h.Set(HeaderWebhookID, id)
			h.Set(HeaderWebhookTimestamp, ts)
			h.Add(HeaderWebhookSignature, extra)
			h.Add(HeaderWebhookSignature, sig)
			got, err := v.Verify(h, body)
			if err != nil {
				require.Empty(t, got)
				require.True(t, errors.Is(err, ErrSignatureMissing) || errors.Is(err, ErrSignatureTimestamp) ||
					errors.Is(err, ErrSignatureInvalid), "unclassified error %v", err)
			}
			return got, err
		}

		got, err := deliver(id, ts, body)
		inWindow := skew >= -tolerance && skew <= tolerance
		switch {
		case id == "":
			require.ErrorIs(t, err, ErrSignatureMissing)
			return
		case !inWindow:
			require.ErrorIs(t, err, ErrSignatureTimestamp)
			return
		case secret == secretUnknown:
			require.ErrorIs(t, err, ErrSignatureInvalid)
			return
		}
		require.NoError(t, err)
		require.Equal(t, id, got)

		// The signature binds every byte of what was signed.
		if len(body) > 0 {
			changed := append([]byte(nil), body...)
			changed[int(tamper%uint32(len(body)))] ^= 1 << (tamper % 8)
			_, err = deliver(id, ts, changed)
			require.ErrorIs(t, err, ErrSignatureInvalid, "a changed body byte is refused")
		}
		_, err = deliver(id, ts, append(append([]byte(nil), body...), 'x'))
		require.ErrorIs(t, err, ErrSignatureInvalid, "an appended byte is refused")
		_, err = deliver(id+"x", ts, body)
		require.ErrorIs(t, err, ErrSignatureInvalid, "another webhook-id is refused")
		_, err = deliver(id, strconv.FormatInt(testNow.Unix()+skew+1, 10), body)
		require.Error(t, err, "another timestamp is refused")
	})
}
