// Package paysimwire is the wire format of paysim's HTTP API and webhooks:
// the JSON bodies (amounts in minor units of their currency, times in
// RFC 3339), the headers, the error types, and the webhook signature
// (the Stripe scheme). Both the server (package paysim) and its client
// (package paysim/paysimclient) import it, so that a binary using the client
// links no simulator server. It imports nothing of Orderly's.
package paysimwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of the API besides FaultHeader.
const (
	// IdempotencyKeyHeader carries the key of every POST to /v1/.
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is "true" on an answer replayed from a key's
	// remembered outcome.
	ReplayedHeader = "Idempotent-Replayed"
)

// Error types of the API's error bodies, {"error":{"type":…}}.
const (
	// ErrTypeInvalidRequest (400, 413) is malformed input.
	ErrTypeInvalidRequest = "invalid_request_error"
	// ErrTypeIdempotency (422) is a key reused with different parameters.
	ErrTypeIdempotency = "idempotency_error"
	// ErrTypeCard (402) is a decline; error.code is the decline code.
	ErrTypeCard = "card_error"
	// ErrTypeNotFound (404) is a key with no outcome, or a refund of a
	// charge with no capture.
	ErrTypeNotFound = "not_found"
	// ErrTypeOutOfStock (409) is a shipment that can never be made.
	ErrTypeOutOfStock = "out_of_stock"
	// ErrTypeAPI (500, 503, 504) is a failure of paysim itself, injected or
	// real; nothing was committed.
	ErrTypeAPI = "api_error"
)

// ChargeStatus is the status of a Charge.
type ChargeStatus string

// Charge statuses; the ledger's CHECK constraint holds the same set.
const (
	// ChargeCaptured is a capture that has not been refunded.
	ChargeCaptured ChargeStatus = "captured"
	// ChargeRefunded is a capture refunded in whole or in part.
	ChargeRefunded ChargeStatus = "refunded"
	// ChargeFailed is a declined charge, remembered under its key.
	ChargeFailed ChargeStatus = "failed"
	// ChargeAuthorized is the outcome of a confirm of a manual-capture
	// intent the issuer approved: money held, not moved. It is never a row
	// of the ledger's charges (GET /admin/ledger lists none): the capture
	// writes the charge.
	ChargeAuthorized ChargeStatus = "authorized"
)

// ShipmentStatus is the status of a Shipment.
type ShipmentStatus string

// Shipment statuses; the ledger's CHECK constraint holds the same set.
const (
	// ShipmentShipped is a shipment made.
	ShipmentShipped ShipmentStatus = "shipped"
	// ShipmentOutOfStock is a remembered final failure.
	ShipmentOutOfStock ShipmentStatus = "out_of_stock"
)

// Charge is one charge key's outcome as the ledger records it and the API
// returns it: a capture, or a decline (Status ChargeFailed, with
// FailureCode).
type Charge struct {
	ID             string       `json:"id"`
	IdempotencyKey string       `json:"idempotency_key"`
	OrderID        string       `json:"order_id"`
	Amount         int64        `json:"amount"`
	Currency       string       `json:"currency"`
	PaymentMethod  string       `json:"payment_method"`
	Status         ChargeStatus `json:"status"`
	AmountRefunded int64        `json:"amount_refunded"`
	FailureCode    string       `json:"failure_code,omitempty"`
	FailureMessage string       `json:"failure_message,omitempty"`
	// PaymentIntent is the intent a confirm made the charge for ("" for
	// POST /v1/charges).
	PaymentIntent string    `json:"payment_intent,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}

// ChargeParams is the body of POST /v1/charges.
type ChargeParams struct {
	OrderID       string `json:"order_id"`
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// Params returns the parameters c was created with, for comparison with a
// repeated request.
func (c Charge) Params() ChargeParams {
	return ChargeParams{OrderID: c.OrderID, Amount: c.Amount, Currency: c.Currency, PaymentMethod: c.PaymentMethod}
}

// Refund is a refund as the ledger records it.
type Refund struct {
	ID             string `json:"id"`
	IdempotencyKey string `json:"idempotency_key"`
	ChargeID       string `json:"charge_id"`
	ChargeKey      string `json:"charge_key"`
	// PaymentIntent is the refunded charge's intent ("" for a charge made
	// by POST /v1/charges); Reference is what the refund request set.
	PaymentIntent string `json:"payment_intent,omitempty"`
	Reference     string `json:"reference,omitempty"`
	// OrderID and Currency are the refunded charge's.
	OrderID   string    `json:"order_id"`
	Currency  string    `json:"currency"`
	Amount    int64     `json:"amount"`
	CreatedAt time.Time `json:"created_at"`
	// Status is RefundSucceeded, or RefundFailed once a refund of a
	// testmode.MethodRefundFail charge was failed (POST
	// /admin/refunds/{id}/fail). "" from a paysim before it: succeeded.
	Status string `json:"status,omitempty"`
}

// Refund statuses.
const (
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed"
)

// RefundParams is the body of POST /v1/refunds: the charge to refund by
// its key (ChargeKey) or the intent whose capture to refund
// (PaymentIntent), exactly one of them; Reference is kept with the refund
// so GET /v1/refunds?payment_intent= finds it again.
type RefundParams struct {
	ChargeKey     string `json:"charge_key,omitempty"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	Amount        int64  `json:"amount"`
	Reference     string `json:"reference,omitempty"`
}

