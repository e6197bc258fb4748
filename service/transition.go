package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/statemachine"
	"github.com/orderly/orderly/store"
)

// Pay charges the order through the payment gateway and moves it to PAID.
// Paying a PAID or FULFILLED order is a no-op. Errors: ENotFound, EInvalid
// (missing payment method; not stored), EMismatch (amount or currency differ
// from the order's), EDeclined, EInvalidTransition, EKeyReused,
// EKeyExpired, EKeyInProgress, EUnavailable (provider or store failed, or
// the provider's answer was lost; nothing final stored).
func (s *Service) Pay(ctx context.Context, c Call, in PayInput) (Result, error) {
	if in.PaymentMethod == "" {
		return Result{}, &apperr.Error{Code: apperr.EInvalid, Message: "the payment has invalid fields",
			Fields: []apperr.FieldError{{Field: "payment_method", Reason: "is required"}}}
	}
	check := func(o order.Order) error {
		if in.Amount != o.Amount || in.Currency != o.Currency {
			return apperr.Errorf(apperr.EMismatch,
				"payment of %s does not match the order's amount %s",
				order.DescribeAmount(in.Amount, in.Currency), order.DescribeAmount(o.Amount, o.Currency))
		}
		return nil
	}
	return s.leased(ctx, c, order.EventPay, check, s.payEffect(in.PaymentMethod, &in.Amount, in.Currency))
}

// Fulfill ships the order through the warehouse and moves it from PAID to
// FULFILLED. Fulfilling a FULFILLED order is a no-op. Errors: ENotFound,
// EInvalidTransition, EFulfillmentRejected, EKeyReused, EKeyExpired,
// EKeyInProgress, EUnavailable.
func (s *Service) Fulfill(ctx context.Context, c Call) (Result, error) {
	return s.leased(ctx, c, order.EventFulfill, nil, s.shipEffect())
}

// Cancel moves a RCVD order to CANCELLED, or refunds a PAID order's charge
// and then moves it to CANCELLED. Cancelling a CANCELLED order is a no-op.
// Errors: ENotFound, EInvalidTransition, EKeyReused, EKeyExpired,
// EKeyInProgress, EUnavailable.
func (s *Service) Cancel(ctx context.Context, c Call) (Result, error) {
	eff := s.refundEffect()
	if s.cfg.Capture == CaptureAtFulfilment {
		// A PAID order's payment may be an authorization, which is voided
		// rather than refunded: phase 1 records no refund attempt, and
		// the decision records the void or the refund.
		eff.intent = func(string, time.Time) store.Intent { return store.Intent{} }
	}
	return s.leased(ctx, c, order.EventCancel, nil, eff)
}

// effect is the provider side of an event: from which state the event calls
// a provider (the order's state for which attempt returns non-nil), the
// attempt a decision needs (nil for none), and how to make it. intent tells
// the store how to record that attempt in phase 1 without a decision from
// Go first; TestEffectsMatchTheirIntents holds the two to the same answer.
type effect struct {
	intent  func(orderID string, now time.Time) store.Intent
	attempt func(o order.Order, d statemachine.Decision, now time.Time) *payment.Attempt
	call    func(ctx context.Context, rec idempotency.Record, a payment.Attempt, o order.Order) callResult
	// sent reports whether attempt a carries this request's own details
	// (nil: every attempt of the event does, as a fulfilment or refund of
	// the order is one call whoever asks). A retryably failed attempt may
	// be reopened under its provider key by another request with another
	// payment method; its outcome is then that request's, not this one's.
	sent func(a payment.Attempt) bool
}

// class sorts provider outcomes (issue: final vs retryable vs unknown).
type class int

const (
	succeeded class = iota + 1 // the provider acted
	declined                   // final: the charge was declined
	rejected                   // final: the provider refused for good
	retryable                  // nothing happened at the provider
	unknown                    // sent, no answer: ask before acting again
	contended                  // the provider key is in use with other details
	attention                  // unknown past the provider's key retention: park it
	awaiting                   // the payment waits for the customer or the provider (issue 16)
)

type callResult struct {
	class class
	ref   string
	err   *apperr.Error
	// intent is the intent an awaiting charge waits on (class awaiting).
	intent *payment.Intent
	// code, if set, is the error code a declined or rejected attempt
	// records instead of err's (payment_expired, canceled,
	// ErrorProviderRefundFailed).
	code string
	// authorized is the intent of a charge that only authorized (capture
	// at fulfilment): its phase 3 records the authorization.
	authorized *payment.Intent
	// refunded is what a cancel's refund returned at the provider (minor
	// units) when known: the refund's amount, or 0 when nothing was left
	// to refund; nil when unknown.
	refunded *int64
}

// operations maps an event to the operation its key is claimed for.
var operations = map[order.Event]idempotency.Operation{
	order.EventPay: idempotency.OpPay, order.EventFulfill: idempotency.OpFulfill, order.EventCancel: idempotency.OpCancel,
}

// leased runs an event in three phases under a lease on the key:
//
//  1. pre-call, one store transaction (StartLeased): take the key's lease
//     (a takeover bumps the fencing token), lock the order, and record the
//     provider attempt if the effect's intent allows the order (the
//     recovery point); the decision is then made from what it returned;
//  2. the provider call, with no transaction or connection held, on a
//     context the client's disconnect does not cancel;
//  3. post-call, one store transaction (InTx): complete or release the key,
//     compare-and-set the order, settle the attempt, every write fenced by
//     the token, so a worker whose lease was taken over cannot write.
//
// A replay is phase 1 alone: the holder comes back with its order.
func (s *Service) leased(ctx context.Context, c Call, ev order.Event, check func(order.Order) error, eff effect) (_ Result, err error) {
	op := operations[ev]
	ctx, end := s.obs.StartOperation(ctx, op)
	defer func() { end(err) }()
	if !order.ValidID(c.OrderID) {
		return Result{}, notFound(store.ErrNotFound, c.OrderID)
	}
	now := s.cfg.Now()
	key, anonymous := c.Key, c.Key.IsZero()
	if anonymous {
		// Without a key (policy off) the request still needs a lease; it
		// gets a private key nobody can replay.
		key = idempotency.Key{Value: "anon:" + uuid.NewString(), Derived: true}
	}
	claim := s.claim(c.TenantID, key, now, op, c.OrderID)
	// The database starts the lease when phase 1 runs, after this instant:
	// measured on this process's monotonic clock, the lease cannot run out
	// before leaseEnd, whatever the two clocks read.
	leaseEnd := time.Now().Add(s.cfg.LeaseDuration)
	st, err := s.store.StartLeased(ctx, claim, eff.intent(c.OrderID, now))
	if err != nil {
		return Result{}, err
	}
	if !st.Acquired && st.Key.State == idempotency.StateInProgress && st.Key.Fingerprint == key.Fingerprint {
		if wait := min(c.Wait, s.cfg.MaxWait); wait > 0 {
			s.obs.KeyEvent(KeyWaited, op)
			waited := time.Now()
			rec := s.awaitHolder(ctx, st.Key, wait)
			if rec.State == idempotency.StateRetryableFailure || rec.State == idempotency.StateUnknownOutcome {
				// The holder let go without an outcome: this request,
				// the same one, takes over now rather than answer 409.
				now = s.cfg.Now()
				claim = s.claim(c.TenantID, key, now, op, c.OrderID)
				leaseEnd = time.Now().Add(s.cfg.LeaseDuration)
				if st, err = s.store.StartLeased(ctx, claim, eff.intent(c.OrderID, now)); err != nil {
					return Result{}, err
				}
			} else {
				// Completed meanwhile (or still held): answer from the key
				// as it is now, with the order read afresh, and the
				// database's clock moved on by the wait.
				st.Key, st.Order = rec, nil
				if !st.Now.IsZero() {
					st.Now = st.Now.Add(time.Since(waited))
				}
			}
		}
	}
	if !st.Acquired {
		// The holder's lease (Retry-After) and the key's expiry are
		// judged on the database's clock as phase 1 read it.
		res, err := s.held(ctx, key, store.Holder{Record: st.Key, Order: st.Order}, dbNow(st.Now, now))
		s.observeHeld(op, res, err)
		return res, err
	}
	if !anonymous {
		s.observeClaim(op, st.Key)
	}
	if st.Key.ResourceID != c.OrderID {
		return Result{}, fmt.Errorf("lease on key for %s resumed for %s", st.Key.ResourceID, c.OrderID)
	}
	res, err := s.drive(ctx, st.Key, leaseEnd, ev, check, eff, &st)
	if anonymous {
		res.KeyExpiresAt = time.Time{}
	}
	return res, err
}

