package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// RefundInput is a partial refund a client asks for (issue 16): Amount in
// minor units of Currency (> 0; Currency must be the order's), Reason
// free text (at most 500 characters; may be empty).
type RefundInput struct {
	Amount   int64
	Currency string
	Reason   string
}

// RefundResult is the answer to a partial refund: the refund as stored
// (its Status is payment.AttemptSucceeded for an answered refund, its
// RefundedAfter the order's refunded total right after it), the order's
// totals as they are now, and, as Result, whether it was a replay and
// when its key expires.
type RefundResult struct {
	Refund       store.Refund
	Totals       store.RefundTotals
	Replayed     bool
	KeyExpiresAt time.Time
}

// partialRefundPrefix is what every partial refund's provider key of order
// id starts with; "/refunds/" never contains the cancel's "/refund/".
func partialRefundPrefix(id string) string { return id + "/refunds/" }

// partialRefundKey is the provider key of the partial refund the client key
// with hash keyHash asks for on order id: "<order id>/refunds/<first 16 of
// the key hash>". Every retry of one key is one refund; two keys are two.
func partialRefundKey(id, keyHash string) string {
	h := keyHash
	if len(h) > 16 {
		h = h[:16]
	}
	return partialRefundPrefix(id) + h
}

// isPartialRefundKey reports whether provider key k is a partial refund's.
func isPartialRefundKey(k string) bool { return strings.Contains(k, "/refunds/") }

// Refund refunds in.Amount of order c.OrderID's captured charge, as its own
// provider attempt (payment.AttemptRefund, provider key partialRefundKey),
// in three phases under a lease on the idempotency key, as leased: phase 1
// reserves the amount with a compare-and-set on the order's reserved total
// in the transaction that records the attempt, so racing refunds never
// together exceed what was captured; phase 3 settles the attempt, adds it
// to the refunded total, moves the order's version on and appends
// order.refunded, in one transaction. The order's state does not change.
// Errors: EInvalid (amount ≤ 0, currency missing; not stored), ENotFound,
// EMismatch (currency is not the order's), EInvalidTransition (the order
// is neither PAID nor FULFILLED), ERefundExceedsCaptured, ERefundRejected,
// EOrderBusy (a shipment or the cancel's refund is in flight), EKeyReused,
// EKeyExpired, EKeyInProgress, EUnavailable.
func (s *Service) Refund(ctx context.Context, c Call, in RefundInput) (_ RefundResult, err error) {
	ctx, end := s.obs.StartOperation(ctx, idempotency.OpRefund)
	defer func() { end(err) }()
	var fe []apperr.FieldError
	if in.Amount <= 0 || in.Amount > order.MaxAmount {
		fe = append(fe, apperr.FieldError{Field: "amount", Reason: "must be from 1 to 2^53-1 (minor currency units)"})
	}
	if reason := order.CurrencyReason(in.Currency); reason != "" {
		fe = append(fe, apperr.FieldError{Field: "currency", Reason: reason})
	}
	if len(in.Reason) > 500 {
		fe = append(fe, apperr.FieldError{Field: "reason", Reason: "must be at most 500 bytes"})
	}
	if len(fe) > 0 {
		return RefundResult{}, &apperr.Error{Code: apperr.EInvalid, Message: "the refund has invalid fields", Fields: fe}
	}
	rs, ok := s.store.(store.RefundStore)
	if !ok {
		return RefundResult{}, apperr.Errorf(apperr.EUnavailable, "this store keeps no partial refunds")
	}
	if !order.ValidID(c.OrderID) {
		return RefundResult{}, notFound(store.ErrNotFound, c.OrderID)
	}
	now := s.cfg.Now()
	key, anonymous := c.Key, c.Key.IsZero()
	if anonymous {
		key = idempotency.Key{Value: "anon:" + uuid.NewString(), Derived: true}
	}
	claim := s.claim(c.TenantID, key, now, idempotency.OpRefund, c.OrderID)
	leaseEnd := time.Now().Add(s.cfg.LeaseDuration)
	rec, acquired, err := s.store.AcquireLease(ctx, claim)
	if err != nil {
		return RefundResult{}, err
	}
	if !acquired {
		dbNow, _ := s.store.Now(ctx)
		if rec.Fingerprint == key.Fingerprint && rec.State == idempotency.StateCompleted && rec.ErrorCode == "" && !rec.Expired(dbNow) {
			r, t, err := rs.GetRefund(ctx, rec.AttemptKey)
			if err != nil {
				return RefundResult{}, err
			}
			return RefundResult{Refund: r, Totals: t, Replayed: true, KeyExpiresAt: rec.ExpiresAt}, nil
		}
		res, err := s.held(ctx, key, store.Holder{Record: rec}, dbNow)
		return RefundResult{Replayed: res.Replayed, KeyExpiresAt: res.KeyExpiresAt}, err
	}
	if !anonymous {
		s.observeClaim(idempotency.OpRefund, rec)
	}
	if rec.ResourceID != c.OrderID {
		return RefundResult{}, fmt.Errorf("lease on key for %s resumed for %s", rec.ResourceID, c.OrderID)
	}
	res, err := s.driveRefund(ctx, rs, rec, leaseEnd, &in)
	if anonymous {
		res.KeyExpiresAt = time.Time{}
	}
	return res, err
}

