package paysim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/orderly/orderly/internal/sqlitefile"
	"github.com/orderly/orderly/paysim/paysimwire"
)

// Errors of the Ledger's intents.
var (
	// ErrIntentNotFound is returned when a confirm, cancel or refund names
	// an intent id the ledger does not hold.
	ErrIntentNotFound = errors.New("paysim: no such payment intent")
	// ErrIntentState is returned when an intent's status forbids the
	// operation: confirming or refunding nothing received, confirming a
	// canceled or succeeded intent, cancelling one that received money.
	ErrIntentState = errors.New("paysim: the payment intent's status forbids this")
	// ErrCaptureTooLarge is returned when a capture asks for more than the
	// intent authorized.
	ErrCaptureTooLarge = errors.New("paysim: the capture is above the authorized amount")
)

// DefaultAuthorizationWindow is how long an authorization of a manual
// intent lasts before it expires uncaptured (the intent then reads as
// canceled): 7 days, Stripe's window for online card payments
// (docs.stripe.com/payments/place-a-hold-on-a-payment-method).
const DefaultAuthorizationWindow = 7 * 24 * time.Hour

func scanIntent(row scanner) (Intent, error) {
	var in Intent
	var created int64
	var canceled, captured bool
	var code, msg sql.NullString
	var captureBefore sql.NullInt64
	err := row.Scan(&in.ID, &in.IdempotencyKey, &in.OrderID, &in.Reference, &in.Amount, &in.Currency, &created,
		&canceled, &in.AmountReceived, &in.AmountRefunded, &captured, &code, &msg, &in.CaptureMethod, &captureBefore)
	in.CreatedAt = fromMicros(created)
	switch {
	case captured:
		in.Status = paysimwire.IntentSucceeded
	case canceled:
		in.Status = paysimwire.IntentCanceled
	case captureBefore.Valid && now().Before(fromMicros(captureBefore.Int64)):
		in.Status = paysimwire.IntentRequiresCapture
		cb := fromMicros(captureBefore.Int64)
		in.CaptureBefore = &cb
	case captureBefore.Valid: // expired uncaptured: released, as Stripe cancels it
		in.Status = paysimwire.IntentCanceled
	default:
		in.Status = paysimwire.IntentRequiresPaymentMethod
		if code.Valid {
			in.LastDecline = &paysimwire.Decline{Code: code.String, Message: msg.String}
		}
	}
	return in, err
}

// Intent returns the intent id as it stands, or ErrNotFound.
func (l *Ledger) Intent(ctx context.Context, id string) (Intent, error) {
	in, err := scanIntent(l.db.QueryRowContext(ctx, selectIntent, id))
	return in, translate(err)
}

// IntentByKey returns the intent created under the idempotency key, or
// ErrNotFound.
func (l *Ledger) IntentByKey(ctx context.Context, key string) (Intent, error) {
	in, err := scanIntent(l.db.QueryRowContext(ctx, selectIntentByKey, key))
	return in, translate(err)
}

// IntentByReference returns the first intent created with reference for
// orderID, or ErrNotFound. The index is written with the intent: it never
// lags.
func (l *Ledger) IntentByReference(ctx context.Context, reference, orderID string) (Intent, error) {
	in, err := scanIntent(l.db.QueryRowContext(ctx, selectIntentByRef, reference, orderID))
	return in, translate(err)
}

// CreateIntent records in (with its ID and CreatedAt set) under
// in.IdempotencyKey in one statement. If the key already holds an intent,
// nothing is written and that intent is returned with created false.
func (l *Ledger) CreateIntent(ctx context.Context, in Intent) (_ Intent, created bool, _ error) {
	method := in.CaptureMethod
	if method == "" {
		method = paysimwire.CaptureAutomatic
	}
	res, err := l.db.ExecContext(ctx, insertIntent, in.ID, in.IdempotencyKey, in.OrderID, in.Reference, in.Amount,
		in.Currency, micros(in.CreatedAt), method)
	if n, err := affected(res, err); err != nil {
		return Intent{}, false, translate(err)
	} else if n == 1 {
		got, err := l.Intent(ctx, in.ID)
		return got, true, err
	}
	held, err := l.IntentByKey(ctx, in.IdempotencyKey)
	return held, false, err
}

