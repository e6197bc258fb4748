-- +goose Up
-- Mirrors migrations/postgres/00009_attempt_intent.sql.
ALTER TABLE provider_attempts ADD COLUMN intent_id TEXT CHECK (length(intent_id) BETWEEN 1 AND 255);
ALTER TABLE provider_attempts ADD COLUMN key_sent_at INTEGER;

-- +goose Down
ALTER TABLE provider_attempts DROP COLUMN key_sent_at;
ALTER TABLE provider_attempts DROP COLUMN intent_id;
