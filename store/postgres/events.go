package postgres

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

var _ store.EventStore = (*Store)(nil)

// appendEvents returns two CTEs, "ev" and "fan", that insert the events src
// selects (id, tenant, order id, sequence, type, created, body) into the
// outbox and fan each out to a pending delivery per enabled endpoint of its
// tenant subscribed to its type. Data-modifying CTEs run whether or not
// the main statement reads them, so appending them to a create adds no
// statement and no round trip.
func appendEvents(src string) string {
	return `ev AS (
    INSERT INTO order_events (id, tenant_id, order_id, sequence, type, created_at, body)
    ` + src + `
    RETURNING id, tenant_id, order_id, sequence, type, created_at
), fan AS (
    INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant_id, order_id, sequence, status, next_attempt_at,
                                    created_at, updated_at)
    SELECT w.id, ev.id, ev.tenant_id, ev.order_id, ev.sequence, 'pending', orderly_now(), ev.created_at, ev.created_at
    FROM ev JOIN webhook_endpoints w ON w.tenant_id = ev.tenant_id AND w.disabled_reason IS NULL
        AND ev.type = ANY (w.event_types)
)`
}

// appendEvent inserts one event ($1 id, $2 tenant, $3 order id, $4
// sequence, $5 type, $6 created, $7 body) and its deliveries.
var appendEvent = `WITH ` + appendEvents(`VALUES ($1::text, $2::text, $3::text, $4::bigint, $5::text, $6::timestamptz, $7::text)`) + `
SELECT 1`

// createdEvent is the order.created event of o, with its JSON.
func createdEvent(o order.Order) (event.Event, []byte, error) {
	ev := event.For(o, o.CreatedAt)
	body, err := ev.Marshal()
	return ev, body, err
}

// AppendEvent implements store.Executor: in a transaction it is queued and
// sent with the transaction's other writes (no round trip of its own).
func (e executor) AppendEvent(ctx context.Context, ev event.Event) error {
	body, err := ev.Marshal()
	if err != nil {
		return err
	}
	return translate(e.db.exec(ctx, appendEvent, ev.ID, ev.TenantID, ev.OrderID, ev.Sequence, string(ev.Type),
		ev.CreatedAt, string(body)))
}

const eventColumns = `id, tenant_id, order_id, sequence, type, body, txid::text`

// listEvents reads a feed page ($1 tenant or ” for all, $2 type, $3 order
// id, $4 after txid, $5 after id, $6 limit): only events whose transaction
// id is below the oldest running transaction's, so nothing can commit
// before them later; ordered by (txid, id), the cursor's order.
const listEvents = `
SELECT ` + eventColumns + ` FROM order_events
WHERE ($1 = '' OR tenant_id = $1) AND ($2 = '' OR type = $2) AND ($3 = '' OR order_id = $3)
  AND txid < pg_snapshot_xmin(pg_current_snapshot())
  AND (txid, id) > ($4::xid8, $5::text)
ORDER BY txid, id
LIMIT $6`

const getEvent = `SELECT ` + eventColumns + ` FROM order_events WHERE tenant_id = $1 AND id = $2`

func (s *Store) events(ctx context.Context, sql string, args ...any) ([]event.Stored, error) {
	var out []event.Stored
	err := s.db.query(ctx, sql, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var ev event.Stored
			var typ, body, txid string
			if err := rows.Scan(&ev.ID, &ev.TenantID, &ev.OrderID, &ev.Sequence, &typ, &body, &txid); err != nil {
				return err
			}
			ev.Type, ev.Body, ev.Cursor = event.Type(typ), []byte(body), txid+"."+ev.ID
			out = append(out, ev)
		}
		return nil
	})
	return out, translate(err)
}

// ListEvents implements store.EventStore. A cursor is "<txid>.<event id>".
func (s *Store) ListEvents(ctx context.Context, tenantID string, f event.Filter) ([]event.Stored, error) {
	f = f.Clamp()
	txid, id := "0", ""
	if f.After != "" {
		var ok bool
		txid, id, ok = strings.Cut(f.After, ".")
		if _, err := strconv.ParseUint(txid, 10, 64); !ok || err != nil || !event.ValidID(id) {
			return nil, badCursor()
		}
	}
	return s.events(ctx, listEvents, tenantID, string(f.Type), f.OrderID, txid, id, f.Limit)
}

