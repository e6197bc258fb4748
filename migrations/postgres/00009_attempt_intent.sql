-- +goose Up
-- Issue 15: an attempt records the provider object it created (the intent
-- id, recorded between Prepare and Confirm under the attempt's fencing
-- token), so an unknown outcome is resolved by reading that object, and the
-- time its provider key was first sent, so a key older than the provider's
-- retention margin is never resent. Both are written once.
ALTER TABLE provider_attempts
    ADD COLUMN intent_id   text CHECK (length(intent_id) BETWEEN 1 AND 255),
    ADD COLUMN key_sent_at timestamptz;

-- +goose Down
ALTER TABLE provider_attempts DROP COLUMN intent_id, DROP COLUMN key_sent_at;
