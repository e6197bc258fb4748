package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// Capture at fulfilment (ORDERD_CAPTURE=at_fulfilment, issue 16; README
// "Capture at fulfilment", docs/state_machine.md). A pay prepares its
// intent with payment.CaptureManual, so Confirm only authorizes
// (payment.IntentRequiresCapture); the charge attempt succeeds, the order
// goes PAID and its store.Authorization is recorded in that one
// transaction, with nothing captured in the refund totals. Then:
//
//   - Fulfil ships (the "<id>/fulfill" attempt, unchanged); the ship's
//     phase 3 moves the order to FULFILLED with its event, settles the
//     shipment and records the capture attempt ("<id>/capture/1", pending)
//     under the same key and lease, which stays in progress: a crash
//     after it leaves a pending capture the completer (or a retry of the
//     key) finishes. The capture's phase 3 completes the key, settles the
//     attempt, moves the authorization to captured, sets the captured
//     total, moves the order's version on and appends order.captured.
//   - A shipment refused for good records the void attempt ("<id>/void/1")
//     in the phase 3 that settles the shipment; the void (Gateway.Cancel
//     of the intent) then ends the fulfil with fulfillment_rejected and
//     the order CANCELLED (order.cancelled with voided true), the
//     authorization voided.
//   - Cancel of a PAID order whose payment is authorized voids it the same
//     way instead of refunding; nothing is ever captured afterwards.
//   - A partial refund before the capture is payment_not_captured (409).
//   - The completer flags an authorization whose capture_before is within
//     Config.CaptureMargin (FlagExpiringAuthorizations).

// captureKey is the provider key of capturing order id's authorization.
func captureKey(id string) string { return id + "/capture/1" }

// voidKey is the provider key of voiding order id's authorization.
func voidKey(id string) string { return id + "/void/1" }

// captureMode is how a new pay's intent is prepared.
func (s *Service) captureMode() payment.CaptureMode {
	if s.cfg.Capture == CaptureAtFulfilment {
		return payment.CaptureManual
	}
	return payment.CaptureAutomatic
}

// authorization returns order o's authorization when its payment is only
// authorized (store.AuthAuthorized), else false.
func (s *Service) authorization(ctx context.Context, o order.Order) (store.Authorization, bool, error) {
	cs, ok := s.store.(store.CaptureStore)
	if !ok {
		return store.Authorization{}, false, nil
	}
	a, err := cs.GetAuthorization(ctx, o.TenantID, o.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return a, false, nil
	case err != nil:
		return a, false, err
	}
	return a, a.Status == store.AuthAuthorized, nil
}

// putAuthorization is the write, in a pay's phase 3, of the authorization
// intent in made for charge attempt chargeKey of next (PAID).
func (s *Service) putAuthorization(next order.Order, chargeKey string, in *payment.Intent) func(tx store.Executor) error {
	if in == nil {
		return nil
	}
	return func(tx store.Executor) error {
		ce, ok := tx.(store.CaptureExecutor)
		if !ok {
			return errors.New("service: the store keeps no authorizations; capture at fulfilment needs one that does")
		}
		return ce.PutAuthorization(context.Background(), store.Authorization{TenantID: next.TenantID, OrderID: next.ID,
			ChargeKey: chargeKey, IntentID: in.ID, Amount: in.Amount, Currency: next.Currency,
			CaptureBefore: in.CaptureBefore, CreatedAt: s.cfg.Now().UTC().Truncate(time.Microsecond)})
	}
}

// authStepAttempt is the capture or void attempt of order o.
func authStepAttempt(o order.Order, kind payment.AttemptKind, auth store.Authorization, now time.Time) payment.Attempt {
	k := captureKey(o.ID)
	if kind == payment.AttemptVoid {
		k = voidKey(o.ID)
	}
	return payment.Attempt{ProviderKey: k, TenantID: o.TenantID, OrderID: o.ID, Kind: kind, Status: payment.AttemptPending,
		Amount: auth.Amount, Currency: auth.Currency, CreatedAt: now, UpdatedAt: now}
}

