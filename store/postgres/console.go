package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

var _ store.OperatorLister = (*Store)(nil)

// SearchOrders implements store.OperatorLister.
func (s *Store) SearchOrders(ctx context.Context, q store.OrderSearch) ([]order.Order, error) {
	return s.orders(ctx, `SELECT `+orderColumns+` FROM orders WHERE `+tenantsWhere+`
  AND ($3 = '' OR customer_id = $3) AND ($4 = '' OR state = $4) ORDER BY id DESC LIMIT $5`,
		tenantArgs(q.Tenants, q.CustomerID, string(q.State), max(q.Limit, 1))...)
}

// SearchDeliveries implements store.OperatorLister.
func (s *Store) SearchDeliveries(ctx context.Context, q store.DeliverySearch) ([]event.Delivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE ($1::boolean OR d.tenant_id = $2::text) AND ($3 = '' OR d.endpoint_id = $3) AND ($4 = '' OR d.status = $4)
ORDER BY d.updated_at DESC, d.endpoint_id, d.event_id LIMIT $5`,
		tenantArgs(q.Tenants, q.EndpointID, string(q.Status), max(q.Limit, 1))...)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event.Delivery, error) { return scanDelivery(row) })
	return out, translate(err)
}

// AllEndpoints implements store.OperatorLister.
func (s *Store) AllEndpoints(ctx context.Context, tenants store.TenantFilter) ([]event.Endpoint, error) {
	return s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE `+tenantsWhere+` ORDER BY tenant_id, id`,
		tenantArgs(tenants)...)
}

// ListOperatorActions implements store.OperatorLister.
func (s *Store) ListOperatorActions(ctx context.Context, q store.ActionSearch) ([]store.OperatorAction, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+operatorActionColumns+` FROM operator_actions WHERE `+tenantsWhere+`
ORDER BY created_at DESC, id DESC LIMIT $3`, tenantArgs(q.Tenants, max(q.Limit, 1))...)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.OperatorAction, error) {
		var a store.OperatorAction
		var result string
		err := row.Scan(&a.KeyHash, &a.Fingerprint, &a.ID, &a.Actor, &a.Action, &a.TenantID, &a.Target, &a.Reason, &result,
			&a.EventID, &a.CreatedAt)
		a.Result, a.CreatedAt = []byte(result), a.CreatedAt.UTC()
		return a, err
	})
	return out, translate(err)
}

// AttemptsByProviderRef implements store.OperatorLister.
func (s *Store) AttemptsByProviderRef(ctx context.Context, tenants store.TenantFilter, ref string) ([]payment.Attempt, error) {
	return s.attempts(ctx, `SELECT `+attemptColumns+` FROM provider_attempts WHERE `+tenantsWhere+` AND provider_ref = $3
ORDER BY created_at, provider_key`, tenantArgs(tenants, ref)...)
}

// DeliveryBacklog implements store.OperatorLister in one statement.
func (s *Store) DeliveryBacklog(ctx context.Context) (store.DeliveryBacklog, error) {
	var b store.DeliveryBacklog
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `SELECT orderly_now(),
       (SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'),
       (SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'delivering')),
       (SELECT min(created_at) FROM webhook_deliveries WHERE status IN ('pending', 'delivering'))`).Scan(
		&b.Now, &b.Failed, &b.Pending, &oldest)
	if oldest != nil {
		b.OldestPending = oldest.UTC()
	}
	b.Now = b.Now.UTC()
	return b, translate(err)
}

// RequeueFailedDeliveries implements store.OperatorExecutor.
func (e opExecutor) RequeueFailedDeliveries(ctx context.Context, endpointID string, since time.Time) (string, int, error) {
	var tenant *string
	n := 0
	err := e.db.query(ctx, `WITH w AS (
    UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = orderly_now(), locked_until = NULL,
        updated_at = orderly_now()
    WHERE endpoint_id = $1 AND status = 'failed' AND updated_at >= $2
    RETURNING 1
)
SELECT (SELECT tenant_id FROM webhook_endpoints WHERE id = $1), (SELECT count(*) FROM w)`,
		[]any{endpointID, since.UTC()}, func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&tenant, &n); err != nil {
					return err
				}
			}
			return nil
		})
	switch {
	case err != nil:
		return "", 0, translate(err)
	case tenant == nil:
		return "", 0, store.ErrNotFound
	}
	return *tenant, n, nil
}

// RotateEndpointSecret implements store.OperatorExecutor.
func (e opExecutor) RotateEndpointSecret(ctx context.Context, endpointID, secret string, grace time.Duration) (string, error) {
	var tenant *string
	err := e.db.query(ctx, `UPDATE webhook_endpoints SET
    previous_secret = CASE WHEN $3::bigint > 0 THEN secret END,
    previous_secret_until = CASE WHEN $3::bigint > 0 THEN orderly_now() + $3::bigint * interval '1 microsecond' END,
    secret = $2
WHERE id = $1 RETURNING tenant_id`, []any{endpointID, secret, grace.Microseconds()}, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&tenant); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return "", translate(err)
	case tenant == nil:
		return "", store.ErrNotFound
	}
	return *tenant, nil
}
