-- +goose Up
-- Timestamps are INTEGER microseconds since the Unix epoch, UTC. The schema
-- mirrors migrations/postgres/00001_orders.sql; see the comments there.
CREATE TABLE orders (
    id           TEXT    PRIMARY KEY,
    tenant_id    TEXT    NOT NULL,
    customer_id  TEXT    NOT NULL,
    currency     TEXT    NOT NULL CHECK (length(currency) = 3 AND currency = upper(currency)),
    items        TEXT    NOT NULL CHECK (json_valid(items) AND json_type(items) = 'array'),
    amount       INTEGER NOT NULL CHECK (amount >= 0),
    state        TEXT    NOT NULL CHECK (state IN ('RCVD', 'PAID', 'FULFILLED', 'CANCELLED')),
    version      INTEGER NOT NULL CHECK (version >= 1),
    created_at   INTEGER NOT NULL,
    paid_at      INTEGER,
    fulfilled_at INTEGER,
    cancelled_at INTEGER,
    CHECK ((state = 'RCVD') OR (state = 'CANCELLED') OR (paid_at IS NOT NULL)),
    CHECK ((state = 'FULFILLED') = (fulfilled_at IS NOT NULL)),
    CHECK ((state = 'CANCELLED') = (cancelled_at IS NOT NULL))
) STRICT;

CREATE INDEX orders_tenant_idx          ON orders (tenant_id, id DESC);
CREATE INDEX orders_tenant_state_idx    ON orders (tenant_id, state, id DESC);
CREATE INDEX orders_tenant_customer_idx ON orders (tenant_id, customer_id, id DESC);

CREATE TABLE idempotency_keys (
    tenant_id       TEXT    NOT NULL,
    key_hash        TEXT    NOT NULL CHECK (length(key_hash) = 64),
    fingerprint     TEXT    NOT NULL,
    derived         INTEGER NOT NULL CHECK (derived IN (0, 1)),
    state           TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired')),
    status_code     INTEGER CHECK (status_code BETWEEN 200 AND 499),
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
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((state = 'completed') = (status_code IS NOT NULL)),
    CHECK (state <> 'completed' OR (status_code < 300) = (error_code IS NULL)),
    CHECK ((state = 'in_progress') = (locked_until IS NOT NULL)),
    CHECK ((state = 'expired') = (tombstone_until IS NOT NULL))
) STRICT;

CREATE INDEX idempotency_keys_expires_idx   ON idempotency_keys (expires_at) WHERE state = 'completed';
CREATE INDEX idempotency_keys_tombstone_idx ON idempotency_keys (tombstone_until) WHERE state = 'expired';
CREATE INDEX idempotency_keys_recovery_idx  ON idempotency_keys (locked_until) WHERE state IN ('in_progress', 'unknown_outcome');

CREATE TABLE provider_attempts (
    provider_key   TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    order_id       TEXT    NOT NULL REFERENCES orders (id),
    kind           TEXT    NOT NULL CHECK (kind IN ('charge', 'shipment', 'refund')),
    status         TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown')),
    amount         INTEGER NOT NULL CHECK (amount >= 0),
    currency       TEXT    NOT NULL,
    payment_method TEXT    NOT NULL DEFAULT '',
    provider_ref   TEXT,
    error_code     TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;

CREATE INDEX provider_attempts_order_idx ON provider_attempts (order_id);

-- +goose Down
DROP TABLE provider_attempts;
DROP TABLE idempotency_keys;
DROP TABLE orders;
