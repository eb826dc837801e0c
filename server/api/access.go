package api

// Tokens, the audit log and the caller's own principal: the routes of access control.
// Package auth decides who may do what and keeps the tokens; package audit keeps the
// log; this file translates between them and HTTP.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server/auth"
	"github.com/rendezvous-run/rendezvous/server/readmodel"
)

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
	_, pg, err := listQuery(c)
	if err != nil {
		return err
	}
	page, err := h.lists.Tokens(c.Request().Context(), h.access.Auth.Store(), pg)
	return servePage(c, page, err)
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
	q, pg, err := listQuery(c, "principal", "action", "target", "since")
	if err != nil {
		return err
	}
	f := readmodel.AuditFilter{Principal: q["principal"], Action: q["action"], Target: q["target"]}
	if s, ok := q["since"]; ok {
		if f.Since, err = time.Parse(time.RFC3339, s); err != nil {
			return invalidQuery("since", "not an RFC 3339 time")
		}
	}
	page, err := h.lists.Audit(c.Request().Context(), f, pg)
	return servePage(c, page, err)
}
