package auth

import (
	"errors"
	"strings"
)

// Errors of ParseBearer.
var (
	// ErrNoCredential: the request has no Authorization header.
	ErrNoCredential = errors.New("no credential")
	// ErrMalformed: the header is not "Bearer <token>".
	ErrMalformed = errors.New(`the Authorization header must be "Bearer <token>"`)
)

// maxHeaderToken bounds a bearer token; an OIDC JWT with many claims stays well below.
const maxHeaderToken = 8 << 10

// ParseBearer returns the token of an Authorization header value, as RFC 6750 has it:
// the scheme "Bearer" (any case), one or more spaces, and a b64token (letters, digits,
// "-._~+/", then optional "="). Anything else is ErrMalformed, an empty header
// ErrNoCredential.
func ParseBearer(header string) (string, error) {
	if header == "" {
		return "", ErrNoCredential
	}
	scheme, rest, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrMalformed
	}
	token := strings.TrimLeft(rest, " ")
	if token == "" || len(token) > maxHeaderToken {
		return "", ErrMalformed
	}
	i := 0
	for i < len(token) && isTokenChar(token[i]) {
		i++
	}
	if i == 0 {
		return "", ErrMalformed
	}
	for j := i; j < len(token); j++ {
		if token[j] != '=' {
			return "", ErrMalformed
		}
	}
	return token, nil
}

func isTokenChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/'
}
