package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

var _ store.OperatorLister = (*Store)(nil)

// SearchOrders implements store.OperatorLister.
func (s *Store) SearchOrders(ctx context.Context, q store.OrderSearch) ([]order.Order, error) {
	return rowsOf(ctx, s.db, scanOrder, `SELECT `+orderColumns+` FROM orders WHERE `+tenantsWhere+`
  AND (?3 = '' OR customer_id = ?3) AND (?4 = '' OR state = ?4) ORDER BY id DESC LIMIT ?5`,
		tenantArgs(q.Tenants, q.CustomerID, string(q.State), max(q.Limit, 1))...)
}

// SearchDeliveries implements store.OperatorLister.
func (s *Store) SearchDeliveries(ctx context.Context, q store.DeliverySearch) ([]event.Delivery, error) {
	return rowsOf(ctx, s.db, func(r scanner) (event.Delivery, error) { return scanDelivery(r) }, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE (?1 OR d.tenant_id = ?2) AND (?3 = '' OR d.endpoint_id = ?3) AND (?4 = '' OR d.status = ?4)
ORDER BY d.updated_at DESC, d.endpoint_id, d.event_id LIMIT ?5`,
		tenantArgs(q.Tenants, q.EndpointID, string(q.Status), max(q.Limit, 1))...)
}

// AllEndpoints implements store.OperatorLister.
func (s *Store) AllEndpoints(ctx context.Context, tenants store.TenantFilter) ([]event.Endpoint, error) {
	return s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE `+tenantsWhere+` ORDER BY tenant_id, id`,
		tenantArgs(tenants)...)
}

// ListOperatorActions implements store.OperatorLister.
func (s *Store) ListOperatorActions(ctx context.Context, q store.ActionSearch) ([]store.OperatorAction, error) {
	return rowsOf(ctx, s.db, func(r scanner) (store.OperatorAction, error) {
		var a store.OperatorAction
		var result string
		var created int64
		err := r.Scan(&a.KeyHash, &a.Fingerprint, &a.ID, &a.Actor, &a.Action, &a.TenantID, &a.Target, &a.Reason, &result,
			&a.EventID, &created)
		a.Result, a.CreatedAt = []byte(result), fromMicros(created)
		return a, err
	}, `SELECT `+operatorActionColumns+` FROM operator_actions WHERE `+tenantsWhere+`
ORDER BY created_at DESC, id DESC LIMIT ?3`, tenantArgs(q.Tenants, max(q.Limit, 1))...)
}

// AttemptsByProviderRef implements store.OperatorLister.
func (s *Store) AttemptsByProviderRef(ctx context.Context, tenants store.TenantFilter, ref string) ([]payment.Attempt, error) {
	return rowsOf(ctx, s.db, scanAttempt, `SELECT `+attemptColumns+` FROM provider_attempts WHERE `+tenantsWhere+`
  AND provider_ref = ?3 ORDER BY created_at, provider_key`, tenantArgs(tenants, ref)...)
}

// DeliveryBacklog implements store.OperatorLister in one statement.
func (s *Store) DeliveryBacklog(ctx context.Context) (store.DeliveryBacklog, error) {
	b := store.DeliveryBacklog{Now: fromMicros(s.now())}
	var oldest sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT
       (SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'),
       (SELECT count(*) FROM webhook_deliveries WHERE status IN ('pending', 'delivering')),
       (SELECT min(created_at) FROM webhook_deliveries WHERE status IN ('pending', 'delivering'))`).Scan(
		&b.Failed, &b.Pending, &oldest)
	if oldest.Valid {
		b.OldestPending = fromMicros(oldest.Int64)
	}
	return b, translate(err)
}

// RequeueFailedDeliveries implements store.OperatorExecutor.
func (e opExecutor) RequeueFailedDeliveries(ctx context.Context, endpointID string, since time.Time) (string, int, error) {
	var tenant string
	if err := e.c.QueryRowContext(ctx, `SELECT tenant_id FROM webhook_endpoints WHERE id = ?1`, endpointID).Scan(&tenant); err != nil {
		return "", 0, translate(err)
	}
	now := e.now()
	res, err := e.c.ExecContext(ctx, `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?3, locked_until = NULL,
    updated_at = ?3
WHERE endpoint_id = ?1 AND status = 'failed' AND updated_at >= ?2`, endpointID, micros(since), now)
	if err != nil {
		return "", 0, translate(err)
	}
	n, err := res.RowsAffected()
	return tenant, int(n), translate(err)
}

// RotateEndpointSecret implements store.OperatorExecutor.
func (e opExecutor) RotateEndpointSecret(ctx context.Context, endpointID, secret string, grace time.Duration) (string, error) {
	var tenant string
	err := e.c.QueryRowContext(ctx, `UPDATE webhook_endpoints SET
    previous_secret = CASE WHEN ?3 > 0 THEN secret END,
    previous_secret_until = CASE WHEN ?3 > 0 THEN ?4 + ?3 END,
    secret = ?2
WHERE id = ?1 RETURNING tenant_id`, endpointID, secret, grace.Microseconds(), e.now()).Scan(&tenant)
	return tenant, translate(err)
}
