-- +goose Up
-- Mirrors migrations/postgres/00008_provider_events.sql. SQLite cannot alter
-- a CHECK, so provider_inbox is rebuilt with the normalised event types and
-- the new columns, in the migration's transaction, keeping every row.
CREATE TABLE provider_inbox_new (
    source             TEXT    NOT NULL CHECK (length(source) BETWEEN 1 AND 64),
    event_id           TEXT    NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type         TEXT    NOT NULL CHECK (event_type IN ('payment.succeeded', 'payment.failed',
                                   'payment.canceled', 'payment.processing', 'payment.requires_action',
                                   'refund.succeeded', 'refund.failed')),
    provider_key       TEXT    NOT NULL,
    received_at        INTEGER NOT NULL,
    provider_type      TEXT,
    object_id          TEXT,
    intent_id          TEXT,
    reference_order_id TEXT,
    amount             INTEGER CHECK (amount >= 0),
    currency           TEXT,
    PRIMARY KEY (source, event_id)
) STRICT;
INSERT INTO provider_inbox_new (source, event_id, event_type, provider_key, received_at)
    SELECT source, event_id, CASE event_type
        WHEN 'charge.succeeded' THEN 'payment.succeeded'
        WHEN 'charge.failed' THEN 'payment.failed'
        ELSE event_type END, provider_key, received_at
    FROM provider_inbox;
DROP TABLE provider_inbox;
ALTER TABLE provider_inbox_new RENAME TO provider_inbox;

-- +goose Down
CREATE TABLE provider_inbox_old (
    source       TEXT    NOT NULL CHECK (length(source) BETWEEN 1 AND 64),
    event_id     TEXT    NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type   TEXT    NOT NULL CHECK (event_type IN ('charge.succeeded', 'charge.failed', 'refund.succeeded')),
    provider_key TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,
    PRIMARY KEY (source, event_id)
) STRICT;
INSERT INTO provider_inbox_old (source, event_id, event_type, provider_key, received_at)
    SELECT source, event_id, CASE event_type
        WHEN 'payment.succeeded' THEN 'charge.succeeded'
        WHEN 'payment.failed' THEN 'charge.failed'
        ELSE event_type END, provider_key, received_at
    FROM provider_inbox WHERE event_type IN ('payment.succeeded', 'payment.failed', 'refund.succeeded');
DROP TABLE provider_inbox;
ALTER TABLE provider_inbox_old RENAME TO provider_inbox;
