-- +goose Up

-- The release before 017 wrote node_executions as a table; 017 made it a view and took
-- those writes into node_execution_rows through an INSTEAD OF trigger, so that release
-- could run beside 017's during a rolling update. No release that writes the view runs
-- beside this one, so the shim goes: node_executions is what it reads as, a read.
-- The view stays: it is where a node's outcome is read, from its one home (the wait's
-- row for a node whose wait decided it, else the node's stored row).
DROP TRIGGER node_executions_write ON node_executions;
DROP FUNCTION node_executions_write();
ALTER VIEW node_executions ALTER COLUMN status DROP DEFAULT;
ALTER VIEW node_executions ALTER COLUMN attempts DROP DEFAULT;
ALTER VIEW node_executions ALTER COLUMN created_at DROP DEFAULT;
ALTER VIEW node_executions ALTER COLUMN updated_at DROP DEFAULT;

-- +goose Down
ALTER VIEW node_executions ALTER COLUMN status SET DEFAULT 'pending';
ALTER VIEW node_executions ALTER COLUMN attempts SET DEFAULT 0;
ALTER VIEW node_executions ALTER COLUMN created_at SET DEFAULT now();
ALTER VIEW node_executions ALTER COLUMN updated_at SET DEFAULT now();

-- +goose StatementBegin
CREATE FUNCTION node_executions_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO node_execution_rows (execution_id, node_id, status, output, error, attempts, created_at,
            updated_at, started_at, finished_at, warning)
        VALUES (NEW.execution_id, NEW.node_id, NEW.status, NEW.output, NEW.error, NEW.attempts, NEW.created_at,
            NEW.updated_at, NEW.started_at, NEW.finished_at, NEW.warning);
        RETURN NEW;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE node_execution_rows
        SET status = NEW.status, output = NEW.output, error = NEW.error, attempts = NEW.attempts,
            updated_at = NEW.updated_at, started_at = NEW.started_at, finished_at = NEW.finished_at,
            warning = NEW.warning
        WHERE execution_id = OLD.execution_id AND node_id = OLD.node_id;
        RETURN NEW;
    END IF;
    DELETE FROM node_execution_rows WHERE execution_id = OLD.execution_id AND node_id = OLD.node_id;
    RETURN OLD;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER node_executions_write INSTEAD OF INSERT OR UPDATE OR DELETE ON node_executions
    FOR EACH ROW EXECUTE FUNCTION node_executions_write();
