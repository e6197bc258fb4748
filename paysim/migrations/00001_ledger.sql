-- +goose Up
-- paysim's ledger. Timestamps are INTEGER microseconds since the Unix epoch,
-- UTC. Every idempotency key is a PRIMARY KEY, so a key holds one outcome and
-- the outcome is written by the same statement (or transaction) that claims
-- the key.

-- One row per charge key: a capture (captured, refunded) or a remembered
-- decline (failed).
CREATE TABLE charges (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT    NOT NULL UNIQUE,
    order_id        TEXT    NOT NULL,
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    currency        TEXT    NOT NULL,
    payment_method  TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('captured', 'refunded', 'failed')),
    amount_refunded INTEGER NOT NULL DEFAULT 0 CHECK (amount_refunded BETWEEN 0 AND amount),
    failure_code    TEXT,
    failure_message TEXT,
    created_at      INTEGER NOT NULL,
    CHECK ((status = 'failed') = (failure_code IS NOT NULL)),
    CHECK (status <> 'captured' OR amount_refunded = 0),
    CHECK (status <> 'failed' OR amount_refunded = 0)
) STRICT;

CREATE INDEX charges_order_idx ON charges (order_id);

CREATE TABLE refunds (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT    NOT NULL UNIQUE,
    charge_key      TEXT    NOT NULL REFERENCES charges (idempotency_key),
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    created_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX refunds_charge_idx ON refunds (charge_key);

-- One row per shipment key: a shipment (shipped) or a remembered final
-- failure (out_of_stock).
CREATE TABLE shipments (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT    NOT NULL UNIQUE,
    order_id        TEXT    NOT NULL,
    items           TEXT    NOT NULL CHECK (json_valid(items) AND json_type(items) = 'array'),
    status          TEXT    NOT NULL CHECK (status IN ('shipped', 'out_of_stock')),
    failure_message TEXT,
    created_at      INTEGER NOT NULL,
    CHECK ((status = 'out_of_stock') = (failure_message IS NOT NULL))
) STRICT;

CREATE INDEX shipments_order_idx ON shipments (order_id);

-- Keys whose one-shot fault (triggered by a payment method or SKU) has fired.
CREATE TABLE fired_faults (
    endpoint        TEXT    NOT NULL CHECK (endpoint IN ('charges', 'refunds', 'shipments')),
    idempotency_key TEXT    NOT NULL,
    fault           TEXT    NOT NULL CHECK (fault IN ('error', 'timeout', 'drop')),
    fired_at        INTEGER NOT NULL,
    PRIMARY KEY (endpoint, idempotency_key)
) STRICT;

-- +goose Down
DROP TABLE fired_faults;
DROP TABLE shipments;
DROP TABLE refunds;
DROP TABLE charges;
