package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

var _ store.RefundStore = (*Store)(nil)

// selectRefund reads refund $1 with its attempt's status, the order's
// succeeded charge (what is refunded) and the order's totals.
const selectRefund = `
SELECT r.provider_key, r.tenant_id, r.order_id, r.amount, r.currency, r.reason, a.status,
    COALESCE(a.provider_ref, ''), a.key_sent_at, r.created_at,
    COALESCE((SELECT c.provider_key FROM provider_attempts c WHERE c.order_id = r.order_id AND c.kind = 'charge'
        AND c.status = 'succeeded' ORDER BY c.created_at DESC LIMIT 1), ''),
    COALESCE((SELECT c.intent_id FROM provider_attempts c WHERE c.order_id = r.order_id AND c.kind = 'charge'
        AND c.status = 'succeeded' ORDER BY c.created_at DESC LIMIT 1), ''),
    COALESCE(t.captured, 0), COALESCE(t.reserved, 0), COALESCE(t.refunded, 0), COALESCE(r.refunded_after, 0),
    COALESCE(a.error_code, '')
FROM order_refunds r JOIN provider_attempts a ON a.provider_key = r.provider_key
LEFT JOIN order_refund_totals t ON t.order_id = r.order_id
WHERE r.provider_key = $1`

const selectRefundTotals = `SELECT captured, reserved, refunded FROM order_refund_totals WHERE order_id = $1 AND tenant_id = $2`

const lockOrderForRefund = `SELECT state, amount FROM orders WHERE id = $1 AND tenant_id = $2 FOR UPDATE`

// otherOpenNonRefund reports whether an attempt on order $1 other than its
// partial refunds (provider keys like $2) is open.
const otherOpenNonRefund = `SELECT EXISTS (SELECT 1 FROM provider_attempts WHERE order_id = $1
    AND provider_key NOT LIKE $2 AND status IN ('pending', 'unknown', 'needs_attention'))`

const insertRefundTotals = `INSERT INTO order_refund_totals (order_id, tenant_id, captured) VALUES ($1, $2, $3)
ON CONFLICT (order_id) DO NOTHING`

// reserveRefund is the compare-and-set on the reserved total.
const reserveRefund = `UPDATE order_refund_totals SET reserved = reserved + $2
WHERE order_id = $1 AND reserved + $2 <= captured RETURNING captured, reserved, refunded`

const insertRefund = `INSERT INTO order_refunds (provider_key, tenant_id, order_id, amount, currency, reason, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (provider_key) DO NOTHING`

const reopenFailedRefund = `UPDATE provider_attempts SET status = 'pending', error_code = NULL, updated_at = $2
WHERE provider_key = $1 AND status = 'failed'`

// settleOpenAttempt settles attempt $1 only if it is open, returning its
// amount when it did.
const settleOpenAttempt = `UPDATE provider_attempts SET status = $2, provider_ref = COALESCE($3, provider_ref),
    error_code = $4, updated_at = $5
WHERE provider_key = $1 AND status IN ('pending', 'unknown', 'needs_attention') RETURNING amount`

const addRefunded = `UPDATE order_refund_totals SET refunded = refunded + $2 WHERE order_id = $1
RETURNING captured, reserved, refunded`

const releaseReserved = `UPDATE order_refund_totals SET reserved = reserved - $2 WHERE order_id = $1
RETURNING captured, reserved, refunded`

const setRefundedAfter = `UPDATE order_refunds SET refunded_after = $2 WHERE provider_key = $1`

const bumpOrderVersion = `UPDATE orders SET version = version + 1 WHERE id = $1 AND tenant_id = $2 RETURNING ` + orderColumns

