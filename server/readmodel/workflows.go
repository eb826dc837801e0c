package readmodel

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// WorkflowSummary is one stored workflow name in the workflow list.
type WorkflowSummary struct {
	Name          string `json:"name"`
	LatestVersion int32  `json:"latest_version"`
	// Versions counts the stored versions.
	Versions int32 `json:"versions"`
	// CreatedAt is when the first version was stored, UpdatedAt the latest.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Workflows returns the stored workflows by name.
func (r *Reader) Workflows(ctx context.Context, pg Paging) (Page[WorkflowSummary], error) {
	limit, err := limitOf(pg.Limit)
	if err != nil {
		return Page[WorkflowSummary]{}, err
	}
	p := dbsqlc.WorkflowListParams{Max: int32(limit + 1)}
	if pg.Cursor != "" {
		name, err := decodeName(kindWorkflows, pg.Cursor)
		if err != nil {
			return Page[WorkflowSummary]{}, err
		}
		p.AfterName = &name
	}
	rows, err := read(ctx, r, "workflows", func(tx pgx.Tx) ([]dbsqlc.WorkflowListRow, error) {
		return r.q.WorkflowList(ctx, tx, p)
	})
	if err != nil {
		return Page[WorkflowSummary]{}, err
	}
	return pageOf(rows, limit, func(w dbsqlc.WorkflowListRow) (WorkflowSummary, error) {
		return WorkflowSummary{Name: w.Name, LatestVersion: w.LatestVersion, Versions: w.Versions,
			CreatedAt: w.FirstCreatedAt, UpdatedAt: w.LatestCreatedAt}, nil
	}, func(w dbsqlc.WorkflowListRow) string { return encodeName(kindWorkflows, w.Name) })
}
