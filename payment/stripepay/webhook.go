package stripepay

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
	if err := v.Verify(body, header); err != nil {
		return ev, false, err
	}
	return v.Event(body)
}

// tolerance is v.Tolerance, DefaultTolerance when zero.
func (v WebhookVerifier) tolerance() time.Duration {
	if v.Tolerance <= 0 {
		return DefaultTolerance
	}
	return v.Tolerance
}

// Verify checks body's signature header (Stripe-Signature,
// docs.stripe.com/webhooks#verify-events) with stripe-go's webhook
// package: one of its v1 signatures must be the HMAC-SHA256 of
// "<t>.<body>" under one of v.Secrets, and t no older than the tolerance.
// Errors wrap ErrSignature.
func (v WebhookVerifier) Verify(body []byte, header string) error {
	for _, s := range v.Secrets {
		switch err := webhook.ValidatePayloadWithTolerance(body, header, s, v.tolerance()); {
		case err == nil:
			return nil
		case !errors.Is(err, webhook.ErrNoValidSignature):
			// Not signed, a malformed header, a stale timestamp: no
			// other secret verifies it either.
			return fmt.Errorf("%w: %v", ErrSignature, err)
		}
	}
	return ErrSignature
}

// Event maps a body whose signature Verify accepted, as Parse does; it
// checks what stripe-go's webhook.ConstructEvent checks after the
// signature (a JSON Event object, "object":"event", of an API version of
// stripe.APIVersion's release train). Errors are malformed events.
func (v WebhookVerifier) Event(body []byte) (ev payment.ProviderEvent, ok bool, err error) {
	var se stripe.Event
	if err := json.Unmarshal(body, &se); err != nil {
		return ev, false, fmt.Errorf("stripepay: webhook: not a Stripe event: %w", err)
	}
	if se.Object != "event" {
		return ev, false, fmt.Errorf("stripepay: webhook: object %q, not an event (a thin event notification?)", se.Object)
	}
	if !compatibleAPIVersion(stripe.APIVersion, se.APIVersion) {
		return ev, false, fmt.Errorf("stripepay: webhook: event of API version %q, stripe-go expects %q", se.APIVersion, stripe.APIVersion)
	}
	return eventOf(se)
}

// compatibleAPIVersion is stripe-go's rule (webhook.isCompatibleAPIVersion):
// versions are "yyyy-MM-dd.train"; an event is compatible when its release
// train is the SDK's, or, for a preview SDK, when the versions are equal.
func compatibleAPIVersion(sdk, event string) bool {
	_, evTrain, ok := strings.Cut(event, ".")
	if !ok {
		return false
	}
	_, sdkTrain, _ := strings.Cut(sdk, ".")
	if sdkTrain == "preview" {
		return sdk == event
	}
	return evTrain == sdkTrain
}

// eventOf maps a Stripe event (see Parse).
func eventOf(se stripe.Event) (ev payment.ProviderEvent, ok bool, err error) {
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

// Webhooks is the Stripe webhook endpoint's authenticator and parser, the
// api.ProviderWebhook orderd serves at /provider/stripe/webhooks: the
// same precheck, body bound, admission slot and inbox as paysim's native
// webhooks (README "Connect Stripe").
type Webhooks struct {
	// Verifier holds the endpoint's signing secrets and tolerance.
	Verifier WebhookVerifier
	// Now is the clock CheckHeader ages the timestamp by (time.Now when
	// nil); Authenticate uses stripe-go's, which is time.Now.
	Now func() time.Time
}

// CheckHeader checks what can be checked of a Stripe-Signature header
// before the body is read: present, "t=<unix seconds>" parseable, at least
// one v1 signature, and t no older than the tolerance (stripe-go's rules,
// docs.stripe.com/webhooks#verify-events). Errors wrap ErrSignature.
func (w Webhooks) CheckHeader(h http.Header) error {
	header := h.Get(SignatureHeader)
	if header == "" {
		return fmt.Errorf("%w: no %s header", ErrSignature, SignatureHeader)
	}
	var at time.Time
	v1 := false
	for pair := range strings.SplitSeq(header, ",") {
		k, val, found := strings.Cut(pair, "=")
		if !found {
			return fmt.Errorf("%w: a malformed %s header", ErrSignature, SignatureHeader)
		}
		switch k {
		case "t":
			sec, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: a malformed timestamp", ErrSignature)
			}
			at = time.Unix(sec, 0)
		case "v1":
			if _, err := hex.DecodeString(val); err == nil {
				v1 = true
			}
		}
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	switch {
	case at.IsZero():
		return fmt.Errorf("%w: no timestamp", ErrSignature)
	case !v1:
		return fmt.Errorf("%w: no v1 signature", ErrSignature)
	case now().Sub(at) > w.Verifier.tolerance():
		return fmt.Errorf("%w: the timestamp is older than %s", ErrSignature, w.Verifier.tolerance())
	}
	return nil
}

// Authenticate verifies the delivery's Stripe-Signature over its raw body
// (WebhookVerifier.Verify). Errors wrap ErrSignature.
func (w Webhooks) Authenticate(h http.Header, body []byte) error {
	return w.Verifier.Verify(body, h.Get(SignatureHeader))
}

// Parse maps an authenticated body (WebhookVerifier.Event). An event that
// means nothing to Orderly — another type, a pending refund, a refund or
// charge.refunded without metadata orderly_reference (a refund Orderly
// did not make) — is an error wrapping payment.ErrIgnoredEvent, which the
// endpoint acknowledges with a 200: Stripe resends anything else for
// days. Other errors are malformed events.
func (w Webhooks) Parse(body []byte) (payment.ProviderEvent, error) {
	ev, ok, err := w.Verifier.Event(body)
	switch {
	case err != nil:
		return ev, err
	case !ok:
		return ev, fmt.Errorf("%w: Stripe event %s of type %s", payment.ErrIgnoredEvent, ev.EventID, ev.ProviderType)
	case (ev.Type == payment.EventRefundSucceeded || ev.Type == payment.EventRefundFailed) && ev.Reference.Key == "":
		return ev, fmt.Errorf("%w: Stripe event %s (%s) is about a refund without metadata %s", payment.ErrIgnoredEvent,
			ev.EventID, ev.ProviderType, MetaReference)
	}
	return ev, nil
}