// driveRefund runs phases 1 to 3 of a partial refund for held key rec; in is
// nil for the completer, which refunds what the stored refund asked.
func (s *Service) driveRefund(ctx context.Context, rs store.RefundStore, rec idempotency.Record, leaseEnd time.Time, in *RefundInput) (RefundResult, error) {
	lease := store.LeaseOf(rec)
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), leaseEnd)
	defer cancel()
	keyed := RefundResult{KeyExpiresAt: rec.ExpiresAt}
	o, err := s.store.GetOrder(ctx, rec.TenantID, rec.ResourceID)
	if errors.Is(err, store.ErrNotFound) {
		_, err := s.forget(ctx, rec, lease)
		return RefundResult{}, err
	} else if err != nil {
		_, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, err)
		return keyed, err
	}
	want := store.Refund{ProviderKey: partialRefundKey(o.ID, rec.KeyHash), TenantID: o.TenantID, OrderID: o.ID,
		CreatedAt: s.cfg.Now().UTC().Truncate(time.Microsecond)}
	if rec.AttemptKey != "" {
		want.ProviderKey = rec.AttemptKey
	}
	if in == nil {
		stored, _, err := rs.GetRefund(ctx, want.ProviderKey)
		if err != nil {
			_, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, err)
			return keyed, err
		}
		in = &RefundInput{Amount: stored.Amount, Currency: stored.Currency, Reason: stored.Reason}
	}
	want.Amount, want.Currency, want.Reason = in.Amount, in.Currency, in.Reason
	if in.Currency != o.Currency {
		_, err := s.completeFinal(ctx, rec, lease, o, apperr.Errorf(apperr.EMismatch,
			"a refund in %s does not match the order's currency %s", in.Currency, o.Currency), nil, nil)
		return keyed, err
	}
	r, t, st, err := rs.ReserveRefund(ctx, lease, want)
	switch {
	case errors.Is(err, store.ErrRefundState):
		_, err := s.completeFinal(ctx, rec, lease, o, apperr.Errorf(apperr.EInvalidTransition,
			"order %s is %s; only a PAID or FULFILLED order can be refunded", o.ID, st), nil, nil)
		return keyed, err
	case errors.Is(err, store.ErrRefundExceedsCaptured) && t.Captured == 0 && s.uncaptured(ctx, o):
		_, err := s.completeFinal(ctx, rec, lease, o, apperr.Errorf(apperr.ENotCaptured,
			"order %s's payment is authorized, not captured (it is captured when the order ships); nothing can be refunded yet — cancel the order to void it",
			o.ID), nil, nil)
		return keyed, err
	case errors.Is(err, store.ErrRefundExceedsCaptured):
		_, err := s.completeFinal(ctx, rec, lease, o, apperr.Errorf(apperr.ERefundExceedsCaptured,
			"a refund of %s would take the order's refunds to %s, above the %s captured",
			order.DescribeAmount(in.Amount, o.Currency), order.DescribeAmount(t.Reserved+in.Amount, o.Currency),
			order.DescribeAmount(t.Captured, o.Currency)), nil, nil)
		return keyed, err
	case errors.Is(err, store.ErrAttemptInFlight):
		_, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, busy(o))
		return keyed, err
	case errors.Is(err, store.ErrLeaseLost):
		s.observeFencing(rec.Operation, err)
		_, err := s.lost(err)
		return keyed, err
	case err != nil:
		// Nothing was reserved or recorded (the transaction rolled back):
		// a retry with the same key runs again.
		_, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, err)
		return keyed, err
	}
	cr := s.settled(payment.Attempt{Kind: payment.AttemptRefund, Status: r.Status, ProviderRef: r.ProviderRef, ErrorCode: r.ErrorCode})
	if cr.class == 0 {
		cr = s.partialRefund(ctx, rec, r)
		if (r.Status == payment.AttemptUnknown || !r.KeySentAt.IsZero()) && cr.class == retryable {
			// It may have been sent before (an unknown outcome, a holder
			// that crashed mid-call): a retryable answer now does not say
			// that nothing happened, so the outcome stays unknown and the
			// reservation stays; the retry or the completer asks again.
			cr = callResult{class: unknown, err: cr.err}
		}
	}
	if cr.class == unknown && s.cfg.Now().Sub(r.CreatedAt) > s.cfg.UnresolvedAfter {
		// Still unknown past Config.UnresolvedAfter (the provider's key
		// retention is near): never asked again by the completer, parked
		// for an operator (Operations.Resolve), its amount kept reserved.
		a := payment.Attempt{ProviderKey: r.ProviderKey, TenantID: r.TenantID, OrderID: r.OrderID, Kind: payment.AttemptRefund}
		s.cfg.Logger.Error("partial refund needs attention: its outcome stayed unknown past the provider's key retention; "+
			"it will not be retried and its amount stays reserved until it is settled by hand",
			"order_id", r.OrderID, "provider_key", r.ProviderKey, "amount", r.Amount, "currency", r.Currency,
			"refund_created_at", r.CreatedAt, "unresolved_after", s.cfg.UnresolvedAfter)
		cr = callResult{class: attention, err: needsAttention(a)}
	}
	f := store.RefundFinish{Update: store.AttemptUpdate{ProviderKey: r.ProviderKey, ProviderRef: cr.ref, At: s.cfg.Now()}}
	switch cr.class {
	case succeeded:
		f.Outcome = &idempotency.Record{ResourceID: o.ID}
		rf := refundFailed()
		f.Rejected = &idempotency.Record{ResourceID: o.ID, ErrorCode: rf.Code, ErrorDetail: rf.Message}
		f.Update.Status = payment.AttemptSucceeded
		f.Event = func(after order.Order, t store.RefundTotals) event.Event {
			return event.ForRefund(after, event.Refund{ID: r.ProviderKey, ProviderRef: cr.ref, Amount: r.Amount,
				Currency: r.Currency, AmountCaptured: t.Captured, AmountRefunded: t.Refunded}, s.cfg.Now())
		}
	case declined, rejected:
		f.Outcome = &idempotency.Record{ResourceID: o.ID, ErrorCode: cr.err.Code, ErrorDetail: cr.err.Message}
		f.Update.Status, f.Update.ErrorCode = payment.AttemptRejected, string(cr.err.Code)
		if cr.code != "" {
			f.Update.ErrorCode = cr.code
		}
	case unknown, contended:
		f.ReleaseTo, f.Update.Status = idempotency.StateUnknownOutcome, payment.AttemptUnknown
	case attention:
		f.ReleaseTo, f.Update.Status = idempotency.StateNeedsAttention, payment.AttemptNeedsAttention
	default:
		f.ReleaseTo, f.Update.Status = idempotency.StateRetryableFailure, payment.AttemptFailed
	}
	if _, err := rs.FinishRefund(ctx, lease, f); errors.Is(err, store.ErrRefundSettledRejected) {
		// A refund.failed event settled it first: the key holds
		// f.Rejected, and so does this answer.
		return keyed, refundFailed()
	} else if err != nil {
		s.observeFencing(rec.Operation, err)
		_, err := s.lost(err)
		return keyed, err
	}
	if f.Outcome == nil || f.Outcome.ErrorCode != "" {
		return keyed, cr.err
	}
	r, t, err = rs.GetRefund(ctx, r.ProviderKey)
	if err != nil {
		return keyed, err
	}
	return RefundResult{Refund: r, Totals: t, KeyExpiresAt: rec.ExpiresAt}, nil
}

