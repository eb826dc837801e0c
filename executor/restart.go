package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
)

// RestartVersion says which definition version a restart runs.
type RestartVersion string

// Restart versions.
const (
	// RestartSameVersion runs the version the old execution ran (the default).
	RestartSameVersion RestartVersion = "same"
	// RestartLatestVersion runs the workflow's latest version.
	RestartLatestVersion RestartVersion = "latest"
)

// RestartOptions adjust a restart; the zero value restarts the same version with the
// same input.
type RestartOptions struct {
	// Version is RestartSameVersion (when empty) or RestartLatestVersion.
	Version RestartVersion
	// Input replaces the old execution's input when set.
	Input json.RawMessage
	// Reason is recorded with the old execution when the restart cancels it.
	Reason string
}

// AlreadyRestartedError is returned when the execution to restart was restarted
// already (by a concurrent restart, say): As names the execution that restarted it.
type AlreadyRestartedError struct{ As uuid.UUID }

func (e *AlreadyRestartedError) Error() string {
	return "execution was already restarted as " + e.As.String()
}

// Restarted describes a restart.
type Restarted struct {
	Started
	// RestartedFrom is the execution restarted.
	RestartedFrom uuid.UUID `json:"restarted_from"`
	// Cancelled is set when the old execution was still open and the restart cancelled
	// it.
	Cancelled bool `json:"cancelled"`
}

// Restart starts a new execution of the workflow of an old one — the same definition
// version unless opts ask for the latest, the same input unless opts give one — and
// links the two both ways (restarted_from, restarted_as). An old execution that is still
// running or waiting is first cancelled, exactly as CancelExecution does: its waits are
// cancelled behind their version fence, so an event racing the restart is recorded by
// the old wait before the cancel, or is late; then the new execution registers its own
// waits, under new correlation ids, as it reaches them.
//
// It runs in one transaction under the old execution's row lock, and an execution is
// restarted once: a concurrent or repeated restart gets an *AlreadyRestartedError.
func (e *Executor) Restart(ctx context.Context, id uuid.UUID, opts RestartOptions) (Restarted, error) {
	switch opts.Version {
	case "":
		opts.Version = RestartSameVersion
	case RestartSameVersion, RestartLatestVersion:
	default:
		return Restarted{}, fmt.Errorf("version: must be %q or %q", RestartSameVersion, RestartLatestVersion)
	}
	if opts.Reason == "" {
		opts.Reason = "restarted"
	}
	var out Restarted
	err := db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
		out = Restarted{RestartedFrom: id}
		old, err := e.q.ExecutionGetForUpdate(ctx, tx, id)
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				return ErrExecutionNotFound
			}
			return fmt.Errorf("lock execution: %w", err)
		}
		if old.RestartedAs != nil {
			return &AlreadyRestartedError{As: *old.RestartedAs}
		}
		version := old.WorkflowVersion
		if opts.Version == RestartLatestVersion {
			latest, err := e.q.WorkflowGetLatest(ctx, tx, old.WorkflowName)
			if err != nil {
				return fmt.Errorf("load workflow: %w", err)
			}
			version = latest.Version
		}
		wf, err := e.definition(ctx, tx, old.WorkflowName, version)
		if err != nil {
			return err
		}
		input := opts.Input
		if len(input) == 0 {
			input = old.Input
		}
		if !execFinished(old.Status) {
			if _, err := e.cancelTx(ctx, tx, id, opts.Reason); err != nil {
				return err
			}
			out.Cancelled = true
		}
		exec, err := e.insertExecution(ctx, tx, db.NewID(), wf, old.WorkflowName, version, input, &id)
		if err != nil {
			return err
		}
		if n, err := e.q.ExecutionSetRestartedAs(ctx, tx, dbsqlc.ExecutionSetRestartedAsParams{ID: id, RestartedAs: exec.ID}); err != nil {
			return fmt.Errorf("link restart: %w", err)
		} else if n == 0 {
			return errors.New("link restart: the locked execution was restarted meanwhile")
		}
		out.Started = Started{ID: exec.ID, Workflow: exec.WorkflowName, WorkflowVersion: exec.WorkflowVersion,
			Status: exec.Status, CreatedAt: exec.CreatedAt}
		return audit.Record(ctx, tx, "execution/"+id.String(), audit.OutcomeOK, "restarted as "+exec.ID.String())
	})
	if err != nil {
		return Restarted{}, err
	}
	e.WakeRunQueue()
	e.logger.InfoContext(ctx, "execution restarted", "execution_id", out.ID, "restarted_from", id,
		"workflow", out.Workflow, "workflow_version", out.WorkflowVersion, "cancelled_old", out.Cancelled,
		"instance_id", e.cfg.InstanceID)
	return out, nil
}