// IntentStatus is the status of an Intent, by Stripe's names
// (docs.stripe.com/payments/paymentintents/lifecycle); paysim uses
// requires_payment_method, requires_capture, succeeded and canceled.
type IntentStatus string

// Intent statuses paysim gives.
const (
	IntentRequiresPaymentMethod IntentStatus = "requires_payment_method"
	// IntentRequiresCapture: a manual intent confirmed and authorized, its
	// money held until CaptureBefore.
	IntentRequiresCapture IntentStatus = "requires_capture"
	IntentSucceeded       IntentStatus = "succeeded"
	IntentCanceled        IntentStatus = "canceled"
)

// Intent is a payment intent: the object that carries one payment, created
// without moving money (POST /v1/payment_intents) and confirmed later
// (POST /v1/payment_intents/{id}/confirm). Its status and amounts are
// derived from the ledger's charges: succeeded once a confirm captured
// (AmountReceived = Amount), canceled once canceled, else
// requires_payment_method with the last decline, if any. Amounts are in
// minor units of Currency.
type Intent struct {
	ID             string       `json:"id"`
	IdempotencyKey string       `json:"idempotency_key"`
	OrderID        string       `json:"order_id"`
	Reference      string       `json:"reference"`
	Amount         int64        `json:"amount"`
	Currency       string       `json:"currency"`
	Status         IntentStatus `json:"status"`
	// CaptureMethod is CaptureAutomatic or CaptureManual.
	CaptureMethod string `json:"capture_method"`
	// CaptureBefore is when the authorization of a requires_capture intent
	// expires (paysim then cancels the intent); nil otherwise.
	CaptureBefore  *time.Time `json:"capture_before,omitempty"`
	AmountReceived int64      `json:"amount_received"`
	AmountRefunded int64      `json:"amount_refunded"`
	LastDecline    *Decline   `json:"last_decline,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// Decline is the last declined confirm of an Intent.
type Decline struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IntentParams is the body of POST /v1/payment_intents.
type IntentParams struct {
	OrderID   string `json:"order_id"`
	Reference string `json:"reference"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	// CaptureMethod is CaptureAutomatic (also when omitted) or
	// CaptureManual: the confirm only authorizes, and POST
	// /v1/payment_intents/{id}/capture moves the money.
	CaptureMethod string `json:"capture_method,omitempty"`
}

// Capture methods of an intent (Stripe's capture_method).
const (
	CaptureAutomatic = "automatic"
	CaptureManual    = "manual"
)

// CaptureParams is the body of POST /v1/payment_intents/{id}/capture: the
// amount to capture in minor units, positive and at most the authorized
// amount (Stripe: amount_to_capture); required, never defaulted.
type CaptureParams struct {
	Amount int64 `json:"amount"`
}

// ConfirmParams is the body of POST /v1/payment_intents/{id}/confirm.
type ConfirmParams struct {
	PaymentMethod string `json:"payment_method"`
}

// RefundList is GET /v1/refunds?payment_intent=ID: the intent's refunds in
// creation order (never nil).
type RefundList struct {
	Data []Refund `json:"data"`
}

// Item is one line of a shipment.
type Item struct {
	SKU       string `json:"sku"`
	Quantity  int64  `json:"quantity"`
	UnitPrice int64  `json:"unit_price"`
}

