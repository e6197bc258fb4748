package payment

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is the payment seam of issue 15: a contract a real provider
// (Stripe's PaymentIntents, docs.stripe.com/api/payment_intents) can
// implement. Recovery never looks a request up by its idempotency key, which
// no real provider offers: the provider object that carries a payment (an
// Intent) is created first, moving no money, and its id is recorded by the
// caller before money can move; an outcome left unknown is then resolved by
// reading that object (Retrieve), or, when even the create's answer was
// lost, by finding it through the Reference the caller set on it (Find).
//
// Idempotency (docs.stripe.com/api/idempotent_requests): every call that
// changes something carries an IdempotencyKey of at most
// MaxIdempotencyKeyLen characters, derived by the caller per order and step
// (such as "<order id>/pay/<version>/prepare"). The provider saves the
// status and body of the first request that began executing under a key and
// replays them to every repeat — a 5xx included — so:
//
//   - a repeated key with the same parameters returns the original result
//     and never moves money twice;
//   - a repeated key with other parameters is a final *ProviderError
//     wrapping ErrIdempotencyKeyReused (Stripe: 400 idempotency_error);
//   - a key whose first request still runs is a retryable *ProviderError
//     (Stripe: 409 idempotency_key_in_use); retry it under the same key;
//   - a replayed 5xx is an unknown outcome (ErrUnknownOutcome), never a
//     decline and never a reason to use a new key: read the object;
//   - the provider may prune keys after a retention (24 hours at Stripe), and
//     the same key then starts a new request. A caller therefore never
//     resends a key older than its configured margin below that retention;
//     it resolves the attempt by Retrieve or Find instead.
//
// The lifecycle of an Intent (docs.stripe.com/payments/paymentintents/
// lifecycle): Prepare leaves it in IntentRequiresPaymentMethod (or
// IntentRequiresConfirmation); Confirm moves it to IntentSucceeded (money
// received), IntentProcessing (a bank debit, settled later by webhook),
// IntentRequiresAction (3-D Secure, waiting for the customer), or back to
// IntentRequiresPaymentMethod with LastDecline set (a decline, final for
// that payment method; the intent may be confirmed again with another);
// Cancel moves an intent that received nothing to IntentCanceled.
//
// Authorize, then capture (docs.stripe.com/payments/place-a-hold-on-a-payment-method):
// an intent prepared with CaptureManual only authorizes on Confirm: it ends
// in IntentRequiresCapture with the money held (Amount authorized,
// AmountReceived 0, CaptureBefore when the provider says until when the
// hold lasts: 7 days for online card payments at Stripe). Capture then
// receives at most the authorized amount, once; a partial capture releases
// the rest. Cancel of an IntentRequiresCapture intent voids the
// authorization (nothing is received); so does the provider itself when
// the hold expires uncaptured (the intent goes to IntentCanceled).

// MaxIdempotencyKeyLen is the longest idempotency key a Gateway accepts, in
// characters (Stripe's limit, docs.stripe.com/api/idempotent_requests).
const MaxIdempotencyKeyLen = 255

// ErrNotFound is wrapped by the error a Gateway returns when the object a
// call names does not exist at the provider: Retrieve of an unknown intent
// id, Find or FindRefund with no object under the reference, Refund,
// Confirm or Cancel of an unknown intent. From Find it means the Prepare
// never took effect, so nothing moved and the attempt is safe to retry.
var ErrNotFound = errors.New("payment: not found")

