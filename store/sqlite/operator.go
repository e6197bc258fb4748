package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

var _ store.OperatorStore = (*Store)(nil)

// tenantsWhere is the TenantFilter of every operator read: ?1 all (0 or
// 1), ?2 the one tenant.
const tenantsWhere = `(?1 OR tenant_id = ?2)`

func tenantArgs(f store.TenantFilter, more ...any) []any {
	return append([]any{f.All, f.TenantID}, more...)
}

// rowsOf runs query and scans each row with scan.
func rowsOf[T any](ctx context.Context, c conn, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, v)
	}
	return out, translate(rows.Err())
}

// ParkedAttempts implements store.OperatorStore.
func (s *Store) ParkedAttempts(ctx context.Context, f store.ParkedFilter) ([]payment.Attempt, error) {
	return rowsOf(ctx, s.db, scanAttempt, `SELECT `+attemptColumns+` FROM provider_attempts
WHERE status = 'needs_attention' AND `+tenantsWhere+` ORDER BY updated_at, provider_key LIMIT ?3`,
		tenantArgs(f.Tenants, max(f.Limit, 1))...)
}

// FindOrder implements store.OperatorStore.
func (s *Store) FindOrder(ctx context.Context, tenants store.TenantFilter, id string) (order.Order, error) {
	o, err := scanOrder(s.db.QueryRowContext(ctx, `SELECT `+orderColumns+` FROM orders WHERE `+tenantsWhere+` AND id = ?3`,
		tenantArgs(tenants, id)...))
	return o, translate(err)
}

// History implements store.OperatorStore in one read transaction, so the
// parts agree with each other.
func (s *Store) History(ctx context.Context, tenants store.TenantFilter, id string) (store.OrderHistory, error) {
	var h store.OrderHistory
	o, err := s.FindOrder(ctx, tenants, id)
	if err != nil {
		return h, err
	}
	h.Order = o
	if h.Events, err = s.events(ctx, `SELECT `+eventColumns+` FROM order_events WHERE tenant_id = $1 AND order_id = $2
ORDER BY sequence`, o.TenantID, o.ID); err != nil {
		return h, err
	}
	if h.Attempts, err = rowsOf(ctx, s.db, scanAttempt, `SELECT `+attemptColumns+` FROM provider_attempts
WHERE tenant_id = ?1 AND order_id = ?2 ORDER BY created_at, provider_key`, o.TenantID, o.ID); err != nil {
		return h, err
	}
	if h.Deliveries, err = rowsOf(ctx, s.db, func(r scanner) (event.Delivery, error) { return scanDelivery(r) },
		`SELECT `+deliveryColumns+` FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE d.tenant_id = ?1 AND d.order_id = ?2 ORDER BY d.sequence, d.created_at, d.endpoint_id`, o.TenantID, o.ID); err != nil {
		return h, err
	}
	h.Keys, err = rowsOf(ctx, s.db, scanKey, `SELECT `+keyColumns+` FROM idempotency_keys WHERE tenant_id = ?1 AND resource_id = ?2
ORDER BY created_at, key_hash`, o.TenantID, o.ID)
	return h, err
}

// FindKeys implements store.OperatorStore.
func (s *Store) FindKeys(ctx context.Context, tenants store.TenantFilter, keyHash string) ([]idempotency.Record, error) {
	return rowsOf(ctx, s.db, scanKey, `SELECT `+keyColumns+` FROM idempotency_keys WHERE `+tenantsWhere+` AND key_hash = ?3
ORDER BY tenant_id`, tenantArgs(tenants, keyHash)...)
}

// FindEvent implements store.OperatorStore.
func (s *Store) FindEvent(ctx context.Context, tenants store.TenantFilter, id string) (event.Stored, error) {
	evs, err := s.events(ctx, `SELECT `+eventColumns+` FROM order_events WHERE `+tenantsWhere+` AND id = ?3`,
		tenantArgs(tenants, id)...)
	if err != nil {
		return event.Stored{}, err
	}
	if len(evs) == 0 {
		return event.Stored{}, store.ErrNotFound
	}
	return evs[0], nil
}

// FindEndpoint implements store.OperatorStore.
func (s *Store) FindEndpoint(ctx context.Context, tenants store.TenantFilter, id string) (event.Endpoint, error) {
	es, err := s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE `+tenantsWhere+` AND id = ?3`,
		tenantArgs(tenants, id)...)
	if err != nil {
		return event.Endpoint{}, err
	}
	if len(es) == 0 {
		return event.Endpoint{}, store.ErrNotFound
	}
	return es[0], nil
}

// FindDelivery implements store.OperatorStore.
func (s *Store) FindDelivery(ctx context.Context, tenants store.TenantFilter, endpointID, eventID string) (event.Delivery, error) {
	d, err := scanDelivery(s.db.QueryRowContext(ctx, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE (?1 OR d.tenant_id = ?2) AND d.endpoint_id = ?3 AND d.event_id = ?4`, tenantArgs(tenants, endpointID, eventID)...))
	return d, translate(err)
}

