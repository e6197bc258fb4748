-- pgbench script: what one POST /v1/orders with a new Idempotency-Key costs the
-- database. It is store/postgres/queries.go claimAndInsertOrder, verbatim but
-- for the parameters: ONE statement (one round trip, one commit) that claims
-- the key and inserts the order only if the claim won. The service computes
-- the key's SHA-256, the fingerprint and the order id in Go and binds 22
-- parameters; here the same values are computed in SQL from random numbers
-- (pgbench \set … random()), so every transaction is a new key and a new
-- order. Run with -M prepared (pgx prepares and caches its statements too):
--   pgbench -n -M prepared -c 16 -j 2 -T 10 -f bench/create.sql "$DATABASE_URL"
\set a random(1, 2147483647)
\set b random(1, 2147483647)
\set qty random(1, 3)
WITH claim AS (
    INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, status_code, resource_id,
                                  error_code, error_detail, created_at, expires_at)
    VALUES ('pgbench', encode(sha256(('pgb-' || :client_id || '-' || :a || '-' || :b)::bytea), 'hex'),
            encode(sha256(('fp-' || :client_id || '-' || :a || '-' || :b)::bytea), 'hex'), false, 'completed', 201,
            'ord_' || left(encode(sha256(('pgb-' || :client_id || '-' || :a || '-' || :b)::bytea), 'hex'), 32),
            NULL, NULL, now(), now() + interval '24 hours')
    ON CONFLICT (tenant_id, key_hash) DO NOTHING
    RETURNING 1
), created AS (
    INSERT INTO orders (id, tenant_id, customer_id, currency, items, amount, state, version, created_at, paid_at, fulfilled_at, cancelled_at)
    SELECT 'ord_' || left(encode(sha256(('pgb-' || :client_id || '-' || :a || '-' || :b)::bytea), 'hex'), 32),
           'pgbench', 'pgb-cus-' || :client_id, 'USD',
           jsonb_build_array(jsonb_build_object('sku', 'sku_1', 'quantity', :qty::bigint, 'unit_price', 1250)),
           :qty::bigint * 1250, 'RCVD', 1, now(), NULL, NULL, NULL
    WHERE EXISTS (SELECT 1 FROM claim)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM claim);