// Gateway is the seam between Orderly and a payment provider, built on
// provider objects rather than on looking requests up by key. Amounts are
// int64 minor units of the intent's currency (cents for USD, yen for JPY);
// currencies are ISO 4217 alphabetic codes such as "USD". Every method that
// changes something honours its request's IdempotencyKey (see the package
// comment of this file for the rules, docs.stripe.com/api/idempotent_requests).
//
// Errors of every method: *DeclineError (final, ErrDeclined), a
// *ProviderError saying whether the same request may be resent (Retryable,
// with Code and RetryAfter when the provider gave them), an error wrapping
// ErrUnknownOutcome (the call may or may not have taken effect: resolve it by
// Retrieve, Find or FindRefund), or one wrapping ErrNotFound.
//
// Implementations must be safe for concurrent use. The conformance suite
// payment/gatewaytest states this contract as tests.
type Gateway interface {
	// Prepare creates the provider object that will carry one payment of
	// req.Amount minor units of req.Currency, moving no money (Stripe:
	// POST /v1/payment_intents with confirm=false and metadata
	// orderly_order_id and orderly_reference, docs.stripe.com/api/
	// payment_intents/create). Idempotent under req.IdempotencyKey: a
	// repeat returns the same Intent. It returns the Intent with its ID,
	// which the caller records before calling Confirm.
	Prepare(ctx context.Context, req PrepareRequest) (Intent, error)

	// Confirm moves money on the prepared intent req.IntentID with
	// req.PaymentMethod (Stripe: POST /v1/payment_intents/{id}/confirm,
	// docs.stripe.com/api/payment_intents/confirm). Idempotent under
	// req.IdempotencyKey, a key other than Prepare's. A decline is returned
	// as a *DeclineError; the intent then stays open
	// (IntentRequiresPaymentMethod, LastDecline set) and may be confirmed
	// again with another payment method under another key. Success returns
	// the Intent in IntentSucceeded (AmountReceived = Amount) or, for an
	// asynchronous method, IntentProcessing or IntentRequiresAction.
	Confirm(ctx context.Context, req ConfirmRequest) (Intent, error)

	// Retrieve reads the intent intentID as the provider holds it now
	// (Stripe: GET /v1/payment_intents/{id}); it changes nothing. An unknown
	// id yields an error wrapping ErrNotFound. After a Confirm whose answer
	// was lost, Retrieve shows the truth: AmountReceived > 0 means money
	// moved.
	Retrieve(ctx context.Context, intentID string) (Intent, error)

	// Find returns the intent whose Reference (set by Prepare) is ref, for
	// when Prepare's answer was lost and its id never recorded; it changes
	// nothing. An error wrapping ErrNotFound says the provider has none, so
	// nothing moved. A provider whose index lags (Stripe's search,
	// docs.stripe.com/search#data-freshness, about a minute) reports a miss
	// while younger than its documented lag as a *ProviderError with
	// Retryable true rather than ErrNotFound.
	Find(ctx context.Context, ref Reference) (Intent, error)

	// Capture receives req.Amount minor units of the money authorized on
	// intent req.IntentID, which must be in IntentRequiresCapture (prepared
	// with CaptureManual and confirmed), and returns it in IntentSucceeded
	// with AmountReceived = req.Amount (Stripe: POST /v1/payment_intents/
	// {id}/capture with amount_to_capture, docs.stripe.com/api/
	// payment_intents/capture). req.Amount may be below the authorized
	// Amount (a partial capture, docs.stripe.com/payments/
	// place-a-hold-on-a-payment-method#capture-funds): the rest is released
	// and can never be captured. Idempotent under req.IdempotencyKey: a
	// repeat returns the same Intent and never captures twice; after an
	// unknown outcome Retrieve shows the truth (IntentSucceeded with
	// AmountReceived > 0: captured). Errors: an Amount above the authorized
	// amount is a final *ProviderError with Code "amount_too_large"; an
	// intent in any other status (not confirmed, captured already, voided
	// or expired) a final *ProviderError with Code
	// "payment_intent_unexpected_state"; an unknown intent wraps
	// ErrNotFound.
	Capture(ctx context.Context, req CaptureRequest) (Intent, error)

	// Refund returns req.Amount minor units of the money received on intent
	// req.IntentID (Stripe: POST /v1/refunds with payment_intent,
	// docs.stripe.com/api/refunds/create), carrying req.Reference in its
	// metadata. Idempotent under req.IdempotencyKey. It never refunds more
	// than was received: an Amount above AmountReceived−AmountRefunded is a
	// final *ProviderError; an unknown intent wraps ErrNotFound.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)

	// FindRefund returns the refund of intent intentID whose Reference is
	// ref (Stripe: GET /v1/refunds?payment_intent=…, matched on metadata;
	// no lag), for when Refund's answer was lost; it changes nothing. An
	// error wrapping ErrNotFound says there is none, so nothing was
	// refunded under ref.
	FindRefund(ctx context.Context, intentID string, ref Reference) (Refund, error)

	// Cancel cancels the intent req.IntentID, which must not have received
	// money (Stripe: POST /v1/payment_intents/{id}/cancel,
	// docs.stripe.com/api/payment_intents/cancel), and returns it in
	// IntentCanceled. Cancelling an intent in IntentRequiresCapture voids
	// its authorization: the held money is released and nothing is
	// received (docs.stripe.com/payments/place-a-hold-on-a-payment-method#cancel-authorization).
	// Idempotent under req.IdempotencyKey; cancelling an intent already
	// canceled returns it unchanged. An intent that received money is a
	// final *ProviderError (refund it instead).
	Cancel(ctx context.Context, req CancelRequest) (Intent, error)
}