// partialRefund is the provider call of refund r under the lease of rec:
// Refund of r.Amount on the order's captured intent under r's provider key,
// with Reference {order id, provider key}. A refund that may have been sent
// before (unknown, or its key sent) is looked up first with FindRefund by
// that reference, never resent blindly; when none is found it is resent
// under a key of this lease ("<provider key>/<keyhash8>.<fencing token>"),
// since a provider may have saved a 5xx under the first.
func (s *Service) partialRefund(ctx context.Context, rec idempotency.Record, r store.Refund) callResult {
	lease := store.LeaseOf(rec)
	intentID := r.IntentID
	if intentID == "" {
		if r.ChargeKey == "" {
			return callResult{class: rejected, err: refundRejected()}
		}
		in, err := s.chargeIntent(ctx, r.OrderID, r.ChargeKey)
		switch {
		case errors.Is(err, payment.ErrNotFound):
			return callResult{class: rejected, err: refundRejected()}
		case err != nil:
			return callResult{class: retryable, err: s.unavailable("payment provider", err)}
		}
		intentID = in.ID
	}
	ref := payment.Reference{OrderID: r.OrderID, Key: r.ProviderKey}
	key := r.ProviderKey
	if r.Status == payment.AttemptUnknown || !r.KeySentAt.IsZero() {
		rf, err := s.gateway.FindRefund(ctx, intentID, ref)
		switch {
		case err == nil:
			return refundAnswer(rf)
		case !errors.Is(err, payment.ErrNotFound):
			return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
		}
		key = fmt.Sprintf("%s/%s.%d", r.ProviderKey, keyHash8(rec), lease.Token)
	} else if _, err := s.store.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: r.ProviderKey, SentAt: s.cfg.Now()}); err != nil {
		return callResult{class: retryable, err: s.unavailable("store", err)}
	}
	return s.provider(ctx, ProviderRefund, func(ctx context.Context) callResult {
		rf, err := s.gateway.Refund(ctx, payment.RefundRequest{IdempotencyKey: key, IntentID: intentID, Amount: r.Amount, Reference: ref})
		switch {
		case err == nil:
			return refundAnswer(rf)
		case errors.Is(err, payment.ErrNotFound):
			return callResult{class: rejected, err: refundRejected()}
		case payment.IsUnknownOutcome(err), errors.Is(err, payment.ErrIdempotencyKeyReused):
			if rf, ferr := s.gateway.FindRefund(ctx, intentID, ref); ferr == nil {
				return refundAnswer(rf)
			}
			return callResult{class: unknown, err: unknownErr("payment provider")}
		case payment.IsRetryable(err):
			return callResult{class: retryable, err: s.unavailable("payment provider", err)}
		default:
			// The provider refused the refund (an amount above what the
			// intent can still refund): final, nothing moved.
			return callResult{class: rejected, err: apperr.Errorf(apperr.ERefundRejected,
				"the payment provider refused the refund; nothing was refunded")}
		}
	})
}

