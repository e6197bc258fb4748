-- +goose Up
-- Issue 15: a Stripe webhook names the PaymentIntent it is about, and the
-- inbox matches it to its attempt by the intent id the attempt recorded
-- (store.Executor.GetAttemptByIntent). Not unique: the store never relies
-- on it, and an attempt records its intent once (00009).
CREATE INDEX provider_attempts_intent_idx ON provider_attempts (intent_id) WHERE intent_id IS NOT NULL;

-- +goose Down
DROP INDEX provider_attempts_intent_idx;
