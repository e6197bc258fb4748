-- +goose Up
-- Mirrors migrations/postgres/00012_pending_payment.sql: the status CHECK
-- admits requires_action and processing. SQLite cannot alter a CHECK, so the
-- table is rebuilt (as in 00003), with the columns of 00008 and the indexes
-- of 00003 and 00010.
CREATE TABLE provider_attempts_new (
    provider_key   TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    order_id       TEXT    NOT NULL REFERENCES orders (id),
    kind           TEXT    NOT NULL CHECK (kind IN ('charge', 'shipment', 'refund')),
    status         TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown', 'needs_attention',
                                                         'requires_action', 'processing')),
    amount         INTEGER NOT NULL CHECK (amount >= 0),
    currency       TEXT    NOT NULL,
    payment_method TEXT    NOT NULL DEFAULT '',
    provider_ref   TEXT,
    error_code     TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    intent_id      TEXT    CHECK (length(intent_id) BETWEEN 1 AND 255),
    key_sent_at    INTEGER
) STRICT;

INSERT INTO provider_attempts_new SELECT * FROM provider_attempts;
DROP TABLE provider_attempts;
ALTER TABLE provider_attempts_new RENAME TO provider_attempts;

CREATE INDEX provider_attempts_order_idx     ON provider_attempts (order_id);
CREATE INDEX provider_attempts_attention_idx ON provider_attempts (tenant_id, updated_at) WHERE status = 'needs_attention';
CREATE INDEX provider_attempts_intent_idx     ON provider_attempts (intent_id) WHERE intent_id IS NOT NULL;

-- +goose Down
UPDATE provider_attempts SET status = 'unknown' WHERE status IN ('requires_action', 'processing');
CREATE TABLE provider_attempts_new (
    provider_key   TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    order_id       TEXT    NOT NULL REFERENCES orders (id),
    kind           TEXT    NOT NULL CHECK (kind IN ('charge', 'shipment', 'refund')),
    status         TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown', 'needs_attention')),
    amount         INTEGER NOT NULL CHECK (amount >= 0),
    currency       TEXT    NOT NULL,
    payment_method TEXT    NOT NULL DEFAULT '',
    provider_ref   TEXT,
    error_code     TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    intent_id      TEXT    CHECK (length(intent_id) BETWEEN 1 AND 255),
    key_sent_at    INTEGER
) STRICT;

INSERT INTO provider_attempts_new SELECT * FROM provider_attempts;
DROP TABLE provider_attempts;
ALTER TABLE provider_attempts_new RENAME TO provider_attempts;

CREATE INDEX provider_attempts_order_idx     ON provider_attempts (order_id);
CREATE INDEX provider_attempts_attention_idx ON provider_attempts (tenant_id, updated_at) WHERE status = 'needs_attention';
CREATE INDEX provider_attempts_intent_idx     ON provider_attempts (intent_id) WHERE intent_id IS NOT NULL;
