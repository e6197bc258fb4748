package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// More operator actions, as event.Action.Name records them.
const (
	ActionResendFailed = "endpoint.resend_failed"
	ActionCancelOrder  = "order.cancel"
	ActionRotateSecret = "endpoint.rotate_secret"
)

// MaxRotationGrace bounds the grace period of a secret rotation.
const MaxRotationGrace = 7 * 24 * time.Hour

// ResendFailedDeliveries makes every failed delivery of endpoint
// endpointID that failed at or after since pending again, due at once
// (the dispatcher sends them on its next pass, each order's in sequence).
// ActionResult.Requeued counts them; 0 is recorded too (nothing had
// failed). Errors: EKeyRequired, EInvalid, ENotFound (no such endpoint),
// EKeyReused.
func (p *Operations) ResendFailedDeliveries(ctx context.Context, c OperatorCall, endpointID string, since time.Time) (ActionResult, error) {
	if err := checkCall(c, ""); err != nil {
		return ActionResult{}, err
	}
	res, err := p.act(ctx, c, func(tx store.OperatorExecutor) (ActionResult, error) {
		tenant, n, err := tx.RequeueFailedDeliveries(ctx, endpointID, since)
		if err != nil {
			return ActionResult{}, err
		}
		act := p.newAction(c, ActionResendFailed, tenant, endpointID)
		act.Outcome = "requeued"
		if n == 0 {
			act.Outcome = "none_failed"
		}
		return ActionResult{Action: act, Requeued: n}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return res, apperr.Errorf(apperr.ENotFound, "no webhook endpoint %s", endpointID)
	}
	return res, err
}

// CancelOrder cancels order orderID on its customer's behalf through the
// tenant API's own call (Service.Cancel): a RCVD order is cancelled, a
// PAID one refunded then cancelled, a CANCELLED one answered as it is;
// the state machine refuses the rest (EInvalidTransition). The tenant's
// idempotency key is the operator's (operator name and Idempotency-Key,
// joined by NUL bytes, which no tenant key contains), so a retry of the
// action is a retry of the same cancel; the action is recorded once the
// cancel has answered. Errors: those of Service.Cancel, and EKeyRequired,
// EInvalid, ENotFound, EKeyReused.
func (p *Operations) CancelOrder(ctx context.Context, c OperatorCall, orderID string) (ActionResult, error) {
	if err := checkCall(c, ""); err != nil {
		return ActionResult{}, err
	}
	if res, ok, err := p.prior(ctx, c); ok {
		return res, err
	}
	o, err := p.st.FindOrder(ctx, store.AnyTenant, orderID)
	if errors.Is(err, store.ErrNotFound) {
		return ActionResult{}, apperr.Errorf(apperr.ENotFound, "order %s not found", orderID)
	}
	if err != nil {
		return ActionResult{}, err
	}
	r, err := p.s.Cancel(ctx, Call{TenantID: o.TenantID, OrderID: o.ID, Key: idempotency.Key{
		Value: "operator\x00" + c.Operator.Name + "\x00" + c.Key, Fingerprint: c.Fingerprint}})
	if err != nil {
		return ActionResult{}, err
	}
	return p.act(ctx, c, func(store.OperatorExecutor) (ActionResult, error) {
		act := p.newAction(c, ActionCancelOrder, o.TenantID, o.ID)
		act.OrderID = o.ID
		act.Outcome = "cancelled"
		if r.Order.PaidAt != nil || o.State == order.Paid {
			act.Outcome = "refunded" // it was paid: the cancel refunded its charge
		}
		moved := r.Order
		return ActionResult{Action: act, Order: &moved}, nil
	})
}

// Backlog is Service.Backlog, for the operators' overview.
func (p *Operations) Backlog(ctx context.Context) (store.WorkBacklog, bool, error) {
	return p.s.Backlog(ctx)
}

// RotateEndpointSecret gives endpoint endpointID a new signing secret
// (event.SecretPrefix and 32 random bytes in hex). For grace (0 to
// MaxRotationGrace) after now, on the store's clock, its former secret
// signs deliveries beside the new one (two v1 values in
// Orderly-Signature), so the receiver can switch without refusing any;
// with 0 the former secret stops at once. The new secret is in
// ActionResult.Secret of this answer only: the recorded answer, which a
// replay gives, and the audit event never hold it (a replay answers
// SecretShown true and no secret: rotate again if it was lost). Errors:
// EKeyRequired, EInvalid, ENotFound, EKeyReused.
func (p *Operations) RotateEndpointSecret(ctx context.Context, c OperatorCall, endpointID string, grace time.Duration) (ActionResult, error) {
	if err := checkCall(c, ""); err != nil {
		return ActionResult{}, err
	}
	if grace < 0 || grace > MaxRotationGrace {
		return ActionResult{}, &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields",
			Fields: []apperr.FieldError{{Field: "grace_seconds", Reason: "must be from 0 to 604800 (7 days)"}}}
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return ActionResult{}, err
	}
	secret := event.SecretPrefix + hex.EncodeToString(b)
	fresh := false
	res, err := p.act(ctx, c, func(tx store.OperatorExecutor) (ActionResult, error) {
		tenant, err := tx.RotateEndpointSecret(ctx, endpointID, secret, grace)
		if err != nil {
			return ActionResult{}, err
		}
		act := p.newAction(c, ActionRotateSecret, tenant, endpointID)
		act.Outcome = "rotated"
		if grace > 0 {
			act.Note = "the former secret signs too until " + act.At.Add(grace).Format(time.RFC3339)
		}
		fresh = true
		return ActionResult{Action: act, SecretShown: true}, nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return res, apperr.Errorf(apperr.ENotFound, "no webhook endpoint %s", endpointID)
	}
	if err != nil {
		return res, err
	}
	if fresh && !res.Replayed {
		res.Secret = secret
	}
	return res, nil
}