func (e executor) getRefund(ctx context.Context, key string) (store.Refund, store.RefundTotals, error) {
	var r store.Refund
	var t store.RefundTotals
	found := false
	err := e.db.query(ctx, selectRefund, []any{key}, func(rows pgx.Rows) error {
		for rows.Next() {
			var status string
			var sent *time.Time
			if err := rows.Scan(&r.ProviderKey, &r.TenantID, &r.OrderID, &r.Amount, &r.Currency, &r.Reason, &status,
				&r.ProviderRef, &sent, &r.CreatedAt, &r.ChargeKey, &r.IntentID, &t.Captured, &t.Reserved, &t.Refunded, &r.RefundedAfter, &r.ErrorCode); err != nil {
				return err
			}
			r.Status = payment.AttemptStatus(status)
			if sent != nil {
				r.KeySentAt = sent.UTC()
			}
			r.CreatedAt = r.CreatedAt.UTC()
			found = true
		}
		return nil
	})
	if err != nil {
		return r, t, translate(err)
	}
	if !found {
		return r, t, store.ErrNotFound
	}
	return r, t, nil
}

func (e executor) totals(ctx context.Context, q string, args ...any) (store.RefundTotals, bool, error) {
	var t store.RefundTotals
	found := false
	err := e.db.query(ctx, q, args, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&t.Captured, &t.Reserved, &t.Refunded); err != nil {
				return err
			}
			found = true
		}
		return nil
	})
	return t, found, translate(err)
}

// ReserveRefund implements store.RefundStore in one transaction.
func (s *Store) ReserveRefund(ctx context.Context, l store.Lease, r store.Refund) (out store.Refund, t store.RefundTotals, st order.State, err error) {
	err = s.InTx(ctx, func(tx store.Executor) error {
		e := tx.(executor)
		if err := e.db.exec(ctx, fenceRecordAttempt, l.TenantID, l.KeyHash, l.Token, r.ProviderKey); err != nil {
			return err
		}
		var amount int64
		var state string
		found := false
		if err := e.db.query(ctx, lockOrderForRefund, []any{r.OrderID, r.TenantID}, func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&state, &amount); err != nil {
					return err
				}
				found = true
			}
			return nil
		}); err != nil {
			return translate(err)
		}
		if !found {
			return store.ErrNotFound
		}
		st = order.State(state)
		existing, _, err := e.getRefund(ctx, r.ProviderKey)
		switch {
		case err == nil && existing.Status != payment.AttemptFailed:
			out, t, err = e.getRefund(ctx, r.ProviderKey)
			return err
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return err
		default:
			// A new refund, or a failed one reopened: the order must take
			// one (a reopened refund of an order cancelled meanwhile must
			// not fit under totals a reversal reopened), and no other call
			// on it (a shipment, the cancel's refund) may be open.
			if st != order.Paid && st != order.Fulfilled {
				return store.ErrRefundState
			}
			var busy bool
			if err := e.db.query(ctx, otherOpenNonRefund, []any{r.OrderID, r.OrderID + "/refunds/%"}, func(rows pgx.Rows) error {
				for rows.Next() {
					if err := rows.Scan(&busy); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return translate(err)
			}
			if busy {
				return store.ErrAttemptInFlight
			}
			if err := e.db.exec(ctx, insertRefundTotals, r.OrderID, r.TenantID, amount); err != nil {
				return translate(err)
			}
		}
		var ok bool
		if t, ok, err = e.totals(ctx, reserveRefund, r.OrderID, r.Amount); err != nil {
			return err
		} else if !ok {
			t, _, _ = e.totals(ctx, selectRefundTotals, r.OrderID, r.TenantID)
			return store.ErrRefundExceedsCaptured
		}
		if existing.ProviderKey != "" {
			if err := e.db.exec(ctx, reopenFailedRefund, r.ProviderKey, r.CreatedAt); err != nil {
				return translate(err)
			}
		} else {
			if err := e.db.exec(ctx, insertAttempt, r.ProviderKey, r.TenantID, r.OrderID, string(payment.AttemptRefund),
				string(payment.AttemptPending), r.Amount, r.Currency, "", nil, nil, r.CreatedAt, r.CreatedAt); err != nil {
				return translate(err)
			}
			if err := e.db.exec(ctx, insertRefund, r.ProviderKey, r.TenantID, r.OrderID, r.Amount, r.Currency, r.Reason,
				r.CreatedAt); err != nil {
				return translate(err)
			}
		}
		out, t, err = e.getRefund(ctx, r.ProviderKey)
		return err
	})
	if errors.Is(err, store.ErrRefundExceedsCaptured) || errors.Is(err, store.ErrRefundState) {
		return out, t, st, err
	}
	return out, t, st, translate(err)
}

