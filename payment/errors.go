package payment

import (
	"errors"
	"fmt"
	"time"
)

// ErrDeclined is matched, through errors.Is, by every decline: the provider
// refused the charge and retrying with the same payment method will not
// change that. A decline is final. The concrete error is a *DeclineError.
var ErrDeclined = errors.New("payment: declined")

// ErrIdempotencyKeyReused is wrapped, inside a non-retryable *ProviderError,
// by the error a Gateway returns when an idempotency key is reused with
// different parameters (a real provider answers 400). It indicates a bug in
// the caller's key derivation, not a customer problem.
var ErrIdempotencyKeyReused = errors.New("payment: idempotency key reused with different parameters")

// Decline codes carried by DeclineError.Code.
const (
	// DeclineCardDeclined is the generic decline of the card issuer.
	DeclineCardDeclined = "card_declined"
	// DeclineInsufficientFunds means the account lacks the funds.
	DeclineInsufficientFunds = "insufficient_funds"
	// DeclineInvalidPaymentMethod means the payment method is missing or
	// unusable.
	DeclineInvalidPaymentMethod = "invalid_payment_method"
)

// DeclineError is a final refusal of a charge by the provider. It matches
// ErrDeclined through errors.Is.
type DeclineError struct {
	// Code is a machine-readable reason, such as DeclineCardDeclined
	// ("card_declined") or DeclineInsufficientFunds ("insufficient_funds").
	Code string
	// Message is a human-readable explanation safe to show the customer.
	Message string
}

// Error implements error.
func (e *DeclineError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("payment: declined (%s)", e.Code)
	}
	return fmt.Sprintf("payment: declined (%s): %s", e.Code, e.Message)
}

// Is reports whether target is ErrDeclined, so that errors.Is(err,
// ErrDeclined) holds for every *DeclineError.
func (e *DeclineError) Is(target error) bool { return target == ErrDeclined }

// ProviderError is a failure of the provider or of the call to it, as opposed
// to a decline. Retryable says whether the same request (same idempotency
// key) may be sent again: true for transient failures such as a 503, a
// timeout or a cancelled call, after which nothing was captured or the
// outcome is unknown; false for requests the provider will never accept,
// such as a reused idempotency key.
type ProviderError struct {
	// Retryable reports whether the request may be retried with the same
	// idempotency key.
	Retryable bool
	// Err is the underlying cause; it may be nil.
	Err error
	// Code is the provider's machine-readable error code when it gave one,
	// such as Stripe's "idempotency_key_in_use" or "lock_timeout"
	// (docs.stripe.com/error-codes); "" otherwise.
	Code string
	// RetryAfter is how long the provider asked the caller to wait before
	// resending (an HTTP Retry-After, in seconds on the wire); zero when it
	// said nothing. Only meaningful when Retryable.
	RetryAfter time.Duration
}

// Error implements error.
func (e *ProviderError) Error() string {
	kind := "final"
	if e.Retryable {
		kind = "retryable"
	}
	if e.Code != "" {
		kind += ", " + e.Code
	}
	if e.Err == nil {
		return fmt.Sprintf("payment: provider error (%s)", kind)
	}
	return fmt.Sprintf("payment: provider error (%s): %v", kind, e.Err)
}

// Unwrap returns Err.
func (e *ProviderError) Unwrap() error { return e.Err }

// IsRetryable reports whether a Gateway call that failed with err may be
// retried with the same idempotency key. The rule, applied in order:
//
//   - nil is not retryable (there is nothing to retry);
//   - a decline (errors.Is(err, ErrDeclined)) is final: false;
//   - a *ProviderError in err's chain says for itself: its Retryable field;
//   - anything else, including ErrNotFound and a bare context error
//     from the caller's own context, is unknown: false.
//
// A caller that treats false as "do not retry" should still remember that a
// bare context error leaves the charge's outcome unknown; retrying later with
// the same idempotency key is always safe.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, ErrDeclined) {
		return false
	}
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Retryable
	}
	return false
}

// ErrUnknownOutcome is wrapped, inside a non-retryable *ProviderError, by the
// error a Gateway returns when a request that changes something (a charge or
// a refund) reached the provider but no usable answer came back: the
// connection broke or the call timed out after the request was written. The
// provider may or may not have acted. IsRetryable reports false for it and
// IsUnknownOutcome true: the caller should learn the outcome with Lookup (or
// by repeating the request with the same idempotency key, which is always
// safe) before deciding anything. When the cause was a context ending, the
// error also matches that context error through errors.Is.
var ErrUnknownOutcome = errors.New("payment: outcome unknown")

// IsUnknownOutcome reports whether err says a Gateway call may or may not
// have taken effect at the provider (errors.Is(err, ErrUnknownOutcome)). A
// caller must then neither treat the charge as failed nor as captured, but
// look it up or repeat it with the same idempotency key.
func IsUnknownOutcome(err error) bool { return errors.Is(err, ErrUnknownOutcome) }
