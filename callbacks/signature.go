package callbacks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks (https://www.standardwebhooks.com) header names.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// SignatureToleranceDefault is how far webhook-timestamp may be from our
// clock, in either direction, before a delivery is refused as a replay (past)
// or a forgery with a skewed clock (future). It matches the spec's suggestion.
const SignatureToleranceDefault = 5 * time.Minute

// secretPrefix marks a base64-encoded secret, as issued by Standard Webhooks
// compatible senders.
const secretPrefix = "whsec_"

// signatureVersion is the only scheme we verify: HMAC-SHA256. Entries with
// other versions (e.g. asymmetric "v1a") are skipped, not rejected, so a
// sender may list several schemes at once.
const signatureVersion = "v1"

// Sentinel errors returned (wrapped with context) by Verify; test them with
// errors.Is. They are distinct so the handler can count failure causes.
var (
	// ErrSignatureMissing means a required webhook-* header is absent.
	ErrSignatureMissing = errors.New("webhook signature headers missing")
	// ErrSignatureTimestamp means webhook-timestamp is malformed or outside
	// the tolerance window.
	ErrSignatureTimestamp = errors.New("webhook timestamp invalid or outside tolerance")
	// ErrSignatureInvalid means no listed signature matches any secret.
	ErrSignatureInvalid = errors.New("webhook signature invalid")
)

// Verifier checks Standard Webhooks signatures against one or more secrets.
// Several secrets allow rotation: during the overlap both the old and the new
// secret are accepted. A Verifier is safe for concurrent use.
type Verifier struct {
	secrets   [][]byte
	tolerance time.Duration
	// now is the clock; tests in this package replace it to pin time.
	now func() time.Time
}

// NewVerifier parses secrets, each either "whsec_<base64>" (the key is the
// decoded bytes) or any other non-empty string (the key is its raw bytes).
// Splitting a comma-separated flag value is the caller's job. A tolerance <= 0
// means SignatureToleranceDefault.
//
// Errors name the offending secret by index only, so secrets never end up in
// logs.
func NewVerifier(secrets []string, tolerance time.Duration) (*Verifier, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook verifier: no secrets given")
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		key, err := parseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("webhook verifier: secret #%d: %w", i, err)
		}
		keys = append(keys, key)
	}
	if tolerance <= 0 {
		tolerance = SignatureToleranceDefault
	}
	return &Verifier{secrets: keys, tolerance: tolerance, now: time.Now}, nil
}

// parseSecret returns the HMAC key for a configured secret. Its errors never
// include the secret itself.
func parseSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty")
	}
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return []byte(s), nil
	}
	// Senders differ on padding; accept both rather than fail at startup.
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		var rawErr error
		key, rawErr = base64.RawStdEncoding.DecodeString(enc)
		if rawErr != nil {
			// err describes an offset only, not the content.
			return nil, fmt.Errorf("invalid base64 after %q prefix: %w", secretPrefix, err)
		}
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("empty key after %q prefix", secretPrefix)
	}
	return key, nil
}

// Verify checks the webhook-* headers in h against body, which must be the
// raw request bytes exactly as received (re-encoded JSON would not match).
// On success it returns the webhook-id, which callers use as the event's
// idempotency key: senders keep it stable across retries of one delivery.
func (v *Verifier) Verify(h http.Header, body []byte) (id string, err error) {
	id = h.Get(HeaderWebhookID)
	tsRaw := h.Get(HeaderWebhookTimestamp)
	// Join repeated headers: some proxies split one list into several.
	sigs := strings.Join(h.Values(HeaderWebhookSignature), " ")

	var missing []string
	if id == "" {
		missing = append(missing, HeaderWebhookID)
	}
	if tsRaw == "" {
		missing = append(missing, HeaderWebhookTimestamp)
	}
	if strings.TrimSpace(sigs) == "" {
		missing = append(missing, HeaderWebhookSignature)
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: %s", ErrSignatureMissing, strings.Join(missing, ", "))
	}

	if err := v.checkTimestamp(tsRaw); err != nil {
		return "", err
	}

	// One MAC per secret, computed once; each listed signature is then only
	// decoded and compared.
	expected := make([][]byte, len(v.secrets))
	for i, key := range v.secrets {
		expected[i] = mac(key, id, tsRaw, body)
	}
	for entry := range strings.FieldsSeq(sigs) {
		version, encoded, ok := strings.Cut(entry, ",")
		if !ok || version != signatureVersion {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil {
			continue // a malformed entry cannot match; others still might
		}
		for _, want := range expected {
			if hmac.Equal(got, want) {
				return id, nil
			}
		}
	}
	return "", fmt.Errorf("%w: no matching v1 signature", ErrSignatureInvalid)
}

// checkTimestamp parses webhook-timestamp (unix seconds) and enforces the
// tolerance window in both directions; the boundary itself is accepted.
func (v *Verifier) checkTimestamp(raw string) error {
	sec, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: not unix seconds", ErrSignatureTimestamp)
	}
	ts := time.Unix(sec, 0)
	now := v.now()
	// time.Time.Sub saturates instead of overflowing, so absurd timestamps
	// land far outside the window rather than wrapping into it.
	if age := now.Sub(ts); age > v.tolerance {
		return fmt.Errorf("%w: %s too old", ErrSignatureTimestamp, age.Round(time.Second))
	}
	if ahead := ts.Sub(now); ahead > v.tolerance {
		return fmt.Errorf("%w: %s in the future", ErrSignatureTimestamp, ahead.Round(time.Second))
	}
	return nil
}

// Sign produces a "v1,<base64>" webhook-signature entry for body sent with
// the given webhook-id and timestamp (truncated to unix seconds). It is used
// by tests, the bench load generator and clients; secret follows the
// NewVerifier format.
func Sign(secret string, id string, ts time.Time, body []byte) (string, error) {
	key, err := parseSecret(secret)
	if err != nil {
		return "", fmt.Errorf("webhook sign: secret: %w", err)
	}
	sum := mac(key, id, strconv.FormatInt(ts.Unix(), 10), body)
	return signatureVersion + "," + base64.StdEncoding.EncodeToString(sum), nil
}

// mac computes HMAC-SHA256 over the spec's signed content
// "{id}.{timestamp}.{body}". The timestamp is the header's text as sent, so
// the signature binds exactly what the sender wrote.
func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
