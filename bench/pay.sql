-- pgbench script: what POST /v1/orders/{id}/pay with a new key costs the
-- database when the provider is the built-in simulator (no network call). The
-- service's three phases, statement for statement (store/postgres/queries.go
-- and postgres.go), 15 statements and 3 commits:
--   1. AcquireLease: claim the key in progress (autocommit);
--   2. GetOrder;
--   3. RecordAttempt: BEGIN, fence the key, lock the order's version, look for
--      another open attempt, insert the attempt, read it back, COMMIT;
--      (the provider call happens here, outside any transaction)
--   4. Complete: BEGIN, complete the key, compare-and-set the order, look for
--      another open attempt, settle the attempt, COMMIT.
-- The order comes from the queue of bench/pay_setup.sql, taken inside the
-- lease statement (the service has the id from the URL), so the extra work is
-- one index lookup and a nextval, and no extra round trip or commit.
WITH target AS (
    SELECT id FROM orderstorm_pay_queue WHERE n = (SELECT nextval('orderstorm_pay_seq'))
)
INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, resource_id, locked_until,
                              fencing_token, recovery_point, created_at, expires_at)
SELECT 'pgbench', encode(sha256(('pgb-pay-' || target.id)::bytea), 'hex'),
       encode(sha256(('fp-pay-' || target.id)::bytea), 'hex'), false, 'in_progress', target.id,
       now() + interval '30 seconds', 1, 'started', now(), now() + interval '24 hours'
FROM target
ON CONFLICT (tenant_id, key_hash) DO UPDATE SET
    state = 'in_progress',
    locked_until = EXCLUDED.locked_until,
    fencing_token = idempotency_keys.fencing_token + 1,
    status_code = NULL, error_code = NULL, error_detail = NULL, tombstone_until = NULL,
    fingerprint = EXCLUDED.fingerprint, derived = EXCLUDED.derived, resource_id = EXCLUDED.resource_id
WHERE (idempotency_keys.state IN ('in_progress', 'retryable_failure', 'unknown_outcome')
        AND idempotency_keys.fingerprint = EXCLUDED.fingerprint
        AND (idempotency_keys.locked_until IS NULL OR idempotency_keys.locked_until <= EXCLUDED.created_at))
RETURNING tenant_id, key_hash, fingerprint, derived, state AS key_state, status_code, resource_id, error_code, error_detail,
          locked_until, fencing_token, recovery_point, attempt_key, created_at AS key_created_at, expires_at, tombstone_until \gset
SELECT id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at
FROM orders WHERE tenant_id = 'pgbench' AND id = :resource_id \gset
BEGIN;
UPDATE idempotency_keys SET recovery_point = 'attempt_recorded', attempt_key = :resource_id || '/pay/' || :version
WHERE tenant_id = 'pgbench' AND key_hash = :key_hash AND fencing_token = :fencing_token AND state = 'in_progress';
SELECT version FROM orders WHERE id = :resource_id AND tenant_id = 'pgbench' FOR UPDATE;
SELECT EXISTS (SELECT 1 FROM provider_attempts
               WHERE order_id = :resource_id AND provider_key <> :resource_id || '/pay/' || :version AND status IN ('pending', 'unknown'));
INSERT INTO provider_attempts (provider_key, tenant_id, order_id, kind, status, amount, currency, payment_method, provider_ref, error_code, created_at, updated_at)
VALUES (:resource_id || '/pay/' || :version, 'pgbench', :resource_id, 'charge', 'pending', :amount, :currency, 'pm_card_visa', NULL, NULL, now(), now())
ON CONFLICT (provider_key) DO UPDATE SET status = 'pending', payment_method = EXCLUDED.payment_method,
    error_code = NULL, updated_at = EXCLUDED.updated_at
WHERE provider_attempts.status = 'failed';
SELECT provider_key, tenant_id, order_id, kind, status, amount, currency, payment_method, provider_ref, error_code, created_at, updated_at
FROM provider_attempts WHERE provider_key = :resource_id || '/pay/' || :version;
COMMIT;
BEGIN;
UPDATE idempotency_keys SET state = 'completed', status_code = 200, resource_id = :resource_id,
    error_code = NULL, error_detail = NULL, locked_until = NULL
WHERE tenant_id = 'pgbench' AND key_hash = :key_hash AND fencing_token = :fencing_token AND state = 'in_progress';
UPDATE orders SET state = 'PAID', version = :version::bigint + 1, paid_at = now(), fulfilled_at = NULL, cancelled_at = NULL
WHERE id = :resource_id AND tenant_id = 'pgbench' AND version = :version::bigint;
SELECT EXISTS (SELECT 1 FROM provider_attempts
               WHERE order_id = :resource_id AND provider_key <> :resource_id || '/pay/' || :version AND status IN ('pending', 'unknown'));
UPDATE provider_attempts SET status = 'succeeded', provider_ref = COALESCE('ch_sim_' || :resource_id, provider_ref),
    error_code = NULL, updated_at = now()
WHERE provider_key = :resource_id || '/pay/' || :version AND status NOT IN ('succeeded', 'declined', 'rejected');
COMMIT;
