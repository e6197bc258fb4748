-- +goose Up
-- Mirrors migrations/postgres/00005_provider_inbox.sql: the provider events
-- taken in, by event id, written in the same transaction as their effect.
CREATE TABLE provider_inbox (
    source       TEXT    NOT NULL CHECK (length(source) BETWEEN 1 AND 64),
    event_id     TEXT    NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type   TEXT    NOT NULL CHECK (event_type IN ('charge.succeeded', 'charge.failed', 'refund.succeeded')),
    provider_key TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,
    PRIMARY KEY (source, event_id)
) STRICT;

-- +goose Down
DROP TABLE provider_inbox;