// Reference is what Orderly sets on a provider object so it can find the
// object again without its id (Stripe: metadata orderly_order_id and
// orderly_reference). OrderID is the order's id; Key is Orderly's derived
// provider key of the attempt, such as "<order id>/pay/<version>" or
// "<order id>/refund". One Key names at most one object of its kind.
type Reference struct {
	// OrderID is the id of the order the object belongs to.
	OrderID string
	// Key is the attempt's provider key, at most MaxIdempotencyKeyLen
	// characters.
	Key string
}

// IsZero reports whether r is the zero Reference.
func (r Reference) IsZero() bool { return r == Reference{} }

// String returns "<Key> (order <OrderID>)".
func (r Reference) String() string { return fmt.Sprintf("%s (order %s)", r.Key, r.OrderID) }

// PrepareRequest asks a Gateway to create the intent of one payment (see
// Gateway.Prepare).
type PrepareRequest struct {
	// IdempotencyKey is the provider-side key of the create, required, at
	// most MaxIdempotencyKeyLen characters.
	IdempotencyKey string
	// Reference is set on the intent so Find can find it; Key is required.
	Reference Reference
	// Amount is the amount to collect in minor units of Currency; it must
	// not be negative.
	Amount int64
	// Currency is an ISO 4217 alphabetic code such as "USD"; required.
	Currency string
	// CaptureMode says whether Confirm receives the money (CaptureAutomatic,
	// also the zero value "") or only authorizes it for a later Capture
	// (CaptureManual; Stripe: capture_method=manual).
	CaptureMode CaptureMode
}

// CaptureMode is how an intent's money is captured (Stripe's
// capture_method, docs.stripe.com/api/payment_intents/create#create_payment_intent-capture_method).
type CaptureMode string

// Capture modes.
const (
	// CaptureAutomatic: Confirm receives the money (Stripe: automatic or
	// automatic_async). The zero value "" means the same.
	CaptureAutomatic CaptureMode = "automatic"
	// CaptureManual: Confirm authorizes the money, leaving the intent in
	// IntentRequiresCapture until Capture (or Cancel, which voids it).
	CaptureManual CaptureMode = "manual"
)

// Manual reports whether m is CaptureManual.
func (m CaptureMode) Manual() bool { return m == CaptureManual }

// Valid reports whether m is "", CaptureAutomatic or CaptureManual.
func (m CaptureMode) Valid() bool { return m == "" || m == CaptureAutomatic || m == CaptureManual }

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without creating anything.
func (r PrepareRequest) Validate() error {
	if err := validKey(r.IdempotencyKey); err != nil {
		return err
	}
	switch {
	case r.Reference.Key == "":
		return &ProviderError{Err: errors.New("reference key is required")}
	case len(r.Reference.Key) > MaxIdempotencyKeyLen:
		return &ProviderError{Err: fmt.Errorf("reference key is %d characters, more than %d", len(r.Reference.Key), MaxIdempotencyKeyLen)}
	case r.Currency == "":
		return &ProviderError{Err: errors.New("currency is required")}
	case r.Amount < 0:
		return &ProviderError{Err: fmt.Errorf("amount %d is negative", r.Amount)}
	case !r.CaptureMode.Valid():
		return &ProviderError{Err: fmt.Errorf("capture mode %q is neither %q nor %q", r.CaptureMode, CaptureAutomatic, CaptureManual)}
	}
	return nil
}

// ConfirmRequest asks a Gateway to move the money of a prepared intent (see
// Gateway.Confirm).
type ConfirmRequest struct {
	// IdempotencyKey is the provider-side key of the confirm, required, at
	// most MaxIdempotencyKeyLen characters, and other than Prepare's.
	IdempotencyKey string
	// IntentID is the provider's id of the prepared intent; required.
	IntentID string
	// PaymentMethod is the provider's token for the customer's payment
	// method, such as "pm_card_visa".
	PaymentMethod string
	// Reference is the intent's Reference, for the provider's logs and as a
	// cross-check.
	Reference Reference
}

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without moving anything.
func (r ConfirmRequest) Validate() error {
	if err := validKey(r.IdempotencyKey); err != nil {
		return err
	}
	if r.IntentID == "" {
		return &ProviderError{Err: errors.New("intent id is required")}
	}
	return nil
}