// drive decides and acts for a held key until it completes or releases it.
// It is shared by requests and the completer. leaseEnd is an instant, on
// this process's monotonic clock, before which the lease cannot have run
// out (taken before the store started it). first is what phase 1 read and
// recorded (nil for the completer, which reads afresh).
func (s *Service) drive(ctx context.Context, rec idempotency.Record, leaseEnd time.Time, ev order.Event, check func(order.Order) error, eff effect, first *store.Started) (Result, error) {
	lease := store.LeaseOf(rec)
	// Past phase 1 the work finishes even if the client goes away, bounded
	// by the lease, so a holder stops before another may take the key over.
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), leaseEnd)
	defer cancel()
	// carry is the settlement of an attempt this request completed at the
	// provider but could not write yet (its compare-and-set lost a race and
	// was rolled back); whatever the key's outcome, it settles the attempt.
	var carry *store.AttemptUpdate
	for i := range maxDecisions {
		now := s.cfg.Now()
		var o order.Order
		var prior *payment.Attempt // the attempt the key pointed at when taken
		if i == 0 && first != nil {
			if first.Order == nil {
				return s.forget(ctx, rec, lease)
			}
			o, prior = *first.Order, first.Attempt
		} else {
			var err error
			if o, err = s.store.GetOrder(ctx, rec.TenantID, rec.ResourceID); err != nil {
				return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry, notFound(err, rec.ResourceID))
			}
			if i == 0 && rec.AttemptKey != "" {
				if a, err := s.store.GetAttempt(ctx, rec.AttemptKey); err == nil {
					prior = &a
				}
			}
		}
		if prior != nil && prior.ProviderKey == rec.AttemptKey && prior.Status.Open() &&
			(prior.Kind == payment.AttemptCapture || prior.Kind == payment.AttemptVoid) {
			// A resumed key that holds a capture or a void (capture at
			// fulfilment): its shipment or cancel is decided; finish it.
			return s.resumeAuthStep(ctx, rec, lease, o, *prior)
		}
		if prior != nil && prior.ProviderKey == rec.AttemptKey {
			// A resumed key whose attempt another holder settled meanwhile
			// (a decline, a refusal) ends with that attempt's outcome: its
			// request was that attempt, not a new one at a later version.
			if r := s.settled(*prior); (r.class == declined || r.class == rejected) && (eff.sent == nil || eff.sent(*prior)) {
				return s.completeFinal(ctx, rec, lease, o, r.err, nil, nil)
			}
		}
		if check != nil {
			if err := check(o); err != nil {
				return s.completeFinal(ctx, rec, lease, o, err, nil, carry)
			}
		}
		d, err := statemachine.Decide(o.State, ev)
		if err != nil {
			if ev == order.EventPay && o.State == order.Cancelled {
				// A pay that lost the race to a cancel may have captured a
				// charge (this request, or an earlier try of it): refund it.
				if rerr := s.refundOrphanedCharge(ctx, rec, o); rerr != nil {
					return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry, rerr)
				}
			}
			return s.completeFinal(ctx, rec, lease, o, err, nil, carry)
		}
		if d.Outcome == statemachine.NoOp {
			res, err := s.completeOK(ctx, rec, lease, o, nil, carry)
			s.observeTransition(ev, o.State, o.State, err)
			return res, err
		}
		next := o.Apply(d.To, now)
		if ev == order.EventCancel && d.From == order.Paid {
			// An order whose payment is only authorized is voided, never
			// refunded (capture at fulfilment).
			auth, ok, err := s.authorization(ctx, o)
			if err != nil {
				return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry, err)
			}
			if ok {
				res, err, again := s.cancelAuthorized(ctx, rec, lease, o, auth)
				if again {
					continue
				}
				return res, err
			}
		}
		a := eff.attempt(o, d, now)
		if a == nil && ev == order.EventCancel && d.From == order.Received {
			// A pay of this version may be waiting for the customer or the
			// bank (issue 16): its intent is cancelled at the provider
			// before the order is, so no charge can land afterwards.
			if ca, err := s.store.GetAttempt(ctx, chargeKey(o.ID, o.Version)); err == nil && ca.Status.Awaiting() {
				res, err, again := s.cancelAwaiting(ctx, rec, lease, o, next, ca)
				if again {
					continue
				}
				return res, err
			}
		}
		if a == nil && ev == order.EventCancel && d.From == order.Received {
			// A charge of this version may have captured even though its
			// attempt failed (a provider 5xx after capture): the cancel
			// then holds a refund attempt, which no pay can overlap, asks
			// the provider, and refunds before the order is CANCELLED.
			if a, err = s.uncertainChargeRefund(ctx, o, now); err != nil {
				return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry, err)
			}
		}
		if a == nil {
			res, err := s.completeOK(ctx, rec, lease, next, &next, carry)
			s.observeTransition(ev, o.State, next.State, err)
			switch {
			case errors.Is(err, store.ErrVersionConflict):
				continue
			case errors.Is(err, store.ErrAttemptInFlight):
				return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry, s.busyOrParked(ctx, o))
			}
			return res, err
		}
		var stored payment.Attempt
		openedAt := a.UpdatedAt // when this request would open the attempt
		if i == 0 && first != nil && prior != nil && first.Key.AttemptKey == a.ProviderKey && prior.ProviderKey == a.ProviderKey &&
			prior.Status != payment.AttemptFailed {
			// Phase 1 recorded this attempt (or found it recorded). A failed
			// one it did not reopen: phase 1 reopens a failed attempt as
			// pending only while no other attempt of the order is open, so
			// a key whose earlier try failed (a provider 503) still points
			// at it when its guard refused — a refund of a racing cancel in
			// flight, say. Calling the provider for it then would ship
			// beside that refund (issue 20's 100 000-operation storm: two
			// orders shipped and refunded); it is recorded below instead,
			// where the same guard answers order_busy.
			stored, openedAt = *prior, first.IntentAt
		} else {
			// Phase 1 did not record it (its guard refused, or this is a
			// later decision): record it now, with the precise reason
			// when it cannot be.
			stored, err = s.store.RecordAttempt(ctx, lease, *a, o.Version)
			switch {
			case errors.Is(err, store.ErrVersionConflict):
				continue
			case errors.Is(err, store.ErrAttemptInFlight) && ev == order.EventPay && s.supersede(ctx, o, *a):
				// A payment left waiting for 3-D Secure was given up for
				// this one: its intent is cancelled and the order's version
				// moved on (or it had succeeded: the order is PAID). Decide
				// again.
				continue
			case errors.Is(err, store.ErrAttemptInFlight):
				return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry, s.busyOrParked(ctx, o))
			case err != nil:
				s.observeFencing(rec.Operation, err)
				return s.lost(err)
			}
		}

		if stored.Status == payment.AttemptPending && !stored.UpdatedAt.Equal(openedAt.UTC().Truncate(time.Microsecond)) {
			// Pending, but not opened by this request: its other holder —
			// a worker that crashed mid-call, or a request with another key
			// joined to the same provider call — may have sent it, or be
			// sending it now. Ask before calling again, and never take a
			// retryable answer for "nothing happened": that would close the
			// attempt while the provider may still act on it.
			stored.Status = payment.AttemptUnknown
		}
		r := s.settled(stored)
		if r.class == 0 {
			r = eff.call(ctx, rec, stored, o)
			if stored.Status == payment.AttemptUnknown && r.class == retryable {
				// Asking failed too (the lookup timed out, the provider is
				// down): the earlier call may still have taken effect, so
				// the outcome stays unknown and the completer keeps asking.
				r = callResult{class: unknown, err: r.err}
			}
		}
		upd := &store.AttemptUpdate{ProviderKey: stored.ProviderKey, ProviderRef: r.ref, Refunded: r.refunded, At: s.cfg.Now()}
		switch r.class {
		case succeeded:
			upd.Status = payment.AttemptSucceeded
			if ev == order.EventFulfill {
				auth, ok, err := s.authorization(ctx, o)
				if err != nil {
					return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, upd, err)
				}
				if ok {
					res, err, again := s.shippedThenCapture(ctx, rec, lease, o, next, upd, auth)
					if again {
						carry = upd
						continue
					}
					return res, err
				}
			}
			res, err := s.completeOK(ctx, rec, lease, next, &next, upd, s.putAuthorization(next, stored.ProviderKey, r.authorized))
			s.observeTransition(ev, o.State, next.State, err)
			if errors.Is(err, store.ErrVersionConflict) {
				// Another request moved the order; the effect stands and
				// deciding again gives the no-op (or the refund).
				carry = upd
				continue
			}
			return res, err
		case declined:
			// The order stays RCVD but its version moves on, so the next
			// pay is a new logical charge with its own provider key.
			upd.Status, upd.ErrorCode = payment.AttemptDeclined, string(r.err.Code)
			if r.code != "" {
				upd.ErrorCode = r.code
			}
			bumped := o.Apply(o.State, now)
			res, err := s.completeFinal(ctx, rec, lease, o, r.err, &bumped, upd)
			if errors.Is(err, store.ErrVersionConflict) {
				return s.completeFinal(ctx, rec, lease, o, r.err, nil, upd)
			}
			return res, err
		case rejected:
			upd.Status, upd.ErrorCode = payment.AttemptRejected, string(r.err.Code)
			if ev == order.EventFulfill {
				// A shipment refused for good of an order whose payment is
				// only authorized: the authorization is voided and the
				// order cancelled (capture at fulfilment).
				if auth, ok, err := s.authorization(ctx, o); err != nil {
					return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, upd, err)
				} else if ok {
					return s.shipRefusedThenVoid(ctx, rec, lease, o, upd, auth)
				}
			}
			return s.completeFinal(ctx, rec, lease, o, r.err, nil, upd)
		case unknown:
			upd.Status = payment.AttemptUnknown
			if stored.Status.Awaiting() {
				// Reading a pending payment failed: it is still pending.
				upd.Status = stored.Status
			}
			return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, upd, r.err)
		case awaiting:
			// The payment waits for the customer (3-D Secure) or the bank
			// (issue 16): the attempt stays the order's one open attempt,
			// in its own status; the key is let go as an unknown outcome,
			// so a retry of it, or the completer, reads the intent again
			// (never confirms it again) until it settles or expires.
			upd.Status, upd.ProviderRef = payment.AttemptProcessing, ""
			if r.intent.Status == payment.IntentRequiresAction {
				upd.Status = payment.AttemptRequiresAction
			}
			if err := s.finish(ctx, lease, nil, idempotency.StateUnknownOutcome, nil, upd); err != nil {
				s.observeFencing(rec.Operation, err)
				return s.lost(err)
			}
			return Result{Order: o, KeyExpiresAt: rec.ExpiresAt,
				// A retry of the key that found the payment pending already
				// answers what its first try did: a replay.
				Replayed: stored.Status.Awaiting() && lease.Token > 1,
				Payment: &PendingPayment{Status: upd.Status, IntentID: r.intent.ID, ClientSecret: r.intent.ClientSecret,
					NextAction: r.intent.NextAction}}, nil
		case attention:
			upd.Status = payment.AttemptNeedsAttention
			s.cfg.Logger.Error("provider attempt needs attention: its outcome stayed unknown past the provider's key retention; "+
				"it will not be retried and its order will not move until it is settled by hand",
				"order_id", stored.OrderID, "provider_key", stored.ProviderKey, "kind", string(stored.Kind),
				"attempt_created_at", stored.CreatedAt, "unresolved_after", s.cfg.UnresolvedAfter)
			return s.release(ctx, rec, lease, idempotency.StateNeedsAttention, upd, r.err)
		case contended:
			// The provider holds a call under this provider key with other
			// details: it may have taken effect. Until someone asks, the
			// outcome is unknown (the completer will ask).
			upd.Status = payment.AttemptUnknown
			return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, upd, r.err)
		default:
			upd.Status = payment.AttemptFailed
			return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, upd, r.err)
		}
	}
	return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, carry,
		apperr.Errorf(apperr.EUnavailable, "order %s is changing too fast; retry", rec.ResourceID))
}

