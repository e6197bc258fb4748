-- +goose Up
-- Issue 15: a provider event is a payment.ProviderEvent, normalised by its
-- adapter. The inbox keeps what it said — its normalised type, the provider's
-- own type, the provider object it is about (and that object's intent), the
-- reference (order id) it echoed, its amount and currency — so that an event
-- whose amount or currency differs from its attempt is on record. Rows of
-- earlier versions keep NULL in the new columns; their types are renamed to
-- the normalised ones.
ALTER TABLE provider_inbox DROP CONSTRAINT provider_inbox_event_type_check;
UPDATE provider_inbox SET event_type = CASE event_type
    WHEN 'charge.succeeded' THEN 'payment.succeeded'
    WHEN 'charge.failed' THEN 'payment.failed'
    ELSE event_type END;
ALTER TABLE provider_inbox ADD CONSTRAINT provider_inbox_event_type_check
    CHECK (event_type IN ('payment.succeeded', 'payment.failed', 'payment.canceled', 'payment.processing',
                          'payment.requires_action', 'refund.succeeded', 'refund.failed'));
ALTER TABLE provider_inbox
    ADD COLUMN provider_type      text,
    ADD COLUMN object_id          text,
    ADD COLUMN intent_id          text,
    ADD COLUMN reference_order_id text,
    ADD COLUMN amount             bigint CHECK (amount >= 0),
    ADD COLUMN currency           text;

-- +goose Down
ALTER TABLE provider_inbox
    DROP COLUMN provider_type, DROP COLUMN object_id, DROP COLUMN intent_id,
    DROP COLUMN reference_order_id, DROP COLUMN amount, DROP COLUMN currency;
ALTER TABLE provider_inbox DROP CONSTRAINT provider_inbox_event_type_check;
DELETE FROM provider_inbox WHERE event_type NOT IN ('payment.succeeded', 'payment.failed', 'refund.succeeded');
UPDATE provider_inbox SET event_type = CASE event_type
    WHEN 'payment.succeeded' THEN 'charge.succeeded'
    WHEN 'payment.failed' THEN 'charge.failed'
    ELSE event_type END;
ALTER TABLE provider_inbox ADD CONSTRAINT provider_inbox_event_type_check
    CHECK (event_type IN ('charge.succeeded', 'charge.failed', 'refund.succeeded'));
