-- +goose Up
-- Authorize, then capture (issue 16): an intent created with
-- capture_method 'manual' only authorizes on confirm. The authorization is
-- a row of authorizations (under the confirm's key), never of charges:
-- charges stay the money that moved, which GET /admin/ledger and
-- /admin/stats count, so an authorization is not a capture. A capture
-- (under its own key, a row of captures) writes the intent's one charge
-- of the captured amount; the rest of the authorization is released. An
-- authorization not captured by capture_before is expired: the intent
-- reads as canceled.
ALTER TABLE intents ADD COLUMN capture_method TEXT NOT NULL DEFAULT 'automatic'
    CHECK (capture_method IN ('automatic', 'manual'));

CREATE TABLE authorizations (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    id              TEXT    NOT NULL UNIQUE,
    payment_intent  TEXT    NOT NULL UNIQUE REFERENCES intents (id),
    payment_method  TEXT    NOT NULL,
    capture_before  INTEGER NOT NULL,
    created_at      INTEGER NOT NULL
) STRICT;

CREATE TABLE captures (
    idempotency_key TEXT    PRIMARY KEY CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    payment_intent  TEXT    NOT NULL REFERENCES intents (id),
    charge_key      TEXT    NOT NULL REFERENCES charges (idempotency_key),
    amount          INTEGER NOT NULL CHECK (amount > 0),
    created_at      INTEGER NOT NULL
) STRICT;

-- +goose Down
DROP TABLE captures;
DROP TABLE authorizations;
ALTER TABLE intents DROP COLUMN capture_method;
