package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/store"
)

var _ store.EventStore = (*Store)(nil)

// appendEvent inserts an event ($1 id, $2 tenant, $3 order id, $4 sequence,
// $5 type, $6 created, $7 body).
const appendEvent = `INSERT INTO order_events (id, tenant_id, order_id, sequence, type, created_at, body)
VALUES ($1, $2, $3, $4, $5, $6, $7)`

// fanOut creates a pending delivery of event $1 per enabled endpoint of its
// tenant subscribed to its type, due at once ($2, the store's clock).
const fanOut = `
INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant_id, order_id, sequence, status, next_attempt_at,
                                created_at, updated_at)
SELECT w.id, ev.id, ev.tenant_id, ev.order_id, ev.sequence, 'pending', $2, ev.created_at, ev.created_at
FROM order_events ev JOIN webhook_endpoints w ON w.tenant_id = ev.tenant_id AND w.disabled_reason IS NULL
    AND EXISTS (SELECT 1 FROM json_each(w.event_types) WHERE value = ev.type)
WHERE ev.id = $1`

// AppendEvent implements store.Executor: two statements, so it must run in
// a transaction (the one of the change it reports).
func (e executor) AppendEvent(ctx context.Context, ev event.Event) error {
	body, err := ev.Marshal()
	if err != nil {
		return err
	}
	if _, err := e.c.ExecContext(ctx, appendEvent, ev.ID, ev.TenantID, ev.OrderID, ev.Sequence, string(ev.Type),
		micros(ev.CreatedAt), string(body)); err != nil {
		return translate(err)
	}
	_, err = e.c.ExecContext(ctx, fanOut, ev.ID, e.now())
	return translate(err)
}

const eventColumns = `id, tenant_id, order_id, sequence, type, body, position`

// listEvents reads a feed page ($1 tenant or ” for all, $2 type, $3 order
// id, $4 after position, $5 limit). Writes are serialised, so positions
// commit in order and a cursor never skips a late commit.
const listEvents = `SELECT ` + eventColumns + ` FROM order_events
WHERE ($1 = '' OR tenant_id = $1) AND ($2 = '' OR type = $2) AND ($3 = '' OR order_id = $3) AND position > $4
ORDER BY position LIMIT $5`

func (s *Store) events(ctx context.Context, query string, args ...any) ([]event.Stored, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []event.Stored
	for rows.Next() {
		var ev event.Stored
		var typ, body string
		var pos int64
		if err := rows.Scan(&ev.ID, &ev.TenantID, &ev.OrderID, &ev.Sequence, &typ, &body, &pos); err != nil {
			return nil, translate(err)
		}
		ev.Type, ev.Body, ev.Cursor = event.Type(typ), json.RawMessage(body), strconv.FormatInt(pos, 10)
		out = append(out, ev)
	}
	return out, translate(rows.Err())
}

// ListEvents implements store.EventStore. A cursor is the event's position.
func (s *Store) ListEvents(ctx context.Context, tenantID string, f event.Filter) ([]event.Stored, error) {
	f = f.Clamp()
	var after int64
	if f.After != "" {
		var err error
		if after, err = strconv.ParseInt(f.After, 10, 64); err != nil || after < 0 {
			return nil, &apperr.Error{Code: apperr.EInvalid, Message: "the query has invalid parameters",
				Fields: []apperr.FieldError{{Field: "after", Reason: "is not a cursor this feed returned"}}}
		}
	}
	return s.events(ctx, listEvents, tenantID, string(f.Type), f.OrderID, after, f.Limit)
}

// GetEvent implements store.EventStore.
func (s *Store) GetEvent(ctx context.Context, tenantID, id string) (event.Stored, error) {
	evs, err := s.events(ctx, `SELECT `+eventColumns+` FROM order_events WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	if err != nil {
		return event.Stored{}, err
	}
	if len(evs) == 0 {
		return event.Stored{}, store.ErrNotFound
	}
	return evs[0], nil
}

// CreateEndpoint implements store.EventStore in one IMMEDIATE transaction
// (it holds the write lock, so the count is not stale).
func (s *Store) CreateEndpoint(ctx context.Context, e event.Endpoint, maxPerTenant int) error {
	types, err := json.Marshal(e.Types)
	if err != nil {
		return err
	}
	if maxPerTenant <= 0 {
		maxPerTenant = math.MaxInt32
	}
	return translate(s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO webhook_endpoints (id, tenant_id, url, event_types, secret, created_at)
SELECT $1, $2, $3, $4, $5, $6 WHERE (SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $2) < $7`,
			e.ID, e.TenantID, e.URL, string(types), e.Secret, micros(e.CreatedAt), maxPerTenant)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrLimitReached
		}
		return nil
	}))
}

