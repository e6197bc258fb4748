package client

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/orderly/orderly/event"
)

// DefaultSignatureTolerance is how far a webhook's signature timestamp may
// be from the receiver's clock before VerifyWebhook refuses it as stale.
const DefaultSignatureTolerance = 5 * time.Minute

// Webhook signature errors, returned (wrapped) by VerifyWebhook and
// ReadWebhook.
var (
	ErrSignatureMalformed = event.ErrSignatureMalformed
	ErrSignatureMismatch  = event.ErrSignatureMismatch
	ErrSignatureStale     = event.ErrSignatureStale
)

// Event is an Orderly event as a webhook delivers it (the body's JSON).
type Event = event.Event

// VerifyWebhook checks a webhook's Orderly-Signature header value against
// its raw body and the endpoint's secret: the v1 HMAC-SHA256 of
// "<t>.<body>" must match (compared in constant time) and t must be within
// tolerance of now (DefaultSignatureTolerance when zero), which stops a
// captured request from being replayed later. Verify the body exactly as
// received, before decoding it. Errors: ErrSignatureMalformed,
// ErrSignatureMismatch, ErrSignatureStale.
func VerifyWebhook(secret, signatureHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	return event.Verify(secret, signatureHeader, body, now, tolerance)
}

// ReadWebhook reads a webhook request's body (at most 1 MiB), verifies its
// signature with secret at the current time, and decodes the event. Since
// delivery is at least once, a receiver deduplicates on Event.ID and can
// ignore an order's event whose Sequence it has already seen.
func ReadWebhook(r *http.Request, secret string) (Event, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return Event{}, fmt.Errorf("client: read webhook: %w", err)
	}
	if err := VerifyWebhook(secret, r.Header.Get(event.SignatureHeader), body, time.Now(), 0); err != nil {
		return Event{}, err
	}
	var ev Event
	if err := json.Unmarshal(body, &ev); err != nil {
		return Event{}, fmt.Errorf("client: decode webhook: %w", err)
	}
	return ev, nil
}
