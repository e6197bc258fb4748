package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

var _ store.OperatorStore = (*Store)(nil)

// tenantsWhere is the TenantFilter of every operator read: $1 all, $2 the
// one tenant.
const tenantsWhere = `($1::boolean OR tenant_id = $2::text)`

func tenantArgs(f store.TenantFilter, more ...any) []any {
	return append([]any{f.All, f.TenantID}, more...)
}

// ParkedAttempts implements store.OperatorStore.
func (s *Store) ParkedAttempts(ctx context.Context, f store.ParkedFilter) ([]payment.Attempt, error) {
	return s.attempts(ctx, `SELECT `+attemptColumns+` FROM provider_attempts
WHERE status = 'needs_attention' AND `+tenantsWhere+` ORDER BY updated_at, provider_key LIMIT $3`,
		tenantArgs(f.Tenants, max(f.Limit, 1))...)
}

func (s *Store) attempts(ctx context.Context, sql string, args ...any) ([]payment.Attempt, error) {
	var out []payment.Attempt
	err := s.db.query(ctx, sql, args, collectAttempts(&out))
	return out, translate(err)
}

// FindOrder implements store.OperatorStore.
func (s *Store) FindOrder(ctx context.Context, tenants store.TenantFilter, id string) (order.Order, error) {
	var o *order.Order
	err := s.db.query(ctx, `SELECT `+orderColumns+` FROM orders WHERE `+tenantsWhere+` AND id = $3`,
		tenantArgs(tenants, id), func(rows pgx.Rows) error {
			for rows.Next() {
				var c orderCols
				if err := rows.Scan(c.targets()...); err != nil {
					return err
				}
				var err error
				if o, err = c.order(); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return order.Order{}, translate(err)
	}
	if o == nil {
		return order.Order{}, store.ErrNotFound
	}
	return *o, nil
}

// History implements store.OperatorStore: the order, then its events,
// attempts, deliveries and keys, each read as it is then.
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
	if h.Attempts, err = s.attempts(ctx, `SELECT `+attemptColumns+` FROM provider_attempts
WHERE tenant_id = $1 AND order_id = $2 ORDER BY created_at, provider_key`, o.TenantID, o.ID); err != nil {
		return h, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE d.tenant_id = $1 AND d.order_id = $2 ORDER BY d.sequence, d.created_at, d.endpoint_id`, o.TenantID, o.ID)
	if err != nil {
		return h, translate(err)
	}
	if h.Deliveries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (event.Delivery, error) { return scanDelivery(row) }); err != nil {
		return h, translate(err)
	}
	h.Keys, err = s.keys(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE tenant_id = $1 AND resource_id = $2
ORDER BY created_at, key_hash`, o.TenantID, o.ID)
	return h, err
}

func (s *Store) keys(ctx context.Context, sql string, args ...any) ([]idempotency.Record, error) {
	var out []idempotency.Record
	err := s.db.query(ctx, sql, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var c keyCols
			if err := rows.Scan(c.targets()...); err != nil {
				return err
			}
			if r, ok := c.record(); ok {
				out = append(out, r)
			}
		}
		return nil
	})
	return out, translate(err)
}

// FindKeys implements store.OperatorStore.
func (s *Store) FindKeys(ctx context.Context, tenants store.TenantFilter, keyHash string) ([]idempotency.Record, error) {
	return s.keys(ctx, `SELECT `+keyColumns+` FROM idempotency_keys WHERE `+tenantsWhere+` AND key_hash = $3
ORDER BY tenant_id`, tenantArgs(tenants, keyHash)...)
}

