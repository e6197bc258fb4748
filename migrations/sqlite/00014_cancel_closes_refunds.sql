-- +goose Up
-- Mirrors migrations/postgres/00015_cancel_closes_refunds.sql (see the
-- comments there).
UPDATE provider_attempts SET amount = (
    SELECT t.captured - t.refunded FROM order_refund_totals t WHERE provider_attempts.provider_key = t.order_id || '/refund')
WHERE status = 'succeeded' AND provider_key IN (
    SELECT t.order_id || '/refund' FROM order_refund_totals t JOIN orders o ON o.id = t.order_id
    WHERE o.state = 'CANCELLED' AND o.paid_at IS NOT NULL AND t.refunded < t.captured);

UPDATE order_refund_totals SET reserved = captured, refunded = captured
WHERE order_id IN (SELECT id FROM orders WHERE state = 'CANCELLED' AND paid_at IS NOT NULL);

-- +goose Down
-- Nothing to undo: the totals and amounts written are true either way.
SELECT 1;
