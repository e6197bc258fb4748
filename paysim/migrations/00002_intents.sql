-- +goose Up
-- Payment intents (issue 15): the object that carries one payment, created
-- without moving money under its own idempotency key, confirmed later. The
-- money still moves only as a row of charges (a confirm's charge names its
-- intent), so the ledger's captures stay the truth a checker reads. An
-- intent's status is derived: succeeded once one of its charges captured,
-- canceled once canceled_at is set, else requires_payment_method.
CREATE TABLE intents (
    id              TEXT    PRIMARY KEY,
    idempotency_key TEXT    NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    order_id        TEXT    NOT NULL,
    reference       TEXT    NOT NULL CHECK (length(reference) BETWEEN 1 AND 255),
    amount          INTEGER NOT NULL CHECK (amount >= 0),
    currency        TEXT    NOT NULL,
    canceled_at     INTEGER,
    created_at      INTEGER NOT NULL
) STRICT;

CREATE INDEX intents_reference_idx ON intents (reference, order_id);

ALTER TABLE charges ADD COLUMN payment_intent TEXT REFERENCES intents (id);
CREATE INDEX charges_intent_idx ON charges (payment_intent);
-- At most one capture per intent.
CREATE UNIQUE INDEX charges_one_capture_per_intent ON charges (payment_intent)
    WHERE payment_intent IS NOT NULL AND status <> 'failed';

ALTER TABLE refunds ADD COLUMN reference TEXT;

-- One row per cancel key: the answer of POST /v1/payment_intents/{id}/cancel.
CREATE TABLE cancels (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    payment_intent  TEXT    NOT NULL REFERENCES intents (id),
    created_at      INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE cancels;
ALTER TABLE refunds DROP COLUMN reference;
DROP INDEX charges_one_capture_per_intent;
DROP INDEX charges_intent_idx;
ALTER TABLE charges DROP COLUMN payment_intent;
DROP TABLE intents;