func badCursor() error {
	return &apperr.Error{Code: apperr.EInvalid, Message: "the query has invalid parameters",
		Fields: []apperr.FieldError{{Field: "after", Reason: "is not a cursor this feed returned"}}}
}

// GetEvent implements store.EventStore.
func (s *Store) GetEvent(ctx context.Context, tenantID, id string) (event.Stored, error) {
	evs, err := s.events(ctx, getEvent, tenantID, id)
	if err != nil {
		return event.Stored{}, err
	}
	if len(evs) == 0 {
		return event.Stored{}, store.ErrNotFound
	}
	return evs[0], nil
}

// createEndpoint inserts an endpoint ($1 id, $2 tenant, $3 url, $4 types,
// $5 secret, $6 created) unless the tenant already has $7 endpoints.
const createEndpoint = `INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_at)
SELECT $1, $2, $3, $4, $5, $6 WHERE (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $2) < $7`

// CreateEndpoint implements store.EventStore in one transaction: a
// transaction-scoped advisory lock on the tenant serializes its creates,
// so the count the insert is guarded by is never stale (READ COMMITTED
// takes the insert's snapshot after the lock is held).
func (s *Store) CreateEndpoint(ctx context.Context, e event.Endpoint, maxPerTenant int) error {
	types := make([]string, len(e.Types))
	for i, t := range e.Types {
		types[i] = string(t)
	}
	if maxPerTenant <= 0 {
		maxPerTenant = math.MaxInt32
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('orderly.webhook_endpoints.' || $1::text, 0))`, e.TenantID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, createEndpoint, e.ID, e.TenantID, e.URL, types, e.Secret, e.CreatedAt, maxPerTenant)
		if err == nil && tag.RowsAffected() == 0 {
			return store.ErrLimitReached
		}
		return err
	})
	return translate(err)
}

const endpointColumns = `id, tenant_id, url, event_types, disabled_reason, created_at`

func (s *Store) endpoints(ctx context.Context, sql string, args ...any) ([]event.Endpoint, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event.Endpoint, error) {
		var e event.Endpoint
		var types []string
		var reason *string
		if err := row.Scan(&e.ID, &e.TenantID, &e.URL, &types, &reason, &e.CreatedAt); err != nil {
			return e, err
		}
		for _, t := range types {
			e.Types = append(e.Types, event.Type(t))
		}
		e.Enabled = reason == nil
		if reason != nil {
			e.DisabledReason = *reason
		}
		e.CreatedAt = e.CreatedAt.UTC()
		return e, nil
	})
	return out, translate(err)
}

// ListEndpoints implements store.EventStore.
func (s *Store) ListEndpoints(ctx context.Context, tenantID string) ([]event.Endpoint, error) {
	return s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE tenant_id = $1 ORDER BY id`, tenantID)
}

// GetEndpoint implements store.EventStore.
func (s *Store) GetEndpoint(ctx context.Context, tenantID, id string) (event.Endpoint, error) {
	es, err := s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	if err != nil {
		return event.Endpoint{}, err
	}
	if len(es) == 0 {
		return event.Endpoint{}, store.ErrNotFound
	}
	return es[0], nil
}