// RefundRequest asks a Gateway to refund (part of) the money received on an
// intent (see Gateway.Refund).
type RefundRequest struct {
	// IdempotencyKey is the provider-side key of the refund, such as
	// "<order id>/refund"; required, at most MaxIdempotencyKeyLen
	// characters.
	IdempotencyKey string
	// IntentID is the provider's id of the intent to refund; required.
	IntentID string
	// Amount is the amount to refund in minor units of the intent's
	// currency; it must be positive and not exceed what is left unrefunded.
	Amount int64
	// Reference is set on the refund so FindRefund can find it.
	Reference Reference
}

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without refunding anything.
// Whether Amount is within what is left of the intent only the provider
// knows.
func (r RefundRequest) Validate() error {
	if err := validKey(r.IdempotencyKey); err != nil {
		return err
	}
	switch {
	case r.IntentID == "":
		return &ProviderError{Err: errors.New("intent id is required")}
	case r.Amount <= 0:
		return &ProviderError{Err: fmt.Errorf("refund amount %d is not positive", r.Amount)}
	}
	return nil
}

// CaptureRequest asks a Gateway to capture (part of) the money authorized
// on an intent in IntentRequiresCapture (see Gateway.Capture).
type CaptureRequest struct {
	// IdempotencyKey is the provider-side key of the capture, such as
	// "<order id>/capture/<version>"; required, at most
	// MaxIdempotencyKeyLen characters.
	IdempotencyKey string
	// IntentID is the provider's id of the authorized intent; required.
	IntentID string
	// Amount is the amount to capture in minor units of the intent's
	// currency (Stripe: amount_to_capture); it must be positive and not
	// above the authorized amount. Never defaulted: the caller states it.
	Amount int64
	// Reference is the intent's Reference, for the provider's logs and as
	// a cross-check.
	Reference Reference
}

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without capturing anything.
// Whether Amount is within the authorization only the provider knows.
func (r CaptureRequest) Validate() error {
	if err := validKey(r.IdempotencyKey); err != nil {
		return err
	}
	switch {
	case r.IntentID == "":
		return &ProviderError{Err: errors.New("intent id is required")}
	case r.Amount <= 0:
		return &ProviderError{Err: fmt.Errorf("capture amount %d is not positive", r.Amount)}
	}
	return nil
}

// CancelRequest asks a Gateway to cancel an intent that received no money
// (see Gateway.Cancel).
type CancelRequest struct {
	// IdempotencyKey is the provider-side key of the cancel; required, at
	// most MaxIdempotencyKeyLen characters.
	IdempotencyKey string
	// IntentID is the provider's id of the intent; required.
	IntentID string
}

// Validate returns nil for a request a provider may accept, and otherwise
// the final *ProviderError a Gateway answers without cancelling anything.
func (r CancelRequest) Validate() error {
	if err := validKey(r.IdempotencyKey); err != nil {
		return err
	}
	if r.IntentID == "" {
		return &ProviderError{Err: errors.New("intent id is required")}
	}
	return nil
}

func validKey(key string) error {
	switch {
	case key == "":
		return &ProviderError{Err: errors.New("idempotency key is required")}
	case len(key) > MaxIdempotencyKeyLen:
		return &ProviderError{Err: fmt.Errorf("idempotency key is %d characters, more than %d", len(key), MaxIdempotencyKeyLen)}
	}
	return nil
}

// IntentStatus is the status of an Intent, by Stripe's names
// (docs.stripe.com/payments/paymentintents/lifecycle).
type IntentStatus string

// Intent statuses.
const (
	// IntentRequiresPaymentMethod: prepared, or the last confirm was
	// declined (Intent.LastDecline); no money moved. It may be confirmed.
	IntentRequiresPaymentMethod IntentStatus = "requires_payment_method"
	// IntentRequiresConfirmation: a payment method is attached and the
	// intent waits for Confirm; no money moved.
	IntentRequiresConfirmation IntentStatus = "requires_confirmation"
	// IntentRequiresAction: the customer must act (3-D Secure); no money
	// moved yet. Settled later by a provider event.
	IntentRequiresAction IntentStatus = "requires_action"
	// IntentProcessing: the provider is collecting (a bank debit, which may
	// take days); settled later by a provider event.
	IntentProcessing IntentStatus = "processing"
	// IntentRequiresCapture: authorized, waiting for a Capture (an intent
	// prepared with CaptureManual and confirmed); money is held, not
	// received, until Intent.CaptureBefore at the latest.
	IntentRequiresCapture IntentStatus = "requires_capture"
	// IntentSucceeded: the money was received (AmountReceived > 0). Final,
	// except for refunds.
	IntentSucceeded IntentStatus = "succeeded"
	// IntentCanceled: canceled before any money was received. Final.
	IntentCanceled IntentStatus = "canceled"
)

