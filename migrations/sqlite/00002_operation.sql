-- +goose Up
-- Mirrors migrations/postgres/00002_operation_and_guards.sql: the key records
-- its operation instead of an HTTP status. SQLite cannot drop a column named
-- by a CHECK constraint, so the table is rebuilt (goose runs this in one
-- transaction).
CREATE TABLE idempotency_keys_new (
    tenant_id       TEXT    NOT NULL,
    key_hash        TEXT    NOT NULL CHECK (length(key_hash) = 64),
    fingerprint     TEXT    NOT NULL,
    derived         INTEGER NOT NULL CHECK (derived IN (0, 1)),
    state           TEXT    NOT NULL CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired')),
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
    PRIMARY KEY (tenant_id, key_hash),
    CHECK (expires_at > created_at),
    CHECK ((state = 'in_progress') = (locked_until IS NOT NULL)),
    CHECK ((state = 'expired') = (tombstone_until IS NOT NULL))
) STRICT;

INSERT INTO idempotency_keys_new (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                                  error_code, error_detail, locked_until, fencing_token, recovery_point,
                                  attempt_key, created_at, expires_at, tombstone_until)
SELECT tenant_id, key_hash, fingerprint, derived, state, CASE WHEN status_code = 201 THEN 'create' END,
       resource_id, error_code, error_detail, locked_until, fencing_token, recovery_point, attempt_key,
       created_at, expires_at, tombstone_until
FROM idempotency_keys;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_new RENAME TO idempotency_keys;

CREATE INDEX idempotency_keys_expires_idx   ON idempotency_keys (expires_at) WHERE state = 'completed';
CREATE INDEX idempotency_keys_tombstone_idx ON idempotency_keys (tombstone_until) WHERE state = 'expired';
CREATE INDEX idempotency_keys_recovery_idx  ON idempotency_keys (locked_until) WHERE state IN ('in_progress', 'unknown_outcome');

-- +goose Down
ALTER TABLE idempotency_keys ADD COLUMN status_code INTEGER;
UPDATE idempotency_keys SET status_code = CASE
    WHEN error_code IS NOT NULL THEN 409 WHEN operation = 'create' THEN 201 ELSE 200 END
WHERE state = 'completed';
ALTER TABLE idempotency_keys DROP COLUMN operation;
