-- +goose Up
-- The ledger of paysim's Stripe mode (package paysim/stripesim): PaymentIntents,
-- their charges and refunds, and Stripe's idempotency layer. Timestamps are
-- INTEGER microseconds since the Unix epoch, UTC; JSON columns hold objects.

-- One row per idempotency key: the endpoint and the fingerprint of the
-- parameters of the first request, and, once it finished executing, the
-- status and body saved for every replay (status NULL: still executing).
-- docs.stripe.com/api/idempotent_requests.
CREATE TABLE stripe_idempotency (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    endpoint        TEXT    NOT NULL,
    fingerprint     TEXT    NOT NULL,
    status          INTEGER,
    body            BLOB,
    created_at      INTEGER NOT NULL,
    CHECK ((status IS NULL) = (body IS NULL))
) STRICT;

CREATE INDEX stripe_idempotency_created_idx ON stripe_idempotency (created_at);

CREATE TABLE stripe_payment_intents (
    id                  TEXT    PRIMARY KEY,
    amount              INTEGER NOT NULL CHECK (amount > 0),
    currency            TEXT    NOT NULL,
    status              TEXT    NOT NULL CHECK (status IN ('requires_payment_method', 'requires_confirmation',
                            'requires_action', 'processing', 'requires_capture', 'succeeded', 'canceled')),
    capture_method      TEXT    NOT NULL CHECK (capture_method IN ('automatic', 'automatic_async', 'manual')),
    payment_method      TEXT,
    metadata            TEXT    NOT NULL CHECK (json_valid(metadata)),
    order_id            TEXT,
    amount_capturable   INTEGER NOT NULL DEFAULT 0,
    amount_received     INTEGER NOT NULL DEFAULT 0,
    latest_charge       TEXT,
    last_payment_error  TEXT    CHECK (last_payment_error IS NULL OR json_valid(last_payment_error)),
    next_action         TEXT    CHECK (next_action IS NULL OR json_valid(next_action)),
    description         TEXT,
    canceled_at         INTEGER,
    cancellation_reason TEXT,
    faults_fired        TEXT    NOT NULL DEFAULT '',
    created_at          INTEGER NOT NULL
) STRICT;

CREATE INDEX stripe_payment_intents_order_idx ON stripe_payment_intents (order_id);

-- One row per confirmation attempt that reached the card network: succeeded
-- (captured or not), pending (a bank debit) or failed (a decline).
CREATE TABLE stripe_charges (
    id              TEXT    PRIMARY KEY,
    payment_intent  TEXT    NOT NULL REFERENCES stripe_payment_intents (id),
    order_id        TEXT,
    amount          INTEGER NOT NULL,
    amount_captured INTEGER NOT NULL DEFAULT 0,
    amount_refunded INTEGER NOT NULL DEFAULT 0 CHECK (amount_refunded BETWEEN 0 AND amount_captured),
    currency        TEXT    NOT NULL,
    payment_method  TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('succeeded', 'pending', 'failed')),
    captured        INTEGER NOT NULL DEFAULT 0,
    failure_code    TEXT,
    decline_code    TEXT,
    failure_message TEXT,
    created_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX stripe_charges_pi_idx ON stripe_charges (payment_intent);

CREATE TABLE stripe_refunds (
    id             TEXT    PRIMARY KEY,
    payment_intent TEXT    NOT NULL REFERENCES stripe_payment_intents (id),
    charge         TEXT    NOT NULL REFERENCES stripe_charges (id),
    amount         INTEGER NOT NULL CHECK (amount > 0),
    currency       TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    reason         TEXT,
    metadata       TEXT    NOT NULL CHECK (json_valid(metadata)),
    created_at     INTEGER NOT NULL
) STRICT;

CREATE INDEX stripe_refunds_pi_idx ON stripe_refunds (payment_intent);

-- +goose Down
DROP TABLE stripe_refunds;
DROP TABLE stripe_charges;
DROP TABLE stripe_payment_intents;
DROP TABLE stripe_idempotency;
