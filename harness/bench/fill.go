package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rendezvous-run/rendezvous/db"
	"github.com/rendezvous-run/rendezvous/server"
)

// FillResult describes the waits parked by Fill.
type FillResult struct {
	Waits   int     `json:"waits"`
	Seconds float64 `json:"seconds"`
	// TableBytes is execution_wait_states with its indexes and TOAST, after filling.
	TableBytes int64 `json:"table_bytes"`
}

const fillerWorkflow = "bench-filler"

// Fill parks n waits that nothing answers in the schema at url: the population a busy
// deployment carries while the measured events arrive. A replica parks one wait of a
// Kafka-only workflow on a topic nobody produces to, with a week's timeout, which is
// then cloned (see cloneWaits) with creation times over the past six days and deadlines
// over the coming ones, into the tables with all their indexes in place (random keys
// split pages as they do in a live table). The tables are then vacuumed and analysed,
// as autovacuum would have done to a table that grew over days, so that visibility and
// statistics are those of a settled table, not of a bulk load.
func Fill(ctx context.Context, url string, n int, logger *slog.Logger) (FillResult, error) {
	start := time.Now()
	rig, err := startKafka(ctx, url, 1, false, nil, nil, logger)
	if err != nil {
		return FillResult{}, err
	}
	def := fmt.Sprintf(`{"name":%q,"nodes":[{"id":"wait","type":"wait_events","data":{
		"kafkaEvent":{"topic":"bench.filler"},"aggregationStrategy":"all","timeout":604800}}]}`, fillerWorkflow)
	if _, err := rig.svc.Exec.PutWorkflow(ctx, fillerWorkflow, []byte(def)); err != nil {
		rig.close()
		return FillResult{}, fmt.Errorf("store filler workflow: %w", err)
	}
	_, err = parkClones(ctx, rig.svc, fillerWorkflow, n, true)
	rig.close()
	if err != nil {
		return FillResult{}, err
	}
	pool, err := db.Connect(ctx, url, 1)
	if err != nil {
		return FillResult{}, err
	}
	defer pool.Close()
	for _, table := range []string{"executions", "node_execution_rows", "execution_wait_states"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			return FillResult{}, fmt.Errorf("vacuum %s: %w", table, err)
		}
	}
	res := FillResult{Seconds: time.Since(start).Seconds()}
	if err := pool.QueryRow(ctx, `SELECT count(*), pg_total_relation_size('execution_wait_states')
		FROM execution_wait_states WHERE status = 'waiting'`).Scan(&res.Waits, &res.TableBytes); err != nil {
		return FillResult{}, err
	}
	if res.Waits < n {
		return FillResult{}, fmt.Errorf("filled %d waiting rows, want %d", res.Waits, n)
	}
	return res, nil
}

// parkClones parks n waits of a stored one-node workflow and returns their ids: a real
// execution is started and parked by the replica svc, and the other n−1 are clones of
// it. spread backdates the clones' creation (see cloneWaits); without it they are
// created now, with the template's deadline. Only when ids are not spread are they
// returned (the million filler waits are never addressed).
func parkClones(ctx context.Context, svc *server.Service, name string, n int, spread bool) ([]waitIDs, error) {
	started, err := svc.Exec.StartExecution(ctx, name, nil)
	if err != nil {
		return nil, fmt.Errorf("start execution: %w", err)
	}
	execs := []uuid.UUID{started.ID}
	if err := waitParked(ctx, svc.Pool(), execs); err != nil {
		return nil, err
	}
	var template waitIDs
	if err := svc.Pool().QueryRow(ctx, `SELECT execution_id, correlation_id FROM execution_wait_states
		WHERE execution_id = $1`, execs[0]).Scan(&template.exec, &template.corr); err != nil {
		return nil, fmt.Errorf("read template wait: %w", err)
	}
	clones, err := cloneWaits(ctx, svc.Pool(), template.exec, n-1, spread, nil)
	if err != nil {
		return nil, err
	}
	if spread {
		return nil, nil
	}
	return append(clones, template), nil
}

