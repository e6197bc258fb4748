-- +goose Up
-- Issue 16: partial refunds. A key may be claimed for a refund; each refund
-- is its own provider attempt (kind refund, provider key
-- "<order id>/refunds/<key hash 16>") with a row here for what the client
-- asked (amount, currency, reason). order_refund_totals holds, per order,
-- what was captured, what refunds have reserved (settled or in flight) and
-- what they refunded: a refund reserves its amount with a compare-and-set
-- on reserved in the transaction that records its attempt, and the CHECK
-- makes "never above the captured amount" the database's rule too.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_operation_check
    CHECK (operation IN ('create', 'pay', 'fulfill', 'cancel', 'refund'));

ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'order.refunded', 'operator.action'));

CREATE TABLE order_refund_totals (
    order_id  text   PRIMARY KEY REFERENCES orders (id),
    tenant_id text   NOT NULL,
    captured  bigint NOT NULL CHECK (captured >= 0),
    reserved  bigint NOT NULL DEFAULT 0,
    refunded  bigint NOT NULL DEFAULT 0,
    CHECK (0 <= refunded AND refunded <= reserved AND reserved <= captured)
);

CREATE TABLE order_refunds (
    provider_key text        PRIMARY KEY REFERENCES provider_attempts (provider_key),
    tenant_id    text        NOT NULL,
    order_id     text        NOT NULL REFERENCES orders (id),
    amount       bigint      NOT NULL CHECK (amount > 0),
    currency     text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    -- the order's refunded total right after this refund succeeded (NULL
    -- until it has): what the refund's answer and its replays show
    refunded_after bigint
);
CREATE INDEX order_refunds_order_idx ON order_refunds (order_id, created_at);

-- +goose Down
DROP TABLE order_refunds;
DROP TABLE order_refund_totals;
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'order.refunded');
DELETE FROM order_events WHERE type = 'order.refunded';
ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'operator.action'));
DELETE FROM idempotency_keys WHERE operation = 'refund';
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_operation_check
    CHECK (operation IN ('create', 'pay', 'fulfill', 'cancel'));
