-- +goose Up
-- An endpoint's secret rotated by an operator with a grace period: until
-- previous_secret_until (the database's clock) deliveries are signed with
-- both secret and previous_secret (two v1 values in Orderly-Signature), so
-- a receiver can move to the new secret without refusing a delivery.
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret text;
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_until timestamptz;
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_previous_secret_check
    CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL));

-- +goose Down
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_previous_secret_check;
ALTER TABLE webhook_endpoints DROP COLUMN previous_secret_until;
ALTER TABLE webhook_endpoints DROP COLUMN previous_secret;
