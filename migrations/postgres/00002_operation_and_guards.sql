-- +goose Up
-- A key records the operation it was claimed for instead of an HTTP status:
-- the api derives the status (201 for a create, 200 for a transition, the
-- error code's status for a stored error) in its one table. Keys completed
-- before this migration with status 201 were creates; the others stay NULL
-- (a transition's 200, or the status of their error_code).
ALTER TABLE idempotency_keys
    ADD COLUMN operation text CHECK (operation IN ('create', 'pay', 'fulfill', 'cancel'));
UPDATE idempotency_keys SET operation = 'create' WHERE status_code = 201;
-- Drops the CHECK constraints that named status_code with it.
ALTER TABLE idempotency_keys DROP COLUMN status_code;

-- orderly_guard lets a guarded write abort its transaction from inside the
-- database: a compare-and-set or fenced update that matched no row raises
-- SQLSTATE OL001 with the violation ('lease_lost', 'version_conflict',
-- 'attempt_in_flight') as its message. The store pipelines several guarded
-- writes and their COMMIT in one round trip; a raise rolls all of them back,
-- and the store maps the message to its sentinel error.
-- +goose StatementBegin
CREATE FUNCTION orderly_guard(ok boolean, violation text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = 'OL001', MESSAGE = violation;
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION orderly_guard(boolean, text);
ALTER TABLE idempotency_keys ADD COLUMN status_code integer CHECK (status_code BETWEEN 200 AND 499);
UPDATE idempotency_keys SET status_code = CASE
    WHEN error_code IS NOT NULL THEN 409 WHEN operation = 'create' THEN 201 ELSE 200 END
WHERE state = 'completed';
ALTER TABLE idempotency_keys DROP COLUMN operation;
