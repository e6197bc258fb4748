-- +goose Up
CREATE TABLE orders (
    id           text        PRIMARY KEY,
    tenant_id    text        NOT NULL,
    customer_id  text        NOT NULL,
    currency     text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    items        jsonb       NOT NULL CHECK (jsonb_typeof(items) = 'array'),
    amount       bigint      NOT NULL CHECK (amount >= 0),
    state        text        NOT NULL CHECK (state IN ('RCVD', 'PAID', 'FULFILLED', 'CANCELLED')),
    version      bigint      NOT NULL CHECK (version >= 1),
    created_at   timestamptz NOT NULL,
    paid_at      timestamptz,
    fulfilled_at timestamptz,
    cancelled_at timestamptz,
    CHECK ((state IN ('PAID', 'FULFILLED')) = (paid_at IS NOT NULL)),
    CHECK ((state = 'FULFILLED') = (fulfilled_at IS NOT NULL)),
    CHECK ((state = 'CANCELLED') = (cancelled_at IS NOT NULL))
);

-- Listing is per tenant, newest first; ids are UUIDv7 and sort by time.
CREATE INDEX orders_tenant_idx          ON orders (tenant_id, id DESC);
CREATE INDEX orders_tenant_state_idx    ON orders (tenant_id, state, id DESC);
CREATE INDEX orders_tenant_customer_idx ON orders (tenant_id, customer_id, id DESC);

-- One row per (tenant, idempotency key): the claim and the stored outcome.
-- Only the key's SHA-256 is kept, never the key.
CREATE TABLE idempotency_keys (
    tenant_id    text        NOT NULL,
    key_hash     text        NOT NULL CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    fingerprint  text        NOT NULL,
    derived      boolean     NOT NULL,
    status_code  integer     NOT NULL CHECK (status_code BETWEEN 200 AND 499),
    resource_id  text,
    error_code   text,
    error_detail text,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((status_code < 300) = (error_code IS NULL))
);

CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);

-- +goose Down
DROP TABLE idempotency_keys;
DROP TABLE orders;