const endpointColumns = `id, tenant_id, url, event_types, disabled_reason, created_at`

func (s *Store) endpoints(ctx context.Context, query string, args ...any) ([]event.Endpoint, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []event.Endpoint
	for rows.Next() {
		var e event.Endpoint
		var types string
		var reason sql.NullString
		var created int64
		if err := rows.Scan(&e.ID, &e.TenantID, &e.URL, &types, &reason, &created); err != nil {
			return nil, translate(err)
		}
		if err := json.Unmarshal([]byte(types), &e.Types); err != nil {
			return nil, err
		}
		e.Enabled, e.DisabledReason, e.CreatedAt = !reason.Valid, reason.String, fromMicros(created)
		out = append(out, e)
	}
	return out, translate(rows.Err())
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
	err := s.db.QueryRowContext(ctx, `SELECT secret FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenantID, id).Scan(&secret)
	if errors.Is(err, sql.ErrNoRows) {
		return "", store.ErrNotFound
	}
	return secret, translate(err)
}

// DeleteEndpoint implements store.EventStore (its deliveries go with it:
// ON DELETE CASCADE).
func (s *Store) DeleteEndpoint(ctx context.Context, tenantID, id string) error {
	res, err := s.c.ExecContext(ctx, `DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND id = $2`, tenantID, id)
	if err != nil {
		return translate(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return translate(err)
	} else if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

const deliveryColumns = `d.endpoint_id, d.event_id, d.tenant_id, d.order_id, d.sequence, ev.type, d.status, d.attempts,
    d.last_status, d.last_error, d.next_attempt_at, d.created_at, d.updated_at`

func scanDelivery(row scanner, extra ...any) (event.Delivery, error) {
	var d event.Delivery
	var typ, status string
	var last, next sql.NullInt64
	var lastErr sql.NullString
	var created, updated int64
	if err := row.Scan(append([]any{&d.EndpointID, &d.EventID, &d.TenantID, &d.OrderID, &d.Sequence, &typ, &status,
		&d.Attempts, &last, &lastErr, &next, &created, &updated}, extra...)...); err != nil {
		return d, err
	}
	d.Type, d.Status = event.Type(typ), event.DeliveryStatus(status)
	d.LastStatus, d.LastError = int(last.Int64), lastErr.String
	d.NextAttemptAt = fromMicrosPtr(next)
	d.CreatedAt, d.UpdatedAt = fromMicros(created), fromMicros(updated)
	return d, nil
}

// ListDeliveries implements store.EventStore.
func (s *Store) ListDeliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]event.Delivery, error) {
	if _, err := s.GetEndpoint(ctx, tenantID, endpointID); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE d.tenant_id = $1 AND d.endpoint_id = $2 ORDER BY d.created_at DESC, d.event_id DESC LIMIT $3`, tenantID, endpointID, limit)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []event.Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, d)
	}
	return out, translate(rows.Err())
}

// claimDeliveries is the PostgreSQL store's statement (its fairness
// ranking included) inside an IMMEDIATE transaction, which serializes
// claimers, with $1 now (the store's clock), $2 lease until, $3 limit, $4
// per-tenant cap, $5 per-endpoint cap.
const claimDeliveries = `
WITH busy_t AS (
    SELECT tenant_id, count(*) AS n FROM webhook_deliveries
    WHERE status = 'delivering' AND locked_until > $1 GROUP BY tenant_id
), busy_e AS (
    SELECT endpoint_id, count(*) AS n FROM webhook_deliveries
    WHERE status = 'delivering' AND locked_until > $1 GROUP BY endpoint_id
), due AS (
    SELECT d.endpoint_id, d.event_id, d.tenant_id, COALESCE(d.next_attempt_at, d.locked_until) AS due_at,
           row_number() OVER (PARTITION BY d.endpoint_id ORDER BY COALESCE(d.next_attempt_at, d.locked_until), d.event_id) AS ep_rank
    FROM webhook_deliveries d
    JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.disabled_reason IS NULL
    WHERE ((d.status = 'pending' AND d.next_attempt_at <= $1) OR (d.status = 'delivering' AND d.locked_until <= $1))
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p
                      WHERE p.endpoint_id = d.endpoint_id AND p.order_id = d.order_id AND p.sequence < d.sequence
                        AND p.status IN ('pending', 'delivering'))
), fit AS (
    SELECT due.endpoint_id, due.event_id, due.tenant_id, due.due_at,
           row_number() OVER (PARTITION BY due.tenant_id ORDER BY due.ep_rank, due.due_at, due.event_id) AS t_rank
    FROM due LEFT JOIN busy_e be ON be.endpoint_id = due.endpoint_id
    WHERE due.ep_rank + COALESCE(be.n, 0) <= $5
), picked AS (
    SELECT fit.endpoint_id, fit.event_id FROM fit LEFT JOIN busy_t bt ON bt.tenant_id = fit.tenant_id
    WHERE fit.t_rank + COALESCE(bt.n, 0) <= $4
    ORDER BY fit.t_rank, fit.due_at, fit.event_id
    LIMIT $3
)
UPDATE webhook_deliveries AS d SET status = 'delivering', locked_until = $2, next_attempt_at = NULL,
    attempts = d.attempts + 1, updated_at = $1
WHERE (d.endpoint_id, d.event_id) IN (SELECT endpoint_id, event_id FROM picked)
RETURNING endpoint_id, event_id`

