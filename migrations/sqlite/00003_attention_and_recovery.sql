-- +goose Up
-- Mirrors migrations/postgres/00003_attention_and_recovery.sql (see the
-- comments there). SQLite cannot alter a CHECK constraint, so both tables
-- are rebuilt (goose runs this in one transaction).
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
                                  attempt_key, created_at, expires_at, tombstone_until)
SELECT tenant_id, key_hash, fingerprint, derived, state, operation, resource_id, error_code, error_detail,
       locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until
FROM idempotency_keys;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;

CREATE INDEX idempotency_keys_expires_idx   ON idempotency_keys (expires_at) WHERE state = 'completed';
CREATE INDEX idempotency_keys_tombstone_idx ON idempotency_keys (tombstone_until) WHERE state = 'expired';
CREATE INDEX idempotency_keys_recovery_idx  ON idempotency_keys (locked_until) WHERE state IN ('in_progress', 'unknown_outcome');

CREATE TABLE provider_attempts_new (
    provider_key   TEXT    PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    order_id       TEXT    NOT NULL REFERENCES orders (id),
    kind           TEXT    NOT NULL CHECK (kind IN ('charge', 'shipment', 'refund')),
    status         TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown', 'needs_attention')),
    amount         INTEGER NOT NULL CHECK (amount >= 0),
    currency       TEXT    NOT NULL,
    payment_method TEXT    NOT NULL DEFAULT '',
    provider_ref   TEXT,
    error_code     TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;

INSERT INTO provider_attempts_new SELECT * FROM provider_attempts;
DROP TABLE provider_attempts;
ALTER TABLE provider_attempts_new RENAME TO provider_attempts;

CREATE INDEX provider_attempts_order_idx     ON provider_attempts (order_id);
CREATE INDEX provider_attempts_attention_idx ON provider_attempts (tenant_id, updated_at) WHERE status = 'needs_attention';

-- readiness holds one row that Store.Ping rewrites: a committed write (a
-- WAL frame and an fsync), so /readyz notices a file that cannot be written
-- (disk full, I/O errors, read-only) and not only one that cannot be read.
CREATE TABLE readiness (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at INTEGER NOT NULL
) STRICT;
INSERT INTO readiness (id, checked_at) VALUES (1, 0);

-- +goose Down
DROP TABLE readiness;
UPDATE provider_attempts SET status = 'unknown' WHERE status = 'needs_attention';
UPDATE idempotency_keys SET state = 'unknown_outcome' WHERE state = 'needs_attention';
DROP INDEX provider_attempts_attention_idx;
ALTER TABLE idempotency_keys DROP COLUMN retry_at;
ALTER TABLE idempotency_keys DROP COLUMN recoveries;
