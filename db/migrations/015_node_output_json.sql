-- +goose Up

-- A node's output is written once, by the statement that finishes the node, and is only
-- ever read back whole (the API, the console, the executor decoding it in Go): nothing
-- queries inside it. As jsonb, every write parsed it into jsonb's tree on the server — for
-- an event completing a wait, the largest value the write carries, and the largest cost of
-- its parameters. As json, the server checks that it is JSON and stores the text as
-- written (Go's encoding: compact, keys in the order written).
ALTER TABLE node_executions ALTER COLUMN output TYPE json USING output::json;

-- +goose Down
ALTER TABLE node_executions ALTER COLUMN output TYPE jsonb USING output::jsonb;
