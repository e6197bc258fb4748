-- +goose Up
-- When the authorization of a manual-capture PaymentIntent's charge
-- expires (issue 16; Stripe: the charge's
-- payment_method_details.card.capture_before, 7 days for online card
-- payments by default). Microseconds since the Unix epoch; NULL for a
-- charge captured at once, failed, or written before.
ALTER TABLE stripe_charges ADD COLUMN capture_before INTEGER;
CREATE INDEX stripe_charges_capture_before_idx ON stripe_charges (capture_before) WHERE capture_before IS NOT NULL AND captured = 0;

-- +goose Down
DROP INDEX stripe_charges_capture_before_idx;
ALTER TABLE stripe_charges DROP COLUMN capture_before;
