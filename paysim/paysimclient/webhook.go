package paysimclient

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store"
)

// Source is the inbox source of paysim's events.
const Source = "paysim"

// Webhooks authenticates and parses paysim's webhooks for orderd's provider
// webhook endpoint (it implements api.ProviderWebhook).
type Webhooks struct {
	// Secret is the shared secret paysim signs with.
	Secret []byte
	// Tolerance is the largest age of a signature's timestamp (default
	// paysim.DefaultSignatureTolerance).
	Tolerance time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// CheckHeader checks the shape and the timestamp of the
// paysim.SignatureHeader before the body is read. Errors wrap
// paysim.ErrSignature.
func (w Webhooks) CheckHeader(h http.Header) error {
	tol, now := w.clock()
	return paysim.CheckSignatureHeader(h.Get(paysim.SignatureHeader), now(), tol)
}

func (w Webhooks) clock() (time.Duration, func() time.Time) {
	tol, now := w.Tolerance, w.Now
	if tol <= 0 {
		tol = paysim.DefaultSignatureTolerance
	}
	if now == nil {
		now = time.Now
	}
	return tol, now
}

// Authenticate verifies the paysim.SignatureHeader of a delivery. Errors
// wrap paysim.ErrSignature.
func (w Webhooks) Authenticate(h http.Header, body []byte) error {
	tol, now := w.clock()
	return paysim.VerifySignature(w.Secret, h.Get(paysim.SignatureHeader), body, now(), tol)
}

// maxEventID is the longest event id the inbox keeps, in bytes.
const maxEventID = 255

// Parse returns the inbox event of a paysim.WebhookEvent body.
func (w Webhooks) Parse(body []byte) (store.InboxEvent, error) {
	var ev paysim.WebhookEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return store.InboxEvent{}, fmt.Errorf("not a paysim event: %w", err)
	}
	in := store.InboxEvent{Source: Source, EventID: ev.ID, Type: store.ProviderEventType(ev.Type), ProviderKey: ev.Data.IdempotencyKey}
	// Each reason names the one member that is wrong; an id too long to
	// keep is not echoed.
	switch {
	case in.EventID == "":
		return store.InboxEvent{}, fmt.Errorf("the event has no id")
	case len(in.EventID) > maxEventID:
		return store.InboxEvent{}, fmt.Errorf("the event id is %d bytes, more than %d", len(in.EventID), maxEventID)
	case !in.Type.Valid():
		return store.InboxEvent{}, fmt.Errorf("event %q has type %q, not one of %s, %s, %s",
			ev.ID, ev.Type, store.ChargeSucceeded, store.ChargeFailed, store.RefundSucceeded)
	case in.ProviderKey == "":
		return store.InboxEvent{}, fmt.Errorf("event %q has no data.idempotency_key", ev.ID)
	}
	return in, nil
}
