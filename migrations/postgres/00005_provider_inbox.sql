-- +goose Up
-- provider_inbox records every provider event (a paysim webhook) orderd has
-- taken in, by the provider's event id, in the same transaction as the
-- event's effect (the attempt settled, the order moved), so a webhook
-- delivered twice, out of order or late takes effect once. The primary key is
-- the deduplication; nothing ever updates a row.
CREATE TABLE provider_inbox (
    source       text        NOT NULL CHECK (length(source) BETWEEN 1 AND 64),
    event_id     text        NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type   text        NOT NULL CHECK (event_type IN ('charge.succeeded', 'charge.failed', 'refund.succeeded')),
    provider_key text        NOT NULL,
    received_at  timestamptz NOT NULL,
    PRIMARY KEY (source, event_id)
);

-- +goose Down
DROP TABLE provider_inbox;