// refundAnswer is the outcome a provider's Refund object rf gives a
// partial refund: rejected with refundFailed when its status is failed or
// canceled (nothing was refunded: docs.stripe.com/api/refunds/object
// status), else succeeded with its id. A pending refund counts as
// succeeded, as the provider counts it in the charge's amount_refunded;
// if it fails later, its refund.failed event reverses it
// (applyPartialRefundFailed).
func refundAnswer(rf payment.Refund) callResult {
	if rf.Status == payment.RefundFailed || rf.Status == payment.RefundCanceled {
		return callResult{class: rejected, ref: rf.ID, err: refundFailed(), code: ErrorProviderRefundFailed}
	}
	return callResult{class: succeeded, ref: rf.ID}
}

// paidChargeKey is the provider key of the charge a cancel of o refunds:
// chargeKey(o.ID, version), unless partial refunds moved the version of the
// PAID order on (issue 16), when the charge their refund records is used.
func (s *Service) paidChargeKey(ctx context.Context, o order.Order, version int64) string {
	rs, ok := s.store.(store.RefundStore)
	if !ok || o.State != order.Paid {
		return chargeKey(o.ID, version)
	}
	// No shortcut on the totals: a partial refund reversed by its
	// refund.failed (applyPartialRefundFailed) moved the version on and
	// brought the reserved total back to 0.
	if t, err := rs.RefundTotals(ctx, o.TenantID, o.ID); err != nil || t.Captured == 0 {
		return chargeKey(o.ID, version)
	}
	if a, err := s.store.GetAttempt(ctx, chargeKey(o.ID, version)); err == nil && a.Status == payment.AttemptSucceeded {
		return a.ProviderKey
	}
	// Partial refunds moved the version on: the charge is an earlier one.
	for v := version - 1; v >= 1; v-- {
		if a, err := s.store.GetAttempt(ctx, chargeKey(o.ID, v)); err == nil && a.Status == payment.AttemptSucceeded {
			return a.ProviderKey
		}
	}
	return chargeKey(o.ID, version)
}

