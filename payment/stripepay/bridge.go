package stripepay

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/orderly/orderly/payment"
)

// ChargeBridge serves the pre-issue-15 payment.ChargeGateway over a
// Gateway, so that orderd's service, which still calls ChargeGateway until
// it moves to payment.Gateway, can take payments through Stripe today. It
// follows the new seam's rule internally: the PaymentIntent is the object
// that guards the money (it succeeds at most once), found again by the
// reference it carries, never by a request's key.
//
//   - Charge(key): Prepare under "<key>/prepare" with Reference{OrderID,
//     Key: key} (after an unknown outcome with no intent to be found, under
//     "<key>/prepare/2", … /4), then Confirm under "<key>/confirm". When the confirm's
//     outcome is unknown (a lost answer, a fresh or replayed 500) the intent
//     is retrieved at once: succeeded → the Charge; no money moved → a
//     confirm under the next key "<key>/confirm/2", … /4 (safe: the intent
//     succeeds at most once, whatever the key; a confirm still running
//     elsewhere makes the next one a 400 payment_intent_unexpected_state or
//     a 409, and the intent is read again); otherwise the unknown outcome
//     is returned.
//   - Lookup(key): Find(Reference{Key: key}) (search, then the consistent
//     list of recent intents); succeeded → the Charge, a decline on the
//     intent → the *payment.DeclineError, nothing moved → ErrNotFound.
//   - Refund(chargeKey): the intent found by its reference, then Refund
//     under the request's key with Reference{Key: key}; see Refund for an
//     unknown outcome.
//
// A payment method that goes processing or requires_action (bank debits,
// 3-D Secure) is refused as a final *payment.ProviderError: those finish by
// webhook, which the service takes with the new seam (issue 16).
type ChargeBridge struct{ G *Gateway }

var _ payment.ChargeGateway = ChargeBridge{}

// Charge implements payment.ChargeGateway.
func (b ChargeBridge) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	if err := req.Validate(); err != nil {
		return payment.Charge{}, err
	}
	ref := payment.Reference{OrderID: req.OrderID, Key: req.IdempotencyKey}
	in, err := b.prepare(ctx, req, ref)
	if err != nil {
		return payment.Charge{}, err
	}
	if in.Status == payment.IntentSucceeded {
		return chargeOf(req.IdempotencyKey, in), nil
	}
	key := req.IdempotencyKey + "/confirm"
	var got payment.Intent
	for n := 2; ; n++ {
		got, err = b.G.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: key, IntentID: in.ID, PaymentMethod: req.PaymentMethod, Reference: ref})
		if !payment.IsUnknownOutcome(err) && !isUnexpectedState(err) {
			break
		}
		now, rerr := b.G.Retrieve(ctx, in.ID)
		if rerr != nil {
			return payment.Charge{}, err
		}
		switch {
		case now.Status == payment.IntentSucceeded:
			return chargeOf(req.IdempotencyKey, now), nil
		case now.LastDecline != nil && now.Status == payment.IntentRequiresPaymentMethod:
			// The lost confirm (or an earlier one of this key) declined: each
			// charge key has its own intent.

			return payment.Charge{}, now.LastDecline
		case (now.Status == payment.IntentRequiresPaymentMethod || now.Status == payment.IntentRequiresConfirmation) && n <= maxConfirms:
			// Nothing moved: confirm again under the next key (the intent
			// succeeds at most once, whatever the key).
			key = fmt.Sprintf("%s/confirm/%d", req.IdempotencyKey, n)
			continue
		}
		return payment.Charge{}, err
	}
	if err != nil {
		return payment.Charge{}, err
	}
	return b.settled(req.IdempotencyKey, got)
}

// maxPrepares and maxConfirms bound the creates and the confirms of one
// charge key.
const (
	maxPrepares = 4
	maxConfirms = 4
)

// prepare creates (or finds) the intent of req. Stripe replays a saved 500
// under a key for as long as it keeps it, so when a create's outcome is
// unknown and the intent cannot be found by its reference (search, then
// the consistent list of recent intents), nothing was created under that
// key and the create is sent under the next key "<key>/prepare/<n>"
// (creating an intent moves no money; Find prefers an intent that did).
func (b ChargeBridge) prepare(ctx context.Context, req payment.ChargeRequest, ref payment.Reference) (payment.Intent, error) {
	key := req.IdempotencyKey + "/prepare"
	for n := 2; ; n++ {
		in, err := b.G.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: key, Reference: ref, Amount: req.Amount, Currency: req.Currency})
		if !payment.IsUnknownOutcome(err) || n > maxPrepares {
			return in, err
		}
		found, ferr := b.G.Find(ctx, ref)
		switch {
		case ferr == nil:
			return found, nil
		case !errors.Is(ferr, payment.ErrNotFound):
			return payment.Intent{}, err
		}
		key = fmt.Sprintf("%s/prepare/%d", req.IdempotencyKey, n)
	}
}

