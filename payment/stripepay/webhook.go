package stripepay

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/orderly/orderly/payment"
)

// Source is the ProviderEvent.Source of Stripe's events.
const Source = "stripe"

// SignatureHeader is the header Stripe signs webhooks in.
const SignatureHeader = "Stripe-Signature"

// DefaultTolerance is how far a signature's timestamp may be from now
// (stripe-go's webhook.DefaultTolerance, 5 minutes).
const DefaultTolerance = webhook.DefaultTolerance

// ErrSignature is wrapped by ParseWebhook's error when no secret verifies
// the signature, or its timestamp is outside the tolerance.
var ErrSignature = errors.New("stripepay: webhook signature does not verify")

// WebhookVerifier verifies Stripe webhooks and turns them into provider
// events.
type WebhookVerifier struct {
	// Secrets are the endpoint's signing secrets (whsec_…); an event
	// verifies when one of them matches one of the header's v1 signatures
	// (several of either while a secret rotates).
	Secrets []string
	// Tolerance bounds the signature's age (DefaultTolerance when zero).
	Tolerance time.Duration
}

// Parse verifies body against header (Stripe-Signature) with stripe-go's
// webhook package (signature, tolerance, the event's API version against
// stripe.APIVersion) and maps the event:
//
//	payment_intent.succeeded        EventPaymentSucceeded   Amount = amount_received
//	payment_intent.payment_failed   EventPaymentFailed      Amount = amount
//	payment_intent.canceled         EventPaymentCanceled    Amount = amount
//	payment_intent.processing       EventPaymentProcessing
//	payment_intent.requires_action  EventPaymentRequiresAction
//	refund.created, refund.updated  EventRefundSucceeded (status succeeded) or EventRefundFailed (failed);
//	                                ObjectID the refund, IntentID its payment_intent
//	charge.refunded                 EventRefundSucceeded; ObjectID the charge, IntentID its payment_intent,
//	                                Amount = amount_refunded (cumulative)
//
// ObjectID of a payment event is the PaymentIntent id; Reference comes from
// metadata orderly_order_id and orderly_reference. ok is false for an
// event that verified but means nothing to Orderly (another type, a pending
// refund): acknowledge it and do nothing. Errors wrap ErrSignature for a
// signature that does not verify; other errors are malformed events.
func (v WebhookVerifier) Parse(body []byte, header string) (ev payment.ProviderEvent, ok bool, err error) {
	tol := v.Tolerance
	if tol <= 0 {
		tol = DefaultTolerance
	}
	var se stripe.Event
	verified := false
	for _, s := range v.Secrets {
		e, err := webhook.ConstructEventWithOptions(body, header, s, webhook.ConstructEventOptions{Tolerance: tol})
		if err == nil {
			se, verified = e, true
			break
		}
		if !isSignatureError(err) {
			return ev, false, fmt.Errorf("stripepay: webhook: %w", err)
		}
	}
	if !verified {
		return ev, false, ErrSignature
	}
	ev = payment.ProviderEvent{Source: Source, EventID: se.ID, ProviderType: string(se.Type)}
	if se.Data == nil {
		return ev, false, errors.New("stripepay: webhook: event without data")
	}
	typ := string(se.Type)
	switch {
	case strings.HasPrefix(typ, "payment_intent."):
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(se.Data.Raw, &pi); err != nil {
			return ev, false, fmt.Errorf("stripepay: webhook %s: %w", typ, err)
		}
		ev.ObjectID, ev.IntentID, ev.Amount, ev.Currency = pi.ID, pi.ID, pi.Amount, strings.ToUpper(string(pi.Currency))
		ev.Reference = payment.Reference{OrderID: pi.Metadata[MetaOrderID], Key: pi.Metadata[MetaReference]}
		switch typ {
		case "payment_intent.succeeded":
			ev.Type, ev.Amount = payment.EventPaymentSucceeded, pi.AmountReceived
		case "payment_intent.payment_failed":
			ev.Type = payment.EventPaymentFailed
		case "payment_intent.canceled":
			ev.Type = payment.EventPaymentCanceled
		case "payment_intent.processing":
			ev.Type = payment.EventPaymentProcessing
		case "payment_intent.requires_action":
			ev.Type = payment.EventPaymentRequiresAction
		default:
			return ev, false, nil
		}
	case typ == "refund.created" || typ == "refund.updated" || typ == "refund.failed":
		var rf stripe.Refund
		if err := json.Unmarshal(se.Data.Raw, &rf); err != nil {
			return ev, false, fmt.Errorf("stripepay: webhook %s: %w", typ, err)
		}
		ev.ObjectID, ev.Amount, ev.Currency = rf.ID, rf.Amount, strings.ToUpper(string(rf.Currency))
		if rf.PaymentIntent != nil {
			ev.IntentID = rf.PaymentIntent.ID
		}
		ev.Reference = payment.Reference{OrderID: rf.Metadata[MetaOrderID], Key: rf.Metadata[MetaReference]}
		switch rf.Status {
		case stripe.RefundStatusSucceeded:
			ev.Type = payment.EventRefundSucceeded
		case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
			ev.Type = payment.EventRefundFailed
		default:
			return ev, false, nil
		}
	case typ == "charge.refunded":
		var ch stripe.Charge
		if err := json.Unmarshal(se.Data.Raw, &ch); err != nil {
			return ev, false, fmt.Errorf("stripepay: webhook %s: %w", typ, err)
		}
		ev.Type, ev.ObjectID, ev.Amount, ev.Currency = payment.EventRefundSucceeded, ch.ID, ch.AmountRefunded, strings.ToUpper(string(ch.Currency))
		if ch.PaymentIntent != nil {
			ev.IntentID = ch.PaymentIntent.ID
		}
		ev.Reference = payment.Reference{OrderID: ch.Metadata[MetaOrderID], Key: ch.Metadata[MetaReference]}
	default:
		return ev, false, nil
	}
	if ev.EventID == "" || ev.ObjectID == "" {
		return ev, false, fmt.Errorf("stripepay: webhook %s without an event or object id", typ)
	}
	return ev, true, nil
}

func isSignatureError(err error) bool {
	return errors.Is(err, webhook.ErrInvalidHeader) || errors.Is(err, webhook.ErrNoValidSignature) ||
		errors.Is(err, webhook.ErrNotSigned) || errors.Is(err, webhook.ErrTooOld)
}
