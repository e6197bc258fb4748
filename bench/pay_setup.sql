-- Setup for bench/pay.sql: 200 000 unpaid orders numbered 1.. ('ord_pgbpay_N', 2500 USD,
-- the amount pay.sql pays); pay.sql's clients take them in turn. Run again before each pay
-- run: it removes what an earlier run paid.
DELETE FROM webhook_deliveries WHERE tenant_id = 'pgbench' AND order_id LIKE 'ord\_pgbpay\_%';
DELETE FROM order_events WHERE tenant_id = 'pgbench' AND order_id LIKE 'ord\_pgbpay\_%';
DELETE FROM provider_attempts WHERE tenant_id = 'pgbench' AND order_id LIKE 'ord\_pgbpay\_%';
DELETE FROM idempotency_keys WHERE tenant_id = 'pgbench' AND resource_id LIKE 'ord\_pgbpay\_%';
DELETE FROM orders WHERE tenant_id = 'pgbench' AND id LIKE 'ord\_pgbpay\_%';
INSERT INTO orders (id, tenant_id, customer_id, currency, items, amount, state, version, created_at)
SELECT 'ord_pgbpay_' || n, 'pgbench', 'pgb-pay', 'USD', '[{"sku":"sku_1","quantity":2,"unit_price":1250}]',
       2500, 'RCVD', 1, now()
FROM generate_series(1, 200000) n;
ANALYZE orders;
