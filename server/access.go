package server

import (
	"errors"
	"fmt"
	"slices"

	"github.com/labstack/echo/v4"

	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/internal/problem"
	"github.com/rendezvous-run/rendezvous/server/api"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// routeAccess is the one table of who may use which route, and of the audit log's name
// for the change a route makes. Every route served must be here: New refuses to start
// with a route that is not (TestEveryRouteHasAnAccessDecision), so a new route cannot
// be served without somebody deciding who may call it. docs/access-control.md draws it
// as a matrix.
var routeAccess = map[string]routeRule{
	"GET /api/v1/workflows":                          {access: auth.Read},
	"POST /api/v1/workflows/validate":                {access: auth.Read},
	"GET /api/v1/workflows/:name":                    {access: auth.Read},
	"PUT /api/v1/workflows/:name":                    {access: auth.Admin, action: audit.ActionWorkflowStore},
	"POST /api/v1/workflows/:name/executions":        {access: auth.Operate, action: audit.ActionExecutionStart},
	"GET /api/v1/executions":                         {access: auth.Read},
	"GET /api/v1/executions/:id":                     {access: auth.Read},
	"POST /api/v1/executions/:id/cancel":             {access: auth.Operate, action: audit.ActionExecutionCancel},
	"POST /api/v1/executions/:id/waits/:node/cancel": {access: auth.Operate, action: audit.ActionWaitCancel},
	"POST /api/v1/executions/:id/events":             {access: auth.Send, action: audit.ActionEventSend},
	"GET /api/v1/events/unmatched":                   {access: auth.Read},
	"GET /api/v1/events/dead-letters":                {access: auth.Read},
	"GET /api/v1/wait-states":                        {access: auth.Read},
	"GET /api/v1/wait-states/:id":                    {access: auth.Read},
	"GET /api/v1/whoami":                             {access: auth.Any},
	"GET /api/v1/tokens":                             {access: auth.Admin},
	"POST /api/v1/tokens":                            {access: auth.Admin, action: audit.ActionTokenCreate},
	"POST /api/v1/tokens/:name/revoke":               {access: auth.Admin, action: audit.ActionTokenRevoke},
	"GET /api/v1/audit":                              {access: auth.Admin},
	// Recovery: an operator's actions, each audited.
	"POST /api/v1/executions/:id/redrive":          {access: auth.Operate, action: audit.ActionExecutionRedrive},
	"POST /api/v1/executions/redrive":              {access: auth.Operate, action: audit.ActionExecutionRedriveMany},
	"POST /api/v1/executions/:id/restart":          {access: auth.Operate, action: audit.ActionExecutionRestart},
	"POST /api/v1/events/dead-letters/:id/replay":  {access: auth.Operate, action: audit.ActionDeadLetterReplay},
	"POST /api/v1/events/dead-letters/:id/dismiss": {access: auth.Operate, action: audit.ActionDeadLetterDismiss},
	"POST /api/v1/events/dead-letters/dismiss":     {access: auth.Operate, action: audit.ActionDeadLetterDismissMany},
	"POST /api/v1/events/unmatched/:id/replay":     {access: auth.Operate, action: audit.ActionUnmatchedReplay},
	"POST /api/v1/events/unmatched/:id/dismiss":    {access: auth.Operate, action: audit.ActionUnmatchedDismiss},
	"POST /api/internal/callbacks/:service":        {access: auth.Public},
	"GET /openapi.json":                            {access: auth.Public},
	"GET /schemas/:name":                           {access: auth.Public},
	"GET /ui":                                      {access: auth.Public},
	"GET /ui/*":                                    {access: auth.Public},
	"GET /healthz":                                 {access: auth.Public},
	"GET /readyz":                                  {access: auth.Public},
	"GET /metrics":                                 {access: auth.Public},
}

// routeRule is what a route needs, and what its change is called in the audit log
// (empty for a route that changes nothing).
type routeRule struct {
	access auth.Access
	action audit.Action
}

// RouteAccess returns the access the route "METHOD /path" (Echo's :param syntax)
// needs, and false for a route the table does not know.
func RouteAccess(route string) (auth.Access, bool) {
	r, ok := routeAccess[route]
	return r.access, ok
}

func lookupAccess(method, path string) (auth.Access, bool) {
	return RouteAccess(method + " " + path)
}

// checkRouteAccess fails for a route served without an access decision.
func checkRouteAccess(routes []string) error {
	var missing []string
	for _, r := range routes {
		if _, ok := routeAccess[r]; !ok {
			missing = append(missing, r)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("routes without an access decision (add them to the table in server/access.go): %v", missing)
	}
	return nil
}

// auditChanges gives a request whose route changes something an audit entry, which the
// change writes in its transaction. A request that wrote none (refused, failed, or a
// change that changed nothing, like storing an unchanged definition) gets its row here,
// in a transaction of its own, so every request that could have changed something is
// in the log.
func (s *Service) auditChanges(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		rule := routeAccess[req.Method+" "+c.Path()]
		if rule.action == "" {
			return next(c)
		}
		p := auth.FromContext(req.Context())
		if p == nil {
			return errors.New("audit: no principal in a request that changes something")
		}
		entry := &audit.Entry{Principal: p.AuditName(), RemoteAddr: c.RealIP(), Action: rule.action}
		c.SetRequest(req.WithContext(audit.NewContext(req.Context(), entry)))
		err := next(c)
		if entry.Written() && err == nil {
			return nil
		}
		status := api.StatusOf(c, err)
		target := req.URL.Path
		var werr error
		if status < 400 {
			werr = audit.Unchanged(req.Context(), s.pool, entry, target)
		} else {
			detail := ""
			if pr, ok := errors.AsType[*problem.Problem](err); ok {
				detail = pr.Detail
			}
			werr = audit.Refused(req.Context(), s.pool, entry, target, status, detail)
		}
		if werr != nil {
			// The database is away more often than not when this happens: the line carries
			// what the row would have held, so the audit trail survives in the logs.
			s.logger.ErrorContext(req.Context(), "audit row not written", "err", werr, "action", rule.action, "target", target,
				"principal", entry.Principal, "remote_addr", entry.RemoteAddr, "status", status)
		}
		return err
	}
}

// retryLater answers a request that failed because the database is away (see
// db.IsUnavailable) with 503, Retry-After and an "unavailable" problem, on every route,
// as the callback and send routes answer an event they could not record: the client
// learns that trying again is right, and an operator's redrive during an outage is not
// audited as an internal error. It runs outside access control, whose token lookup
// reads the database too; the audit log names the status through api.StatusOf.
func (s *Service) retryLater(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		p := api.Unavailable(err)
		// A client that went away cancelled the request's statements, which reads as a
		// timeout to pgx: nobody reads the answer, and the database was not at fault.
		if p == nil || c.Request().Context().Err() != nil {
			return err
		}
		s.logger.WarnContext(c.Request().Context(), "request failed: database unavailable",
			"method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
		return problem.RetryLater(c, p.Detail)
	}
}
