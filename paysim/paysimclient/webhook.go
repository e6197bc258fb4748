package paysimclient

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/paysimwire"
)

// Source is the inbox source of paysim's events.
const Source = "paysim"

// Webhooks authenticates and parses paysim's webhooks for orderd's provider
// webhook endpoint (it implements api.ProviderWebhook).
type Webhooks struct {
	// Secret is the shared secret paysim signs with.
	Secret []byte
	// Tolerance is the largest age of a signature's timestamp (default
	// paysimwire.DefaultSignatureTolerance).
	Tolerance time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// CheckHeader checks the shape and the timestamp of the
// paysimwire.SignatureHeader before the body is read. Errors wrap
// paysimwire.ErrSignature.
func (w Webhooks) CheckHeader(h http.Header) error {
	tol, now := w.clock()
	return paysimwire.CheckSignatureHeader(h.Get(paysimwire.SignatureHeader), now(), tol)
}

func (w Webhooks) clock() (time.Duration, func() time.Time) {
	tol, now := w.Tolerance, w.Now
	if tol <= 0 {
		tol = paysimwire.DefaultSignatureTolerance
	}
	if now == nil {
		now = time.Now
	}
	return tol, now
}

// Authenticate verifies the paysimwire.SignatureHeader of a delivery. Errors
// wrap paysimwire.ErrSignature.
func (w Webhooks) Authenticate(h http.Header, body []byte) error {
	tol, now := w.clock()
	return paysimwire.VerifySignature(w.Secret, h.Get(paysimwire.SignatureHeader), body, now(), tol)
}

// maxEventID is the longest event id the inbox keeps, in bytes.
const maxEventID = 255

// eventTypes maps paysim's event types to the payment domain's.
var eventTypes = map[string]payment.ProviderEventType{
	paysimwire.EventChargeSucceeded: payment.EventPaymentSucceeded,
	paysimwire.EventChargeFailed:    payment.EventPaymentFailed,
	paysimwire.EventRefundSucceeded: payment.EventRefundSucceeded,
	paysimwire.EventRefundFailed:    payment.EventRefundFailed,
}

// Parse returns the provider event of a paysimwire.WebhookEvent body: its type
// normalised (charge.succeeded → payment.succeeded, charge.failed →
// payment.failed, refund.succeeded, refund.failed), the object it is about, the reference
// (data.order_id, data.idempotency_key), the amount in minor units and the
// currency, upper case.
func (w Webhooks) Parse(body []byte) (payment.ProviderEvent, error) {
	var ev paysimwire.WebhookEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return payment.ProviderEvent{}, fmt.Errorf("not a paysim event: %w", err)
	}
	typ, known := eventTypes[ev.Type]
	out := payment.ProviderEvent{Source: Source, EventID: ev.ID, Type: typ, ProviderType: ev.Type,
		ObjectID:  ev.Data.ObjectID,
		Reference: payment.Reference{OrderID: ev.Data.OrderID, Key: ev.Data.IdempotencyKey},
		Amount:    ev.Data.Amount, Currency: strings.ToUpper(ev.Data.Currency)}
	// paysim's native events are about a charge or a refund (ch_…, re_…),
	// never a payment intent: IntentID stays empty and the inbox matches
	// them by their provider key.
	// Each reason names the one member that is wrong; an id too long to
	// keep is not echoed.
	switch {
	case out.EventID == "":
		return payment.ProviderEvent{}, fmt.Errorf("the event has no id")
	case len(out.EventID) > maxEventID:
		return payment.ProviderEvent{}, fmt.Errorf("the event id is %d bytes, more than %d", len(out.EventID), maxEventID)
	case !known:
		return payment.ProviderEvent{}, fmt.Errorf("event %q has type %q, not one of %s, %s, %s, %s",
			ev.ID, ev.Type, paysimwire.EventChargeSucceeded, paysimwire.EventChargeFailed, paysimwire.EventRefundSucceeded,
			paysimwire.EventRefundFailed)
	case out.Reference.Key == "":
		return payment.ProviderEvent{}, fmt.Errorf("event %q has no data.idempotency_key", ev.ID)
	case out.Currency == "":
		return payment.ProviderEvent{}, fmt.Errorf("event %q has no data.currency", ev.ID)
	case out.Amount < 0:
		return payment.ProviderEvent{}, fmt.Errorf("event %q has a negative data.amount", ev.ID)
	}
	return out, nil
}