// cloneWaits copies the parked wait of execution template n times: execution, node and
// wait state, every column from the template's rows but fresh ids (version 7, of their
// creation time, as the service draws them) and, with spread, creation times over the last six
// days and deadlines a week after each (so they spread over the indexes holding them as
// in a live table). Each chunk is one INSERT … SELECT over generate_series inserting
// all three, so foreign keys hold at its end; chunks run on two connections, as one
// statement's work is mostly one core's. Without spread, it returns the clones' ids.
//
// Parking this way rather than through the executor is what keeps the bench's run time
// in minutes: the rows are exactly what registering writes (they are copies of what it
// wrote), and parking is not what is measured.
//
// waitColumns, when not nil, give SQL expressions for columns of the clones' wait
// states (they may use src.wait_id, a fresh uuid per clone, and t, the template's row);
// by default every column is the template's.
func cloneWaits(ctx context.Context, pool *pgxpool.Pool, template uuid.UUID, n int, spread bool, waitColumns map[string]string) ([]waitIDs, error) {
	stmt, err := cloneStatement(ctx, pool, spread, waitColumns)
	if err != nil {
		return nil, err
	}
	const chunk, workers = 25000, 2
	sizes := make(chan int)
	go func() {
		defer close(sizes)
		for left := n; left > 0; left -= chunk {
			select {
			case sizes <- min(left, chunk):
			case <-ctx.Done():
				return
			}
		}
	}()
	var mu sync.Mutex
	var ids []waitIDs
	var firstErr error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for size := range sizes {
				mu.Lock()
				failed := firstErr != nil
				mu.Unlock()
				if failed {
					continue // drain
				}
				rows, err := pool.Query(ctx, stmt, template, size)
				var got []waitIDs
				if err == nil {
					got, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (waitIDs, error) {
						var w waitIDs
						return w, row.Scan(&w.exec, &w.corr)
					})
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("clone waits: %w", err)
				}
				if !spread {
					ids = append(ids, got...)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return ids, ctx.Err()
}

// cloneStatement builds the statement that clones the template execution ($1) $2 times,
// returning each clone's execution and correlation ids. Columns are listed from the
// catalogue, so that whatever migrations add is copied from the template too.
func cloneStatement(ctx context.Context, pool *pgxpool.Pool, spread bool, waitColumns map[string]string) (string, error) {
	created, deadline := "now()", ""
	if spread {
		created = "now() - random() * interval '6 days'"
		deadline = "src.created + interval '7 days'"
	}
	overrides := map[string]map[string]string{
		"executions": {"id": "src.exec_id", "created_at": "src.created", "updated_at": "src.created"},
		"node_execution_rows": {"execution_id": "src.exec_id", "created_at": "src.created", "updated_at": "src.created",
			"started_at": "src.created"},
		"execution_wait_states": {"id": "src.wait_id", "execution_id": "src.exec_id", "correlation_id": "src.corr",
			"created_at": "src.created", "updated_at": "src.created"},
	}
	for col, expr := range waitColumns {
		overrides["execution_wait_states"][col] = expr
	}
	if deadline != "" {
		overrides["execution_wait_states"]["expires_at"] = deadline
		overrides["execution_wait_states"]["next_deadline_at"] = deadline
	}
	key := map[string]string{"executions": "id", "node_execution_rows": "execution_id", "execution_wait_states": "execution_id"}
	insert := map[string]string{}
	for table, set := range overrides {
		rows, err := pool.Query(ctx, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
		if err != nil {
			return "", fmt.Errorf("columns of %s: %w", table, err)
		}
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", fmt.Errorf("columns of %s: %w", table, err)
		}
		exprs := make([]string, len(cols))
		for i, c := range cols {
			exprs[i] = "t." + pgx.Identifier{c}.Sanitize()
			if e, ok := set[c]; ok {
				exprs[i] = e
			}
			cols[i] = pgx.Identifier{c}.Sanitize()
		}
		insert[table] = fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s AS t, src WHERE t.%s = $1",
			table, strings.Join(cols, ", "), strings.Join(exprs, ", "), table, key[table])
	}
	return `WITH src AS (
    SELECT ` + uuidV7("c") + ` AS exec_id, ` + uuidV7("c") + ` AS wait_id, ` + uuidV7("c") + ` AS corr, c AS created
    FROM (SELECT ` + created + ` AS c FROM generate_series(1, $2::integer)) AS g
), e AS (` + insert["executions"] + `
), ne AS (` + insert["node_execution_rows"] + `
)
` + insert["execution_wait_states"] + `
RETURNING execution_id, correlation_id`, nil
}

// uuidV7 is an SQL expression for a version 7 UUID of the moment ts, as the service
// draws its ids (uuid.NewV7): the milliseconds since the epoch, then random bits, in the
// bytes of a random (version 4) UUID whose version is turned into 7.
func uuidV7(ts string) string {
	return `encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) placing
        substring(int8send(floor(extract(epoch FROM ` + ts + `) * 1000)::bigint) FROM 3) FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid`
}

// waitParked waits until every execution of execs has its wait waiting.
func waitParked(ctx context.Context, pool *pgxpool.Pool, execs []uuid.UUID) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM execution_wait_states
			WHERE execution_id = ANY($1) AND status = 'waiting'`, execs).Scan(&waiting); err != nil {
			return fmt.Errorf("count parked waits: %w", err)
		}
		if waiting == len(execs) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d waits parked", waiting, len(execs))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}
