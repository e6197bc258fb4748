-- +goose Up
-- Issue 16, capture at fulfilment (ORDERD_CAPTURE=at_fulfilment): a pay only
-- authorizes (a PaymentIntent with capture_method=manual), recorded here in
-- the transaction that makes the order PAID; a fulfilment ships, then
-- captures (its own provider attempt, kind capture, provider key
-- "<order id>/capture/1"); a cancel, or a shipment refused for good, voids
-- the authorization (kind void, "<order id>/void/1"). status moves
-- authorized → captured or authorized → voided, each a compare-and-set in
-- the transaction that settles its attempt. flagged_at is set once by the
-- completer's pass when capture_before comes within its margin.
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_kind_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_kind_check
    CHECK (kind IN ('charge', 'shipment', 'refund', 'capture', 'void'));

ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'order.refunded', 'order.captured', 'operator.action'));

CREATE TABLE order_authorizations (
    order_id       text        PRIMARY KEY REFERENCES orders (id),
    tenant_id      text        NOT NULL,
    charge_key     text        NOT NULL,
    intent_id      text        NOT NULL CHECK (length(intent_id) BETWEEN 1 AND 255),
    amount         bigint      NOT NULL CHECK (amount > 0),
    currency       text        NOT NULL,
    capture_before timestamptz,
    status         text        NOT NULL CHECK (status IN ('authorized', 'captured', 'voided')),
    flagged_at     timestamptz,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL
);
CREATE INDEX order_authorizations_expiry_idx ON order_authorizations (capture_before)
    WHERE status = 'authorized' AND flagged_at IS NULL;

-- +goose Down
DROP TABLE order_authorizations;
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'order.captured');
DELETE FROM order_events WHERE type = 'order.captured';
ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'order.refunded', 'operator.action'));
UPDATE idempotency_keys SET attempt_key = NULL, recovery_point = 'started'
    WHERE attempt_key IN (SELECT provider_key FROM provider_attempts WHERE kind IN ('capture', 'void'));
DELETE FROM provider_attempts WHERE kind IN ('capture', 'void');
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_kind_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_kind_check
    CHECK (kind IN ('charge', 'shipment', 'refund'));
