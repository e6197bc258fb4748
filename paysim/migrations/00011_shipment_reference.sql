-- +goose Up
-- The reference a shipment request sets (issue 15, the warehouse seam): the
-- caller's key of the step, found again with its order id by
-- GET /v1/shipments?reference=R&order_id=O, never by idempotency key. NULL
-- for rows written before it.
ALTER TABLE shipments ADD COLUMN reference TEXT CHECK (reference IS NULL OR length(reference) BETWEEN 1 AND 255);
CREATE INDEX shipments_reference_idx ON shipments (reference, order_id, created_at);

-- +goose Down
DROP INDEX shipments_reference_idx;
ALTER TABLE shipments DROP COLUMN reference;
