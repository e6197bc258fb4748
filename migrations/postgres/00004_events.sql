-- +goose Up
-- The transactional outbox: one row per state change of an order, written
-- in the same transaction as the change. sequence is the order's version
-- after the change, so (order_id, sequence) is unique: never two events for
-- one change. txid is the writing transaction's id; the feed shows an event
-- only once every transaction with a smaller id has ended, and orders by
-- (txid, id), so a consumer resuming after a cursor never misses an event
-- that committed late. body is the event's JSON exactly as signed and sent.
CREATE TABLE order_events (
    id         text        PRIMARY KEY CHECK (id LIKE 'evt\_%'),
    tenant_id  text        NOT NULL,
    order_id   text        NOT NULL,
    sequence   bigint      NOT NULL CHECK (sequence >= 1),
    type       text        NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed',
                                                    'order.fulfilled', 'order.cancelled')),
    created_at timestamptz NOT NULL,
    txid       xid8        NOT NULL DEFAULT pg_current_xact_id(),
    body       text        NOT NULL,
    UNIQUE (order_id, sequence)
);
CREATE INDEX order_events_feed_idx  ON order_events (tenant_id, txid, id);
CREATE INDEX order_events_order_idx ON order_events (tenant_id, order_id, sequence);

-- A tenant's webhook targets. event_types lists the types it receives.
CREATE TABLE webhook_endpoints (
    id              text        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    url             text        NOT NULL,
    event_types     text[]      NOT NULL CHECK (cardinality(event_types) >= 1),
    secret          text        NOT NULL,
    disabled_reason text,
    created_at      timestamptz NOT NULL
);
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant_id, id);

-- One event to one endpoint, inserted with the event (same transaction).
-- attempts is also the fencing token of the lease (locked_until) of the
-- instance delivering it.
CREATE TABLE webhook_deliveries (
    endpoint_id     text        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id        text        NOT NULL REFERENCES order_events (id),
    tenant_id       text        NOT NULL,
    order_id        text        NOT NULL,
    sequence        bigint      NOT NULL,
    status          text        NOT NULL CHECK (status IN ('pending', 'delivering', 'succeeded', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz,
    locked_until    timestamptz,
    last_status     integer,
    last_error      text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (endpoint_id, event_id),
    CHECK ((status = 'delivering') = (locked_until IS NOT NULL)),
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'delivering');
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (endpoint_id, order_id, sequence)
    WHERE status IN ('pending', 'delivering');

-- Cursors of feed consumers inside orderd (the NATS JetStream publisher),
-- each held by one instance at a time under a lease.
CREATE TABLE event_cursors (
    name         text        PRIMARY KEY,
    cursor       text        NOT NULL DEFAULT '',
    holder       text,
    locked_until timestamptz
);

-- +goose Down
DROP TABLE event_cursors;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE order_events;