// FinishRefund implements store.RefundStore in one transaction.
func (s *Store) FinishRefund(ctx context.Context, l store.Lease, f store.RefundFinish) (t store.RefundTotals, err error) {
	finish := func(f store.RefundFinish) error {
		return s.InTx(ctx, func(tx store.Executor) error {
			e := tx.(executor)
			if f.Outcome != nil {
				if err := e.CompleteKey(ctx, l, *f.Outcome); err != nil {
					return err
				}
			} else if err := e.ReleaseKey(ctx, l, f.ReleaseTo); err != nil {
				return err
			}
			t, err = e.settleRefund(ctx, f.Update, f.Event, settleOpen)
			if !errors.Is(err, errNotSettled) {
				return err
			}
			// Settled already: a late answer changes nothing, unless it
			// says succeeded of a refund settled rejected first.
			if f.Rejected != nil && f.Outcome != nil && f.Outcome.ErrorCode == "" {
				a, err := e.GetAttempt(ctx, f.Update.ProviderKey)
				if err != nil {
					return err
				}
				if a.Status == payment.AttemptRejected {
					return errSettledRejected
				}
			}
			return nil
		})
	}
	err = finish(f)
	if errors.Is(err, errSettledRejected) {
		// Rolled back: the key is completed with the rejection instead
		// (the same lock order, key first; rejected is final).
		f.Outcome = f.Rejected
		if err = finish(f); err == nil {
			return t, store.ErrRefundSettledRejected
		}
	}
	return t, translate(err)
}

// errSettledRejected rolls back a FinishRefund whose success found its
// attempt settled rejected first.
var errSettledRejected = errors.New("postgres: refund attempt settled rejected first")

// refundGuard is how settleRefund settles a partial refund's attempt: sql,
// a guarded UPDATE of provider_attempts taking (key, status, provider ref,
// error code, at) and returning the attempt's amount (no row: the attempt
// was in no state it settles); reverses, whether the attempt had succeeded
// and its amount comes off the refunded and reserved totals (a refund that
// failed at the provider later) rather than being settled from open.
type refundGuard struct {
	sql      string
	reverses bool
}

var (
	settleOpen       = refundGuard{sql: settleOpenAttempt}
	settleParkedOnly = refundGuard{sql: settleParkedRefund}
	reverseSucceeded = refundGuard{sql: reverseSucceededRefund, reverses: true}
)

// errNotSettled is settleRefund's answer when its guarded statement found
// the attempt in no state it settles: nothing was written.
var errNotSettled = errors.New("postgres: refund attempt not settled")

