-- +goose Up
-- Run and resume work are claimed separately (resumes in batches), so the claim index
-- leads with the kind.
DROP INDEX run_queue_visible_at_idx;
CREATE INDEX run_queue_kind_visible_at_idx ON run_queue (kind, visible_at);

-- +goose Down
DROP INDEX run_queue_kind_visible_at_idx;
CREATE INDEX run_queue_visible_at_idx ON run_queue (visible_at);