// EndpointSecret implements store.EventStore.
func (s *Store) EndpointSecret(ctx context.Context, tenantID, id string) (string, error) {
	var secret string
	err := s.pool.QueryRow(ctx, `SELECT secret FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenantID, id).Scan(&secret)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", store.ErrNotFound
	}
	return secret, translate(err)
}

// DeleteEndpoint implements store.EventStore (its deliveries go with it:
// ON DELETE CASCADE).
func (s *Store) DeleteEndpoint(ctx context.Context, tenantID, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}

const deliveryColumns = `d.endpoint_id, d.event_id, d.tenant_id, d.order_id, d.sequence, ev.type, d.status, d.attempts,
    d.last_status, d.last_error, d.next_attempt_at, d.created_at, d.updated_at`

func scanDelivery(row pgx.CollectableRow, extra ...any) (event.Delivery, error) {
	var d event.Delivery
	var typ, status string
	var last *int
	var lastErr *string
	var next *time.Time
	if err := row.Scan(append([]any{&d.EndpointID, &d.EventID, &d.TenantID, &d.OrderID, &d.Sequence, &typ, &status,
		&d.Attempts, &last, &lastErr, &next, &d.CreatedAt, &d.UpdatedAt}, extra...)...); err != nil {
		return d, err
	}
	d.Type, d.Status = event.Type(typ), event.DeliveryStatus(status)
	if last != nil {
		d.LastStatus = *last
	}
	if lastErr != nil {
		d.LastError = *lastErr
	}
	if next != nil {
		t := next.UTC()
		d.NextAttemptAt = &t
	}
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return d, nil
}

// ListDeliveries implements store.EventStore.
func (s *Store) ListDeliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]event.Delivery, error) {
	if _, err := s.GetEndpoint(ctx, tenantID, endpointID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE d.tenant_id = $1 AND d.endpoint_id = $2 ORDER BY d.created_at DESC, d.event_id DESC LIMIT $3`, tenantID, endpointID, limit)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event.Delivery, error) { return scanDelivery(row) })
	return out, translate(err)
}

// claimLockKey is the advisory lock that serializes ClaimDeliveries
// across instances ("orderly.webhook.claim" as a 64-bit number).
const claimLockKey = 0x6f72646c79776863

// claimDeliveries leases due deliveries for $1 microseconds, at most $2 of
// them, due and expired as of orderly_now(), the database's clock: the
// first undelivered event of each (endpoint, order) only. Fairness: each
// tenant's in-flight deliveries (delivering under an unexpired lease) stay
// at most $3, each endpoint's at most $4; the due deliveries are ranked
// within their endpoint (ep_rank), those that fit the endpoint's cap
// ranked within their tenant (t_rank), and taken by t_rank first, so
// tenants (and a tenant's endpoints) interleave. Run under claimLockKey:
// the in-flight counts are not stale.
const claimDeliveries = `
WITH busy_t AS (
    SELECT tenant_id, count(*) AS n FROM webhook_deliveries
    WHERE status = 'delivering' AND locked_until > orderly_now() GROUP BY tenant_id
), busy_e AS (
    SELECT endpoint_id, count(*) AS n FROM webhook_deliveries
    WHERE status = 'delivering' AND locked_until > orderly_now() GROUP BY endpoint_id
), due AS (
    SELECT d.endpoint_id, d.event_id, d.tenant_id, COALESCE(d.next_attempt_at, d.locked_until) AS due_at,
           row_number() OVER (PARTITION BY d.endpoint_id ORDER BY COALESCE(d.next_attempt_at, d.locked_until), d.event_id) AS ep_rank
    FROM webhook_deliveries d
    JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.disabled_reason IS NULL
    WHERE ((d.status = 'pending' AND d.next_attempt_at <= orderly_now())
           OR (d.status = 'delivering' AND d.locked_until <= orderly_now()))
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p
                      WHERE p.endpoint_id = d.endpoint_id AND p.order_id = d.order_id AND p.sequence < d.sequence
                        AND p.status IN ('pending', 'delivering'))
), fit AS (
    SELECT due.endpoint_id, due.event_id, due.tenant_id, due.due_at,
           row_number() OVER (PARTITION BY due.tenant_id ORDER BY due.ep_rank, due.due_at, due.event_id) AS t_rank
    FROM due LEFT JOIN busy_e be ON be.endpoint_id = due.endpoint_id
    WHERE due.ep_rank + COALESCE(be.n, 0) <= $4
), picked AS (
    SELECT fit.endpoint_id, fit.event_id FROM fit LEFT JOIN busy_t bt ON bt.tenant_id = fit.tenant_id
    WHERE fit.t_rank + COALESCE(bt.n, 0) <= $3
    ORDER BY fit.t_rank, fit.due_at, fit.event_id
    LIMIT $2
)
UPDATE webhook_deliveries d SET status = 'delivering',
    locked_until = orderly_now() + $1::bigint * interval '1 microsecond', next_attempt_at = NULL,
    attempts = d.attempts + 1, updated_at = orderly_now()
FROM picked, order_events ev, webhook_endpoints w
WHERE d.endpoint_id = picked.endpoint_id AND d.event_id = picked.event_id AND ev.id = d.event_id AND w.id = d.endpoint_id
RETURNING ` + deliveryColumns + `, ev.body, w.url, w.secret,
    CASE WHEN w.previous_secret_until > orderly_now() THEN w.previous_secret ELSE '' END`

