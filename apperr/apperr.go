package apperr

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable kind of application error. The api
// package maps each Code to one HTTP status and one problem type URI
// (RFC 9457) in a single table.
type Code string

// Application error codes.
const (
	// EInvalid: the request is malformed or a field fails validation (400).
	EInvalid Code = "invalid"
	// ENotFound: the resource does not exist for this tenant (404).
	ENotFound Code = "not_found"
	// EInvalidTransition: the state machine does not allow the event in the
	// order's current state (409).
	EInvalidTransition Code = "invalid_transition"
	// EMismatch: the request contradicts the resource, such as a payment whose
	// amount or currency differs from the order's (422).
	EMismatch Code = "mismatch"
	// EDeclined: the payment provider declined the charge; final (402).
	EDeclined Code = "payment_declined"
	// EFulfillmentRejected: the warehouse refused the shipment for good, such
	// as an item out of stock; final (422).
	EFulfillmentRejected Code = "fulfillment_rejected"
	// ERefundRejected: the payment provider refused a refund for good (it
	// knows no such charge); final (422).
	ERefundRejected Code = "refund_rejected"
	// ERefundExceedsCaptured: a partial refund would take the order's
	// refunds (settled or in flight) above what was captured (issue 16).
	ERefundExceedsCaptured Code = "refund_exceeds_captured"
	// ENotCaptured: a partial refund of an order whose payment is only
	// authorized (capture at fulfilment, issue 16): nothing was captured
	// yet, so nothing can be refunded; cancel the order to void it (409).
	ENotCaptured Code = "payment_not_captured"
	// EKeyReused: an idempotency key was reused with a different request
	// fingerprint (422, draft-ietf-httpapi-idempotency-key-header §2.7).
	EKeyReused Code = "idempotency_key_reused"
	// EKeyInProgress: a request with the same idempotency key is still being
	// processed (409 with Retry-After, draft §2.7).
	EKeyInProgress Code = "idempotency_key_in_progress"
	// EOrderBusy: another operation on the order is calling a provider (a
	// payment, a shipment, a refund); retry later (409 with Retry-After).
	EOrderBusy Code = "order_busy"
	// EKeyExpired: the idempotency key is past its retention window and can no
	// longer be replayed; the client must use a new key (422).
	EKeyExpired Code = "idempotency_key_expired"
	// EKeyRequired: the server requires an Idempotency-Key and none was sent
	// (400, draft §2.7).
	EKeyRequired Code = "idempotency_key_required"
	// EUnavailable: a dependency (store, provider) failed in a retryable way;
	// nothing final was recorded (503 with Retry-After).
	EUnavailable Code = "unavailable"
	// ENeedsAttention: a provider call's outcome stayed unknown past the age
	// a provider keeps its idempotency keys; nothing is retried for it (that
	// could move money twice) until a person settles it (409, no
	// Retry-After).
	ENeedsAttention Code = "needs_attention"
	// ELimitReached: the request would take the tenant past a cap on what
	// it may have, such as its webhook endpoints; nothing was created
	// (409, no Retry-After: it stays refused until the tenant frees one).
	ELimitReached Code = "limit_reached"
	// EForbidden: the caller is authenticated but its role may not do this
	// (an operator credential with role reader asked to act; 403).
	EForbidden Code = "forbidden"
	// EFindingContradicted: an operator's finding about a parked attempt
	// contradicts what the provider answers now; nothing was changed (409,
	// no Retry-After).
	EFindingContradicted Code = "finding_contradicts_provider"
	// EAttemptNotParked: an operator asked to resolve an attempt that is
	// not needs_attention (settled already, or still in flight); nothing
	// was changed (409).
	EAttemptNotParked Code = "attempt_not_parked"
	// EDeliveryNotFailed: an operator asked to resend a webhook delivery
	// that has not failed; nothing was changed (409).
	EDeliveryNotFailed Code = "delivery_not_failed"
	// EEndpointEnabled: an operator asked to enable a webhook endpoint that
	// is enabled; nothing was changed (409).
	EEndpointEnabled Code = "endpoint_enabled"
	// EInternal: an unexpected failure (500). Never stored as final.
	EInternal Code = "internal"
)

// FieldError names one invalid field of a request body and why it is invalid.
// Field is a JSON path such as "items[2].quantity".
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Error is Orderly's application error: a Code, a human-readable Message and,
// for EInvalid, the list of invalid fields.
type Error struct {
	Code    Code
	Message string
	Fields  []FieldError
	// RetryAfter, when positive, is how long the client should wait before
	// it retries, when the server knows (such as the time left on the lease
	// of the request holding the key); the api bounds it and sends it as
	// Retry-After (RFC 9110 §10.2.3) in place of its table's default.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string {
	if len(e.Fields) > 0 {
		return fmt.Sprintf("%s: %s (%d invalid fields)", e.Code, e.Message, len(e.Fields))
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Errorf returns an *Error with the given code and formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the Code of the first *Error in err's chain, EInternal for
// any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EInternal
}