// refundFailed is the answer of a partial refund the provider reports as
// failed (its Refund object's status failed or canceled; Stripe: the card
// it returns to was closed): nothing was refunded, its amount is no longer
// reserved.
func refundFailed() *apperr.Error {
	return apperr.Errorf(apperr.ERefundRejected,
		"the payment provider reports the refund failed (the payment method cannot take it back); nothing was refunded")
}

func refundRejected() *apperr.Error {
	return apperr.Errorf(apperr.ERefundRejected,
		"the payment provider knows no charge of this order to refund; nothing was refunded and the order keeps its state — contact support")
}

func busy(o order.Order) error {
	return apperr.Errorf(apperr.EOrderBusy, "another operation on order %s is in progress with a provider; retry", o.ID)
}

// settled returns the outcome an attempt already settled by another request
// records, or a zero callResult when the provider must be called.
func (s *Service) settled(a payment.Attempt) callResult {
	switch a.Status {
	case payment.AttemptSucceeded:
		return callResult{class: succeeded, ref: a.ProviderRef}
	case payment.AttemptDeclined:
		return callResult{class: declined, err: apperr.Errorf(apperr.EDeclined, "the payment was declined: %s", a.ErrorCode)}
	case payment.AttemptNeedsAttention:
		return callResult{class: attention, err: needsAttention(a)}
	case payment.AttemptRejected:
		if a.Kind == payment.AttemptRefund && a.ErrorCode == ErrorProviderRefundFailed {
			return callResult{class: rejected, err: refundFailed(), code: ErrorProviderRefundFailed}
		}
		if a.Kind == payment.AttemptRefund {
			return callResult{class: rejected, err: refundRejected()}
		}
		return callResult{class: rejected, err: apperr.Errorf(apperr.EFulfillmentRejected, "the warehouse rejected the shipment")}
	}
	return callResult{}
}

// completeOK completes the key with a success for o (with next as the
// compare-and-set, if set).
func (s *Service) completeOK(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order, next *order.Order, upd *store.AttemptUpdate, extra ...func(store.Executor) error) (Result, error) {
	out := idempotency.Record{ResourceID: o.ID}
	if err := s.finish(ctx, lease, &out, "", next, upd, extra...); err != nil {
		s.observeFencing(rec.Operation, err)
		if errors.Is(err, store.ErrVersionConflict) || errors.Is(err, store.ErrAttemptInFlight) {
			return Result{}, err
		}
		return s.lost(err)
	}
	return Result{Order: o, KeyExpiresAt: rec.ExpiresAt}, nil
}

// completeFinal completes the key with a final error (stored, replayed).
func (s *Service) completeFinal(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order, cause error, next *order.Order, upd *store.AttemptUpdate) (Result, error) {
	var oe *apperr.Error
	if !errors.As(cause, &oe) {
		return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, cause)
	}
	out := idempotency.Record{ResourceID: o.ID, ErrorCode: oe.Code, ErrorDetail: oe.Message}
	if err := s.finish(ctx, lease, &out, "", next, upd); err != nil {
		s.observeFencing(rec.Operation, err)
		if errors.Is(err, store.ErrVersionConflict) {
			return Result{}, err
		}
		return s.lost(err)
	}
	return Result{KeyExpiresAt: rec.ExpiresAt}, cause
}

// release ends the lease without an outcome and returns cause (a 404, 503 or
// 409: nothing final happened, so nothing is stored).
func (s *Service) release(ctx context.Context, rec idempotency.Record, lease store.Lease, to idempotency.State, upd *store.AttemptUpdate, cause error) (Result, error) {
	if err := s.finish(ctx, lease, nil, to, nil, upd); err != nil {
		s.observeFencing(rec.Operation, err)
		if errors.Is(err, store.ErrLeaseLost) {
			return s.lost(err)
		}
		s.cfg.Logger.Warn("could not release an idempotency key; the completer will", "err", err)
	}
	return Result{KeyExpiresAt: rec.ExpiresAt}, cause
}

