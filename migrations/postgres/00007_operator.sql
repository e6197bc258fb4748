-- +goose Up
-- operator.action: the audit event of an operator's action (package
-- operator), written to the outbox in the transaction of the action's
-- effect. Its order_id column holds the action's id (act_…) with sequence
-- 1, so it is a stream of its own and never takes an order's sequence.
ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled',
                    'operator.action'));

-- operator_actions is the operators' idempotency store and audit log: one
-- row per action taken, by the hash of (operator, Idempotency-Key), written
-- in the action's transaction. A replay answers result; the same key with
-- another fingerprint is refused. Nothing ever updates a row.
CREATE TABLE operator_actions (
    key_hash    text        PRIMARY KEY CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    fingerprint text        NOT NULL,
    id          text        NOT NULL UNIQUE CHECK (id LIKE 'act\_%'),
    actor       text        NOT NULL,
    action      text        NOT NULL,
    tenant_id   text        NOT NULL,
    target      text        NOT NULL,
    reason      text        NOT NULL CHECK (length(reason) >= 1),
    result      text        NOT NULL,
    event_id    text        NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX operator_actions_created_idx ON operator_actions (created_at);

-- +goose Down
DROP TABLE operator_actions;
DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM order_events WHERE type = 'operator.action');
DELETE FROM order_events WHERE type = 'operator.action';
ALTER TABLE order_events DROP CONSTRAINT order_events_type_check;
ALTER TABLE order_events ADD CONSTRAINT order_events_type_check
    CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed', 'order.fulfilled', 'order.cancelled'));
