-- +goose Up
-- Timestamps are INTEGER microseconds since the Unix epoch, UTC.
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
    CHECK ((state IN ('PAID', 'FULFILLED')) = (paid_at IS NOT NULL)),
    CHECK ((state = 'FULFILLED') = (fulfilled_at IS NOT NULL)),
    CHECK ((state = 'CANCELLED') = (cancelled_at IS NOT NULL))
) STRICT;

CREATE INDEX orders_tenant_idx          ON orders (tenant_id, id DESC);
CREATE INDEX orders_tenant_state_idx    ON orders (tenant_id, state, id DESC);
CREATE INDEX orders_tenant_customer_idx ON orders (tenant_id, customer_id, id DESC);

CREATE TABLE idempotency_keys (
    tenant_id    TEXT    NOT NULL,
    key_hash     TEXT    NOT NULL CHECK (length(key_hash) = 64),
    fingerprint  TEXT    NOT NULL,
    derived      INTEGER NOT NULL CHECK (derived IN (0, 1)),
    status_code  INTEGER NOT NULL CHECK (status_code BETWEEN 200 AND 499),
    resource_id  TEXT,
    error_code   TEXT,
    error_detail TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((status_code < 300) = (error_code IS NULL))
) STRICT;

CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE orders;
