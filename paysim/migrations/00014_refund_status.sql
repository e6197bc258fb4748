-- +goose Up
-- A refund's status (issue 16): succeeded when it is made; failed when a
-- refund of a charge paid with testmode.MethodRefundFail is failed later
-- by POST /admin/refunds/{id}/fail (as Stripe's refund_fail test card's
-- refunds fail after they succeeded), its amount then given back to the
-- charge's unrefunded amount.
ALTER TABLE refunds ADD COLUMN status TEXT NOT NULL DEFAULT 'succeeded' CHECK (status IN ('succeeded', 'failed'));

-- +goose Down
ALTER TABLE refunds DROP COLUMN status;
