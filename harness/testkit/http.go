package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// RequestTimeout bounds one request of Do, so that a server that stops answering fails
// the test at that request instead of at the test binary's deadline.
const RequestTimeout = time.Minute

// Response is a test server's whole answer.
type Response struct {
	Status int
	Header http.Header
	Raw    []byte
	// JSON is the body read as a JSON object; nil when it is not one.
	JSON map[string]any
}

// Do sends one request with http.DefaultClient and reads the whole answer; see DoWith.
func Do(t testing.TB, method, url string, body any, header http.Header) Response {
	t.Helper()
	return DoWith(t, http.DefaultClient, method, url, body, header)
}

// DoWith sends one request with client and reads the whole answer. body is nil for
// none, sent as is when it is []byte or an io.Reader, and as JSON otherwise; a body is
// sent as application/json. header is added to the request (it may set Content-Type
// too). A request that cannot be sent fails the test; any answer is returned.
func DoWith(t testing.TB, client *http.Client, method, url string, body any, header http.Header) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("%s %s: encode the body: %v", method, url, err)
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		req.Header[http.CanonicalHeaderKey(k)] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, url, err)
	}
	r := Response{Status: resp.StatusCode, Header: resp.Header, Raw: raw}
	_ = json.Unmarshal(raw, &r.JSON)
	return r
}

// DoJSON is Do for a request whose answer must be a JSON object (or empty): its status
// and the object.
func DoJSON(t testing.TB, method, url string, body any, header http.Header) (int, map[string]any) {
	t.Helper()
	r := Do(t, method, url, body, header)
	if len(r.Raw) > 0 && r.JSON == nil {
		t.Fatalf("%s %s answered %d, not a JSON object: %s", method, url, r.Status, r.Raw)
	}
	return r.Status, r.JSON
}

// Bearer is the header that authenticates a request with token; none for "".
func Bearer(token string) http.Header {
	if token == "" {
		return nil
	}
	return http.Header{"Authorization": {"Bearer " + token}}
}
