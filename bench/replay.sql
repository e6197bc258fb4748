-- pgbench script: what a replayed POST /v1/orders (the same Idempotency-Key
-- again) costs the database. The service runs three statements
-- (service.Create → store CreateOrder, then held → LookupKey, then replay →
-- GetOrder): the claim-and-insert statement, which finds the key taken and
-- inserts nothing, a read of the key's record, and a read of the order. The
-- keys are the 1000 of bench/replay_setup.sql, drawn at random.
\set n random(1, 1000)
WITH claim AS (
    INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, status_code, resource_id,
                                  error_code, error_detail, created_at, expires_at)
    VALUES ('pgbench', encode(sha256(('pgb-replay-' || :n)::bytea), 'hex'),
            encode(sha256(('fp-replay-' || :n)::bytea), 'hex'), false, 'completed', 201,
            'ord_' || left(encode(sha256(('pgb-replay-' || :n)::bytea), 'hex'), 32),
            NULL, NULL, now(), now() + interval '24 hours')
    ON CONFLICT (tenant_id, key_hash) DO NOTHING
    RETURNING 1
), created AS (
    INSERT INTO orders (id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at)
    SELECT 'ord_' || left(encode(sha256(('pgb-replay-' || :n)::bytea), 'hex'), 32),
           'pgbench', 'pgb-replay', 'USD', '[{"sku":"sku_1","quantity":2,"unit_price":1250}]'::jsonb,
           2500, 'RCVD', 1, now(), NULL, NULL, NULL
    WHERE EXISTS (SELECT 1 FROM claim)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claim);
SELECT tenant_id, key_hash, fingerprint, derived, state, status_code, resource_id, error_code, error_detail,
       locked_until, fencing_token, recovery_point, attempt_key, created_at, expires_at, tombstone_until
FROM idempotency_keys WHERE tenant_id = 'pgbench' AND key_hash = encode(sha256(('pgb-replay-' || :n)::bytea), 'hex') \gset
SELECT id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at
FROM orders WHERE tenant_id = 'pgbench' AND id = :resource_id;
