package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/audit"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/internal/jsonnum"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// ErrNameMismatch is returned when a definition's name differs from the name it is
// stored under.
var ErrNameMismatch = errors.New("definition name does not match")

// StoredWorkflow is the result of PutWorkflow.
type StoredWorkflow struct {
	Name      string    `json:"name"`
	Version   int32     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	// Created is true for the first version of a name.
	Created bool `json:"-"`
	// Unchanged is true when the definition equals the latest version, which is kept.
	Unchanged bool `json:"unchanged"`
	// Warnings lists what the definition holds to no effect, at JSON paths; never null.
	Warnings []workflow.FieldError `json:"warnings"`
}

// PutWorkflow validates raw and stores it as the next version of name. A definition
// equal to the latest version stores nothing and returns that version. Validation
// problems are a *workflow.ValidationError listing all of them.
func (e *Executor) PutWorkflow(ctx context.Context, name string, raw []byte) (StoredWorkflow, error) {
	wf, err := workflow.Compile(raw, e.reg)
	var verr *workflow.ValidationError
	if err != nil && !errors.As(err, &verr) {
		return StoredWorkflow{}, err
	}
	if err == nil {
		if errs := e.checkLimits(wf); len(errs) > 0 {
			verr = &workflow.ValidationError{Errors: errs, Warnings: wf.Warnings()}
		}
	}
	// The name is checked even when the definition has other errors, so that one answer
	// lists them all.
	var head struct {
		Name *string `json:"name"`
	}
	if json.Unmarshal(raw, &head) == nil && head.Name != nil && *head.Name != name {
		nameErr := workflow.FieldError{Path: "name", Message: fmt.Sprintf("%q does not match the name in the URL %q", *head.Name, name)}
		if verr == nil {
			verr = &workflow.ValidationError{}
		}
		if !slices.ContainsFunc(verr.Errors, func(fe workflow.FieldError) bool { return fe.Path == "name" }) {
			verr.Errors = append([]workflow.FieldError{nameErr}, verr.Errors...)
		}
	}
	if verr != nil {
		return StoredWorkflow{}, verr
	}
	for attempt := 0; ; attempt++ {
		latest, err := e.q.WorkflowGetLatest(ctx, e.pool, name)
		switch {
		case err == nil:
			if sameJSON(latest.Definition, raw) {
				return StoredWorkflow{Name: name, Version: latest.Version, CreatedAt: latest.CreatedAt, Unchanged: true, Warnings: wf.Warnings()}, nil
			}
		case !errors.Is(db.Interpret(err), db.ErrNotFound):
			return StoredWorkflow{}, fmt.Errorf("load workflow: %w", err)
		}
		var row dbsqlc.Workflow
		err = db.Tx(ctx, e.pool, func(tx pgx.Tx) error {
			var err error
			if row, err = e.q.WorkflowInsert(ctx, tx, dbsqlc.WorkflowInsertParams{Name: name, Definition: raw}); err != nil {
				return err
			}
			return audit.Record(ctx, tx, "workflow/"+name, audit.OutcomeOK, fmt.Sprintf("version %d", row.Version))
		})
		if err != nil {
			// Two concurrent stores of one name pick the same version; the loser retries.
			if errors.Is(db.Interpret(err), db.ErrDuplicate) && attempt < 5 {
				continue
			}
			return StoredWorkflow{}, fmt.Errorf("store workflow: %w", db.Interpret(err))
		}
		e.defsMu.Lock()
		e.defs[defKey{name, row.Version}] = wf
		e.defsMu.Unlock()
		poke(e.stored)
		return StoredWorkflow{Name: name, Version: row.Version, CreatedAt: row.CreatedAt, Created: row.Version == 1, Warnings: wf.Warnings()}, nil
	}
}

// checkLimits finds what in a valid definition exceeds this service's limits: a payload
// match whose lookback is longer than the aggregator keeps early records
// (--max-lookback). It is checked where definitions are stored, not when they are
// compiled: a definition stored under a larger bound must still run (its lookback is
// then held to the bound).
func (e *Executor) checkLimits(wf *workflow.Workflow) []workflow.FieldError {
	maxLookback := e.agg.MaxLookback()
	var errs []workflow.FieldError
	for i, n := range wf.Nodes() {
		cfg, ok := n.Config.(*workflow.WaitEvents)
		if !ok {
			continue
		}
		for j, ev := range cfg.Events {
			if ev.Lookback > maxLookback {
				errs = append(errs, workflow.FieldError{
					Path:    fmt.Sprintf("nodes[%d].data.events[%d].lookback", i, j),
					Message: fmt.Sprintf("%s exceeds this service's maximum lookback of %s (--max-lookback)", ev.Lookback, maxLookback),
				})
			}
		}
	}
	return errs
}

// sameJSON reports whether two definitions are the same JSON, numbers compared by exact
// value: the stored one has been through jsonb (1e2 comes back as 100), and a definition
// that changes only 9007199254740993 to 9007199254740992 is a new version.
func sameJSON(a, b []byte) bool {
	va, erra := jsonnum.Decode(a)
	vb, errb := jsonnum.Decode(b)
	return erra == nil && errb == nil && jsonnum.DeepEqual(va, vb)
}

// definition returns a compiled definition; versions are immutable, so compiled ones
// are cached for the life of the process.
func (e *Executor) definition(ctx context.Context, q dbsqlc.DBTX, name string, version int32) (*workflow.Workflow, error) {
	k := defKey{name, version}
	e.defsMu.RLock()
	wf := e.defs[k]
	e.defsMu.RUnlock()
	if wf != nil {
		return wf, nil
	}
	row, err := e.q.WorkflowGet(ctx, q, dbsqlc.WorkflowGetParams{Name: name, Version: version})
	if err != nil {
		return nil, fmt.Errorf("load workflow %s v%d: %w", name, version, db.Interpret(err))
	}
	wf, err = workflow.Compile(row.Definition, e.reg)
	if err != nil {
		return nil, fmt.Errorf("compile stored workflow %s v%d: %w", name, version, err)
	}
	e.defsMu.Lock()
	e.defs[k] = wf
	e.defsMu.Unlock()
	return wf, nil
}

// Validated is the answer to a definition that passed validation.
type Validated struct {
	Valid bool `json:"valid"`
	// Nodes counts the definition's nodes.
	Nodes int `json:"nodes"`
	// Warnings lists what the definition holds to no effect, at JSON paths; never null.
	Warnings []workflow.FieldError `json:"warnings"`
}

// ValidateWorkflow checks raw exactly as PutWorkflow does, storing nothing. There is no
// stored name to compare with; the definition's own name is checked like any field.
// Problems are a *workflow.ValidationError.
func (e *Executor) ValidateWorkflow(raw []byte) (Validated, error) {
	wf, err := workflow.Compile(raw, e.reg)
	if err != nil {
		return Validated{}, err
	}
	if errs := e.checkLimits(wf); len(errs) > 0 {
		return Validated{}, &workflow.ValidationError{Errors: errs, Warnings: wf.Warnings()}
	}
	return Validated{Valid: true, Nodes: len(wf.Nodes()), Warnings: wf.Warnings()}, nil
}
