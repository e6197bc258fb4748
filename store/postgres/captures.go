package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/store"
)

var _ store.CaptureStore = (*Store)(nil)

const authColumns = `tenant_id, order_id, charge_key, intent_id, amount, currency, capture_before, status,
    flagged_at, created_at, updated_at`

const insertAuthorization = `INSERT INTO order_authorizations (` + authColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, 'authorized', NULL, $8, $8) ON CONFLICT (order_id) DO NOTHING`

// insertCapturedZero seeds the order's refund totals with nothing captured.
const insertCapturedZero = `INSERT INTO order_refund_totals (order_id, tenant_id, captured) VALUES ($1, $2, 0)
ON CONFLICT (order_id) DO NOTHING`

const setAuthorization = `UPDATE order_authorizations SET status = $3, updated_at = $4
WHERE order_id = $1 AND tenant_id = $2 AND status = 'authorized' RETURNING amount`

const existsAuthorization = `SELECT EXISTS (SELECT 1 FROM order_authorizations WHERE order_id = $1 AND tenant_id = $2)`

const setCaptured = `INSERT INTO order_refund_totals (order_id, tenant_id, captured) VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO UPDATE SET captured = EXCLUDED.captured`

const selectAuthorization = `SELECT ` + authColumns + ` FROM order_authorizations WHERE order_id = $1 AND tenant_id = $2`

const flagExpiring = `UPDATE order_authorizations SET flagged_at = $2
WHERE order_id IN (SELECT order_id FROM order_authorizations
    WHERE status = 'authorized' AND flagged_at IS NULL AND capture_before < $1
    ORDER BY capture_before LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING ` + authColumns

func scanAuthorizations(rows pgx.Rows) ([]store.Authorization, error) {
	var out []store.Authorization
	for rows.Next() {
		var a store.Authorization
		var before, flagged *time.Time
		var status string
		if err := rows.Scan(&a.TenantID, &a.OrderID, &a.ChargeKey, &a.IntentID, &a.Amount, &a.Currency, &before, &status,
			&flagged, &a.CreatedAt, &a.UpdatedAt); err != nil {
			return nil, err
		}
		a.Status = store.AuthorizationStatus(status)
		if before != nil {
			a.CaptureBefore = before.UTC()
		}
		if flagged != nil {
			a.FlaggedAt = flagged.UTC()
		}
		a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
		out = append(out, a)
	}
	return out, rows.Err()
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}

// PutAuthorization implements store.CaptureExecutor (two writes; in a
// transaction they are pipelined).
func (e executor) PutAuthorization(ctx context.Context, a store.Authorization) error {
	at := a.CreatedAt.UTC().Truncate(time.Microsecond)
	if err := e.db.exec(ctx, insertAuthorization, a.TenantID, a.OrderID, a.ChargeKey, a.IntentID, a.Amount, a.Currency,
		timeOrNil(a.CaptureBefore), at); err != nil {
		return translate(err)
	}
	return translate(e.db.exec(ctx, insertCapturedZero, a.OrderID, a.TenantID))
}

// SetAuthorization implements store.CaptureExecutor.
func (e executor) SetAuthorization(ctx context.Context, tenantID, orderID string, to store.AuthorizationStatus, at time.Time) error {
	var amount int64
	moved := false
	err := e.db.query(ctx, setAuthorization, []any{orderID, tenantID, string(to), at.UTC().Truncate(time.Microsecond)},
		func(rows pgx.Rows) error {
			for rows.Next() {
				moved = true
				if err := rows.Scan(&amount); err != nil {
					return err
				}
			}
			return rows.Err()
		})
	if err != nil {
		return translate(err)
	}
	if !moved {
		exists := false
		if err := e.db.query(ctx, existsAuthorization, []any{orderID, tenantID}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return noRow(rows)
			}
			return rows.Scan(&exists)
		}); err != nil {
			return translate(err)
		}
		if !exists {
			return store.ErrNotFound
		}
		return store.ErrVersionConflict
	}
	if to == store.AuthCaptured {
		return translate(e.db.exec(ctx, setCaptured, orderID, tenantID, amount))
	}
	return nil
}

// GetAuthorization implements store.CaptureExecutor.
func (e executor) GetAuthorization(ctx context.Context, tenantID, orderID string) (store.Authorization, error) {
	var as []store.Authorization
	err := e.db.query(ctx, selectAuthorization, []any{orderID, tenantID}, func(rows pgx.Rows) error {
		var err error
		as, err = scanAuthorizations(rows)
		return err
	})
	switch {
	case err != nil:
		return store.Authorization{}, translate(err)
	case len(as) == 0:
		return store.Authorization{}, store.ErrNotFound
	}
	return as[0], nil
}

// FlagExpiringAuthorizations implements store.CaptureStore in one statement.
func (s *Store) FlagExpiringAuthorizations(ctx context.Context, before, at time.Time, limit int) ([]store.Authorization, error) {
	var as []store.Authorization
	err := s.db.query(ctx, flagExpiring, []any{before.UTC(), at.UTC().Truncate(time.Microsecond), limit}, func(rows pgx.Rows) error {
		var err error
		as, err = scanAuthorizations(rows)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return as, translate(err)
}
