package service

import (
	"context"
	"errors"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// RecoverAbandoned is one pass of the completer: it takes over at most limit
// keys whose holder vanished (in progress past its lease — a crash, a kill —
// or left with an unknown provider outcome) and drives each to a definite
// end from its recovery point: a key that never reached a provider is
// released as a retryable failure; one with a recorded attempt asks the
// provider what happened and rolls forward. It returns how many keys it
// took over. Several instances may run it at once: each key goes to one.
func (s *Service) RecoverAbandoned(ctx context.Context, limit int) (n int, err error) {
	start := time.Now()
	defer func() {
		if err == nil && s.cfg.Observer != nil {
			b, ok, _ := s.Backlog(ctx)
			s.obs.CompleterPass(time.Since(start), n, b, ok)
		}
	}()
	now := s.cfg.Now()
	recs, err := s.store.TakeOverAbandoned(ctx, now, now.Add(s.cfg.LeaseDuration), limit)
	if err != nil {
		return 0, err
	}
	for _, rec := range recs {
		s.obs.KeyEvent(KeyLeaseTakeover, rec.Operation)
		lease := store.LeaseOf(rec)
		if rec.RecoveryPoint != idempotency.RecoveryAttemptRecorded || rec.AttemptKey == "" {
			if err := s.store.ReleaseKey(ctx, lease, idempotency.StateRetryableFailure); err != nil && !errors.Is(err, store.ErrLeaseLost) {
				return len(recs), err
			}
			continue
		}
		a, err := s.store.GetAttempt(ctx, rec.AttemptKey)
		if err != nil {
			return len(recs), err
		}
		var ev order.Event
		var eff effect
		switch a.Kind {
		case store.AttemptCharge:
			ev, eff = order.EventPay, s.payEffect(a.PaymentMethod, nil, "")
		case store.AttemptShipment:
			ev, eff = order.EventFulfill, s.shipEffect()
		case store.AttemptRefund:
			ev, eff = order.EventCancel, s.refundEffect()
		}
		_, err = s.drive(ctx, rec, ev, nil, eff, nil)
		s.cfg.Logger.Info("completer finished an abandoned request", "order_id", rec.ResourceID,
			"event", string(ev), "outcome", outcomeOf(err))
	}
	return len(recs), nil
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
	res, err := s.store.Sweep(ctx, s.cfg.Now(), s.cfg.TombstoneTTL, limit)
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
		if r.Expired(s.cfg.Now()) {
			info.State, info.ErrorCode = KeyExpired, ""
		}
	}
	return info, nil
}
