-- +goose Up

-- The columns a wait takes from its node's definition at registration — the expected,
-- required and enabled events, the output mapping, the timer — are read back whole on
-- every decision about the wait (an event correlated to it, the sweeper claiming it due)
-- and only decoded in Go: nothing indexes or compares inside them. As jsonb, every such
-- read serialised each value from jsonb's tree on the server again; in a sweeper's claim
-- of 2,000 due waits those four columns took about 2.7 of its 7 ms. As json, a read
-- sends the text as registration wrote it (Go's encoding: compact, keys in the order
-- written), and registration checks the text instead of parsing it.
ALTER TABLE execution_wait_states
    ALTER COLUMN required_events DROP DEFAULT,
    ALTER COLUMN enabled_events DROP DEFAULT,
    ALTER COLUMN expected_events DROP DEFAULT,
    ALTER COLUMN output_mapping DROP DEFAULT;
ALTER TABLE execution_wait_states
    ALTER COLUMN required_events TYPE json USING required_events::json,
    ALTER COLUMN enabled_events TYPE json USING enabled_events::json,
    ALTER COLUMN expected_events TYPE json USING expected_events::json,
    ALTER COLUMN output_mapping TYPE json USING output_mapping::json,
    ALTER COLUMN timer TYPE json USING timer::json;
ALTER TABLE execution_wait_states
    ALTER COLUMN required_events SET DEFAULT '[]',
    ALTER COLUMN enabled_events SET DEFAULT '[]',
    ALTER COLUMN expected_events SET DEFAULT '[]',
    ALTER COLUMN output_mapping SET DEFAULT '{}';

-- +goose Down
ALTER TABLE execution_wait_states
    ALTER COLUMN required_events DROP DEFAULT,
    ALTER COLUMN enabled_events DROP DEFAULT,
    ALTER COLUMN expected_events DROP DEFAULT,
    ALTER COLUMN output_mapping DROP DEFAULT;
ALTER TABLE execution_wait_states
    ALTER COLUMN required_events TYPE jsonb USING required_events::jsonb,
    ALTER COLUMN enabled_events TYPE jsonb USING enabled_events::jsonb,
    ALTER COLUMN expected_events TYPE jsonb USING expected_events::jsonb,
    ALTER COLUMN output_mapping TYPE jsonb USING output_mapping::jsonb,
    ALTER COLUMN timer TYPE jsonb USING timer::jsonb;
ALTER TABLE execution_wait_states
    ALTER COLUMN required_events SET DEFAULT '[]',
    ALTER COLUMN enabled_events SET DEFAULT '[]',
    ALTER COLUMN expected_events SET DEFAULT '[]',
    ALTER COLUMN output_mapping SET DEFAULT '{}';