// finish is phase 3 in one store transaction, fenced by lease: the key is
// completed with out (or, when out is nil, released to the state to); next,
// if set, is written as a compare-and-set that no other open attempt may
// overlap, with its event appended to the outbox; upd, if set, settles its
// attempt; extra, each if non-nil, writes more in the same transaction (an
// authorization). On PostgreSQL this is one round trip and one commit.
func (s *Service) finish(ctx context.Context, lease store.Lease, out *idempotency.Record, to idempotency.State, next *order.Order, upd *store.AttemptUpdate, extra ...func(store.Executor) error) error {
	return s.store.InTx(ctx, func(tx store.Executor) error {
		if out != nil {
			if err := tx.CompleteKey(ctx, lease, *out); err != nil {
				return err
			}
		} else if err := tx.ReleaseKey(ctx, lease, to); err != nil {
			return err
		}
		if next != nil {
			own := ""
			if upd != nil {
				own = upd.ProviderKey
			}
			if err := tx.CompareAndSetOrder(ctx, *next, own); err != nil {
				return err
			}
			// The outbox: the change's event commits with it or not at all.
			ref, refunded := "", (*int64)(nil)
			if upd != nil {
				ref, refunded = upd.ProviderRef, upd.Refunded
			}
			ev, err := s.changeEvent(ctx, tx, *next, ref, refunded, s.cfg.Now())
			if err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, ev); err != nil {
				return err
			}
		}
		for _, x := range extra {
			if x == nil {
				continue
			}
			if err := x(tx); err != nil {
				return err
			}
		}
		if upd != nil {
			return tx.SettleAttempt(ctx, *upd)
		}
		return nil
	})
}

// lost answers a request whose lease was taken over (or whose store write
// failed): the new holder finishes; the client retries with the same key.
func (s *Service) lost(err error) (Result, error) {
	if errors.Is(err, store.ErrLeaseLost) {
		return Result{}, apperr.Errorf(apperr.EKeyInProgress,
			"this request took too long and another worker finished it; retry with the same key")
	}
	return Result{}, err
}

// payEffect charges o at its current version with method, in three phases
// on the provider's object (issue 15): Prepare the intent under
// "<attempt key>/prepare" (moves no money), record its id in the attempt
// fenced by the lease, Confirm under "<attempt key>/confirm". An unknown
// outcome is resolved by reading the intent (Retrieve by the recorded id,
// or Find by its Reference when Prepare's answer was lost), never by
// looking a request up by its key.
func (s *Service) payEffect(method string, amount *int64, currency string) effect {
	return effect{
		intent: func(id string, now time.Time) store.Intent {
			return store.Intent{From: order.Received, Kind: payment.AttemptCharge, ProviderKeyPrefix: chargeKeyPrefix(id),
				Versioned: true, Amount: amount, Currency: currency, PaymentMethod: method, At: now}
		},
		attempt: func(o order.Order, d statemachine.Decision, now time.Time) *payment.Attempt {
			return &payment.Attempt{ProviderKey: chargeKey(o.ID, o.Version), TenantID: o.TenantID, OrderID: o.ID,
				Kind: payment.AttemptCharge, Status: payment.AttemptPending, Amount: o.Amount, Currency: o.Currency,
				PaymentMethod: method, CreatedAt: now, UpdatedAt: now}
		},
		call: func(ctx context.Context, rec idempotency.Record, a payment.Attempt, o order.Order) callResult {
			return s.charge(ctx, rec, a)
		},
		sent: func(a payment.Attempt) bool { return a.PaymentMethod == method },
	}
}

// charge runs the charge attempt a under the lease of rec (see payEffect).
func (s *Service) charge(ctx context.Context, rec idempotency.Record, a payment.Attempt) callResult {
	lease := store.LeaseOf(rec)
	ref := payment.Reference{OrderID: a.OrderID, Key: a.ProviderKey}
	// asked: this attempt may have been sent before (an unknown outcome,
	// another holder, an earlier retryable failure): read before acting.
	asked := a.Status == payment.AttemptUnknown || !a.KeySentAt.IsZero() || a.IntentID != ""
	stale := s.keyTooOld(a)
	intentID := a.IntentID
	prepareKey := a.ProviderKey + "/prepare"
	if intentID == "" && asked {
		var in payment.Intent
		r := s.provider(ctx, ProviderChargeLookup, func(ctx context.Context) callResult {
			var err error
			in, err = s.gateway.Find(ctx, ref)
			switch {
			case err == nil:
				return callResult{class: succeeded}
			case errors.Is(err, payment.ErrNotFound):
				return callResult{class: rejected}
			}
			// A lagging index (retryable) or a failed read: still unknown.
			return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
		})
		switch r.class {
		case succeeded:
			intentID = in.ID
			if _, err := s.store.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: in.ID}); errors.Is(err, store.ErrIntentConflict) {
				if stored, gerr := s.store.GetAttempt(ctx, a.ProviderKey); gerr == nil && stored.IntentID != "" {
					intentID = stored.IntentID
				}
			} else if err != nil {
				return callResult{class: unknown, err: s.unknownAfter("store", err)}
			}
		case rejected:
			// Nothing was prepared, so nothing moved. A saved 5xx may sit
			// under the old key: prepare under one scoped to this lease.
			if s.unresolved(a) {
				return callResult{class: attention, err: needsAttention(a)}
			}
			prepareKey = fmt.Sprintf("%s/prepare/%s.%d", a.ProviderKey, keyHash8(rec), lease.Token)
			stale = false
		default:
			return r
		}
	}
	if intentID == "" {
		if stale {
			return callResult{class: attention, err: needsAttention(a)}
		}
		if a.KeySentAt.IsZero() {
			if _, err := s.store.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, SentAt: s.cfg.Now()}); err != nil {
				return callResult{class: retryable, err: s.unavailable("store", err)}
			}
		}
		var in payment.Intent
		r := s.provider(ctx, ProviderPrepare, func(ctx context.Context) callResult {
			var err error
			in, err = s.gateway.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: prepareKey, Reference: ref,
				Amount: a.Amount, Currency: a.Currency, CaptureMode: s.captureMode()})
			if err != nil {
				return s.classifyIntent(payment.Intent{}, err)
			}
			return callResult{class: succeeded}
		})
		if r.class != succeeded {
			// A decline here is final and moved nothing: the provider
			// refuses the amount itself (Stripe's amount_too_small for 0,
			// amount_too_large above 99999999), which no retry changes. It
			// is answered 402 like a decline of the confirm, never a 503 a
			// client would retry for good.
			return r
		}
		// Recorded before any money can move, fenced by the lease: a
		// holder whose lease was taken over never confirms.
		_, err := s.store.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: in.ID})
		switch {
		case errors.Is(err, store.ErrIntentConflict):
			// Another holder of this attempt prepared (under its own
			// key) and recorded its intent first: that one is the
			// attempt's; this one moved nothing and is let go.
			stored, gerr := s.store.GetAttempt(ctx, a.ProviderKey)
			if gerr != nil || stored.IntentID == "" {
				return callResult{class: retryable, err: s.unavailable("store", err)}
			}
			s.cancelSpare(ctx, in.ID, prepareKey)
			intentID = stored.IntentID
		case errors.Is(err, store.ErrLeaseLost):
			// The lease was taken over while this Prepare ran: the new
			// holder goes on. If the attempt records another intent (the
			// new holder found none by the Reference and prepared its
			// own), this one is the spare, which no holder will ever
			// confirm: cancel it. If it records none yet, the new holder
			// may still find this one by its Reference and confirm it, so
			// it is left alone.
			if stored, gerr := s.store.GetAttempt(ctx, a.ProviderKey); gerr == nil && stored.IntentID != "" && stored.IntentID != in.ID {
				s.cancelSpare(ctx, in.ID, prepareKey)
			}
			return callResult{class: retryable, err: s.unavailable("store", err)}
		case err != nil:
			return callResult{class: retryable, err: s.unavailable("store", err)}
		case in.Status == payment.IntentSucceeded || in.Status == payment.IntentCanceled:
			return s.classifyIntent(in, nil)
		case prepareKey == a.ProviderKey+"/prepare":
			return s.confirm(ctx, a, in.ID, a.ProviderKey+"/confirm", ref)
		default:
			intentID = in.ID
		}
	}
	// The intent is known: its state is the truth.
	in, r := s.retrieve(ctx, intentID)
	if r.class != 0 {
		return r
	}
	if in.Status == payment.IntentRequiresAction && s.cfg.Now().Sub(a.CreatedAt) > s.cfg.PendingPaymentExpiry {
		return s.expire(ctx, a, intentID)
	}
	if in.Status != payment.IntentRequiresPaymentMethod && in.Status != payment.IntentRequiresConfirmation {
		return s.classifyIntent(in, nil)
	}
	if in.LastDecline != nil {
		return s.declineIntent(ctx, a, intentID, in.LastDecline)
	}
	if s.unresolved(a) {
		// Nothing moved, but the customer asked long ago: never charge
		// an attempt that stayed unknown that long (Config.UnresolvedAfter).
		return callResult{class: attention, err: needsAttention(a)}
	}
	// Nothing moved. The confirm's own key first, unless it is too old to
	// resend: a retryable answer or a lost one saved nothing, or saved the
	// answer that is now replayed. A provider that saved a 5xx under it
	// (Stripe) replays that 5xx; the intent, read again, still shows nothing
	// moved, and the confirm goes under a key of this lease (the intent
	// succeeds at most once, whatever the key).
	if !s.keyTooOld(a) {
		r, nothing := s.confirmOnce(ctx, a, intentID, a.ProviderKey+"/confirm", ref)
		if !nothing {
			return r
		}
	}
	r, _ = s.confirmOnce(ctx, a, intentID, fmt.Sprintf("%s/confirm/%s.%d", a.ProviderKey, keyHash8(rec), lease.Token), ref)
	return r
}

