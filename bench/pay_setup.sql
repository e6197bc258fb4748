-- Setup for bench/pay.sql: a queue of the unpaid orders bench/create.sql made
-- (numbered, so each pgbench transaction takes the next one with one index
-- lookup and no locking) and the sequence that hands them out. Re-run before
-- each pay run.
DROP TABLE IF EXISTS orderstorm_pay_queue;
DROP SEQUENCE IF EXISTS orderstorm_pay_seq;
CREATE TABLE orderstorm_pay_queue (n bigint PRIMARY KEY, id text NOT NULL);
INSERT INTO orderstorm_pay_queue
SELECT row_number() OVER (ORDER BY id), id FROM orders
WHERE tenant_id = 'pgbench' AND state = 'RCVD' AND customer_id LIKE 'pgb-cus-%';
CREATE SEQUENCE orderstorm_pay_seq;
ANALYZE orderstorm_pay_queue;
