-- +goose Up

-- A wait_events node's outcome is written where its wait is decided: in the wait's row,
-- by the one statement that ends the wait (WaitStateWrite), not in a second row of
-- node_executions. Each event that completes a wait wrote both rows; now it writes one,
-- and the node's row stays as registration left it, waiting_for_events.
--
-- node_executions becomes a view that reads a node as it is: the stored row
-- (node_execution_rows), or, for a node still stored as waiting whose wait has ended and
-- decided it, the wait's outcome. Readers keep reading node_executions, and their
-- conditions on a node's status see the outcome; this release writes node_execution_rows.
-- A wait that goes (retention, a redrive) hands its outcome to the node's stored row
-- first, so an outcome is never lost.
--
-- The previous release, which runs beside this one during a rolling update, reads and
-- writes node_executions as a table: the view takes its writes into the stored rows
-- (INSTEAD OF triggers), and its conditions see the outcomes this release wrote, so it
-- never moves a node that a wait decided.
ALTER TABLE node_executions RENAME TO node_execution_rows;

-- The node's outcome as the wait decided it: null while the wait is open, and again once
-- a redrive opens the wait anew (execution_wait_states_forget_node, below).
ALTER TABLE execution_wait_states
    ADD COLUMN node_status text CHECK (node_status IN ('completed', 'failed')),
    ADD COLUMN node_output json,
    ADD COLUMN node_error text,
    ADD COLUMN node_warning text,
    ADD COLUMN node_finished_at timestamptz;

-- The lateral read runs once per node, and only for a node stored as waiting (its
-- condition on n.status alone becomes a one-time filter), through UNIQUE (execution_id,
-- node_id): reading the nodes of an execution that waits on nothing costs what it did.
-- LIMIT 1 (there is at most one row) keeps the planner from flattening the subquery into
-- a join, which it may then plan as a scan of every wait.
CREATE VIEW node_executions AS
SELECT n.execution_id,
       n.node_id,
       coalesce(w.node_status, n.status) AS status,
       (CASE WHEN w.node_status IS NULL THEN n.output ELSE w.node_output END)::json AS output,
       (CASE WHEN w.node_status IS NULL THEN n.error ELSE w.node_error END)::text AS error,
       n.attempts,
       n.created_at,
       coalesce(w.node_finished_at, n.updated_at) AS updated_at,
       n.started_at,
       coalesce(w.node_finished_at, n.finished_at) AS finished_at,
       (CASE WHEN w.node_status IS NULL THEN n.warning ELSE w.node_warning END)::text AS warning
FROM node_execution_rows AS n
LEFT JOIN LATERAL (
    SELECT s.node_status, s.node_output, s.node_error, s.node_warning, s.node_finished_at
    FROM execution_wait_states AS s
    WHERE n.status = 'waiting_for_events' AND s.execution_id = n.execution_id AND s.node_id = n.node_id
      AND s.node_status IS NOT NULL AND s.status NOT IN ('waiting', 'scheduled')
    LIMIT 1
) AS w ON true;

-- Inserted through the view (the previous release), a node gets the table's defaults.
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

-- A wait that holds its node's outcome hands it to the node's stored row as it goes,
-- whoever deletes it. Under a cascade from its execution (whose row is gone by then,
-- whichever of its children the cascade reaches first) nothing is written into a row
-- that goes with it.
-- +goose StatementBegin
CREATE FUNCTION execution_wait_states_settle_node() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE node_execution_rows
    SET status = OLD.node_status, output = OLD.node_output, error = OLD.node_error,
        warning = OLD.node_warning, updated_at = OLD.node_finished_at, finished_at = OLD.node_finished_at
    WHERE execution_id = OLD.execution_id AND node_id = OLD.node_id AND status = 'waiting_for_events'
      AND EXISTS (SELECT 1 FROM executions WHERE id = OLD.execution_id);
    RETURN OLD;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER execution_wait_states_settle_node BEFORE DELETE ON execution_wait_states
    FOR EACH ROW WHEN (OLD.node_status IS NOT NULL AND OLD.status NOT IN ('waiting', 'scheduled'))
    EXECUTE FUNCTION execution_wait_states_settle_node();

-- A wait that opens again (a redrive) forgets the outcome it held, whichever release
-- opens it: left behind, it would show through once the wait ends again, before the
-- release that ends it has written the node's new outcome.
-- +goose StatementBegin
CREATE FUNCTION execution_wait_states_forget_node() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.node_status := NULL;
    NEW.node_output := NULL;
    NEW.node_error := NULL;
    NEW.node_warning := NULL;
    NEW.node_finished_at := NULL;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER execution_wait_states_forget_node BEFORE UPDATE ON execution_wait_states
    FOR EACH ROW WHEN (NEW.status IN ('waiting', 'scheduled') AND OLD.status NOT IN ('waiting', 'scheduled')
        AND NEW.node_status IS NOT NULL)
    EXECUTE FUNCTION execution_wait_states_forget_node();

-- +goose Down
DROP TRIGGER execution_wait_states_forget_node ON execution_wait_states;
DROP FUNCTION execution_wait_states_forget_node();
DROP TRIGGER execution_wait_states_settle_node ON execution_wait_states;
DROP FUNCTION execution_wait_states_settle_node();
DROP VIEW node_executions;
DROP FUNCTION node_executions_write();
UPDATE node_execution_rows AS n
SET status = w.node_status, output = w.node_output, error = w.node_error, warning = w.node_warning,
    updated_at = w.node_finished_at, finished_at = w.node_finished_at
FROM execution_wait_states AS w
WHERE n.status = 'waiting_for_events' AND w.execution_id = n.execution_id AND w.node_id = n.node_id
  AND w.node_status IS NOT NULL AND w.status NOT IN ('waiting', 'scheduled');
ALTER TABLE execution_wait_states
    DROP COLUMN node_status, DROP COLUMN node_output, DROP COLUMN node_error,
    DROP COLUMN node_warning, DROP COLUMN node_finished_at;
ALTER TABLE node_execution_rows RENAME TO node_executions;