// ClaimDeliveries implements store.EventStore in one IMMEDIATE
// transaction.
func (s *Store) ClaimDeliveries(ctx context.Context, c store.DeliveryClaim) ([]event.Delivery, error) {
	perTenant, perEndpoint := c.Caps()
	var out []event.Delivery
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		rows, err := tx.QueryContext(ctx, claimDeliveries, now, now+c.Lease.Microseconds(), max(c.Limit, 1), perTenant, perEndpoint)
		if err != nil {
			return err
		}
		type pk struct{ endpoint, event string }
		var claimed []pk
		for rows.Next() {
			var k pk
			if err := rows.Scan(&k.endpoint, &k.event); err != nil {
				rows.Close()
				return err
			}
			claimed = append(claimed, k)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, k := range claimed {
			var body, url, secret, previous string
			d, err := scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+`, ev.body, w.url, w.secret,
    CASE WHEN w.previous_secret_until > $3 THEN w.previous_secret ELSE '' END
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id JOIN webhook_endpoints w ON w.id = d.endpoint_id
WHERE d.endpoint_id = $1 AND d.event_id = $2`, k.endpoint, k.event, now), &body, &url, &secret, &previous)
			if err != nil {
				return err
			}
			d.Body, d.URL, d.Secret, d.PreviousSecret = []byte(body), url, secret, previous
			out = append(out, d)
		}
		return nil
	})
	return out, translate(err)
}

// FinishDelivery implements store.EventStore in one IMMEDIATE transaction.
func (s *Store) FinishDelivery(ctx context.Context, o store.DeliveryOutcome) error {
	var last any
	if o.LastStatus != 0 {
		last = o.LastStatus
	}
	return translate(s.inTx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		var next any
		if o.Status == event.DeliveryPending {
			next = now + max(o.RetryIn, 0).Microseconds()
		}
		err := fenced(tx.ExecContext(ctx, `UPDATE webhook_deliveries SET status = $4, locked_until = NULL,
    next_attempt_at = $5, last_status = $6, last_error = $7, updated_at = $8
WHERE endpoint_id = $1 AND event_id = $2 AND attempts = $3 AND status = 'delivering'`,
			o.EndpointID, o.EventID, o.Attempts, string(o.Status), next, last, nullable(o.LastError), now))
		if err != nil || o.DisableEndpoint == "" {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET disabled_reason = $2 WHERE id = $1 AND disabled_reason IS NULL`,
			o.EndpointID, o.DisableEndpoint)
		return err
	}))
}

// LeaseCursor implements store.EventStore in one statement.
func (s *Store) LeaseCursor(ctx context.Context, name, holder string, lease time.Duration) (string, bool, error) {
	var cursor string
	now := s.now()
	err := s.db.QueryRowContext(ctx, `
INSERT INTO event_cursors (name, holder, locked_until) VALUES ($1, $2, $4)
ON CONFLICT (name) DO UPDATE SET holder = $2, locked_until = $4
WHERE event_cursors.holder = $2 OR event_cursors.locked_until IS NULL OR event_cursors.locked_until <= $3
RETURNING cursor`, name, holder, now, now+lease.Microseconds()).Scan(&cursor)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, translate(err)
	}
	return cursor, true, nil
}

// AdvanceCursor implements store.EventStore.
func (s *Store) AdvanceCursor(ctx context.Context, name, holder, cursor string) error {
	return fenced(s.c.ExecContext(ctx, `UPDATE event_cursors SET cursor = $3 WHERE name = $1 AND holder = $2`, name, holder, cursor))
}
