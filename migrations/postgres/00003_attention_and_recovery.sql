-- +goose Up
-- needs_attention: a provider attempt whose outcome stayed unknown past the
-- age a provider keeps its idempotency keys (service.Config.UnresolvedAfter,
-- shorter than e.g. Stripe's 24 h). Asking again cannot be trusted and
-- charging, shipping or refunding again could move money twice, so the
-- attempt is parked for a person: it stays open (no other provider call on
-- its order), its key leaves the completer's queue, and it is listed by
-- GET /v1/attempts?status=needs_attention.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_state_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_state_check
    CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired', 'needs_attention'));
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_status_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_status_check
    CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown', 'needs_attention'));

-- The completer's per-key backoff: every takeover of an unknown outcome
-- counts in recoveries and defers the key's next takeover to retry_at.
ALTER TABLE idempotency_keys ADD COLUMN recoveries integer NOT NULL DEFAULT 0 CHECK (recoveries >= 0);
ALTER TABLE idempotency_keys ADD COLUMN retry_at timestamptz;

CREATE INDEX provider_attempts_attention_idx ON provider_attempts (tenant_id, updated_at) WHERE status = 'needs_attention';

-- +goose Down
DROP INDEX provider_attempts_attention_idx;
ALTER TABLE idempotency_keys DROP COLUMN retry_at;
ALTER TABLE idempotency_keys DROP COLUMN recoveries;
UPDATE provider_attempts SET status = 'unknown' WHERE status = 'needs_attention';
UPDATE idempotency_keys SET state = 'unknown_outcome' WHERE state = 'needs_attention';
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_status_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_status_check
    CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown'));
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_state_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_state_check
    CHECK (state IN ('in_progress', 'completed', 'retryable_failure', 'unknown_outcome', 'expired'));