// shippedThenCapture is the phase 3 of a shipment that succeeded for an
// order whose payment is authorized: in one transaction, fenced by lease,
// the order moves to next (FULFILLED) with its event, the shipment is
// settled with upd, and the capture attempt is recorded under the key
// (which stays in progress); then the capture runs. again reports a lost
// compare-and-set: nothing was written, decide again.
func (s *Service) shippedThenCapture(ctx context.Context, rec idempotency.Record, lease store.Lease, o, next order.Order,
	upd *store.AttemptUpdate, auth store.Authorization) (_ Result, _ error, again bool) {
	ca := authStepAttempt(next, payment.AttemptCapture, auth, s.cfg.Now().UTC().Truncate(time.Microsecond))
	var stored payment.Attempt
	err := s.store.InTx(ctx, func(tx store.Executor) error {
		if err := tx.CompareAndSetOrder(ctx, next, upd.ProviderKey); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, event.For(next, s.cfg.Now())); err != nil {
			return err
		}
		if err := tx.SettleAttempt(ctx, *upd); err != nil {
			return err
		}
		var err error
		stored, err = tx.RecordAttempt(ctx, lease, ca, next.Version)
		return err
	})
	s.observeTransition(order.EventFulfill, o.State, next.State, err)
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		return Result{}, nil, true
	case err != nil:
		s.observeFencing(rec.Operation, err)
		res, err := s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, nil, err)
		return res, err, false
	}
	res, err := s.driveCapture(ctx, rec, lease, next, stored, auth)
	return res, err, false
}

// shipRefusedThenVoid is the phase 3 of a shipment refused for good for an
// order o (PAID) whose payment is authorized: the shipment is settled with
// upd and the void attempt recorded under the key, in one transaction;
// then the void runs and ends the fulfil with cause.
func (s *Service) shipRefusedThenVoid(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order,
	upd *store.AttemptUpdate, auth store.Authorization) (Result, error) {
	va := authStepAttempt(o, payment.AttemptVoid, auth, s.cfg.Now().UTC().Truncate(time.Microsecond))
	var stored payment.Attempt
	err := s.store.InTx(ctx, func(tx store.Executor) error {
		if err := tx.SettleAttempt(ctx, *upd); err != nil {
			return err
		}
		var err error
		stored, err = tx.RecordAttempt(ctx, lease, va, o.Version)
		return err
	})
	if err != nil {
		s.observeFencing(rec.Operation, err)
		return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, err)
	}
	return s.driveVoid(ctx, rec, lease, o, stored, auth)
}

// cancelAuthorized is a cancel of order o (PAID) whose payment is only
// authorized: the void attempt is recorded (or found) under the key, then
// the void runs. again reports that the order moved meanwhile.
func (s *Service) cancelAuthorized(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order,
	auth store.Authorization) (_ Result, _ error, again bool) {
	va := authStepAttempt(o, payment.AttemptVoid, auth, s.cfg.Now().UTC().Truncate(time.Microsecond))
	if ra, err := s.store.GetAttempt(ctx, refundKey(o.ID)); err == nil && ra.Status == payment.AttemptPending && ra.KeySentAt.IsZero() {
		// A cancel's phase 1 under ORDERD_CAPTURE=at_pay (the mode switched
		// back) recorded a refund attempt: never sent, and a refund of an
		// intent that received nothing sends nothing (refund), so it is
		// closed as failed — nothing happened — and the void goes instead.
		if err := s.store.SettleAttempt(ctx, store.AttemptUpdate{ProviderKey: ra.ProviderKey, Status: payment.AttemptFailed,
			At: s.cfg.Now()}); err != nil {
			res, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, err)
			return res, err, false
		}
	}
	stored, err := s.store.RecordAttempt(ctx, lease, va, o.Version)
	switch {
	case errors.Is(err, store.ErrVersionConflict):
		return Result{}, nil, true
	case errors.Is(err, store.ErrAttemptInFlight):
		res, err := s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, s.busyOrParked(ctx, o))
		return res, err, false
	case err != nil:
		s.observeFencing(rec.Operation, err)
		res, err := s.lost(err)
		return res, err, false
	}
	res, err := s.driveVoid(ctx, rec, lease, o, stored, auth)
	return res, err, false
}

// resumeAuthStep finishes the open capture or void attempt a that key rec
// holds (a retry of the key, or the completer, after a crash or an
// unknown outcome), from the order o as it is now.
func (s *Service) resumeAuthStep(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order, a payment.Attempt) (Result, error) {
	cs, ok := s.store.(store.CaptureStore)
	if !ok {
		return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, errors.New("service: the store keeps no authorizations"))
	}
	auth, err := cs.GetAuthorization(ctx, o.TenantID, o.ID)
	if err != nil {
		return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, nil, err)
	}
	if a.Kind == payment.AttemptCapture {
		// The shipment happened under an earlier lease of this key, and
		// that try answered its FULFILLED order (driveCapture answers the
		// shipment whatever the capture did): this answer is a replay of
		// it (draft-ietf-httpapi-idempotency-key-header §2.6), with the
		// capture finished or still pending.
		res, err := s.driveCapture(ctx, rec, lease, o, a, auth)
		res.Replayed = err == nil
		return res, err
	}
	return s.driveVoid(ctx, rec, lease, o, a, auth)
}