// settleRefund settles the partial refund's attempt u.ProviderKey with
// guard g (errNotSettled when its UPDATE changed no row), after locking
// the order's row: reversed (g.reverses), the amount comes off the refunded
// and reserved totals, the version moves on and ev's event is appended;
// to succeeded, the order's refunded total grows by the amount, its
// version moves on and ev's event is appended; to declined, rejected or
// failed, the reservation is released. It returns the totals after.
func (e executor) settleRefund(ctx context.Context, u store.AttemptUpdate, ev func(order.Order, store.RefundTotals) event.Event, g refundGuard) (store.RefundTotals, error) {
	r, t, err := e.getRefund(ctx, u.ProviderKey)
	if err != nil {
		return t, err
	}
	// The order's row first, as ReserveRefund locks it: the same lock
	// order (key, order, totals) in both, so racing refunds wait for each
	// other and never deadlock.
	if err := e.db.exec(ctx, lockOrderForRefund, r.OrderID, r.TenantID); err != nil {
		return t, translate(err)
	}
	var amount int64
	settled := false
	if err := e.db.query(ctx, g.sql, []any{u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), u.At}, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&amount); err != nil {
				return err
			}
			settled = true
		}
		return nil
	}); err != nil {
		return t, translate(err)
	}
	if !settled {
		return t, errNotSettled
	}
	switch {
	case g.reverses:
		if t, _, err = e.totals(ctx, takeBackRefunded, r.OrderID, amount); err != nil {
			return t, err
		}
		return t, e.bumpWithEvent(ctx, r, t, ev)
	case u.Status == payment.AttemptSucceeded:
		if t, _, err = e.totals(ctx, addRefunded, r.OrderID, amount); err != nil {
			return t, err
		}
		if err := e.db.exec(ctx, setRefundedAfter, r.ProviderKey, t.Refunded); err != nil {
			return t, translate(err)
		}
		return t, e.bumpWithEvent(ctx, r, t, ev)
	case u.Status == payment.AttemptDeclined, u.Status == payment.AttemptRejected, u.Status == payment.AttemptFailed:
		t, _, err = e.totals(ctx, releaseReserved, r.OrderID, amount)
		return t, err
	}
	return t, nil
}

// bumpWithEvent moves refund r's order's version on by one and appends
// ev's event of the order and totals t after.
func (e executor) bumpWithEvent(ctx context.Context, r store.Refund, t store.RefundTotals, ev func(order.Order, store.RefundTotals) event.Event) error {
	os, err := e.orders(ctx, bumpOrderVersion, r.OrderID, r.TenantID)
	if err != nil {
		return err
	}
	if len(os) == 0 {
		return store.ErrNotFound
	}
	if ev != nil {
		return e.AppendEvent(ctx, ev(os[0], t))
	}
	return nil
}

// reverseSucceededRefund settles attempt $1 only while it is succeeded
// (a refund that failed at the provider after it succeeded), returning
// its amount when it did.
const reverseSucceededRefund = `UPDATE provider_attempts SET status = $2, provider_ref = COALESCE($3, provider_ref),
    error_code = $4, updated_at = $5
WHERE provider_key = $1 AND status = 'succeeded' RETURNING amount`

// takeBackRefunded takes a failed refund's amount $2 off order $1's
// refunded and reserved totals.
const takeBackRefunded = `UPDATE order_refund_totals SET refunded = refunded - $2, reserved = reserved - $2
WHERE order_id = $1 RETURNING captured, reserved, refunded`

var _ store.RefundReverser = executor{}

// ReverseRefund implements store.RefundReverser with
// reverseSucceededRefund's guard.
func (e executor) ReverseRefund(ctx context.Context, u store.AttemptUpdate, ev func(order.Order, store.RefundTotals) event.Event) (store.RefundTotals, error) {
	t, err := e.settleRefund(ctx, u, ev, reverseSucceeded)
	if errors.Is(err, errNotSettled) {
		return t, store.ErrVersionConflict
	}
	return t, err
}

// settleParkedRefund settles attempt $1 only while it is needs_attention.
const settleParkedRefund = `UPDATE provider_attempts SET status = $2, provider_ref = COALESCE($3, provider_ref),
    error_code = $4, updated_at = $5
WHERE provider_key = $1 AND status = 'needs_attention' RETURNING amount`

var _ store.OpenRefundSettler = executor{}

// SettleOpenRefund implements store.OpenRefundSettler with
// settleOpenAttempt's guard.
func (e executor) SettleOpenRefund(ctx context.Context, u store.AttemptUpdate, ev func(order.Order, store.RefundTotals) event.Event) (store.RefundTotals, error) {
	t, err := e.settleRefund(ctx, u, ev, settleOpen)
	if errors.Is(err, errNotSettled) {
		return t, store.ErrVersionConflict
	}
	return t, err
}

