package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

var _ store.RefundStore = (*Store)(nil)

// The statements mirror store/postgres/refunds.go; a write transaction is
// IMMEDIATE, so the order needs no row lock.
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
WHERE r.provider_key = ?1`

const selectRefundTotals = `SELECT captured, reserved, refunded FROM order_refund_totals WHERE order_id = ?1 AND tenant_id = ?2`

const orderForRefund = `SELECT state, amount FROM orders WHERE id = ?1 AND tenant_id = ?2`

const otherOpenNonRefund = `SELECT EXISTS (SELECT 1 FROM provider_attempts WHERE order_id = ?1
    AND provider_key NOT LIKE ?2 AND status IN ('pending', 'unknown', 'needs_attention'))`

const insertRefundTotals = `INSERT INTO order_refund_totals (order_id, tenant_id, captured) VALUES (?1, ?2, ?3)
ON CONFLICT (order_id) DO NOTHING`

const reserveRefund = `UPDATE order_refund_totals SET reserved = reserved + ?2
WHERE order_id = ?1 AND reserved + ?2 <= captured RETURNING captured, reserved, refunded`

const insertRefund = `INSERT INTO order_refunds (provider_key, tenant_id, order_id, amount, currency, reason, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (provider_key) DO NOTHING`

const reopenFailedRefund = `UPDATE provider_attempts SET status = 'pending', error_code = NULL, updated_at = ?2
WHERE provider_key = ?1 AND status = 'failed'`

const settleOpenAttempt = `UPDATE provider_attempts SET status = ?2, provider_ref = COALESCE(?3, provider_ref),
    error_code = ?4, updated_at = ?5
WHERE provider_key = ?1 AND status IN ('pending', 'unknown', 'needs_attention') RETURNING amount`

const addRefunded = `UPDATE order_refund_totals SET refunded = refunded + ?2 WHERE order_id = ?1
RETURNING captured, reserved, refunded`

const releaseReserved = `UPDATE order_refund_totals SET reserved = reserved - ?2 WHERE order_id = ?1
RETURNING captured, reserved, refunded`

const setRefundedAfter = `UPDATE order_refunds SET refunded_after = ?2 WHERE provider_key = ?1`

const bumpOrderVersion = `UPDATE orders SET version = version + 1 WHERE id = ?1 AND tenant_id = ?2 RETURNING ` + orderColumns

func (e executor) getRefund(ctx context.Context, key string) (store.Refund, store.RefundTotals, error) {
	var r store.Refund
	var t store.RefundTotals
	var status string
	var sent sql.NullInt64
	var created int64
	err := e.c.QueryRowContext(ctx, selectRefund, key).Scan(&r.ProviderKey, &r.TenantID, &r.OrderID, &r.Amount, &r.Currency,
		&r.Reason, &status, &r.ProviderRef, &sent, &created, &r.ChargeKey, &r.IntentID, &t.Captured, &t.Reserved, &t.Refunded, &r.RefundedAfter, &r.ErrorCode)
	if err != nil {
		return r, t, translate(err)
	}
	r.Status, r.KeySentAt, r.CreatedAt = payment.AttemptStatus(status), zeroOrTime(sent), fromMicros(created)
	return r, t, nil
}

func (e executor) totals(ctx context.Context, q string, args ...any) (store.RefundTotals, bool, error) {
	var t store.RefundTotals
	err := e.c.QueryRowContext(ctx, q, args...).Scan(&t.Captured, &t.Reserved, &t.Refunded)
	if errors.Is(err, sql.ErrNoRows) {
		return t, false, nil
	}
	return t, err == nil, translate(err)
}

// ReserveRefund implements store.RefundStore in one IMMEDIATE transaction.
func (s *Store) ReserveRefund(ctx context.Context, l store.Lease, r store.Refund) (out store.Refund, t store.RefundTotals, st order.State, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		e := executor{c: tx, clock: s.clock}
		if err := fenced(e.c.ExecContext(ctx, fenceRecordAttempt, l.TenantID, l.KeyHash, l.Token, r.ProviderKey)); err != nil {
			return err
		}
		var amount int64
		var state string
		if err := e.c.QueryRowContext(ctx, orderForRefund, r.OrderID, r.TenantID).Scan(&state, &amount); err != nil {
			return translate(err)
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
			// A new refund, or a failed one reopened (as store/postgres's).
			if st != order.Paid && st != order.Fulfilled {
				return store.ErrRefundState
			}
			var busy bool
			if err := e.c.QueryRowContext(ctx, otherOpenNonRefund, r.OrderID, r.OrderID+"/refunds/%").Scan(&busy); err != nil {
				return translate(err)
			}
			if busy {
				return store.ErrAttemptInFlight
			}
			if _, err := e.c.ExecContext(ctx, insertRefundTotals, r.OrderID, r.TenantID, amount); err != nil {
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
			if _, err := e.c.ExecContext(ctx, reopenFailedRefund, r.ProviderKey, micros(r.CreatedAt)); err != nil {
				return translate(err)
			}
		} else {
			if _, err := e.c.ExecContext(ctx, insertAttempt, r.ProviderKey, r.TenantID, r.OrderID, string(payment.AttemptRefund),
				string(payment.AttemptPending), r.Amount, r.Currency, "", nil, nil, micros(r.CreatedAt), micros(r.CreatedAt)); err != nil {
				return translate(err)
			}
			if _, err := e.c.ExecContext(ctx, insertRefund, r.ProviderKey, r.TenantID, r.OrderID, r.Amount, r.Currency, r.Reason,
				micros(r.CreatedAt)); err != nil {
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

// FinishRefund implements store.RefundStore in one IMMEDIATE transaction.
func (s *Store) FinishRefund(ctx context.Context, l store.Lease, f store.RefundFinish) (t store.RefundTotals, err error) {
	finish := func(f store.RefundFinish) error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			e := executor{c: tx, clock: s.clock}
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
var errSettledRejected = errors.New("sqlite: refund attempt settled rejected first")

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
var errNotSettled = errors.New("sqlite: refund attempt not settled")

// settleRefund mirrors store/postgres's: it settles the partial refund's
// attempt u.ProviderKey with guard g (errNotSettled when it changed no
// row) and applies the effects on the totals, the order and the outbox.
func (e executor) settleRefund(ctx context.Context, u store.AttemptUpdate, ev func(order.Order, store.RefundTotals) event.Event, g refundGuard) (store.RefundTotals, error) {
	r, t, err := e.getRefund(ctx, u.ProviderKey)
	if err != nil {
		return t, err
	}
	var amount int64
	err = e.c.QueryRowContext(ctx, g.sql, u.ProviderKey, string(u.Status), nullable(u.ProviderRef),
		nullable(u.ErrorCode), micros(u.At)).Scan(&amount)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return t, errNotSettled
	case err != nil:
		return t, translate(err)
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
		if _, err := e.c.ExecContext(ctx, setRefundedAfter, r.ProviderKey, t.Refunded); err != nil {
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
	o, err := scanOrder(e.c.QueryRowContext(ctx, bumpOrderVersion, r.OrderID, r.TenantID))
	if err != nil {
		return translate(err)
	}
	if ev != nil {
		return e.AppendEvent(ctx, ev(o, t))
	}
	return nil
}

// reverseSucceededRefund mirrors store/postgres's: it settles attempt ?1
// only while it is succeeded.
const reverseSucceededRefund = `UPDATE provider_attempts SET status = ?2, provider_ref = COALESCE(?3, provider_ref),
    error_code = ?4, updated_at = ?5
WHERE provider_key = ?1 AND status = 'succeeded' RETURNING amount`

// takeBackRefunded takes a failed refund's amount ?2 off order ?1's
// refunded and reserved totals.
const takeBackRefunded = `UPDATE order_refund_totals SET refunded = refunded - ?2, reserved = reserved - ?2
WHERE order_id = ?1 RETURNING captured, reserved, refunded`

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

const settleParkedRefund = `UPDATE provider_attempts SET status = ?2, provider_ref = COALESCE(?3, provider_ref),
    error_code = ?4, updated_at = ?5
WHERE provider_key = ?1 AND status = 'needs_attention' RETURNING amount`

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

const selectParkedRefund = `SELECT provider_key FROM provider_attempts WHERE order_id = ?1 AND tenant_id = ?2
    AND provider_key LIKE ?3 AND status = 'needs_attention' ORDER BY created_at LIMIT 1`

var _ store.ParkedRefunds = (*Store)(nil)

// ParkedRefund implements store.ParkedRefunds.
func (s *Store) ParkedRefund(ctx context.Context, tenantID, orderID string) (payment.Attempt, error) {
	var key string
	if err := s.db.QueryRowContext(ctx, selectParkedRefund, orderID, tenantID, orderID+"/refunds/%").Scan(&key); err != nil {
		return payment.Attempt{}, translate(err)
	}
	return s.GetAttempt(ctx, key)
}

// GetRefund implements store.RefundStore.
func (s *Store) GetRefund(ctx context.Context, providerKey string) (store.Refund, store.RefundTotals, error) {
	return executor{c: s.db, clock: s.clock}.getRefund(ctx, providerKey)
}

// RefundTotals implements store.RefundStore.
func (s *Store) RefundTotals(ctx context.Context, tenantID, orderID string) (store.RefundTotals, error) {
	t, _, err := executor{c: s.db, clock: s.clock}.totals(ctx, selectRefundTotals, orderID, tenantID)
	return t, err
}

var _ store.RefundCloser = executor{}

const insertTotalsOfOrder = `INSERT INTO order_refund_totals (order_id, tenant_id, captured)
SELECT id, tenant_id, amount FROM orders WHERE id = ?1 AND tenant_id = ?2 ON CONFLICT (order_id) DO NOTHING`

const closeRefundTotals = `UPDATE order_refund_totals SET reserved = captured, refunded = captured
WHERE order_id = ?1 AND tenant_id = ?2 RETURNING captured, reserved, refunded`

const setAttemptAmount = `UPDATE provider_attempts SET amount = ?2 WHERE provider_key = ?1`

// CloseRefunds implements store.RefundCloser; it must run in a
// transaction (IMMEDIATE: the order needs no row lock).
func (e executor) CloseRefunds(ctx context.Context, tenantID, orderID, providerKey string, refunded *int64) (int64, store.RefundTotals, error) {
	t, found, err := e.totals(ctx, selectRefundTotals, orderID, tenantID)
	if err != nil {
		return 0, t, err
	}
	if !found {
		if _, err := e.c.ExecContext(ctx, insertTotalsOfOrder, orderID, tenantID); err != nil {
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
	if _, err := e.c.ExecContext(ctx, setAttemptAmount, providerKey, amount); err != nil {
		return 0, t, translate(err)
	}
	return amount, t, nil
}
