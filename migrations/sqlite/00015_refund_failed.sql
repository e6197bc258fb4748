-- +goose Up
-- Mirrors migrations/postgres/00016_refund_failed.sql (see the comments
-- there). SQLite cannot alter a CHECK constraint, so order_events is
-- rebuilt with order.refund_failed, and webhook_deliveries with it (as in
-- 00013); goose runs this in one transaction.
CREATE TABLE order_events_new (
    position   INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE CHECK (id LIKE 'evt\_%' ESCAPE '\'),
    tenant_id  TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    sequence   INTEGER NOT NULL CHECK (sequence >= 1),
    type       TEXT    NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed',
                                                'order.fulfilled', 'order.cancelled', 'order.refunded',
                                                'order.captured', 'order.refund_failed', 'operator.action')),
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

-- +goose Down
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'order.refund_failed');
DELETE FROM order_events WHERE type = 'order.refund_failed';
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