// CreateConfirm records c, a confirm's outcome (a capture or a decline) of
// intent c.PaymentIntent under c.IdempotencyKey, in one BEGIN IMMEDIATE
// transaction: OrderID, Amount and Currency are taken from the intent. If
// the key already holds a charge, nothing is written and that charge is
// returned with created false. An approved confirm of a manual intent is
// recorded as an authorization instead (c comes back with Status
// ChargeAuthorized), held until window from now, and no charge is written.
// Errors: ErrIntentNotFound, ErrIntentState (the intent is canceled,
// authorized or has its capture already: money never moves twice for one
// intent).
func (l *Ledger) CreateConfirm(ctx context.Context, c Charge, window time.Duration) (_ Charge, created bool, _ error) {
	var out Charge
	err := sqlitefile.InTx(ctx, l.db, func(tx *sql.Tx) error {
		held, err := confirmOutcome(ctx, tx, c.IdempotencyKey)
		if err == nil {
			out = held
			return nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		in, err := scanIntent(tx.QueryRowContext(ctx, selectIntent, c.PaymentIntent))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrIntentNotFound
		case err != nil:
			return err
		case in.Status != paysimwire.IntentRequiresPaymentMethod:
			return fmt.Errorf("%w: cannot confirm intent %s in status %s", ErrIntentState, in.ID, in.Status)
		}
		c.OrderID, c.Amount, c.Currency = in.OrderID, in.Amount, in.Currency
		if in.CaptureMethod == paysimwire.CaptureManual && c.Status != ChargeFailed {
			c.Status = ChargeAuthorized
			if _, err := tx.ExecContext(ctx, insertAuthorization, c.IdempotencyKey, c.ID, c.PaymentIntent, c.PaymentMethod,
				micros(c.CreatedAt.Add(window)), micros(c.CreatedAt)); err != nil {
				return err
			}
			created, out = true, c
			return nil
		}
		if _, err := tx.ExecContext(ctx, insertCharge, c.IdempotencyKey, c.ID, c.OrderID, c.Amount, c.Currency,
			c.PaymentMethod, string(c.Status), nullable(c.FailureCode), nullable(c.FailureMessage), micros(c.CreatedAt),
			c.PaymentIntent); err != nil {
			return err
		}
		created, out = true, c
		return nil
	})
	return out, created, translate(err)
}

// confirmOutcome returns the outcome held under a confirm key: its charge
// (a capture or a decline) or its authorization, or sql.ErrNoRows.
func confirmOutcome(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, key string) (Charge, error) {
	held, err := scanCharge(q.QueryRowContext(ctx, selectCharge, key))
	if !errors.Is(err, sql.ErrNoRows) {
		return held, err
	}
	var c Charge
	var created int64
	err = q.QueryRowContext(ctx, selectAuthorization, key).Scan(&c.IdempotencyKey, &c.ID, &c.OrderID, &c.Amount, &c.Currency,
		&c.PaymentMethod, &created, &c.PaymentIntent)
	c.Status, c.CreatedAt = ChargeAuthorized, fromMicros(created)
	return c, err
}

// Confirm returns the outcome held under confirm key key: a charge or an
// authorization, or ErrNotFound.
func (l *Ledger) Confirm(ctx context.Context, key string) (Charge, error) {
	c, err := confirmOutcome(ctx, l.db, key)
	return c, translate(err)
}