// FindEvent implements store.OperatorStore.
func (s *Store) FindEvent(ctx context.Context, tenants store.TenantFilter, id string) (event.Stored, error) {
	evs, err := s.events(ctx, `SELECT `+eventColumns+` FROM order_events WHERE `+tenantsWhere+` AND id = $3`,
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
	es, err := s.endpoints(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE `+tenantsWhere+` AND id = $3`,
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
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+`
FROM webhook_deliveries d JOIN order_events ev ON ev.id = d.event_id
WHERE ($1::boolean OR d.tenant_id = $2::text) AND d.endpoint_id = $3 AND d.event_id = $4`,
		tenantArgs(tenants, endpointID, eventID)...)
	if err != nil {
		return event.Delivery{}, translate(err)
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (event.Delivery, error) { return scanDelivery(row) })
	if err != nil {
		return event.Delivery{}, translate(err)
	}
	if len(ds) == 0 {
		return event.Delivery{}, store.ErrNotFound
	}
	return ds[0], nil
}

const operatorActionColumns = `key_hash, fingerprint, id, actor, action, tenant_id, target, reason, result, event_id, created_at`

// GetOperatorAction implements store.OperatorStore.
func (s *Store) GetOperatorAction(ctx context.Context, keyHash string) (store.OperatorAction, error) {
	var a store.OperatorAction
	var result string
	err := s.pool.QueryRow(ctx, `SELECT `+operatorActionColumns+` FROM operator_actions WHERE key_hash = $1`, keyHash).Scan(
		&a.KeyHash, &a.Fingerprint, &a.ID, &a.Actor, &a.Action, &a.TenantID, &a.Target, &a.Reason, &result, &a.EventID, &a.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, store.ErrNotFound
	}
	a.Result, a.CreatedAt = []byte(result), a.CreatedAt.UTC()
	return a, translate(err)
}

// OperatorTx implements store.OperatorStore: one pipelined transaction, as
// InTx.
func (s *Store) OperatorTx(ctx context.Context, fn func(tx store.OperatorExecutor) error) error {
	return s.InTx(ctx, func(tx store.Executor) error { return fn(opExecutor{tx.(executor)}) })
}

// opExecutor is an executor inside an OperatorTx.
type opExecutor struct{ executor }

// settleParked is SettleAttempt guarded on needs_attention.
const settleParked = `
WITH w AS (
    UPDATE provider_attempts SET status = $2, provider_ref = COALESCE($3, provider_ref), error_code = $4, updated_at = $5
    WHERE provider_key = $1 AND status = 'needs_attention'
    RETURNING 1
)
SELECT orderly_guard(EXISTS (SELECT 1 FROM w), 'version_conflict')`

// SettleParkedAttempt implements store.OperatorExecutor.
func (e opExecutor) SettleParkedAttempt(ctx context.Context, u store.AttemptUpdate) error {
	return translate(e.db.exec(ctx, settleParked, u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), u.At.UTC()))
}

// ResolveParkedKeys implements store.OperatorExecutor.
func (e opExecutor) ResolveParkedKeys(ctx context.Context, providerKey string, out idempotency.Record) (int, error) {
	n := 0
	err := e.db.query(ctx, `WITH w AS (
    UPDATE idempotency_keys SET state = 'completed', resource_id = COALESCE($2, resource_id), error_code = $3,
        error_detail = $4, locked_until = NULL
    WHERE attempt_key = $1 AND state = 'needs_attention'
    RETURNING 1
)
SELECT count(*) FROM w`, []any{providerKey, nullable(out.ResourceID), nullable(string(out.ErrorCode)), nullable(out.ErrorDetail)},
		func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&n); err != nil {
					return err
				}
			}
			return nil
		})
	return n, translate(err)
}

// guardedTenant runs sql, a CTE "w" that returns the changed row's
// tenant_id and a second select of the row's tenant as it was, and maps
// the outcome: changed, in the wrong state (ErrVersionConflict) or absent
// (ErrNotFound).
func (e opExecutor) guardedTenant(ctx context.Context, sql string, args ...any) (string, error) {
	var changed, exists *string
	err := e.db.query(ctx, sql, args, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&changed, &exists); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return "", translate(err)
	case changed != nil:
		return *changed, nil
	case exists != nil:
		return "", store.ErrVersionConflict
	}
	return "", store.ErrNotFound
}

// RequeueDelivery implements store.OperatorExecutor.
func (e opExecutor) RequeueDelivery(ctx context.Context, endpointID, eventID string) (string, error) {
	return e.guardedTenant(ctx, `WITH w AS (
    UPDATE webhook_deliveries SET status = 'pending', next_attempt_at = orderly_now(), locked_until = NULL,
        updated_at = orderly_now()
    WHERE endpoint_id = $1 AND event_id = $2 AND status = 'failed'
    RETURNING tenant_id
)
SELECT (SELECT tenant_id FROM w), (SELECT tenant_id FROM webhook_deliveries WHERE endpoint_id = $1 AND event_id = $2)`,
		endpointID, eventID)
}

// EnableEndpoint implements store.OperatorExecutor.
func (e opExecutor) EnableEndpoint(ctx context.Context, endpointID string) (string, error) {
	return e.guardedTenant(ctx, `WITH w AS (
    UPDATE webhook_endpoints SET disabled_reason = NULL WHERE id = $1 AND disabled_reason IS NOT NULL
    RETURNING tenant_id
)
SELECT (SELECT tenant_id FROM w), (SELECT tenant_id FROM webhook_endpoints WHERE id = $1)`, endpointID)
}

// RecordOperatorAction implements store.OperatorExecutor: a concurrent
// insert of the same key waits for the other transaction and then finds
// its row.
func (e opExecutor) RecordOperatorAction(ctx context.Context, a store.OperatorAction) (bool, error) {
	recorded := false
	err := e.db.query(ctx, `INSERT INTO operator_actions (`+operatorActionColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (key_hash) DO NOTHING RETURNING true`,
		[]any{a.KeyHash, a.Fingerprint, a.ID, a.Actor, a.Action, a.TenantID, a.Target, a.Reason, string(a.Result),
			a.EventID, a.CreatedAt.UTC().Truncate(time.Microsecond)},
		func(rows pgx.Rows) error {
			for rows.Next() {
				recorded = true
			}
			return nil
		})
	return recorded, translate(err)
}