var _ store.ParkedRefundSettler = opExecutor{}

// SettleParkedRefund implements store.ParkedRefundSettler.
func (e opExecutor) SettleParkedRefund(ctx context.Context, u store.AttemptUpdate, ev func(order.Order, store.RefundTotals) event.Event) (store.RefundTotals, error) {
	t, err := e.settleRefund(ctx, u, ev, settleParkedOnly)
	if errors.Is(err, errNotSettled) {
		return t, store.ErrVersionConflict
	}
	return t, err
}

// selectParkedRefund finds a partial refund of order $1 (provider keys
// like $3) of tenant $2 that is parked.
const selectParkedRefund = `SELECT provider_key FROM provider_attempts WHERE order_id = $1 AND tenant_id = $2
    AND provider_key LIKE $3 AND status = 'needs_attention' ORDER BY created_at LIMIT 1`

var _ store.ParkedRefunds = (*Store)(nil)

// ParkedRefund implements store.ParkedRefunds.
func (s *Store) ParkedRefund(ctx context.Context, tenantID, orderID string) (payment.Attempt, error) {
	var key string
	found := false
	if err := s.db.query(ctx, selectParkedRefund, []any{orderID, tenantID, orderID + "/refunds/%"}, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&key); err != nil {
				return err
			}
			found = true
		}
		return nil
	}); err != nil {
		return payment.Attempt{}, translate(err)
	}
	if !found {
		return payment.Attempt{}, store.ErrNotFound
	}
	return s.GetAttempt(ctx, key)
}

// GetRefund implements store.RefundStore.
func (s *Store) GetRefund(ctx context.Context, providerKey string) (store.Refund, store.RefundTotals, error) {
	return s.getRefund(ctx, providerKey)
}

// RefundTotals implements store.RefundStore.
func (s *Store) RefundTotals(ctx context.Context, tenantID, orderID string) (store.RefundTotals, error) {
	t, _, err := s.totals(ctx, selectRefundTotals, orderID, tenantID)
	return t, err
}

var _ store.RefundCloser = executor{}

const insertTotalsOfOrder = `INSERT INTO order_refund_totals (order_id, tenant_id, captured)
SELECT id, tenant_id, amount FROM orders WHERE id = $1 AND tenant_id = $2 ON CONFLICT (order_id) DO NOTHING`

const closeRefundTotals = `UPDATE order_refund_totals SET reserved = captured, refunded = captured
WHERE order_id = $1 AND tenant_id = $2 RETURNING captured, reserved, refunded`

const setAttemptAmount = `UPDATE provider_attempts SET amount = $2 WHERE provider_key = $1`

// CloseRefunds implements store.RefundCloser; the caller's transaction
// holds the order's row (CompareAndSetOrder locked it).
func (e executor) CloseRefunds(ctx context.Context, tenantID, orderID, providerKey string, refunded *int64) (int64, store.RefundTotals, error) {
	t, found, err := e.totals(ctx, selectRefundTotals, orderID, tenantID)
	if err != nil {
		return 0, t, err
	}
	if !found {
		if err := e.db.exec(ctx, insertTotalsOfOrder, orderID, tenantID); err != nil {
			return 0, t, translate(err)
		}
		if t, found, err = e.totals(ctx, selectRefundTotals, orderID, tenantID); err != nil {
			return 0, t, err
		} else if !found {
			return 0, t, store.ErrNotFound
		}
	}
	if t.Reserved != t.Refunded {
		return 0, t, store.ErrAttemptInFlight
	}
	amount := t.Captured - t.Refunded
	if refunded != nil {
		amount = *refunded
	}
	if t, _, err = e.totals(ctx, closeRefundTotals, orderID, tenantID); err != nil {
		return 0, t, err
	}
	if err := e.db.exec(ctx, setAttemptAmount, providerKey, amount); err != nil {
		return 0, t, translate(err)
	}
	return amount, t, nil
}