const operatorActionColumns = `key_hash, fingerprint, id, actor, action, tenant_id, target, reason, result, event_id, created_at`

// GetOperatorAction implements store.OperatorStore.
func (s *Store) GetOperatorAction(ctx context.Context, keyHash string) (store.OperatorAction, error) {
	var a store.OperatorAction
	var result string
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT `+operatorActionColumns+` FROM operator_actions WHERE key_hash = ?1`, keyHash).Scan(
		&a.KeyHash, &a.Fingerprint, &a.ID, &a.Actor, &a.Action, &a.TenantID, &a.Target, &a.Reason, &result, &a.EventID, &created)
	a.Result, a.CreatedAt = []byte(result), fromMicros(created)
	return a, translate(err)
}

// OperatorTx implements store.OperatorStore: one IMMEDIATE transaction.
func (s *Store) OperatorTx(ctx context.Context, fn func(tx store.OperatorExecutor) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return fn(opExecutor{executor{c: tx, clock: s.clock}}) })
}

// opExecutor is an executor inside an OperatorTx.
type opExecutor struct{ executor }

// SettleParkedAttempt implements store.OperatorExecutor.
func (e opExecutor) SettleParkedAttempt(ctx context.Context, u store.AttemptUpdate) error {
	res, err := e.c.ExecContext(ctx, `UPDATE provider_attempts SET status = ?2, provider_ref = COALESCE(?3, provider_ref),
    error_code = ?4, updated_at = ?5
WHERE provider_key = ?1 AND status = 'needs_attention'`, u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), micros(u.At))
	return guarded(res, err)
}

// guarded maps a guarded write that changed no row to ErrVersionConflict.
func guarded(res sql.Result, err error) error {
	if err != nil {
		return translate(err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return translate(err)
	} else if n == 0 {
		return store.ErrVersionConflict
	}
	return nil
}

// ResolveParkedKeys implements store.OperatorExecutor.
func (e opExecutor) ResolveParkedKeys(ctx context.Context, providerKey string, out idempotency.Record) (int, error) {
	res, err := e.c.ExecContext(ctx, `UPDATE idempotency_keys SET state = 'completed', resource_id = COALESCE(?2, resource_id),
    error_code = ?3, error_detail = ?4, locked_until = NULL
WHERE attempt_key = ?1 AND state = 'needs_attention'`, providerKey, nullable(out.ResourceID), nullable(string(out.ErrorCode)),
		nullable(out.ErrorDetail))
	if err != nil {
		return 0, translate(err)
	}
	n, err := res.RowsAffected()
	return int(n), translate(err)
}

// guardedTenant runs write (one row's guarded UPDATE … RETURNING
// tenant_id) and, when it changed nothing, exists (the row's tenant): the
// outcome is the tenant, ErrVersionConflict or ErrNotFound.
func (e opExecutor) guardedTenant(ctx context.Context, write, exists string, args ...any) (string, error) {
	var tenant string
	err := e.c.QueryRowContext(ctx, write, args...).Scan(&tenant)
	if !errors.Is(err, sql.ErrNoRows) {
		return tenant, translate(err)
	}
	if err := e.c.QueryRowContext(ctx, exists, args...).Scan(&tenant); err != nil {
		return "", translate(err)
	}
	return "", store.ErrVersionConflict
}

// RequeueDelivery implements store.OperatorExecutor.
func (e opExecutor) RequeueDelivery(ctx context.Context, endpointID, eventID string) (string, error) {
	now := e.now()
	return e.guardedTenant(ctx, `UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = ?3, locked_until = NULL,
    updated_at = ?3
WHERE endpoint_id = ?1 AND event_id = ?2 AND status = 'failed' RETURNING tenant_id`,
		`SELECT tenant_id FROM webhook_deliveries WHERE endpoint_id = ?1 AND event_id = ?2 AND ?3 IS NOT NULL`,
		endpointID, eventID, now)
}

// EnableEndpoint implements store.OperatorExecutor.
func (e opExecutor) EnableEndpoint(ctx context.Context, endpointID string) (string, error) {
	return e.guardedTenant(ctx, `UPDATE webhook_endpoints SET disabled_reason = NULL
WHERE id = ?1 AND disabled_reason IS NOT NULL RETURNING tenant_id`,
		`SELECT tenant_id FROM webhook_endpoints WHERE id = ?1`, endpointID)
}

// RecordOperatorAction implements store.OperatorExecutor.
func (e opExecutor) RecordOperatorAction(ctx context.Context, a store.OperatorAction) (bool, error) {
	res, err := e.c.ExecContext(ctx, `INSERT INTO operator_actions (`+operatorActionColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (key_hash) DO NOTHING`,
		a.KeyHash, a.Fingerprint, a.ID, a.Actor, a.Action, a.TenantID, a.Target, a.Reason, string(a.Result), a.EventID,
		micros(a.CreatedAt))
	if err != nil {
		return false, translate(err)
	}
	n, err := res.RowsAffected()
	return n == 1, translate(err)
}