// cancelSpare cancels intent id, prepared under prepareKey for an attempt
// that records another intent: it moved no money and no holder confirms
// it (docs.stripe.com/api/payment_intents/cancel). The cancel goes under
// "<prepareKey>/cancel"; a failure is logged, not returned (the spare
// stays open at the provider, still without money).
func (s *Service) cancelSpare(ctx context.Context, id, prepareKey string) {
	if _, err := s.gateway.Cancel(ctx, payment.CancelRequest{IdempotencyKey: prepareKey + "/cancel", IntentID: id}); err != nil {
		s.cfg.Logger.Warn("could not cancel a spare intent (it moved no money)", "intent_id", id, "err", err)
	}
}

// confirm confirms intent id under key and classifies the answer, the
// first confirm of an attempt: an unknown answer (a lost or 5xx answer, an
// unexpected state) is left unknown, for the retry or the completer to
// resolve by reading the intent (Retrieve).
func (s *Service) confirm(ctx context.Context, a payment.Attempt, id, key string, ref payment.Reference) callResult {
	return s.provider(ctx, ProviderCharge, func(ctx context.Context) callResult {
		in, err := s.gateway.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: key, IntentID: id,
			PaymentMethod: a.PaymentMethod, Reference: ref})
		return s.classifyIntent(in, err)
	})
}

// confirmOnce is confirm; nothing reports that the answer was unknown (or
// the key was reused with other details) and the intent, read
// afterwards, shows that nothing moved and no decline.
func (s *Service) confirmOnce(ctx context.Context, a payment.Attempt, id, key string, ref payment.Reference) (callResult, bool) {
	r := s.provider(ctx, ProviderCharge, func(ctx context.Context) callResult {
		in, err := s.gateway.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: key, IntentID: id,
			PaymentMethod: a.PaymentMethod, Reference: ref})
		return s.classifyIntent(in, err)
	})
	if r.class != unknown && r.class != contended {
		return r, false
	}
	in, rr := s.retrieve(ctx, id)
	switch {
	case rr.class != 0:
		return r, false
	case in.Status == payment.IntentSucceeded, in.Status == payment.IntentCanceled:
		return s.classifyIntent(in, nil), false
	case in.LastDecline != nil && in.Status == payment.IntentRequiresPaymentMethod:
		return s.classifyIntent(payment.Intent{}, in.LastDecline), false
	}
	nothing := in.Status == payment.IntentRequiresPaymentMethod || in.Status == payment.IntentRequiresConfirmation
	return r, nothing
}

// cancelIntent cancels intent id of the pending charge attempt a (issue 16)
// under "<attempt key>/cancel" (docs.stripe.com/api/payment_intents/cancel:
// a canceled PaymentIntent makes no further charge) and classifies the
// intent as it is afterwards: declined (canceled, with code "canceled", or
// declined meanwhile: nothing received), succeeded (the money landed first), awaiting (still
// processing: a bank debit, which the provider cancels only in rare
// cases, or a cancel that did not take), retryable or unknown (nothing
// known; cancelling again is safe).
func (s *Service) cancelIntent(ctx context.Context, a payment.Attempt, id string) callResult {
	return s.provider(ctx, ProviderCancel, func(ctx context.Context) callResult {
		in, err := s.gateway.Cancel(ctx, payment.CancelRequest{IdempotencyKey: a.ProviderKey + "/cancel", IntentID: id})
		if err != nil {
			if payment.IsRetryable(err) {
				return callResult{class: retryable, err: s.unavailable("payment provider", err)}
			}
			// Refused (the intent received money, or is processing) or
			// lost: the intent says which.
			var rr callResult
			if in, rr = s.retrieve(ctx, id); rr.class != 0 {
				return rr
			}
		}
		r := s.classifyIntent(in, nil)
		if in.Status == payment.IntentCanceled {
			r.code = "canceled"
		}
		return r
	})
}

// declineIntent settles the read of intent id, which a decline sent back
// to requires_payment_method (a failed 3-D Secure, a failed debit, a
// declined confirm whose answer was lost), as decline — after cancelling
// the intent. A declined PaymentIntent stays open at the provider, and its
// client secret, handed out in a 202 for 3-D Secure, lets the customer
// confirm it again with another card (docs.stripe.com/payments/
// paymentintents/lifecycle); money landing there after the attempt is
// declined and the order paid under its next version would be a second
// charge. So: cancelled, the attempt is declined with the decline's code;
// succeeded meanwhile, it is a success (the order is PAID by it); a cancel
// that did not take leaves the attempt open (retryable or unknown), for
// the retry or the completer to cancel again.
func (s *Service) declineIntent(ctx context.Context, a payment.Attempt, id string, decline *payment.DeclineError) callResult {
	r := s.cancelIntent(ctx, a, id)
	switch r.class {
	case declined:
		return s.classifyIntent(payment.Intent{}, decline)
	case succeeded:
		return r
	}
	if r.err == nil {
		r.err = s.unavailable("payment provider", errors.New("cancel of a declined intent did not take"))
	}
	return r
}

// expire ends the charge attempt a whose intent id still waits for the
// customer past Config.PendingPaymentExpiry: the intent is cancelled at the
// provider and the attempt declined with error code payment_expired; an
// intent that succeeded meanwhile is a success.
func (s *Service) expire(ctx context.Context, a payment.Attempt, id string) callResult {
	r := s.cancelIntent(ctx, a, id)
	if r.class == declined && r.code == "canceled" {
		s.cfg.Logger.Info("a pending payment expired; its intent was cancelled", "order_id", a.OrderID,
			"provider_key", a.ProviderKey, "pending_payment_expiry", s.cfg.PendingPaymentExpiry)
		return callResult{class: declined, code: "payment_expired", err: apperr.Errorf(apperr.EDeclined,
			"the payment was declined: payment_expired (the customer did not complete it within %s); pay again with a new Idempotency-Key",
			s.cfg.PendingPaymentExpiry)}
	}
	return r
}