// Valid reports whether s is one of the intent statuses.
func (s IntentStatus) Valid() bool {
	switch s {
	case IntentRequiresPaymentMethod, IntentRequiresConfirmation, IntentRequiresAction,
		IntentProcessing, IntentRequiresCapture, IntentSucceeded, IntentCanceled:
		return true
	}
	return false
}

// Final reports whether no further confirm can change the intent:
// IntentSucceeded or IntentCanceled.
func (s IntentStatus) Final() bool { return s == IntentSucceeded || s == IntentCanceled }

// Intent is a provider object carrying one payment (a Stripe PaymentIntent,
// docs.stripe.com/api/payment_intents/object) as the provider holds it.
type Intent struct {
	// ID is the provider's id, such as "pi_" followed by 24 characters.
	ID string
	// Reference is what Prepare set on the intent.
	Reference Reference
	// Amount is the amount to collect in minor units of Currency.
	Amount int64
	// Currency is an ISO 4217 alphabetic code such as "USD" (upper case,
	// whatever case the provider uses).
	Currency string
	// Status is the intent's current status.
	Status IntentStatus
	// CaptureMode is the intent's capture mode as the provider holds it:
	// CaptureAutomatic or CaptureManual (never "").
	CaptureMode CaptureMode
	// CaptureBefore is when an authorization in IntentRequiresCapture
	// expires, after which the provider cancels the intent and releases
	// the money (Stripe: the charge's
	// payment_method_details.card.capture_before, docs.stripe.com/payments/
	// place-a-hold-on-a-payment-method#auth-and-capture); zero when the
	// provider does not say or nothing is authorized (UTC).
	CaptureBefore time.Time
	// AmountReceived is how much was received, in minor units; > 0 exactly
	// when money moved (Stripe: amount_received). An authorization is not
	// received: 0 in IntentRequiresCapture; after a partial Capture, the
	// captured amount (below Amount).
	AmountReceived int64
	// AmountRefunded is how much of AmountReceived was refunded, in minor
	// units; never above AmountReceived.
	AmountRefunded int64
	// LastDecline is set when the last confirm was declined (Stripe:
	// last_payment_error); the status is then back to
	// IntentRequiresPaymentMethod. Nil otherwise.
	LastDecline *DeclineError
	// CreatedAt is when the provider created the intent (UTC).
	CreatedAt time.Time
	// ClientSecret is the secret the customer's browser or app uses to
	// complete an intent that requires action (Stripe: client_secret,
	// docs.stripe.com/api/payment_intents/object#payment_intent_object-client_secret);
	// "" when the provider has none. Never logged.
	ClientSecret string
	// NextAction is what the customer must do while Status is
	// IntentRequiresAction (Stripe: next_action); nil otherwise.
	NextAction *NextAction
}

// NextAction is what a customer must do to complete an intent in
// IntentRequiresAction, in Stripe's shape (docs.stripe.com/api/
// payment_intents/object#payment_intent_object-next_action).
type NextAction struct {
	// Type is "redirect_to_url" or "use_stripe_sdk" (or another type the
	// provider names).
	Type string
	// RedirectURL is the page the customer authenticates on, for
	// "redirect_to_url" (Stripe: redirect_to_url.url); "" otherwise.
	RedirectURL string
	// ReturnURL is where the customer comes back to (Stripe:
	// redirect_to_url.return_url); may be "".
	ReturnURL string
}

// Refund statuses carried by Refund.Status (Stripe's names,
// docs.stripe.com/api/refunds/object#refund_object-status).
const (
	RefundPending   = "pending"
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed"
	RefundCanceled  = "canceled"
)

