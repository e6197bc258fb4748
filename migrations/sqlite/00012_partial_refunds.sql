-- +goose Up
-- Mirrors migrations/postgres/00013_partial_refunds.sql (see the comments
-- there). SQLite cannot alter a CHECK constraint, so idempotency_keys is
-- rebuilt with 'refund' among its operations (goose runs this in one
-- transaction).
CREATE TABLE idempotency_keys_new (
    tenant_id       TEXT    NOT NULL,
    key_hash        TEXT    NOT NULL CHECK (length(key_hash) = 64),
    fingerprint     TEXT    NOT NULL,
    derived         INTEGER NOT NULL CHECK (derived IN (0, 1)),
    state           TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired', 'needs_attention')),
    operation       TEXT    CHECK (operation IN ('create', 'pay', 'fulfill', 'cancel', 'refund')),
    resource_id     TEXT,
    error_code      TEXT,
    error_detail    TEXT,
    locked_until    INTEGER,
    fencing_token   INTEGER NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
    recovery_point  TEXT    CHECK (recovery_point IN ('started', 'attempt_recorded')),
    attempt_key     TEXT,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    tombstone_until INTEGER,
    recoveries      INTEGER NOT NULL DEFAULT 0 CHECK (recoveries >= 0),
    retry_at        INTEGER,
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((state = 'in_progress') = (locked_until IS NOT NULL)),
    CHECK ((state = 'expired') = (tombstone_until IS NOT NULL))
) STRICT;

INSERT INTO idempotency_keys_new (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                                  error_code, error_detail, locked_until, fencing_token, recovery_point,
                                  attempt_key, created_at, expires_at, tombstone_until, recoveries, retry_at)
SELECT tenant_id, key_hash, fingerprint, derived, state, operation, resource_id, error_code, error_detail,
       locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until,
       recoveries, retry_at
FROM idempotency_keys;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;

CREATE INDEX idempotency_keys_expires_idx   ON idempotency_keys (expires_at) WHERE state = 'completed';
CREATE INDEX idempotency_keys_tombstone_idx ON idempotency_keys (tombstone_until) WHERE state = 'expired';
CREATE INDEX idempotency_keys_recovery_idx  ON idempotency_keys (locked_until) WHERE state IN ('in_progress', 'unknown_outcome');

-- order.refunded joins the event types: order_events is rebuilt with it,
-- and webhook_deliveries, which references it, with it (as 00006 did).
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

CREATE TABLE order_refund_totals (
    order_id  TEXT    PRIMARY KEY REFERENCES orders (id),
    tenant_id TEXT    NOT NULL,
    captured  INTEGER NOT NULL CHECK (captured >= 0),
    reserved  INTEGER NOT NULL DEFAULT 0,
    refunded  INTEGER NOT NULL DEFAULT 0,
    CHECK (0 <= refunded AND refunded <= reserved AND reserved <= captured)
) STRICT;

CREATE TABLE order_refunds (
    provider_key TEXT    PRIMARY KEY REFERENCES provider_attempts (provider_key),
    tenant_id    TEXT    NOT NULL,
    order_id     TEXT    NOT NULL REFERENCES orders (id),
    amount       INTEGER NOT NULL CHECK (amount > 0),
    currency     TEXT    NOT NULL,
    reason       TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    refunded_after INTEGER
) STRICT;
CREATE INDEX order_refunds_order_idx ON order_refunds (order_id, created_at);

-- +goose Down
DROP TABLE order_refunds;
DROP TABLE order_refund_totals;
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'order.refunded');
DELETE FROM order_events WHERE type = 'order.refunded';
CREATE TABLE order_events_new (
    position   INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE CHECK (id LIKE 'evt\_%' ESCAPE '\'),
    tenant_id  TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    sequence   INTEGER NOT NULL CHECK (sequence >= 1),
    type       TEXT    NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed',
                                                'order.fulfilled', 'order.cancelled', 'operator.action')),
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

CREATE TABLE idempotency_keys_new (
    tenant_id       TEXT    NOT NULL,
    key_hash        TEXT    NOT NULL CHECK (length(key_hash) = 64),
    fingerprint     TEXT    NOT NULL,
    derived         INTEGER NOT NULL CHECK (derived IN (0, 1)),
    state           TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired', 'needs_attention')),
    operation       TEXT    CHECK (operation IN ('create', 'pay', 'fulfill', 'cancel')),
    resource_id     TEXT,
    error_code      TEXT,
    error_detail    TEXT,
    locked_until    INTEGER,
    fencing_token   INTEGER NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
    recovery_point  TEXT    CHECK (recovery_point IN ('started', 'attempt_recorded')),
    attempt_key     TEXT,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    tombstone_until INTEGER,
    recoveries      INTEGER NOT NULL DEFAULT 0 CHECK (recoveries >= 0),
    retry_at        INTEGER,
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((state = 'in_progress') = (locked_until IS NOT NULL)),
    CHECK ((state = 'expired') = (tombstone_until IS NOT NULL))
) STRICT;

INSERT INTO idempotency_keys_new (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                                  error_code, error_detail, locked_until, fencing_token, recovery_point,
                                  attempt_key, created_at, expires_at, tombstone_until, recoveries, retry_at)
SELECT tenant_id, key_hash, fingerprint, derived, state, operation, resource_id, error_code, error_detail,
       locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until,
       recoveries, retry_at
FROM idempotency_keys WHERE operation IS NULL OR operation <> 'refund';

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;

CREATE INDEX idempotency_keys_expires_idx   ON idempotency_keys (expires_at) WHERE state = 'completed';
CREATE INDEX idempotency_keys_tombstone_idx ON idempotency_keys (tombstone_until) WHERE state = 'expired';
CREATE INDEX idempotency_keys_recovery_idx  ON idempotency_keys (locked_until) WHERE state IN ('in_progress', 'unknown_outcome');
