-- +goose Up
-- Mirrors migrations/postgres/00011_attempt_intent_index.sql.
CREATE INDEX provider_attempts_intent_idx ON provider_attempts (intent_id) WHERE intent_id IS NOT NULL;

-- +goose Down
DROP INDEX provider_attempts_intent_idx;