// cancelAwaiting is a cancel of order o, RCVD, whose charge attempt ca of
// the same version waits asynchronously (issue 16): its intent is cancelled
// first. Cancelled (or declined meanwhile), the attempt is declined
// ("canceled") and the order moves to next (CANCELLED) in one transaction
// with the key's outcome. If the money landed first, the attempt succeeds
// and the order moves to PAID with its event, and again reports that the
// cancel must decide again (from PAID: refund, then CANCELLED). A debit
// still processing cannot be cancelled: 409 order_busy.
func (s *Service) cancelAwaiting(ctx context.Context, rec idempotency.Record, lease store.Lease, o, next order.Order, ca payment.Attempt) (_ Result, _ error, again bool) {
	r := s.cancelIntent(ctx, ca, ca.IntentID)
	now := s.cfg.Now()
	upd := &store.AttemptUpdate{ProviderKey: ca.ProviderKey, At: now}
	switch r.class {
	case declined:
		// Canceled, or declined meanwhile (the customer failed 3-D Secure).
		upd.Status, upd.ErrorCode = payment.AttemptDeclined, r.code
		if r.code == "" {
			upd.ErrorCode = string(r.err.Code)
		}
		res, err := s.completeOK(ctx, rec, lease, next, &next, upd)
		s.observeTransition(order.EventCancel, o.State, next.State, err)
		if errors.Is(err, store.ErrVersionConflict) {
			return Result{}, nil, true
		}
		return res, err, false
	case succeeded:
		upd.Status, upd.ProviderRef = payment.AttemptSucceeded, r.ref
		err := s.settleAwaiting(ctx, o.Apply(order.Paid, now), *upd, r.authorized)
		if err == nil || errors.Is(err, store.ErrVersionConflict) {
			s.cfg.Logger.Info("a pending payment succeeded before its order's cancel; it is refunded", "order_id", o.ID,
				"provider_key", ca.ProviderKey)
			return Result{}, nil, true
		}
		res, rerr := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, s.unavailable("store", err))
		return res, rerr, false
	case awaiting:
		res, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, apperr.Errorf(apperr.EOrderBusy,
			"the payment of order %s is %s at the provider and cannot be cancelled now; retry the cancel after it settles "+
				"(a settled payment is refunded)", o.ID, ca.Status))
		return res, err, false
	}
	if r.err == nil {
		r.err = s.unavailable("payment provider", errors.New("cancel outcome unknown"))
	}
	res, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, r.err)
	return res, err, false
}

// settleAwaiting settles the pending charge attempt upd names and moves its
// order to next (PAID, or RCVD one version on), with next's event, in one
// transaction: the compare-and-set of a request's phase 3, allowed only
// while that attempt is the order's one open attempt. ErrVersionConflict
// says another request moved the order first.
func (s *Service) settleAwaiting(ctx context.Context, next order.Order, upd store.AttemptUpdate, authorized ...*payment.Intent) error {
	return s.store.InTx(ctx, func(tx store.Executor) error {
		if err := tx.CompareAndSetOrder(ctx, next, upd.ProviderKey); err != nil {
			return err
		}
		for _, in := range authorized {
			if put := s.putAuthorization(next, upd.ProviderKey, in); put != nil {
				if err := put(tx); err != nil {
					return err
				}
			}
		}
		ev, err := s.changeEvent(ctx, tx, next, upd.ProviderRef, upd.Refunded, upd.At)
		if err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, ev); err != nil {
			return err
		}
		return tx.SettleAttempt(ctx, upd)
	})
}

// supersede gives up the payment of order o (RCVD) waiting for 3-D Secure
// when a pay with another payment method, attempt a, finds it open (issue
// 16): a customer who abandoned the challenge pays with another card at
// once rather than after Config.PendingPaymentExpiry. Its intent is
// cancelled at the provider; cancelled (or declined meanwhile), its
// attempt is declined with error code "superseded" and the order's version
// moves on as after a decline, so a has a charge key of its own; if the
// money landed first the order moves to PAID (the new pay is then a
// no-op). It reports whether the order moved (or another request moved
// it), so the pay decides again; false leaves the 409 order_busy (a debit
// processing, a cancel that did not take, a store failure).
func (s *Service) supersede(ctx context.Context, o order.Order, a payment.Attempt) bool {
	ca, err := s.store.GetAttempt(ctx, chargeKey(o.ID, o.Version))
	if err != nil || ca.Status != payment.AttemptRequiresAction || ca.PaymentMethod == a.PaymentMethod || ca.IntentID == "" {
		return false
	}
	r := s.cancelIntent(ctx, ca, ca.IntentID)
	now := s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: ca.ProviderKey, At: now}
	var next order.Order
	switch r.class {
	case declined:
		upd.Status, upd.ErrorCode = payment.AttemptDeclined, "superseded"
		next = o.Apply(o.State, now)
	case succeeded:
		upd.Status, upd.ProviderRef = payment.AttemptSucceeded, r.ref
		next = o.Apply(order.Paid, now)
	default:
		return false
	}
	err = s.settleAwaiting(ctx, next, upd, r.authorized)
	if err != nil && !errors.Is(err, store.ErrVersionConflict) {
		s.cfg.Logger.Warn("could not settle a superseded pending payment", "order_id", o.ID, "provider_key", ca.ProviderKey, "err", err)
		return false
	}
	s.cfg.Logger.Info("a payment waiting for 3-D Secure was given up for a pay with another method", "order_id", o.ID,
		"provider_key", ca.ProviderKey, "outcome", string(upd.Status))
	return true
}

// retrieve reads intent id; a zero class means it was read.
func (s *Service) retrieve(ctx context.Context, id string) (payment.Intent, callResult) {
	var in payment.Intent
	r := s.provider(ctx, ProviderChargeLookup, func(ctx context.Context) callResult {
		var err error
		if in, err = s.gateway.Retrieve(ctx, id); err != nil {
			return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
		}
		return callResult{class: succeeded}
	})
	if r.class == succeeded {
		r = callResult{}
	}
	return in, r
}

// classifyIntent sorts a Confirm's (or a read's) answer: a succeeded intent
// is a success; a decline final, and so is a canceled intent; an intent
// processing or waiting for the customer is awaiting (a 202; a provider
// event, a retry or the completer settles it); any other is unknown.
func (s *Service) classifyIntent(in payment.Intent, err error) callResult {
	var decline *payment.DeclineError
	var pe *payment.ProviderError
	switch {
	case err == nil && in.Status == payment.IntentSucceeded:
		return callResult{class: succeeded, ref: in.ID}
	case err == nil && in.Status == payment.IntentRequiresCapture:
		// Authorized (capture at fulfilment): the pay succeeded; the money
		// is held until the fulfilment captures it.
		return callResult{class: succeeded, ref: in.ID, authorized: &in}
	case err == nil && in.Status == payment.IntentCanceled:
		return callResult{class: declined, err: apperr.Errorf(apperr.EDeclined, "the payment was declined: canceled")}
	case err == nil && in.LastDecline != nil:
		return callResult{class: declined, err: apperr.Errorf(apperr.EDeclined, "the payment was declined: %s", in.LastDecline.Code)}
	case err == nil && (in.Status == payment.IntentRequiresAction || in.Status == payment.IntentProcessing):
		return callResult{class: awaiting, intent: &in}
	case err == nil:
		return callResult{class: unknown, err: unknownErr("payment provider")}
	case errors.As(err, &decline):
		return callResult{class: declined, err: apperr.Errorf(apperr.EDeclined, "the payment was declined: %s", decline.Code)}
	case errors.Is(err, payment.ErrIdempotencyKeyReused):
		return callResult{class: contended, err: apperr.Errorf(apperr.EOrderBusy,
			"another payment of this order, with other details, is in progress; retry")}
	case payment.IsUnknownOutcome(err), errors.As(err, &pe) && pe.Code == "payment_intent_unexpected_state":
		return callResult{class: unknown, err: unknownErr("payment provider")}
	default:
		// Retryable, or a refusal that is not a decline (an invalid
		// request): the provider acted on nothing.
		return callResult{class: retryable, err: s.unavailable("payment provider", err)}
	}
}

// keyTooOld reports whether attempt a's provider key was first sent longer
// than Config.ProviderKeyMaxAge ago: the provider may have pruned it, and
// the same key would then start a new request, so it is never resent.
func (s *Service) keyTooOld(a payment.Attempt) bool {
	return !a.KeySentAt.IsZero() && s.cfg.Now().Sub(a.KeySentAt) > s.cfg.ProviderKeyMaxAge
}

// keyHash8 is the first 8 characters of rec's key hash: with the fencing
// token it scopes a derived provider key to one holder of one client key.
func keyHash8(rec idempotency.Record) string {
	if len(rec.KeyHash) < 8 {
		return rec.KeyHash
	}
	return rec.KeyHash[:8]
}

