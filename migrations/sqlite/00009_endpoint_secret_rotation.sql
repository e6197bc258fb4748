-- +goose Up
-- Mirrors migrations/postgres/00010_endpoint_secret_rotation.sql
-- (previous_secret_until in Unix microseconds; SQLite cannot add a table
-- CHECK, so the store writes the two together).
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_until INTEGER;

-- +goose Down
ALTER TABLE webhook_endpoints DROP COLUMN previous_secret_until;
ALTER TABLE webhook_endpoints DROP COLUMN previous_secret;