// stepKey is the provider key a capture or void attempt a sends now: its
// own the first time, else one of this lease ("<key>/<keyhash8>.<token>"),
// since a provider may have saved a 5xx under the first; the intent is
// captured or cancelled at most once whatever the key.
func stepKey(rec idempotency.Record, a payment.Attempt) string {
	if a.Status == payment.AttemptUnknown || !a.KeySentAt.IsZero() {
		return fmt.Sprintf("%s/%s.%d", a.ProviderKey, keyHash8(rec), store.LeaseOf(rec).Token)
	}
	return a.ProviderKey
}

// driveCapture runs capture attempt a of order o (FULFILLED) for auth under
// the lease of rec, phases 2 and 3. Captured: the key completes with o and
// the capture is written (see finishCapture). The intent canceled (the hold
// expired) or refusing the amount: the attempt is rejected, the key
// completes (the order shipped), and an error-level log line asks for a
// person. Anything else leaves the attempt unknown and the key an unknown
// outcome, for a retry or the completer; the fulfil still answers its
// FULFILLED order (it shipped), with the capture pending.
func (s *Service) driveCapture(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order, a payment.Attempt, auth store.Authorization) (Result, error) {
	now := s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, At: now}
	in, r := s.captureCall(ctx, rec, a, auth)
	switch r.class {
	case succeeded:
		upd.Status, upd.ProviderRef = payment.AttemptSucceeded, in.ID
		after, err := s.finishCapture(ctx, lease, o, upd, auth, in)
		if err != nil {
			s.observeFencing(rec.Operation, err)
			if errors.Is(err, store.ErrLeaseLost) {
				return s.lost(err)
			}
			return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, nil, err)
		}
		return Result{Order: after, KeyExpiresAt: rec.ExpiresAt}, nil
	case rejected:
		upd.Status, upd.ErrorCode = payment.AttemptRejected, "capture_failed"
		s.cfg.Logger.Error("the capture of a shipped order failed for good; its payment needs a person", "order_id", o.ID,
			"provider_key", a.ProviderKey, "intent_id", auth.IntentID, "intent_status", string(in.Status))
		err := s.store.InTx(ctx, func(tx store.Executor) error {
			if err := tx.CompleteKey(ctx, lease, idempotency.Record{ResourceID: o.ID}); err != nil {
				return err
			}
			if in.Status == payment.IntentCanceled {
				if err := tx.(store.CaptureExecutor).SetAuthorization(ctx, o.TenantID, o.ID, store.AuthVoided, now); err != nil {
					return err
				}
			}
			return tx.SettleAttempt(ctx, upd)
		})
		if err != nil {
			return s.lost(err)
		}
		return Result{Order: o, KeyExpiresAt: rec.ExpiresAt}, nil
	}
	upd.Status = payment.AttemptUnknown
	if _, err := s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, &upd, r.err); errors.Is(err, store.ErrLeaseLost) {
		return s.lost(err)
	}
	return Result{Order: o, KeyExpiresAt: rec.ExpiresAt}, nil
}

// captureCall is the provider side of capture attempt a: a capture that
// may have been sent before is asked about first (Retrieve: succeeded with
// AmountReceived > 0 is captured, canceled is final), and only an intent
// still in requires_capture is captured, for auth.Amount.
func (s *Service) captureCall(ctx context.Context, rec idempotency.Record, a payment.Attempt, auth store.Authorization) (payment.Intent, callResult) {
	asked := a.Status == payment.AttemptUnknown || !a.KeySentAt.IsZero()
	if asked {
		in, r := s.retrieve(ctx, auth.IntentID)
		if r.class != 0 {
			return in, r
		}
		if c, done := classifyCaptured(in); done {
			return in, c
		}
	} else if _, err := s.store.RecordAttemptProgress(ctx, store.LeaseOf(rec), store.AttemptProgress{ProviderKey: a.ProviderKey, SentAt: s.cfg.Now()}); err != nil {
		return payment.Intent{}, callResult{class: unknown, err: s.unavailable("store", err)}
	}
	var in payment.Intent
	r := s.provider(ctx, ProviderCapture, func(ctx context.Context) callResult {
		var err error
		in, err = s.gateway.Capture(ctx, payment.CaptureRequest{IdempotencyKey: stepKey(rec, a), IntentID: auth.IntentID,
			Amount: auth.Amount, Reference: payment.Reference{OrderID: a.OrderID, Key: auth.ChargeKey}})
		if err == nil {
			if c, done := classifyCaptured(in); done {
				return c
			}
			return callResult{class: unknown, err: unknownErr("payment provider")}
		}
		// Whatever the error, the intent says what happened.
		var rr callResult
		if in, rr = s.retrieve(ctx, auth.IntentID); rr.class != 0 {
			return rr
		}
		if c, done := classifyCaptured(in); done {
			return c
		}
		var pe *payment.ProviderError
		if errors.As(err, &pe) && pe.Code == "amount_too_large" {
			return callResult{class: rejected, err: apperr.Errorf(apperr.EUnavailable, "the provider refused the capture")}
		}
		return callResult{class: unknown, err: s.unknownAfter("payment provider", err)}
	})
	return in, r
}

