-- +goose Up
-- Issue 16: a partial refund that succeeded at the provider can fail there
-- later (Stripe: its status moves from succeeded to failed and
-- refund.failed is sent, when the card it returns to was closed; the
-- money goes back to the merchant's balance). The inbox then records it
-- (its attempt rejected with error_code provider_refund_failed, its amount
-- taken off the order's refunded and reserved totals) with the event
-- order.refund_failed in the same transaction.
ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'order.refunded', 'order.captured', 'order.refund_failed', 'operator.action'));

-- +goose Down
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'order.refund_failed');
DELETE FROM order_events WHERE type = 'order.refund_failed';
ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'order.refunded', 'order.captured', 'operator.action'));