// withRefunds sets o's AmountCaptured and AmountRefunded (minor units): a
// RCVD order, or one cancelled before it was paid, captured nothing; a
// PAID or FULFILLED one captured its amount and refunded what its partial
// refunds returned; one cancelled from PAID refunded all of it (the
// cancel refunds what partial refunds left, and its transaction closes
// the totals so: changeEvent).
func (s *Service) withRefunds(ctx context.Context, o *order.Order) error {
	var captured, refunded int64
	authorized, err := s.withAuthorization(ctx, o)
	if err != nil {
		return err
	}
	switch {
	case o.PaidAt == nil:
	case authorized && o.Payment.Status != string(store.AuthCaptured):
		// Only authorized (or voided): nothing captured, nothing refunded.
	default:
		captured = o.Amount
		if o.State == order.Cancelled {
			refunded = o.Amount
		}
		if rs, ok := s.store.(store.RefundStore); ok {
			t, err := rs.RefundTotals(ctx, o.TenantID, o.ID)
			if err != nil {
				return err
			}
			if t.Captured > 0 {
				captured, refunded = t.Captured, t.Refunded
			}
		}
	}
	o.AmountCaptured, o.AmountRefunded = &captured, &refunded
	return nil
}

// uncaptured reports whether order o's payment is an authorization that is
// not captured (capture at fulfilment): authorized, voided, or captured by
// nothing yet.
func (s *Service) uncaptured(ctx context.Context, o order.Order) bool {
	cs, ok := s.store.(store.CaptureStore)
	if !ok {
		return false
	}
	a, err := cs.GetAuthorization(ctx, o.TenantID, o.ID)
	return err == nil && a.Status != store.AuthCaptured
}

// changeEvent is the event of the change that produced next (event.For),
// made in tx. A cancel from PAID (next CANCELLED with PaidAt set) refunded
// what the order's partial refunds left (issue 16): in tx the order's refund
// totals are closed (store.RefundCloser: refunded = captured, so no partial
// refund fits afterwards) and the cancel's refund attempt records that
// amount, and the order.cancelled event carries the refund (its provider
// key refundKey, ref the provider's refund id when known, the amount in
// minor units — refunded, what the provider's refund returned, when known
// — the totals after); a cancel whose authorization was voided
// instead (capture at fulfilment) records nothing. Errors: those of CloseRefunds
// (store.ErrAttemptInFlight when a partial refund is in flight).
func (s *Service) changeEvent(ctx context.Context, tx store.Executor, next order.Order, ref string, refunded *int64, now time.Time) (event.Event, error) {
	ev := event.For(next, now)
	rc, ok := tx.(store.RefundCloser)
	if next.State != order.Cancelled || next.PaidAt == nil || !ok {
		return ev, nil
	}
	if ce, ok := tx.(store.CaptureExecutor); ok {
		// An authorization not captured was voided, not refunded (capture
		// at fulfilment): nothing to record, the totals stay untouched.
		if a, err := ce.GetAuthorization(ctx, next.TenantID, next.ID); err == nil && a.Status != store.AuthCaptured {
			return ev, nil
		} else if err != nil && !errors.Is(err, store.ErrNotFound) {
			return ev, err
		}
	}
	amount, t, err := rc.CloseRefunds(ctx, next.TenantID, next.ID, refundKey(next.ID), refunded)
	if err != nil {
		return ev, err
	}
	ev.Refund = &event.Refund{ID: refundKey(next.ID), ProviderRef: ref, Amount: amount, Currency: next.Currency,
		AmountCaptured: t.Captured, AmountRefunded: t.Refunded}
	return ev, nil
}