func (b ChargeBridge) settled(key string, in payment.Intent) (payment.Charge, error) {
	switch in.Status {
	case payment.IntentSucceeded:
		return chargeOf(key, in), nil
	case payment.IntentProcessing, payment.IntentRequiresAction, payment.IntentRequiresCapture:
		return payment.Charge{}, &payment.ProviderError{Code: string(in.Status),
			Err: fmt.Errorf("stripe: intent %s is %s; asynchronous payment methods need the provider-object seam (issue 16)", in.ID, in.Status)}
	}
	if in.LastDecline != nil {
		return payment.Charge{}, in.LastDecline
	}
	return payment.Charge{}, &payment.ProviderError{Err: fmt.Errorf("stripe: intent %s is %s after confirm", in.ID, in.Status)}
}

func isUnexpectedState(err error) bool {
	var pe *payment.ProviderError
	return errors.As(err, &pe) && pe.Code == "payment_intent_unexpected_state"
}

func chargeOf(key string, in payment.Intent) payment.Charge {
	st := payment.ChargeCaptured
	if in.AmountRefunded > 0 {
		st = payment.ChargeRefunded
	}
	return payment.Charge{ID: in.ID, IdempotencyKey: key, OrderID: in.Reference.OrderID, Amount: in.AmountReceived,
		Currency: strings.ToUpper(in.Currency), Status: st, CreatedAt: in.CreatedAt}
}

// Lookup implements payment.ChargeGateway.
func (b ChargeBridge) Lookup(ctx context.Context, key string) (payment.Charge, error) {
	in, err := b.G.Find(ctx, payment.Reference{Key: key})
	if err != nil {
		return payment.Charge{}, err
	}
	if in.Status == payment.IntentSucceeded {
		return chargeOf(key, in), nil
	}
	if in.LastDecline != nil {
		return payment.Charge{}, in.LastDecline
	}
	if in.Status == payment.IntentProcessing || in.Status == payment.IntentRequiresAction {
		return payment.Charge{}, &payment.ProviderError{Retryable: true, Code: string(in.Status),
			Err: fmt.Errorf("stripe: intent %s is %s", in.ID, in.Status)}
	}
	return payment.Charge{}, fmt.Errorf("stripe: intent %s for %q moved no money (%s): %w", in.ID, key, in.Status, payment.ErrNotFound)
}

// maxRefunds bounds the refund requests of one refund key.
const maxRefunds = 4

// Refund implements payment.ChargeGateway. A refund whose outcome is
// unknown is looked for among the intent's refunds (a consistent list);
// when Stripe answered the request (a 5xx, so it is not still executing)
// and no refund carries its reference, nothing was refunded and the refund
// is sent under the next key "<key>/2", … /4. After an unknown outcome
// without an answer it is never resent under another key (a refund still
// executing would be made twice).
func (b ChargeBridge) Refund(ctx context.Context, req payment.ChargeRefundRequest) (payment.ChargeRefund, error) {
	in, err := b.G.Find(ctx, payment.Reference{Key: req.ChargeKey})
	if err != nil {
		return payment.ChargeRefund{}, err
	}
	if in.AmountReceived == 0 {
		return payment.ChargeRefund{}, fmt.Errorf("stripe: intent %s for %q received nothing: %w", in.ID, req.ChargeKey, payment.ErrNotFound)
	}
	ref := payment.Reference{OrderID: in.Reference.OrderID, Key: req.IdempotencyKey}
	key := req.IdempotencyKey
	for n := 2; ; n++ {
		rf, err := b.G.Refund(ctx, payment.RefundRequest{IdempotencyKey: key, IntentID: in.ID, Amount: req.Amount, Reference: ref})
		if err == nil {
			return payment.ChargeRefund{ID: rf.ID, ChargeID: in.ID, Amount: rf.Amount, CreatedAt: rf.CreatedAt}, nil
		}
		if !payment.IsUnknownOutcome(err) {
			return payment.ChargeRefund{}, err
		}
		found, ferr := b.G.FindRefund(ctx, in.ID, ref)
		switch {
		case ferr == nil:
			return payment.ChargeRefund{ID: found.ID, ChargeID: in.ID, Amount: found.Amount, CreatedAt: found.CreatedAt}, nil
		case errors.Is(ferr, payment.ErrNotFound) && Answered(err) && n <= maxRefunds:
			key = fmt.Sprintf("%s/%d", req.IdempotencyKey, n)
		default:
			return payment.ChargeRefund{}, err
		}
	}
}
