-- +goose Up

-- Unused: open waits are counted and found through the deadline index, the match index
-- and the (execution_id, node_id) key. Every waiting row paid for an entry in it.
DROP INDEX idx_execution_wait_states_status;

-- Room on each page for the next version of a row: an update that changes no indexed
-- column then stays on its page (a HOT update) and writes no index entry. A node's row
-- changes status a few times and is indexed only by its key, so every change can be
-- HOT; a wait's row changes no indexed column when an event arrives that neither ends
-- it nor moves its next deadline (the first of two events, typically).
ALTER TABLE node_executions SET (fillfactor = 70);
ALTER TABLE execution_wait_states SET (fillfactor = 70);

-- +goose Down
ALTER TABLE execution_wait_states RESET (fillfactor);
ALTER TABLE node_executions RESET (fillfactor);
CREATE INDEX idx_execution_wait_states_status ON execution_wait_states (status) WHERE status = 'waiting';