// Refund is a refund of (part of) an intent's received money as the provider
// records it (docs.stripe.com/api/refunds/object).
type Refund struct {
	// ID is the provider's refund id, such as "re_" followed by 24
	// characters.
	ID string
	// IntentID is the id of the refunded intent.
	IntentID string
	// Reference is what Refund set on it (RefundRequest.Reference).
	Reference Reference
	// Amount is the refunded amount in minor units of the intent's
	// currency.
	Amount int64
	// Status is one of RefundPending, RefundSucceeded, RefundFailed,
	// RefundCanceled.
	Status string
	// CreatedAt is when the provider made the refund (UTC).
	CreatedAt time.Time
}

// ProviderEventType is the kind of a provider event (a webhook), normalised
// by the adapter that parsed it from its provider's own type (kept in
// ProviderEvent.ProviderType). The set is closed and constrained in the
// database.
type ProviderEventType string

// Provider event types.
const (
	// EventPaymentSucceeded: the intent ObjectID received its money (Stripe:
	// payment_intent.succeeded; paysim: charge.succeeded).
	EventPaymentSucceeded ProviderEventType = "payment.succeeded"
	// EventPaymentFailed: the last confirm of the intent was declined
	// (Stripe: payment_intent.payment_failed; paysim: charge.failed).
	EventPaymentFailed ProviderEventType = "payment.failed"
	// EventPaymentCanceled: the intent was canceled (Stripe:
	// payment_intent.canceled).
	EventPaymentCanceled ProviderEventType = "payment.canceled"
	// EventPaymentProcessing: the intent is collecting asynchronously
	// (Stripe: payment_intent.processing). Moves nothing.
	EventPaymentProcessing ProviderEventType = "payment.processing"
	// EventPaymentRequiresAction: the customer must act (Stripe:
	// payment_intent.requires_action). Moves nothing.
	EventPaymentRequiresAction ProviderEventType = "payment.requires_action"
	// EventRefundSucceeded: the refund ObjectID of intent IntentID succeeded
	// (Stripe: charge.refunded, refund.updated with status succeeded;
	// paysim: refund.succeeded).
	EventRefundSucceeded ProviderEventType = "refund.succeeded"
	// EventRefundFailed: the refund ObjectID failed (Stripe: refund.updated
	// or refund.failed with status failed).
	EventRefundFailed ProviderEventType = "refund.failed"
)

// Valid reports whether t is one of the provider event types.
func (t ProviderEventType) Valid() bool {
	switch t {
	case EventPaymentSucceeded, EventPaymentFailed, EventPaymentCanceled, EventPaymentProcessing,
		EventPaymentRequiresAction, EventRefundSucceeded, EventRefundFailed:
		return true
	}
	return false
}

// ErrIgnoredEvent is wrapped by an adapter's error for a provider event that
// verified but means nothing to Orderly (another type, a pending refund, a
// refund Orderly did not make): the receiver acknowledges it (200
// "ignored") and records nothing, since a provider resends an event it was
// refused.
var ErrIgnoredEvent = errors.New("payment: provider event ignored")

// ProviderEvent is one provider event (a webhook) as an adapter parsed and
// verified it: what it says about which provider object. It is matched to
// its attempt by ObjectID (the intent id recorded in the attempt; for a
// refund event, the refund's intent IntentID), with Reference.OrderID as a
// cross-check; an event whose Amount or Currency differs from its attempt
// moves nothing and parks the attempt needs_attention.
type ProviderEvent struct {
	// Source names the provider, such as "paysim" or "stripe"; (Source,
	// EventID) is unique.
	Source string
	// EventID is the provider's event id, such as "evt_…"; at most 255
	// bytes.
	EventID string
	// Type is the normalised kind of the event.
	Type ProviderEventType
	// ProviderType is the provider's own event type, such as
	// "payment_intent.succeeded", for logs.
	ProviderType string
	// ObjectID is the provider id of the object the event is about: the
	// intent for EventPayment*, the refund for EventRefund*.
	ObjectID string
	// IntentID is the intent the object belongs to: ObjectID itself for an
	// intent, the refunded intent for a refund.
	IntentID string
	// Reference is the object's Reference as the provider echoes it
	// (metadata); zero when the provider sent none.
	Reference Reference
	// Amount is the event's amount in minor units of Currency: the amount
	// received for a payment, the amount refunded for a refund.
	Amount int64
	// Currency is an ISO 4217 alphabetic code, upper case.
	Currency string
	// ReceivedAt is when Orderly took the event in (UTC); set by the
	// receiver, not by the adapter.
	ReceivedAt time.Time
}