func (s *Service) unknownAfter(who string, err error) *apperr.Error {
	s.cfg.Logger.Warn("provider read failed", "provider", who, "err", err)
	return unknownErr("payment provider")
}

// shipEffect ships o's items with the order's provider key.
func (s *Service) shipEffect() effect {
	return effect{
		intent: func(id string, now time.Time) store.Intent {
			return store.Intent{From: order.Paid, Kind: payment.AttemptShipment, ProviderKeyPrefix: shipmentKey(id), At: now}
		},
		attempt: func(o order.Order, d statemachine.Decision, now time.Time) *payment.Attempt {
			return &payment.Attempt{ProviderKey: shipmentKey(o.ID), TenantID: o.TenantID, OrderID: o.ID,
				Kind: payment.AttemptShipment, Status: payment.AttemptPending, Amount: o.Amount, Currency: o.Currency,
				CreatedAt: now, UpdatedAt: now}
		},
		call: func(ctx context.Context, rec idempotency.Record, a payment.Attempt, o order.Order) callResult {
			ref := shipmentRef(a)
			if a.Status == payment.AttemptUnknown || s.unresolved(a) {
				// Never ship blindly again: find the shipment by the
				// reference the first Ship set on it. Not found means
				// nothing shipped, so the Ship below is sent again under
				// the same key — unless the attempt is past
				// UnresolvedAfter, where it is parked as before.
				notFound := false
				r := s.provider(ctx, ProviderShipmentFind, func(ctx context.Context) callResult {
					sh, err := s.warehouse.Find(ctx, ref)
					if notFound = errors.Is(err, fulfillment.ErrShipmentNotFound); notFound {
						return callResult{class: rejected}
					}
					return s.classifyShipment(sh, err)
				})
				if !notFound {
					return r
				}
				if s.unresolved(a) {
					return callResult{class: attention, err: needsAttention(a)}
				}
			}
			return s.provider(ctx, ProviderShip, func(ctx context.Context) callResult {
				sh, err := s.warehouse.Ship(ctx, fulfillment.ShipmentRequest{IdempotencyKey: a.ProviderKey, Reference: ref,
					OrderID: o.ID, Items: o.Items})
				return s.classifyShipment(sh, err)
			})
		},
	}
}

// shipmentRef is the fulfillment.Reference the shipment attempt a sets on
// its shipment and finds it by: its order and its provider key
// ("<order id>/fulfill").
func shipmentRef(a payment.Attempt) fulfillment.Reference {
	return fulfillment.Reference{OrderID: a.OrderID, Key: a.ProviderKey}
}

func (s *Service) classifyShipment(sh fulfillment.Shipment, err error) callResult {
	switch {
	case err == nil:
		return callResult{class: succeeded, ref: sh.ID}
	case fulfillment.IsUnknownOutcome(err):
		return callResult{class: unknown, err: unknownErr("warehouse")}
	case fulfillment.IsRetryable(err), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return callResult{class: retryable, err: s.unavailable("warehouse", err)}
	case errors.Is(err, fulfillment.ErrIdempotencyKeyReused):
		return callResult{class: contended, err: apperr.Errorf(apperr.EOrderBusy, "another fulfilment of this order is in progress; retry")}
	case errors.Is(err, fulfillment.ErrOutOfStock):
		return callResult{class: rejected, err: apperr.Errorf(apperr.EFulfillmentRejected,
			"the warehouse rejected the shipment: an item is out of stock; the order can be cancelled and refunded")}
	default:
		return callResult{class: rejected, err: apperr.Errorf(apperr.EFulfillmentRejected, "the warehouse rejected the shipment")}
	}
}

// refundEffect refunds a PAID order's charge before it is cancelled; a
// cancel from RCVD calls no provider unless a charge of its version may
// have captured.
func (s *Service) refundEffect() effect {
	return effect{
		intent: func(id string, now time.Time) store.Intent {
			return store.Intent{From: order.Paid, Kind: payment.AttemptRefund, ProviderKeyPrefix: refundKey(id), At: now}
		},
		attempt: func(o order.Order, d statemachine.Decision, now time.Time) *payment.Attempt {
			if d.From != order.Paid {
				return nil
			}
			return &payment.Attempt{ProviderKey: refundKey(o.ID), TenantID: o.TenantID, OrderID: o.ID,
				Kind: payment.AttemptRefund, Status: payment.AttemptPending, Amount: o.Amount, Currency: o.Currency,
				CreatedAt: now, UpdatedAt: now}
		},
		call: func(ctx context.Context, rec idempotency.Record, a payment.Attempt, o order.Order) callResult {
			// A PAID order at version v was paid by the charge of version
			// v-1; a RCVD one may have been charged at its own version by
			// a charge whose attempt failed after capture (see
			// uncertainChargeRefund): read its intent before refunding.
			version := o.Version - 1
			if o.State == order.Received {
				version = o.Version
			}
			return s.refund(ctx, rec, a, s.paidChargeKey(ctx, o, version), o.State != order.Received)
		},
	}
}

// chargeIntent reads the intent of the charge attempt whose provider key is
// key of order orderID: by the id its attempt recorded, else by its
// Reference. An error wrapping payment.ErrNotFound means no intent exists.
func (s *Service) chargeIntent(ctx context.Context, orderID, key string) (payment.Intent, error) {
	id := ""
	if ca, err := s.store.GetAttempt(ctx, key); err == nil {
		id = ca.IntentID
	} else if !errors.Is(err, store.ErrNotFound) {
		return payment.Intent{}, err
	}
	if id != "" {
		return s.gateway.Retrieve(ctx, id)
	}
	return s.gateway.Find(ctx, payment.Reference{OrderID: orderID, Key: key})
}

// refund refunds what the charge chargeKey received, for refund attempt a
// (provider key refundKey(order)), under the lease of rec. paid says the
// order is PAID, so a charge must exist (its absence is a rejection);
// otherwise nothing received is nothing to refund. An unknown outcome is
// resolved by FindRefund and by the intent's AmountRefunded, never by
// resending a key the provider may have saved a 5xx under.
func (s *Service) refund(ctx context.Context, rec idempotency.Record, a payment.Attempt, chargeKey string, paid bool) callResult {
	var in payment.Intent
	r := s.provider(ctx, ProviderChargeLookup, func(ctx context.Context) callResult {
		var err error
		in, err = s.chargeIntent(ctx, a.OrderID, chargeKey)
		switch {
		case err == nil:
			return callResult{class: succeeded}
		case errors.Is(err, payment.ErrNotFound):
			return callResult{class: rejected}
		case payment.IsRetryable(err):
			return callResult{class: retryable, err: s.unavailable("payment provider", err)}
		}
		return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
	})
	switch {
	case r.class == rejected && paid:
		return callResult{class: rejected, err: refundRejected()}
	case r.class == rejected:
		return callResult{class: succeeded} // nothing captured is left to refund
	case r.class != succeeded:
		return r
	case in.AmountReceived == 0 && !paid:
		return callResult{class: succeeded}
	case in.AmountReceived == 0:
		return callResult{class: rejected, err: refundRejected()}
	case in.AmountRefunded >= in.AmountReceived:
		return callResult{class: succeeded}
	}
	ref := payment.Reference{OrderID: a.OrderID, Key: a.ProviderKey}
	lease := store.LeaseOf(rec)
	key := a.ProviderKey
	if a.Status == payment.AttemptUnknown || !a.KeySentAt.IsZero() {
		if rf, err := s.gateway.FindRefund(ctx, in.ID, ref); err == nil {
			s.noteFailedCancelRefund(a, rf)
			return callResult{class: succeeded, ref: rf.ID, refunded: &rf.Amount}
		} else if !errors.Is(err, payment.ErrNotFound) {
			return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
		}
		// Nothing refunded under the reference: refund under a key of
		// this lease (a saved 5xx may sit under the old one; the intent
		// never refunds more than it received).
		key = fmt.Sprintf("%s/%s.%d", a.ProviderKey, keyHash8(rec), lease.Token)
	} else if rec.KeyHash != "" {
		if _, err := s.store.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, SentAt: s.cfg.Now()}); err != nil {
			return callResult{class: retryable, err: s.unavailable("store", err)}
		}
	}
	amount := in.AmountReceived - in.AmountRefunded
	return s.provider(ctx, ProviderRefund, func(ctx context.Context) callResult {
		rf, err := s.gateway.Refund(ctx, payment.RefundRequest{IdempotencyKey: key, IntentID: in.ID, Amount: amount, Reference: ref})
		switch {
		case err == nil:
			s.noteFailedCancelRefund(a, rf)
			return callResult{class: succeeded, ref: rf.ID, refunded: &rf.Amount}
		case errors.Is(err, payment.ErrNotFound):
			return callResult{class: rejected, err: refundRejected()}
		case payment.IsUnknownOutcome(err):
			if rf, ferr := s.gateway.FindRefund(ctx, in.ID, ref); ferr == nil {
				s.noteFailedCancelRefund(a, rf)
				return callResult{class: succeeded, ref: rf.ID, refunded: &rf.Amount}
			}
			return callResult{class: unknown, err: unknownErr("payment provider")}
		case errors.Is(err, payment.ErrIdempotencyKeyReused):
			return callResult{class: unknown, err: unknownErr("payment provider")}
		default:
			if now, rerr := s.gateway.Retrieve(ctx, in.ID); rerr == nil && now.AmountRefunded >= now.AmountReceived {
				return callResult{class: succeeded}
			}
			if payment.IsRetryable(err) {
				return callResult{class: retryable, err: s.unavailable("payment provider", err)}
			}
			return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
		}
	})
}

