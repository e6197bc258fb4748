-- +goose Up
-- Issue 16: a cancel from PAID refunds what the order's partial refunds
-- left, and its transaction now records that amount on its refund attempt
-- ("<order id>/refund") and closes the order's refund totals (reserved =
-- refunded = captured). Orders cancelled before this migration get the
-- same: the attempt's amount first (from the totals as the cancel left
-- them), then the totals.
UPDATE provider_attempts a SET amount = t.captured - t.refunded
FROM order_refund_totals t JOIN orders o ON o.id = t.order_id
WHERE a.provider_key = t.order_id || '/refund' AND a.status = 'succeeded'
  AND o.state = 'CANCELLED' AND o.paid_at IS NOT NULL AND t.refunded < t.captured;

UPDATE order_refund_totals t SET reserved = t.captured, refunded = t.captured
FROM orders o WHERE o.id = t.order_id AND o.state = 'CANCELLED' AND o.paid_at IS NOT NULL;

-- +goose Down
-- Nothing to undo: the totals and amounts written are true either way.
SELECT 1;
