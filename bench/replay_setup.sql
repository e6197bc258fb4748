-- Setup for bench/replay.sql: 1000 keys, each with its order, made exactly as
-- bench/create.sql makes them (key 'pgb-replay-N'). Idempotent.
INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation, resource_id,
                              created_at, expires_at)
SELECT 'pgbench', encode(sha256(('pgb-replay-' || n)::bytea), 'hex'), encode(sha256(('fp-replay-' || n)::bytea), 'hex'),
       false, 'completed', 'create', 'ord_' || left(encode(sha256(('pgb-replay-' || n)::bytea), 'hex'), 32),
       now(), now() + interval '24 hours'
FROM generate_series(1, 1000) n
ON CONFLICT DO NOTHING;
INSERT INTO orders (id, tenant_id, customer_id, currency, items, amount, state, version, created_at)
SELECT 'ord_' || left(encode(sha256(('pgb-replay-' || n)::bytea), 'hex'), 32), 'pgbench', 'pgb-replay', 'USD',
       '[{"sku":"sku_1","quantity":2,"unit_price":1250}]', 2500, 'RCVD', 1, now()
FROM generate_series(1, 1000) n
ON CONFLICT DO NOTHING;
