package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/orderly/orderly/store"
)

var _ store.CaptureStore = (*Store)(nil)

// The statements mirror store/postgres/captures.go.
const authColumns = `tenant_id, order_id, charge_key, intent_id, amount, currency, capture_before, status,
    flagged_at, created_at, updated_at`

const insertAuthorization = `INSERT INTO order_authorizations (` + authColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'authorized', NULL, ?8, ?8) ON CONFLICT (order_id) DO NOTHING`

const insertCapturedZero = `INSERT INTO order_refund_totals (order_id, tenant_id, captured) VALUES (?1, ?2, 0)
ON CONFLICT (order_id) DO NOTHING`

const setAuthorization = `UPDATE order_authorizations SET status = ?3, updated_at = ?4
WHERE order_id = ?1 AND tenant_id = ?2 AND status = 'authorized' RETURNING amount`

const existsAuthorization = `SELECT EXISTS (SELECT 1 FROM order_authorizations WHERE order_id = ?1 AND tenant_id = ?2)`

const setCaptured = `INSERT INTO order_refund_totals (order_id, tenant_id, captured) VALUES (?1, ?2, ?3)
ON CONFLICT (order_id) DO UPDATE SET captured = excluded.captured`

const selectAuthorization = `SELECT ` + authColumns + ` FROM order_authorizations WHERE order_id = ?1 AND tenant_id = ?2`

const flagExpiring = `UPDATE order_authorizations SET flagged_at = ?2
WHERE order_id IN (SELECT order_id FROM order_authorizations
    WHERE status = 'authorized' AND flagged_at IS NULL AND capture_before < ?1
    ORDER BY capture_before LIMIT ?3)
RETURNING ` + authColumns

type authScanner interface{ Scan(dest ...any) error }

func scanAuthorization(r authScanner) (store.Authorization, error) {
	var a store.Authorization
	var before, flagged sql.NullInt64
	var created, updated int64
	var status string
	if err := r.Scan(&a.TenantID, &a.OrderID, &a.ChargeKey, &a.IntentID, &a.Amount, &a.Currency, &before, &status,
		&flagged, &created, &updated); err != nil {
		return a, err
	}
	a.Status = store.AuthorizationStatus(status)
	a.CaptureBefore, a.FlaggedAt = zeroOrTime(before), zeroOrTime(flagged)
	a.CreatedAt, a.UpdatedAt = fromMicros(created), fromMicros(updated)
	return a, nil
}

func microsOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return micros(t)
}

// PutAuthorization implements store.CaptureExecutor. It must run in a
// transaction (Store's opens one).
func (e executor) PutAuthorization(ctx context.Context, a store.Authorization) error {
	if _, err := e.c.ExecContext(ctx, insertAuthorization, a.TenantID, a.OrderID, a.ChargeKey, a.IntentID, a.Amount,
		a.Currency, microsOrNil(a.CaptureBefore), micros(a.CreatedAt)); err != nil {
		return translate(err)
	}
	_, err := e.c.ExecContext(ctx, insertCapturedZero, a.OrderID, a.TenantID)
	return translate(err)
}

// SetAuthorization implements store.CaptureExecutor. It must run in a
// transaction (Store's opens one).
func (e executor) SetAuthorization(ctx context.Context, tenantID, orderID string, to store.AuthorizationStatus, at time.Time) error {
	var amount int64
	err := e.c.QueryRowContext(ctx, setAuthorization, orderID, tenantID, string(to), micros(at)).Scan(&amount)
	if errors.Is(err, sql.ErrNoRows) {
		var exists bool
		if err := e.c.QueryRowContext(ctx, existsAuthorization, orderID, tenantID).Scan(&exists); err != nil {
			return translate(err)
		}
		if !exists {
			return store.ErrNotFound
		}
		return store.ErrVersionConflict
	} else if err != nil {
		return translate(err)
	}
	if to == store.AuthCaptured {
		_, err = e.c.ExecContext(ctx, setCaptured, orderID, tenantID, amount)
	}
	return translate(err)
}

// GetAuthorization implements store.CaptureExecutor.
func (e executor) GetAuthorization(ctx context.Context, tenantID, orderID string) (store.Authorization, error) {
	a, err := scanAuthorization(e.c.QueryRowContext(ctx, selectAuthorization, orderID, tenantID))
	return a, translate(err)
}

// PutAuthorization implements store.CaptureExecutor in one IMMEDIATE
// transaction.
func (s *Store) PutAuthorization(ctx context.Context, a store.Authorization) error {
	return s.inTx(ctx, func(tx *sql.Tx) error { return executor{c: tx, clock: s.clock}.PutAuthorization(ctx, a) })
}

// SetAuthorization implements store.CaptureExecutor in one IMMEDIATE
// transaction.
func (s *Store) SetAuthorization(ctx context.Context, tenantID, orderID string, to store.AuthorizationStatus, at time.Time) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		return executor{c: tx, clock: s.clock}.SetAuthorization(ctx, tenantID, orderID, to, at)
	})
}

// FlagExpiringAuthorizations implements store.CaptureStore in one
// IMMEDIATE transaction.
func (s *Store) FlagExpiringAuthorizations(ctx context.Context, before, at time.Time, limit int) (out []store.Authorization, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, flagExpiring, micros(before), micros(at), limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			a, err := scanAuthorization(rows)
			if err != nil {
				return err
			}
			out = append(out, a)
		}
		return rows.Err()
	})
	return out, err
}