// classifyCaptured reads an intent after (or instead of) a capture: done is
// false while it still waits in requires_capture.
func classifyCaptured(in payment.Intent) (callResult, bool) {
	switch {
	case in.Status == payment.IntentSucceeded && in.AmountReceived > 0:
		return callResult{class: succeeded, ref: in.ID}, true
	case in.Status == payment.IntentCanceled:
		return callResult{class: rejected, err: apperr.Errorf(apperr.EUnavailable, "the authorization expired or was voided")}, true
	case in.Status == payment.IntentRequiresCapture:
		return callResult{}, false
	}
	return callResult{class: unknown, err: unknownErr("payment provider")}, true
}

// finishCapture is the capture's phase 3 in one transaction fenced by
// lease: the key completes, the capture attempt is settled with upd, the
// authorization moves to captured (the refund totals' captured amount with
// it), the order's version moves on (its state stays FULFILLED) and
// order.captured is appended. It returns the order after.
func (s *Service) finishCapture(ctx context.Context, lease store.Lease, o order.Order, upd store.AttemptUpdate, auth store.Authorization, in payment.Intent) (order.Order, error) {
	after := o
	after.Version++
	err := s.store.InTx(ctx, func(tx store.Executor) error {
		if err := tx.CompleteKey(ctx, lease, idempotency.Record{ResourceID: o.ID}); err != nil {
			return err
		}
		if err := tx.CompareAndSetOrder(ctx, after, upd.ProviderKey); err != nil {
			return err
		}
		if err := tx.SettleAttempt(ctx, upd); err != nil {
			return err
		}
		if err := tx.(store.CaptureExecutor).SetAuthorization(ctx, o.TenantID, o.ID, store.AuthCaptured, upd.At); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, event.ForCapture(after, event.Capture{ID: upd.ProviderKey, IntentID: in.ID,
			Amount: in.AmountReceived, Currency: o.Currency}, s.cfg.Now()))
	})
	return after, err
}

