-- +goose Up
-- Mirrors migrations/postgres/00004_events.sql; see the comments there.
-- Writes are serialised (BEGIN IMMEDIATE), so commit order is rowid order
-- and the feed's cursor is the rowid (position). Timestamps are INTEGER
-- microseconds since the Unix epoch, UTC; event_types is a JSON array.
CREATE TABLE order_events (
    position   INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE CHECK (id LIKE 'evt\_%' ESCAPE '\'),
    tenant_id  TEXT    NOT NULL,
    order_id   TEXT    NOT NULL,
    sequence   INTEGER NOT NULL CHECK (sequence >= 1),
    type       TEXT    NOT NULL CHECK (type IN ('order.created', 'order.paid', 'order.payment_failed',
                                                'order.fulfilled', 'order.cancelled')),
    created_at INTEGER NOT NULL,
    body       TEXT    NOT NULL CHECK (json_valid(body)),
    UNIQUE (order_id, sequence)
) STRICT;
CREATE INDEX order_events_feed_idx  ON order_events (tenant_id, position);
CREATE INDEX order_events_order_idx ON order_events (tenant_id, order_id, sequence);

CREATE TABLE webhook_endpoints (
    id              TEXT    PRIMARY KEY,
    tenant_id       TEXT    NOT NULL,
    url             TEXT    NOT NULL,
    event_types     TEXT    NOT NULL CHECK (json_valid(event_types) AND json_array_length(event_types) >= 1),
    secret          TEXT    NOT NULL,
    disabled_reason TEXT,
    created_at      INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant_id, id);

CREATE TABLE webhook_deliveries (
    endpoint_id     TEXT    NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id        TEXT    NOT NULL REFERENCES order_events (id),
    tenant_id       TEXT    NOT NULL,
    order_id        TEXT    NOT NULL,
    sequence        INTEGER NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'delivering', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at INTEGER,
    locked_until    INTEGER,
    last_status     INTEGER,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (endpoint_id, event_id),
    CHECK ((status = 'delivering') = (locked_until IS NOT NULL)),
    CHECK ((status = 'pending') = (next_attempt_at IS NOT NULL))
) STRICT;
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status IN ('pending', 'delivering');
CREATE INDEX webhook_deliveries_order_idx ON webhook_deliveries (endpoint_id, order_id, sequence)
    WHERE status IN ('pending', 'delivering');

CREATE TABLE event_cursors (
    name         TEXT    PRIMARY KEY,
    cursor       TEXT    NOT NULL DEFAULT '',
    holder       TEXT,
    locked_until INTEGER
) STRICT;

-- +goose Down
DROP TABLE event_cursors;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE order_events;
