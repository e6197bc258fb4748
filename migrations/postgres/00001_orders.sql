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
    CHECK ((state = 'RCVD') OR (state = 'CANCELLED') OR (paid_at IS NOT NULL)),
    CHECK ((state = 'FULFILLED') = (fulfilled_at IS NOT NULL)),
    CHECK ((state = 'CANCELLED') = (cancelled_at IS NOT NULL))
);

-- Listing is per tenant, newest first; ids are UUIDv7 and sort by time.
CREATE INDEX orders_tenant_idx          ON orders (tenant_id, id DESC);
CREATE INDEX orders_tenant_state_idx    ON orders (tenant_id, state, id DESC);
CREATE INDEX orders_tenant_customer_idx ON orders (tenant_id, customer_id, id DESC);

-- One row per (tenant, idempotency key): the claim, its lease, and the
-- stored outcome. Only the key's SHA-256 is kept, never the key.
--   in_progress        a request holds the key until locked_until (its lease);
--                      fencing_token grows on every takeover
--   completed          the outcome (status_code, resource_id, error_*) replays
--   retryable_failure  nothing final happened; a retry may take the key over
--   unknown_outcome    a provider call's outcome is unknown; a retry or the
--                      completer asks the provider before anything else
--   expired            a tombstone: the outcome is dropped, the key is kept
--                      until tombstone_until so a late retry gets a clear error
CREATE TABLE idempotency_keys (
    tenant_id       text        NOT NULL,
    key_hash        text        NOT NULL CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    fingerprint     text        NOT NULL,
    derived         boolean     NOT NULL,
    state           text        NOT NULL CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired')),
    status_code     integer     CHECK (status_code BETWEEN 200 AND 499),
    resource_id     text,
    error_code      text,
    error_detail    text,
    locked_until    timestamptz,
    fencing_token   bigint      NOT NULL DEFAULT 0 CHECK (fencing_token >= 0),
    recovery_point  text        CHECK (recovery_point IN ('started', 'attempt_recorded')),
    attempt_key     text,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    tombstone_until timestamptz,
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((state = 'completed') = (status_code IS NOT NULL)),
    CHECK (state <> 'completed' OR (status_code < 300) = (error_code IS NULL)),
    CHECK ((state = 'in_progress') = (locked_until IS NOT NULL)),
    CHECK ((state = 'expired') = (tombstone_until IS NOT NULL))
);

-- The sweeper's scans; the completer's scan of abandoned leases.
CREATE INDEX idempotency_keys_expires_idx   ON idempotency_keys (expires_at) WHERE state = 'completed';
CREATE INDEX idempotency_keys_tombstone_idx ON idempotency_keys (tombstone_until) WHERE state = 'expired';
CREATE INDEX idempotency_keys_recovery_idx  ON idempotency_keys (locked_until) WHERE state IN ('in_progress', 'unknown_outcome');

-- One row per logical provider call: a charge of one order version, a
-- shipment, a refund. provider_key is the idempotency key sent to the
-- provider, so a call attempted by several requests or workers happens once.
CREATE TABLE provider_attempts (
    provider_key   text        PRIMARY KEY,
    tenant_id      text        NOT NULL,
    order_id       text        NOT NULL REFERENCES orders (id),
    kind           text        NOT NULL CHECK (kind IN ('charge', 'shipment', 'refund')),
    status         text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown')),
    amount         bigint      NOT NULL CHECK (amount >= 0),
    currency       text        NOT NULL,
    payment_method text        NOT NULL DEFAULT '',
    provider_ref   text,
    error_code     text,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);

CREATE INDEX provider_attempts_order_idx ON provider_attempts (order_id);

-- +goose Down
DROP TABLE provider_attempts;
DROP TABLE idempotency_keys;
DROP TABLE orders;
