// Package auth owns who may call what: the roles and what each route needs (Access),
// the Authorization header, API tokens (created, listed, revoked, looked up by hash),
// the bootstrap token, OIDC bearer tokens, and the echo middleware that answers 401 or
// 403 before a handler runs. It does not own the routes themselves (their table lives
// where they are served) nor what a change writes to the audit log beyond the rows of
// its own token changes.
package auth

import (
	"fmt"
	"slices"
	"strings"
)

// Role is what a principal may do. Roles are not a strict ladder: sender may only send
// events, which viewer may not.
type Role string

// The roles.
const (
	// RoleAdmin may do everything: definitions, tokens, the audit log, and all the others.
	RoleAdmin Role = "admin"
	// RoleOperator may start and cancel executions, cancel waits and send events, and
	// read everything a viewer reads.
	RoleOperator Role = "operator"
	// RoleViewer may read the API (not tokens nor the audit log) and use the web view.
	RoleViewer Role = "viewer"
	// RoleSender may only send events to executions, optionally only to executions of
	// workflows whose name starts with its token's prefix.
	RoleSender Role = "sender"
)

// Roles lists every role, most powerful first.
var Roles = []Role{RoleAdmin, RoleOperator, RoleViewer, RoleSender}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q; want one of admin, operator, viewer, sender", s)
}

// Access is what a route needs of its caller. Every route served declares one; a route
// without is refused to everybody but admin.
type Access string

// The access levels of routes.
const (
	// Public needs no bearer token: callbacks (signed, and addressed by a correlation id
	// nobody can guess), the probes, the metrics, the API and schema documents and the
	// web view's static files (which hold no data; the data comes from the API).
	Public Access = "public"
	// Any is for any authenticated principal, whatever its role (who am I).
	Any Access = "any"
	// Read is for the API's reads: viewer, operator, admin.
	Read Access = "read"
	// Send is for sending an event to an execution: sender, operator, admin.
	Send Access = "send"
	// Operate is for changes to executions and waits: operator, admin.
	Operate Access = "operate"
	// Admin is for definitions, tokens and the audit log: admin only.
	Admin Access = "admin"
)

// Allows reports whether a principal of role r may use a route that needs a.
func (r Role) Allows(a Access) bool {
	switch a {
	case Public, Any:
		return slices.Contains(Roles, r)
	case Read:
		return r == RoleAdmin || r == RoleOperator || r == RoleViewer
	case Send:
		return r == RoleAdmin || r == RoleOperator || r == RoleSender
	case Operate:
		return r == RoleAdmin || r == RoleOperator
	case Admin:
		return r == RoleAdmin
	}
	return false
}

// PrincipalKind says how a principal proved who it is.
type PrincipalKind string

// The kinds of principal.
const (
	// KindToken is an API token stored in the database.
	KindToken PrincipalKind = "token"
	// KindBootstrap is the token of RENDEZVOUS_BOOTSTRAP_TOKEN.
	KindBootstrap PrincipalKind = "bootstrap"
	// KindOIDC is a JWT from the configured identity provider.
	KindOIDC PrincipalKind = "oidc"
	// KindInsecure is everybody, when the service runs without authentication.
	KindInsecure PrincipalKind = "insecure"
)

// Principal is who made a request.
type Principal struct {
	// Name is the token's name or the OIDC subject; the audit log records it.
	Name string        `json:"name"`
	Kind PrincipalKind `json:"kind"`
	Role Role          `json:"role"`
	// WorkflowPrefix, for a sender, limits it to executions of workflows whose name
	// starts with it; empty means any workflow.
	WorkflowPrefix string `json:"workflow_prefix,omitempty"`
}

// MaySendTo reports whether p may send events to an execution of workflow.
func (p *Principal) MaySendTo(workflow string) bool {
	return p.Role != RoleSender || strings.HasPrefix(workflow, p.WorkflowPrefix)
}

// AuditName is how the audit log names p: "token:ci", "oidc:alice@example.com".
func (p *Principal) AuditName() string {
	return string(p.Kind) + ":" + p.Name
}