// ClaimDeliveries implements store.EventStore in one transaction: the
// advisory lock claimLockKey, then one statement.
func (s *Store) ClaimDeliveries(ctx context.Context, c store.DeliveryClaim) ([]event.Delivery, error) {
	perTenant, perEndpoint := c.Caps()
	var out []event.Delivery
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(claimLockKey)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, claimDeliveries, c.Lease.Microseconds(), max(c.Limit, 1), perTenant, perEndpoint)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (event.Delivery, error) {
			var body string
			var url, secret, previous string
			d, err := scanDelivery(row, &body, &url, &secret, &previous)
			d.Body, d.URL, d.Secret, d.PreviousSecret = []byte(body), url, secret, previous
			return d, err
		})
		return err
	})
	return out, translate(err)
}

// finishDelivery ends the attempt fenced by ($1 endpoint, $2 event, $3
// attempts) with $4 status, the next attempt $5 microseconds after
// orderly_now() (NULL: none), $6 last status, $7 last error, and disables
// the endpoint when $8 (a reason) is set.
const finishDelivery = `
WITH d AS (
    UPDATE webhook_deliveries SET status = $4, locked_until = NULL,
        next_attempt_at = orderly_now() + $5::bigint * interval '1 microsecond',
        last_status = $6, last_error = $7, updated_at = orderly_now()
    WHERE endpoint_id = $1 AND event_id = $2 AND attempts = $3 AND status = 'delivering'
    RETURNING endpoint_id
), off AS (
    UPDATE webhook_endpoints SET disabled_reason = $8
    WHERE id = $1 AND $8::text IS NOT NULL AND disabled_reason IS NULL AND EXISTS (SELECT 1 FROM d)
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM d), 'lease_lost')`

// FinishDelivery implements store.EventStore in one statement.
func (s *Store) FinishDelivery(ctx context.Context, o store.DeliveryOutcome) error {
	var next *int64
	if o.Status == event.DeliveryPending {
		us := max(o.RetryIn, 0).Microseconds()
		next = &us
	}
	var last *int
	if o.LastStatus != 0 {
		last = &o.LastStatus
	}
	_, err := s.pool.Exec(ctx, finishDelivery, o.EndpointID, o.EventID, o.Attempts, string(o.Status), next, last,
		nullable(o.LastError), nullable(o.DisableEndpoint))
	return translate(err)
}

// LeaseCursor implements store.EventStore in one statement.
func (s *Store) LeaseCursor(ctx context.Context, name, holder string, lease time.Duration) (string, bool, error) {
	var cursor string
	err := s.pool.QueryRow(ctx, `
INSERT INTO event_cursors (name, holder, locked_until) VALUES ($1, $2, orderly_now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE SET holder = $2, locked_until = EXCLUDED.locked_until
WHERE event_cursors.holder = $2 OR event_cursors.locked_until IS NULL OR event_cursors.locked_until <= orderly_now()
RETURNING cursor`, name, holder, lease.Microseconds()).Scan(&cursor)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, translate(err)
	}
	return cursor, true, nil
}

// AdvanceCursor implements store.EventStore.
func (s *Store) AdvanceCursor(ctx context.Context, name, holder, cursor string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE event_cursors SET cursor = $3 WHERE name = $1 AND holder = $2`, name, holder, cursor)
	if err != nil {
		return translate(err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrLeaseLost
	}
	return nil
}
