-- +goose Up
-- Issue 16: a charge whose PaymentIntent waits for the customer (3-D Secure,
-- requires_action) or for the bank (a debit, processing) stays open in its
-- own status, the order's one open attempt, until the intent settles or the
-- attempt expires (ORDERD_PENDING_PAYMENT_EXPIRY).
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_status_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_status_check
    CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown', 'needs_attention',
                      'requires_action', 'processing'));

-- +goose Down
UPDATE provider_attempts SET status = 'unknown' WHERE status IN ('requires_action', 'processing');
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_status_check;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_status_check
    CHECK (status IN ('pending', 'succeeded', 'declined', 'rejected', 'failed', 'unknown', 'needs_attention'));