// driveVoid runs void attempt a of order o (PAID) for auth under the lease
// of rec: Gateway.Cancel of the intent, then, cancelled, one transaction
// completes the key (a cancel's with success, a refused fulfil's with
// fulfillment_rejected), settles the attempt, moves the authorization to
// voided and the order to CANCELLED with order.cancelled (voided true).
// An intent that cannot be cancelled now leaves the attempt unknown, for a
// retry or the completer.
func (s *Service) driveVoid(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order, a payment.Attempt, auth store.Authorization) (Result, error) {
	now := s.cfg.Now()
	upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, At: now}
	var final *apperr.Error
	if rec.Operation == idempotency.OpFulfill {
		final = apperr.Errorf(apperr.EFulfillmentRejected,
			"the warehouse rejected the shipment; the payment's authorization was voided and the order cancelled")
	}
	if o.State != order.Paid {
		// Moved already (a void another holder finished): settle the
		// attempt as it stands and answer from the order.
		if o.State == order.Cancelled {
			upd.Status = payment.AttemptSucceeded
		} else {
			upd.Status = payment.AttemptRejected
		}
		res, err := s.completeFinalOrOK(ctx, rec, lease, o, final, &upd)
		return res, err
	}
	if !a.KeySentAt.IsZero() || a.Status == payment.AttemptUnknown {
		// Asked before: Cancel is idempotent on a canceled intent.
	} else if _, err := s.store.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, SentAt: now}); err != nil {
		return s.release(ctx, rec, lease, idempotency.StateRetryableFailure, nil, s.unavailable("store", err))
	}
	r := s.provider(ctx, ProviderVoid, func(ctx context.Context) callResult {
		in, err := s.gateway.Cancel(ctx, payment.CancelRequest{IdempotencyKey: stepKey(rec, a), IntentID: auth.IntentID})
		if err != nil {
			var rr callResult
			if in, rr = s.retrieve(ctx, auth.IntentID); rr.class != 0 {
				return rr
			}
		}
		if in.Status == payment.IntentCanceled {
			return callResult{class: succeeded, ref: in.ID}
		}
		return callResult{class: unknown, err: unknownErr("payment provider")}
	})
	if r.class != succeeded {
		upd.Status = payment.AttemptUnknown
		return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, &upd, r.err)
	}
	upd.Status, upd.ProviderRef = payment.AttemptSucceeded, r.ref
	next := o.Apply(order.Cancelled, now)
	out := idempotency.Record{ResourceID: o.ID}
	if final != nil {
		out.ErrorCode, out.ErrorDetail = final.Code, final.Message
	}
	err := s.store.InTx(ctx, func(tx store.Executor) error {
		if err := tx.CompleteKey(ctx, lease, out); err != nil {
			return err
		}
		if err := tx.CompareAndSetOrder(ctx, next, upd.ProviderKey); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, event.ForVoid(next, s.cfg.Now())); err != nil {
			return err
		}
		if err := tx.SettleAttempt(ctx, upd); err != nil {
			return err
		}
		return tx.(store.CaptureExecutor).SetAuthorization(ctx, o.TenantID, o.ID, store.AuthVoided, now)
	})
	s.observeTransition(order.EventCancel, o.State, next.State, err)
	if err != nil {
		s.observeFencing(rec.Operation, err)
		if errors.Is(err, store.ErrLeaseLost) {
			return s.lost(err)
		}
		upd.Status = payment.AttemptUnknown
		return s.release(ctx, rec, lease, idempotency.StateUnknownOutcome, &upd, err)
	}
	s.cfg.Logger.Info("voided the authorization of an order being cancelled", "order_id", o.ID, "provider_key", a.ProviderKey,
		"operation", string(rec.Operation))
	if final != nil {
		return Result{KeyExpiresAt: rec.ExpiresAt}, final
	}
	return Result{Order: next, KeyExpiresAt: rec.ExpiresAt}, nil
}

// completeFinalOrOK completes the key with final (if set) or a success
// for o, settling upd.
func (s *Service) completeFinalOrOK(ctx context.Context, rec idempotency.Record, lease store.Lease, o order.Order, final *apperr.Error, upd *store.AttemptUpdate) (Result, error) {
	if final != nil {
		return s.completeFinal(ctx, rec, lease, o, final, nil, upd)
	}
	return s.completeOK(ctx, rec, lease, o, nil, upd)
}

// FlagExpiringAuthorizations is the completer's near-expiry rule of capture
// at fulfilment: at most limit authorizations still uncaptured whose
// capture_before is within Config.CaptureMargin are flagged (once each;
// the order's payment shows capture_attention) and logged at error level
// for an operator, who ships (the capture follows) or cancels (the void
// follows) before the provider releases the hold. Nothing is captured
// early. It returns how many it flagged; a store without authorizations
// flags none.
func (s *Service) FlagExpiringAuthorizations(ctx context.Context, limit int) (int, error) {
	cs, ok := s.store.(store.CaptureStore)
	if !ok || limit <= 0 {
		return 0, nil
	}
	now := s.cfg.Now()
	as, err := cs.FlagExpiringAuthorizations(ctx, now.Add(s.cfg.CaptureMargin), now, limit)
	for _, a := range as {
		s.cfg.Logger.Error("an authorization is close to its capture_before and is still not captured: ship or cancel the order",
			"order_id", a.OrderID, "tenant", a.TenantID, "intent_id", a.IntentID, "capture_before", a.CaptureBefore,
			"capture_margin", s.cfg.CaptureMargin)
	}
	return len(as), err
}

// withAuthorization sets o.Payment from its authorization, if it has one,
// and what it captured: nothing until the capture.
func (s *Service) withAuthorization(ctx context.Context, o *order.Order) (bool, error) {
	cs, ok := s.store.(store.CaptureStore)
	if !ok || o.PaidAt == nil {
		return false, nil
	}
	a, err := cs.GetAuthorization(ctx, o.TenantID, o.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	p := &order.Payment{Status: string(a.Status), IntentID: a.IntentID, CaptureAttention: !a.FlaggedAt.IsZero() && a.Status == store.AuthAuthorized}
	if a.Status == store.AuthAuthorized {
		p.AmountCapturable = a.Amount
		if !a.CaptureBefore.IsZero() {
			cb := a.CaptureBefore
			p.CaptureBefore = &cb
		}
	}
	o.Payment = p
	return true, nil
}
