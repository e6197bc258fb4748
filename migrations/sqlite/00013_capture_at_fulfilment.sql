-- +goose Up
-- Mirrors migrations/postgres/00014_capture_at_fulfilment.sql (see the
-- comments there). SQLite cannot alter a CHECK constraint, so
-- provider_attempts is rebuilt with the kinds capture and void (as in
-- 00011), and order_events with order.captured, webhook_deliveries with it
-- (as in 00012); goose runs this in one transaction.
CREATE TABLE provider_attempts_new (
    provider_key   TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    order_id       TEXT    NOT NULL REFERENCES orders (id),
    kind           TEXT    NOT NULL CHECK (kind IN ('charge', 'shipment', 'refund', 'capture', 'void')),
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

CREATE TABLE order_events_new (
    position   INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE CHECK (id LIKE 'evt\_%' ESCAPE '\'),
    tenant_id  TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    sequence   INTEGER NOT NULL CHECK (sequence >= 1),
    type       TEXT    NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed',
                                                'order.fulfilled', 'order.cancelled', 'order.refunded',
                                                'order.captured', 'operator.action')),
    created_at INTEGER NOT NULL,
    body       TEXT    NOT NULL CHECK (json_valid(body)),
    UNIQUE (order_id, sequence)
) STRICT;
INSERT INTO order_events_new (position, id, tenant_id, order_id, sequence, type, created_at, body)
    SELECT position, id, tenant_id, order_id, sequence, type, created_at, body FROM order_events;

CREATE TABLE webhook_deliveries_new (
    endpoint_id     TEXT    NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id        TEXT    NOT NULL REFERENCES order_events_new (id),
    tenant_id       TEXT    NOT NULL,
    order_id        TEXT    NOT NULL,
    sequence        INTEGER NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'delivering', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER,
    locked_until    INTEGER,
    last_status     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, event_id),
    CHECK ((status = 'delivering') = (locked_until IS NOT NULL)),
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
) STRICT;
INSERT INTO webhook_deliveries_new SELECT * FROM webhook_deliveries;

DROP TABLE webhook_deliveries;
DROP TABLE order_events;
ALTER TABLE order_events_new RENAME TO order_events;
ALTER TABLE webhook_deliveries_new RENAME TO webhook_deliveries;
CREATE INDEX order_events_feed_idx  ON order_events (tenant_id, position);
CREATE INDEX order_events_order_idx ON order_events (tenant_id, order_id, sequence);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'delivering');
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (endpoint_id, order_id, sequence)
    WHERE status IN ('pending', 'delivering');

CREATE TABLE order_authorizations (
    order_id       TEXT    PRIMARY KEY REFERENCES orders (id),
    tenant_id      TEXT    NOT NULL,
    charge_key     TEXT    NOT NULL,
    intent_id      TEXT    NOT NULL CHECK (length(intent_id) BETWEEN 1 AND 255),
    amount         INTEGER NOT NULL CHECK (amount > 0),
    currency       TEXT    NOT NULL,
    capture_before INTEGER,
    status         TEXT    NOT NULL CHECK (status IN ('authorized', 'captured', 'voided')),
    flagged_at     INTEGER,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;
CREATE INDEX order_authorizations_expiry_idx ON order_authorizations (capture_before)
    WHERE status = 'authorized' AND flagged_at IS NULL;

-- +goose Down
DROP TABLE order_authorizations;
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'order.captured');
DELETE FROM order_events WHERE type = 'order.captured';
CREATE TABLE order_events_new (
    position   INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE CHECK (id LIKE 'evt\_%' ESCAPE '\'),
    tenant_id  TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    sequence   INTEGER NOT NULL CHECK (sequence >= 1),
    type       TEXT    NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed',
                                                'order.fulfilled', 'order.cancelled', 'order.refunded', 'operator.action')),
    created_at INTEGER NOT NULL,
    body       TEXT    NOT NULL CHECK (json_valid(body)),
    UNIQUE (order_id, sequence)
) STRICT;
INSERT INTO order_events_new (position, id, tenant_id, order_id, sequence, type, created_at, body)
    SELECT position, id, tenant_id, order_id, sequence, type, created_at, body FROM order_events;

CREATE TABLE webhook_deliveries_new (
    endpoint_id     TEXT    NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id        TEXT    NOT NULL REFERENCES order_events_new (id),
    tenant_id       TEXT    NOT NULL,
    order_id        TEXT    NOT NULL,
    sequence        INTEGER NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'delivering', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER,
    locked_until    INTEGER,
    last_status     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, event_id),
    CHECK ((status = 'delivering') = (locked_until IS NOT NULL)),
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
) STRICT;
INSERT INTO webhook_deliveries_new SELECT * FROM webhook_deliveries;

DROP TABLE webhook_deliveries;
DROP TABLE order_events;
ALTER TABLE order_events_new RENAME TO order_events;
ALTER TABLE webhook_deliveries_new RENAME TO webhook_deliveries;
CREATE INDEX order_events_feed_idx  ON order_events (tenant_id, position);
CREATE INDEX order_events_order_idx ON order_events (tenant_id, order_id, sequence);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'delivering');
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (endpoint_id, order_id, sequence)
    WHERE status IN ('pending', 'delivering');

UPDATE idempotency_keys SET attempt_key = NULL, recovery_point = 'started'
    WHERE attempt_key IN (SELECT provider_key FROM provider_attempts WHERE kind IN ('capture', 'void'));
DELETE FROM provider_attempts WHERE kind IN ('capture', 'void');
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
