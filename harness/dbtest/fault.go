package dbtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// UpdateFault makes PostgreSQL itself refuse some updates of a table, for tests of what
// the service does when a statement fails for a reason no check of its own foresaw.
type UpdateFault struct {
	pool *pgxpool.Pool
	name string
}

// FailUpdates installs, in pool's schema, a trigger named name that fails every update
// of table whose new row meets cond (SQL over NEW, such as
// NEW.kafka_event_data->>'refuse' = 'yes') with an error of SQLSTATE code and message
// msg. Each failure is counted in a sequence, which a rollback does not undo.
func FailUpdates(tb testing.TB, pool *pgxpool.Pool, name, table, cond, code, msg string) *UpdateFault {
	tb.Helper()
	_, err := pool.Exec(context.Background(), fmt.Sprintf(`
		CREATE SEQUENCE %[1]s_failures;
		CREATE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF %[3]s THEN
				PERFORM nextval('%[1]s_failures');
				RAISE EXCEPTION '%[5]s' USING ERRCODE = '%[4]s';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER %[1]s BEFORE UPDATE ON %[2]s FOR EACH ROW EXECUTE FUNCTION %[1]s();`,
		name, table, cond, code, msg))
	if err != nil {
		tb.Fatalf("install update fault %s: %v", name, err)
	}
	return &UpdateFault{pool: pool, name: name}
}

// Failures is how many updates the fault has failed so far.
func (f *UpdateFault) Failures(tb testing.TB) int {
	tb.Helper()
	var n int
	err := f.pool.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM %s_failures`, f.name)).Scan(&n)
	if err != nil {
		tb.Fatalf("read update fault %s: %v", f.name, err)
	}
	return n
}

// Remove drops the trigger: updates succeed again.
func (f *UpdateFault) Remove(tb testing.TB) {
	tb.Helper()
	var table string
	err := f.pool.QueryRow(context.Background(),
		`SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = $1 AND NOT tgisinternal`, f.name).Scan(&table)
	if err == nil {
		_, err = f.pool.Exec(context.Background(), fmt.Sprintf(`DROP TRIGGER %s ON %s`, f.name, table))
	}
	if err != nil {
		tb.Fatalf("remove update fault %s: %v", f.name, err)
	}
}
