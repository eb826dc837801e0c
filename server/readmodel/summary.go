package readmodel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/db/dbsqlc"
	"github.com/rendezvous-run/rendezvous/workflow"
)

// displays holds the display template of each workflow version a list has shown: a
// stored version never changes, so each is read once per process.
type displays struct {
	m sync.Map // "name@version" → string
}

func displayKey(name string, version int32) string { return name + "@" + strconv.Itoa(int(version)) }

// wfVersion is one version of a workflow.
type wfVersion struct {
	name    string
	version int32
}

// load reads the display templates of the versions not held yet, in tx.
func (d *displays) load(ctx context.Context, q *dbsqlc.Queries, tx pgx.Tx, versions []wfVersion) error {
	for _, v := range versions {
		name, version := v.name, v.version
		key := displayKey(name, version)
		if _, ok := d.m.Load(key); ok {
			continue
		}
		row, err := q.WorkflowGet(ctx, tx, dbsqlc.WorkflowGetParams{Name: name, Version: version})
		if err != nil {
			if errors.Is(db.Interpret(err), db.ErrNotFound) {
				continue // no definition to draw from: the input's fields name it
			}
			return fmt.Errorf("load workflow %s version %d: %w", name, version, err)
		}
		var def struct {
			Display string `json:"display"`
		}
		// A stored definition was valid when stored; one that does not decode here has
		// no display to use.
		_ = json.Unmarshal(row.Definition, &def)
		d.m.Store(key, def.Display)
	}
	return nil
}

// summary is the business key of an execution of name@version with input.
func (d *displays) summary(name string, version int32, input json.RawMessage) string {
	display, _ := d.m.Load(displayKey(name, version))
	s, _ := display.(string)
	return workflow.Summary(s, input)
}

// versionsOf collects the distinct workflow versions of rows.
func versionsOf[R any](rows []R, of func(R) (string, int32)) []wfVersion {
	var out []wfVersion
	seen := map[wfVersion]bool{}
	for _, r := range rows {
		name, version := of(r)
		v := wfVersion{name, version}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