// Shipment is one shipment key's outcome: a shipment, or a remembered
// out-of-stock failure (Status ShipmentOutOfStock, with FailureMessage).
// Reference is the caller's reference the request set ("" if none), by
// which GET /v1/shipments?reference=R&order_id=O finds it.
type Shipment struct {
	ID             string         `json:"id"`
	IdempotencyKey string         `json:"idempotency_key"`
	OrderID        string         `json:"order_id"`
	Reference      string         `json:"reference,omitempty"`
	Items          []Item         `json:"items"`
	Status         ShipmentStatus `json:"status"`
	FailureMessage string         `json:"failure_message,omitempty"`
	CreatedAt      time.Time      `json:"created_at"`
}

// ShipmentParams is the body of POST /v1/shipments. Reference is the
// caller's reference of the shipment (at most 255 characters; optional),
// stored on it.
type ShipmentParams struct {
	OrderID   string `json:"order_id"`
	Reference string `json:"reference,omitempty"`
	Items     []Item `json:"items"`
}

// SignatureHeader carries a webhook's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the shared
// secret>" (the Stripe scheme). Several v1 values may appear while a secret
// is rotated; one matching is enough.
const SignatureHeader = "Paysim-Signature"

// DefaultSignatureTolerance is how old (or how far ahead) a signature's
// timestamp may be before VerifySignature refuses it as a replay.
const DefaultSignatureTolerance = 5 * time.Minute

// Webhook event types.
const (
	EventChargeSucceeded = "charge.succeeded"
	EventChargeFailed    = "charge.failed"
	EventRefundSucceeded = "refund.succeeded"
	// EventRefundFailed: a refund that succeeded failed later (its charge
	// was paid with testmode.MethodRefundFail; POST /admin/refunds/{id}/fail).
	EventRefundFailed = "refund.failed"
)

// WebhookEvent is the body of a webhook: a provider event id (unique, the
// same on every delivery of the event), its type, when it happened, and the
// object it is about. Data.IdempotencyKey is the key the client sent with
// the call that made the object, so the client finds its own record.
type WebhookEvent struct {
	ID      string      `json:"id"`
	Type    string      `json:"type"`
	Created int64       `json:"created"`
	Data    WebhookData `json:"data"`
}

// WebhookData is the object a WebhookEvent is about. Amount is in minor
// units of Currency. For a refund, ChargeID is the refunded charge and
// OrderID and Currency are that charge's.
type WebhookData struct {
	ObjectID       string `json:"object_id"`
	IdempotencyKey string `json:"idempotency_key"`
	ChargeID       string `json:"charge_id,omitempty"`
	OrderID        string `json:"order_id,omitempty"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency,omitempty"`
	DeclineCode    string `json:"decline_code,omitempty"`
}

// Sign returns the SignatureHeader value of body signed with secret at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// ErrSignature is returned by VerifySignature for a missing, malformed,
// wrong or stale signature.
var ErrSignature = errors.New("paysim: webhook signature does not verify")

// VerifySignature checks header, a SignatureHeader value, against body and
// secret: one v1 must be the HMAC-SHA256 of "<t>.<body>" (compared in
// constant time) and t must be within tolerance of now (a replayed old
// delivery is refused). Errors wrap ErrSignature.
func VerifySignature(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := parseSignature(header, now, tolerance)
	if err != nil {
		return err
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrSignature)
}

// CheckSignatureHeader checks what VerifySignature can check without the
// body: that header has the shape t=<unix seconds>,v1=<hex>[,v1=…] and its
// timestamp is within tolerance of now. A receiver calls it before it reads
// a body, so a sender without a fresh signature cannot make it read one.
// Errors wrap ErrSignature.
func CheckSignatureHeader(header string, now time.Time, tolerance time.Duration) error {
	_, _, err := parseSignature(header, now, tolerance)
	return err
}

// parseSignature returns the timestamp and the v1 signatures of header,
// or an error wrapping ErrSignature when it is malformed or its timestamp
// is outside tolerance of now.
func parseSignature(header string, now time.Time, tolerance time.Duration) (string, [][]byte, error) {
	if len(header) > maxSignatureHeader {
		return "", nil, fmt.Errorf("%w: the header is longer than %d bytes", ErrSignature, maxSignatureHeader)
	}
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
		case k == "t":
			ts = v
		case k == "v1":
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return "", nil, fmt.Errorf("%w: want t=<unix seconds>,v1=<hex>", ErrSignature)
	}
	if age := now.Sub(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return "", nil, fmt.Errorf("%w: timestamp %d is outside the tolerance of %s", ErrSignature, sec, tolerance)
	}
	return ts, sigs, nil
}

// maxSignatureHeader bounds the signature header VerifySignature parses
// (a timestamp and a few signatures while a secret rotates).
const maxSignatureHeader = 1024