// noteFailedCancelRefund logs, at error level, a cancel's refund rf that
// the provider answers failed or canceled: the cancel still happens (the
// goods will not ship; its refund attempt is recorded as sent), but the
// customer has not received the money, which a person returns another way,
// as for a cancel's refund that fails later (applyProviderEvent).
func (s *Service) noteFailedCancelRefund(a payment.Attempt, rf payment.Refund) {
	if rf.Status == payment.RefundFailed || rf.Status == payment.RefundCanceled {
		s.cfg.Logger.Error("a provider reports a cancelled order's refund failed: the customer has not received it; return it another way",
			"order_id", a.OrderID, "provider_key", a.ProviderKey, "refund_id", rf.ID, "amount", rf.Amount, "status", rf.Status)
	}
}

// refundOrphanedCharge refunds the charge a pay may have captured for an
// order that a racing cancel moved from RCVD to CANCELLED, under the lease
// of rec, the pay's key. Only a cancel at version v+1 can orphan a charge
// made at version v; the refund's reference is the order's, so a refund
// happens once however often this runs.
func (s *Service) refundOrphanedCharge(ctx context.Context, rec idempotency.Record, o order.Order) error {
	if o.PaidAt != nil {
		return nil // cancelled from PAID: the cancel refunded it
	}
	return s.refundCapturedCharge(ctx, rec, o, o.Version-1)
}

// refundCapturedCharge makes sure no charge of order o at version stays
// captured: its intent is read (by the id its attempt recorded, else by
// its Reference) and what it received and has not refunded is refunded.
// A declined or rejected charge captured nothing. It is for an order
// already CANCELLED, which no pay can move on. The refund carries the
// order's refund key and Reference, so it happens once however often this
// runs (FindRefund finds an earlier one; the intent never refunds more
// than it received). Its provider key is scoped to rec's lease
// (<order id>/refund/<keyhash8>.<fencing token>), as any refund resent after
// an unknown outcome: a provider that saved a 5xx under one lease's key
// (Stripe does) cannot block the refund, since the next lease sends another.
func (s *Service) refundCapturedCharge(ctx context.Context, rec idempotency.Record, o order.Order, version int64) error {
	a, err := s.store.GetAttempt(ctx, chargeKey(o.ID, version))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil // no charge was ever attempted
	case err != nil:
		return err
	case a.Status == payment.AttemptDeclined || a.Status == payment.AttemptRejected:
		return nil // nothing was captured
	}
	ra := payment.Attempt{ProviderKey: refundKey(o.ID), TenantID: o.TenantID, OrderID: o.ID, Kind: payment.AttemptRefund,
		Status: payment.AttemptUnknown, Amount: a.Amount, Currency: a.Currency}
	r := s.refund(ctx, rec, ra, a.ProviderKey, false)
	switch r.class {
	case succeeded:
		if r.ref != "" {
			s.cfg.Logger.Info("refunded a charge of an order being cancelled", "order_id", o.ID, "provider_key", a.ProviderKey)
		}
		return nil
	case rejected:
		return nil
	}
	if r.err != nil {
		return r.err
	}
	return s.unavailable("payment provider", errors.New("refund outcome unknown"))
}

// uncertainChargeRefund returns the refund attempt a cancel of o, in RCVD,
// must hold when a charge of o's version was attempted and may have
// captured (its attempt failed: a provider can capture and still answer
// 5xx), or nil when none was or none captured (declined, rejected). An
// open charge attempt is returned as such a refund too: recording it then
// fails with ErrAttemptInFlight (order busy), and a succeeded one (a stale
// read) with ErrVersionConflict.
func (s *Service) uncertainChargeRefund(ctx context.Context, o order.Order, now time.Time) (*payment.Attempt, error) {
	a, err := s.store.GetAttempt(ctx, chargeKey(o.ID, o.Version))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	case a.Status == payment.AttemptDeclined || a.Status == payment.AttemptRejected:
		return nil, nil
	}
	return &payment.Attempt{ProviderKey: refundKey(o.ID), TenantID: o.TenantID, OrderID: o.ID,
		Kind: payment.AttemptRefund, Status: payment.AttemptPending, Amount: o.Amount, Currency: o.Currency,
		CreatedAt: now, UpdatedAt: now}, nil
}

// unresolved reports whether attempt a, not settled, is older than
// Config.UnresolvedAfter: the provider may have forgotten its key, so a
// lookup that finds nothing proves nothing and it must not be called
// again.
func (s *Service) unresolved(a payment.Attempt) bool {
	return a.Status.Open() && s.cfg.Now().Sub(a.CreatedAt) > s.cfg.UnresolvedAfter
}

// needsAttention is the error of a request whose attempt is parked.
func needsAttention(a payment.Attempt) *apperr.Error {
	return orderParked(a)
}

// forget answers a request whose order does not exist for the tenant: it
// did not happen, so its key is deleted (a corrected request may use it)
// and the answer is a 404.
func (s *Service) forget(ctx context.Context, rec idempotency.Record, lease store.Lease) (Result, error) {
	cause := notFound(store.ErrNotFound, rec.ResourceID)
	if err := s.store.ForgetKey(ctx, lease); err != nil {
		s.cfg.Logger.Warn("could not forget the idempotency key of a request on a missing order", "err", err)
		return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, cause)
	}
	return Result{}, cause
}

// chargeKey is the provider-side idempotency key of paying order id at
// version: every pay of one order version is one logical charge. A decline
// moves the version on, so a new payment method gets a new charge.
func chargeKey(id string, version int64) string {
	return chargeKeyPrefix(id) + strconv.FormatInt(version, 10)
}

// chargeKeyPrefix is what every charge key of order id starts with; the
// order's version follows.
func chargeKeyPrefix(id string) string { return id + "/pay/" }

// shipmentKey is the provider-side key of shipping order id: an order
// ships once.
func shipmentKey(id string) string { return id + "/fulfill" }

// refundKey is the provider-side key of refunding order id's charge.
func refundKey(id string) string { return id + "/refund" }

// unavailable is the client-facing error of a retryable provider failure;
// the cause goes to the log, not to the client.
func (s *Service) unavailable(who string, err error) *apperr.Error {
	s.cfg.Logger.Warn("provider call failed", "provider", who, "err", err)
	return &apperr.Error{Code: apperr.EUnavailable, Message: fmt.Sprintf(
		"the %s is unavailable; nothing was done — retry with the same Idempotency-Key", who)}
}

func unknownErr(who string) *apperr.Error {
	return &apperr.Error{Code: apperr.EUnavailable, Message: fmt.Sprintf("the %s's answer was lost; "+
		"retry with the same Idempotency-Key: the outcome is checked with the %s before anything is done again", who, who)}
}
