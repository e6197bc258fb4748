package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// RecoverAbandoned is one pass of the completer: it takes over at most limit
// keys whose holder vanished (in progress past its lease — a crash, a kill —
// or left with an unknown provider outcome) and drives each to a definite
// end from its recovery point: a key that never reached a provider is
// released as a retryable failure; one with a recorded attempt asks the
// provider what happened and rolls forward. It returns how many keys it
// took over. Several instances may run it at once: each key goes to one.
//
// The pass is fair and bounded: the store hands out the longest-due keys
// first across both kinds, each unknown outcome backs off per key
// (Config.CompleterBackoff), and keys are taken Config.CompleterParallel at
// a time, only when a worker is free to drive them, and only within one
// lease duration from the start of the pass, so no key waits in the pass
// while its lease runs out (each drive is itself bounded by the lease).
func (s *Service) RecoverAbandoned(ctx context.Context, limit int) (taken int, firstErr error) {
	start := time.Now()
	defer func() {
		if firstErr == nil && s.cfg.Observer != nil {
			b, ok, _ := s.Backlog(ctx)
			s.obs.CompleterPass(time.Since(start), taken, b, ok)
		}
	}()
	if s.cfg.Capture == CaptureAtFulfilment {
		if _, err := s.FlagExpiringAuthorizations(ctx, limit); err != nil {
			return 0, err
		}
	}
	for taken < limit && time.Since(start) < s.cfg.LeaseDuration && ctx.Err() == nil {
		leaseEnd := time.Now().Add(s.cfg.LeaseDuration) // before the database starts the leases
		recs, err := s.store.TakeOverAbandoned(ctx, store.TakeOver{Lease: s.cfg.LeaseDuration,
			Limit: min(s.cfg.CompleterParallel, limit-taken), Backoff: s.cfg.CompleterBackoff, MaxBackoff: s.cfg.CompleterMaxBackoff})
		if err != nil {
			return taken, err
		}
		if len(recs) == 0 {
			break
		}
		taken += len(recs)
		errs := make([]error, len(recs))
		var wg sync.WaitGroup
		for i, rec := range recs {
			wg.Go(func() { errs[i] = s.recoverKey(ctx, rec, leaseEnd) })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return taken, firstErr
}

// recoverKey drives one key the completer took over. It returns an error only
// when the store failed; the outcome of the drive itself is logged.
func (s *Service) recoverKey(ctx context.Context, rec idempotency.Record, leaseEnd time.Time) error {
	s.obs.KeyEvent(KeyLeaseTakeover, rec.Operation)
	lease := store.LeaseOf(rec)
	if rec.RecoveryPoint != idempotency.RecoveryAttemptRecorded || rec.AttemptKey == "" {
		if err := s.store.ReleaseKey(ctx, lease, idempotency.StateRetryableFailure); err != nil && !errors.Is(err, store.ErrLeaseLost) {
			return err
		}
		return nil
	}
	a, err := s.store.GetAttempt(ctx, rec.AttemptKey)
	if err != nil {
		return err
	}
	if rs, ok := s.store.(store.RefundStore); ok && a.Kind == payment.AttemptRefund && isPartialRefundKey(a.ProviderKey) {
		// A partial refund (issue 16): resolved as its request would be,
		// from the refund it stored.
		_, err := s.driveRefund(ctx, rs, rec, leaseEnd, nil)
		s.cfg.Logger.Info("completer finished an abandoned request", "order_id", rec.ResourceID,
			"event", "refund", "outcome", outcomeOf(err))
		return nil
	}
	var ev order.Event
	var eff effect
	switch a.Kind {
	case payment.AttemptCharge:
		ev, eff = order.EventPay, s.payEffect(a.PaymentMethod, nil, "")
	case payment.AttemptShipment:
		ev, eff = order.EventFulfill, s.shipEffect()
	case payment.AttemptRefund:
		ev, eff = order.EventCancel, s.refundEffect()
	case payment.AttemptCapture, payment.AttemptVoid:
		// Capture at fulfilment: the key's shipment or cancel is decided,
		// its capture or void is finished (drive resumes it).
		ev, eff = order.EventFulfill, s.shipEffect()
		if a.Kind == payment.AttemptVoid && rec.Operation == idempotency.OpCancel {
			ev, eff = order.EventCancel, s.refundEffect()
		}
	}
	_, err = s.drive(ctx, rec, leaseEnd, ev, nil, eff, nil)
	s.cfg.Logger.Info("completer finished an abandoned request", "order_id", rec.ResourceID,
		"event", string(ev), "outcome", outcomeOf(err))
	return nil
}

// CompleterBacklog returns the completer's queue now: expired leases and
// unknown outcomes due, unknown outcomes backing off, attempts needing
// attention, and when the oldest due key became due. It is one read, cheap
// enough for a metrics scrape.
func (s *Service) CompleterBacklog(ctx context.Context) (store.Backlog, error) {
	return s.store.AbandonedBacklog(ctx)
}

// AttemptsNeedingAttention returns at most limit (1–100) of the tenant's
// provider attempts parked as needs_attention, oldest first.
func (s *Service) AttemptsNeedingAttention(ctx context.Context, tenantID string, limit int) ([]payment.Attempt, error) {
	return s.store.AttemptsNeedingAttention(ctx, tenantID, min(max(limit, 1), 100))
}

func outcomeOf(err error) string {
	if err == nil {
		return "ok"
	}
	return string(apperr.ErrorCode(err))
}

// SweepKeys is one pass of the key lifecycle at the current time, at most
// limit rows per step (see store.Store.Sweep): completed client keys past
// retention become tombstones for Config.TombstoneTTL, then are deleted.
func (s *Service) SweepKeys(ctx context.Context, limit int) (store.SweepResult, error) {
	res, err := s.store.Sweep(ctx, s.cfg.TombstoneTTL, limit)
	if err == nil {
		s.obs.SweepPass(res)
	}
	return res, err
}

// KeyState is the state of an idempotency key as GET
// /v1/idempotency-keys/{key} reports it.
type KeyState string

// Key states reported to clients.
const (
	KeyInProgress       KeyState = "in_progress"
	KeyCompleted        KeyState = "completed"
	KeyRetryableFailure KeyState = "retryable_failure"
	KeyUnknownOutcome   KeyState = "unknown_outcome"
	KeyExpired          KeyState = "expired"
	KeyNeedsAttention   KeyState = "needs_attention"
)

// KeyInfo describes a tenant's idempotency key: its state, when its
// retention window ends, the order it concerns, the operation it was claimed
// for, and, for a completed key whose outcome is an error, the error's code
// (the api derives the outcome's HTTP status from Operation and ErrorCode).
type KeyInfo struct {
	State      KeyState
	ExpiresAt  time.Time
	ResourceID string
	Operation  idempotency.Operation
	ErrorCode  apperr.Code
}

// KeyStatus reports the tenant's key (the raw key the client sent). Errors:
// ENotFound.
func (s *Service) KeyStatus(ctx context.Context, tenantID, key string) (KeyInfo, error) {
	r, err := s.store.LookupKey(ctx, tenantID, idempotency.HashKey(key))
	if errors.Is(err, store.ErrNotFound) {
		return KeyInfo{}, apperr.Errorf(apperr.ENotFound, "no such idempotency key (it may never have been used, or its tombstone was deleted)")
	}
	if err != nil {
		return KeyInfo{}, err
	}
	info := KeyInfo{State: KeyState(r.State), ExpiresAt: r.ExpiresAt, ResourceID: r.ResourceID, Operation: r.Operation}
	if r.State == idempotency.StateCompleted {
		info.ErrorCode = r.ErrorCode
		// Expired on the database's clock, as a retry of the key would
		// find it.
		now, err := s.store.Now(ctx)
		if err != nil {
			return KeyInfo{}, err
		}
		if r.Expired(now) {
			info.State, info.ErrorCode = KeyExpired, ""
		}
	}
	return info, nil
}
