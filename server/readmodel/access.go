package readmodel

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/server/auth"
)

// Tokens returns the API tokens by name. The token store reads them (it pages through
// them itself to fill its cache); this list only pages.
func (r *Reader) Tokens(ctx context.Context, store *auth.Store, pg Paging) (Page[auth.Token], error) {
	limit, err := limitOf(pg.Limit)
	if err != nil {
		return Page[auth.Token]{}, err
	}
	after := ""
	if pg.Cursor != "" {
		if after, err = decodeName(kindTokens, pg.Cursor); err != nil {
			return Page[auth.Token]{}, err
		}
	}
	items, more, err := store.List(ctx, after, limit)
	if err != nil {
		return Page[auth.Token]{}, err
	}
	page := Page[auth.Token]{Items: items}
	if more {
		page.NextCursor = encodeName(kindTokens, items[len(items)-1].Name)
	}
	return page, nil
}

// AuditRow is one row of the audit log.
type AuditRow struct {
	ID         int64     `json:"id"`
	At         time.Time `json:"at"`
	Principal  string    `json:"principal"`
	RemoteAddr string    `json:"remote_addr"`
	Action     string    `json:"action"`
	Target     string    `json:"target"`
	Outcome    string    `json:"outcome"`
	Detail     string    `json:"detail,omitempty"`
}

// AuditFilter selects audit rows; empty fields select everything.
type AuditFilter struct {
	Principal, Action, Target string
	// Since keeps rows at or after it; zero keeps all.
	Since time.Time
}

// Audit returns the audit log, newest first.
func (r *Reader) Audit(ctx context.Context, f AuditFilter, pg Paging) (Page[AuditRow], error) {
	limit, before, err := idPaging(kindAudit, pg)
	if err != nil {
		return Page[AuditRow]{}, err
	}
	p := dbsqlc.AuditLogListParams{Max: int32(limit + 1), BeforeID: before}
	for _, fv := range []struct {
		param string
		v     string
		dst   **string
	}{{"principal", f.Principal, &p.Principal}, {"action", f.Action, &p.Action}, {"target", f.Target, &p.Target}} {
		if *fv.dst, err = Text(fv.param, fv.v); err != nil {
			return Page[AuditRow]{}, err
		}
	}
	if !f.Since.IsZero() {
		p.Since = &f.Since
	}
	rows, err := read(ctx, r, "audit log", func(tx pgx.Tx) ([]dbsqlc.AuditLog, error) {
		return r.q.AuditLogList(ctx, tx, p)
	})
	if err != nil {
		return Page[AuditRow]{}, err
	}
	return pageOf(rows, limit, func(a dbsqlc.AuditLog) (AuditRow, error) {
		return AuditRow{ID: a.ID, At: a.At, Principal: a.Principal, RemoteAddr: a.RemoteAddr,
			Action: a.Action, Target: a.Target, Outcome: a.Outcome, Detail: a.Detail}, nil
	}, func(a dbsqlc.AuditLog) string { return encodeID(kindAudit, a.ID) })
}
