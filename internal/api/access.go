package api

// Tokens, the audit log and the caller's own principal: the routes of access control.
// Package auth decides who may do what and keeps the tokens; package audit keeps the
// log; this file translates between them and HTTP.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/internal/audit"
	"github.com/rendezvous-run/rendezvous/internal/auth"
	"github.com/rendezvous-run/rendezvous/internal/problem"
)

// Cursor kinds of the lists of this file; a cursor of one list is refused by the other.
const (
	cursorTokens = 't'
	cursorAudit  = 'a'
)

func encodeCursor(kind byte, v string) string {
	return base64.RawURLEncoding.EncodeToString(append([]byte{kind}, v...))
}

func decodeCursor(kind byte, s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != kind {
		return "", invalidQuery("cursor", "not a cursor of this list")
	}
	return string(b[1:]), nil
}

// pageLimit is pageParams' limit with the default applied.
func pageLimit(q map[string]string) (int, string, error) {
	limit, cursor, err := pageParams(q)
	if limit == 0 {
		limit = 50
	}
	return limit, cursor, err
}

// whoami answers who the caller is, so that the web view shows only what the role may
// do.
func (h *handlers) whoami(c echo.Context) error {
	if _, err := queryParams(c); err != nil {
		return err
	}
	p := auth.FromContext(c.Request().Context())
	if p == nil {
		return errors.New("whoami: no principal in a request that needs one")
	}
	return c.JSON(http.StatusOK, p)
}

func (h *handlers) createToken(c echo.Context) error {
	if _, err := queryParams(c); err != nil {
		return err
	}
	body, err := readBodyUpTo(c, 4<<10)
	if err != nil {
		return err
	}
	var req auth.NewToken
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return problem.New(http.StatusBadRequest, `body must be {"name": "...", "role": "admin|operator|viewer|sender", "workflow_prefix": "...", "expires_at": "RFC 3339"}: `+err.Error()).WithType("malformed-json")
	}
	created, err := h.access.Auth.Store().Create(c.Request().Context(), req)
	if ie, ok := errors.AsType[*auth.TokenInvalidError](err); ok {
		return invalidField("invalid-token-request", ie.Field, ie.Reason)
	}
	if errors.Is(err, auth.ErrTokenExists) {
		return problem.New(http.StatusConflict, "a token named "+req.Name+" exists (revoked tokens keep their names)").WithType("token-exists")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, created)
}

func (h *handlers) listTokens(c echo.Context) error {
	q, err := queryParams(c, "limit", "cursor")
	if err != nil {
		return err
	}
	limit, cursor, err := pageLimit(q)
	if err != nil {
		return err
	}
	after := ""
	if cursor != "" {
		if after, err = decodeCursor(cursorTokens, cursor); err != nil {
			return err
		}
	}
	items, more, err := h.access.Auth.Store().List(c.Request().Context(), after, limit)
	if err != nil {
		return err
	}
	page := struct {
		Items      []auth.Token `json:"items"`
		NextCursor string       `json:"next_cursor,omitempty"`
	}{Items: items}
	if more {
		page.NextCursor = encodeCursor(cursorTokens, items[len(items)-1].Name)
	}
	return c.JSON(http.StatusOK, page)
}

func (h *handlers) revokeToken(c echo.Context) error {
	if _, err := queryParams(c); err != nil {
		return err
	}
	t, err := h.access.Auth.Store().Revoke(c.Request().Context(), c.Param("name"))
	if errors.Is(err, auth.ErrTokenNotFound) {
		return problem.New(http.StatusNotFound, "no token named "+c.Param("name")).WithType("token-not-found")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, t)
}

func (h *handlers) listAudit(c echo.Context) error {
	q, err := queryParams(c, "principal", "action", "target", "since", "limit", "cursor")
	if err != nil {
		return err
	}
	f := audit.Filter{Principal: q["principal"], Action: q["action"], Target: q["target"]}
	if f.Limit, _, err = pageLimit(q); err != nil {
		return err
	}
	if s, ok := q["since"]; ok {
		if f.Since, err = time.Parse(time.RFC3339, s); err != nil {
			return invalidQuery("since", "not an RFC 3339 time")
		}
	}
	if s, ok := q["cursor"]; ok {
		v, err := decodeCursor(cursorAudit, s)
		if err != nil {
			return err
		}
		if f.BeforeID, err = strconv.ParseInt(v, 10, 64); err != nil || f.BeforeID <= 0 {
			return invalidQuery("cursor", "not a cursor of this list")
		}
	}
	rows, more, err := audit.List(c.Request().Context(), h.access.Pool, f)
	if err != nil {
		return err
	}
	page := struct {
		Items      []audit.Row `json:"items"`
		NextCursor string      `json:"next_cursor,omitempty"`
	}{Items: rows}
	if more {
		page.NextCursor = encodeCursor(cursorAudit, strconv.FormatInt(rows[len(rows)-1].ID, 10))
	}
	return c.JSON(http.StatusOK, page)
}