// CaptureIntent captures amount minor units of the authorization of intent
// id under key in one BEGIN IMMEDIATE transaction: it writes the intent's
// one charge (status captured, of amount; the rest of the authorization is
// released) and the capture's row, and returns the intent. If the key
// holds a capture already, nothing is written and that capture's intent
// and amount are returned with created false. Errors: ErrIntentNotFound,
// ErrIntentState (not in requires_capture: never confirmed, captured,
// canceled or expired), ErrCaptureTooLarge.
func (l *Ledger) CaptureIntent(ctx context.Context, key, id string, amount int64) (_ Intent, heldAmount int64, created bool, _ error) {
	var out Intent
	err := sqlitefile.InTx(ctx, l.db, func(tx *sql.Tx) error {
		var heldID string
		err := tx.QueryRowContext(ctx, selectCaptureByKey, key).Scan(&heldID, &heldAmount)
		if err == nil {
			out, err = scanIntent(tx.QueryRowContext(ctx, selectIntent, heldID))
			return err
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		in, err := scanIntent(tx.QueryRowContext(ctx, selectIntent, id))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrIntentNotFound
		case err != nil:
			return err
		case in.Status != paysimwire.IntentRequiresCapture:
			return fmt.Errorf("%w: cannot capture intent %s in status %s", ErrIntentState, in.ID, in.Status)
		case amount > in.Amount:
			return fmt.Errorf("%w: capture of %d, intent %s authorized %d", ErrCaptureTooLarge, amount, in.ID, in.Amount)
		}
		var method string
		if err := tx.QueryRowContext(ctx, selectAuthMethod, id).Scan(&method); err != nil {
			return err
		}
		at := now()
		chargeKey := "capture:" + key
		if _, err := tx.ExecContext(ctx, insertCharge, chargeKey, newID("ch_"), in.OrderID, amount, in.Currency, method,
			string(ChargeCaptured), nil, nil, micros(at), id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertCapture, key, id, chargeKey, amount, micros(at)); err != nil {
			return err
		}
		created, heldAmount = true, amount
		out, err = scanIntent(tx.QueryRowContext(ctx, selectIntent, id))
		return err
	})
	return out, heldAmount, created, translate(err)
}

// CancelIntent cancels intent id under key in one BEGIN IMMEDIATE
// transaction, and returns the intent. If the key holds a cancel already,
// nothing is written and that cancel's intent is returned with created
// false. Cancelling an intent canceled before records the key and changes
// nothing else. Errors: ErrIntentNotFound, ErrIntentState (it received
// money).
func (l *Ledger) CancelIntent(ctx context.Context, key, id string) (_ Intent, created bool, _ error) {
	var out Intent
	err := sqlitefile.InTx(ctx, l.db, func(tx *sql.Tx) error {
		var heldID string
		err := tx.QueryRowContext(ctx, selectCancelIntentID, key).Scan(&heldID)
		if err == nil {
			out, err = scanIntent(tx.QueryRowContext(ctx, selectIntent, heldID))
			return err
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		in, err := scanIntent(tx.QueryRowContext(ctx, selectIntent, id))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrIntentNotFound
		case err != nil:
			return err
		case in.Status == paysimwire.IntentSucceeded:
			return fmt.Errorf("%w: intent %s received money; refund it instead", ErrIntentState, in.ID)
		}
		at := now()
		if _, err := tx.ExecContext(ctx, cancelIntent, micros(at), id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertCancel, key, id, micros(at)); err != nil {
			return err
		}
		created = true
		out, err = scanIntent(tx.QueryRowContext(ctx, selectIntent, id))
		return err
	})
	return out, created, translate(err)
}

// RefundsOfIntent returns the refunds of intent id's capture, in creation
// order (never nil).
func (l *Ledger) RefundsOfIntent(ctx context.Context, id string) ([]Refund, error) {
	rows, err := l.db.QueryContext(ctx, refundsOfIntent, id)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := []Refund{}
	for rows.Next() {
		r, err := scanRefund(rows)
		if err != nil {
			return nil, translate(err)
		}
		out = append(out, r)
	}
	return out, translate(rows.Err())
}

// resolveIntentCharge sets r.ChargeKey to the key of intent
// r.PaymentIntent's capture, inside tx. Errors: ErrIntentNotFound,
// ErrIntentState (nothing captured).
func resolveIntentCharge(ctx context.Context, tx *sql.Tx, r *Refund) error {
	var exists int
	if err := tx.QueryRowContext(ctx, `SELECT 1 FROM intents WHERE id = ?`, r.PaymentIntent).Scan(&exists); errors.Is(err, sql.ErrNoRows) {
		return ErrIntentNotFound
	} else if err != nil {
		return err
	}
	err := tx.QueryRowContext(ctx, capturedChargeKey, r.PaymentIntent).Scan(&r.ChargeKey)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: intent %s received nothing to refund", ErrIntentState, r.PaymentIntent)
	}
	return err
}
