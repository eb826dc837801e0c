package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// WorkflowVersion is one stored version of a workflow.
type WorkflowVersion struct {
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
}

// WorkflowView is one version of a workflow with the list of all of them.
type WorkflowView struct {
	Name          string `json:"name"`
	LatestVersion int32  `json:"latest_version"`
	// Version is the version whose Definition is shown.
	Version    int32           `json:"version"`
	Definition json.RawMessage `json:"definition"`
	// Versions lists every version, newest first.
	Versions []WorkflowVersion `json:"versions"`
}

// Workflow returns version (0: the latest) of the named workflow, or an error wrapping
// ErrNotFound when the name or that version is unknown.
func (r *Reader) Workflow(ctx context.Context, name string, version int32) (*WorkflowView, error) {
	if _, err := Text("name", name); err != nil {
		// No stored name holds such text.
		return nil, fmt.Errorf("%w: no workflow named %q", ErrNotFound, name)
	}
	var v *WorkflowView
	err := Snapshot(ctx, r.pool, func(tx pgx.Tx) error {
		versions, err := r.q.WorkflowVersions(ctx, tx, name)
		if err != nil {
			return fmt.Errorf("list workflow versions: %w", err)
		}
		if len(versions) == 0 {
			return fmt.Errorf("%w: no workflow named %s", ErrNotFound, name)
		}
		v = &WorkflowView{Name: name, LatestVersion: versions[0].Version, Version: version, Versions: make([]WorkflowVersion, len(versions))}
		for i, r := range versions {
			v.Versions[i] = WorkflowVersion{Version: r.Version, CreatedAt: r.CreatedAt}
		}
		if version == 0 {
			v.Version = v.LatestVersion
		}
		row, err := r.q.WorkflowGet(ctx, tx, dbsqlc.WorkflowGetParams{Name: name, Version: v.Version})
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return fmt.Errorf("%w: workflow %s has no version %d (latest is %d)", ErrNotFound, name, version, v.LatestVersion)
			}
			return fmt.Errorf("load workflow: %w", err)
		}
		v.Definition = row.Definition
		return nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}
