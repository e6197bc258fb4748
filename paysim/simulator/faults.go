package simulator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderly/orderly/payment"
)

// MethodProviderError is the test payment method that IntentGateway's
// Confirm fails with a retryable *payment.ProviderError every time, like a
// transient 503 from the provider. Nothing is received and the failure is
// not remembered under the idempotency key, so a retry is evaluated afresh.
// It is the simulator's own: paysim approves it (its nearest fault,
// paysim.MethodFault503, fails the first request for a key only).
const MethodProviderError = "pm_card_provider_error"

// Test payment methods of IntentGateway that pay asynchronously (issue 16),
// by the names paysim's Stripe mode uses.
const (
	// MethodThreeDSecure leaves the intent in payment.IntentRequiresAction
	// (next action redirect_to_url, a client secret) until
	// IntentGateway.Authenticate.
	MethodThreeDSecure = "pm_card_threeDSecure2Required"
	// MethodBankDebit leaves the intent in payment.IntentProcessing until
	// IntentGateway.Settle.
	MethodBankDebit = "pm_sepaDebit"
)

// errProviderUnavailable is the cause inside the ProviderError returned for
// MethodProviderError.
var errProviderUnavailable = errors.New("simulated provider unavailable (503)")

// cancelled returns the retryable ProviderError for a call whose context
// ended before the provider acted.
func cancelled(ctx context.Context) error {
	return &payment.ProviderError{Retryable: true, Err: ctx.Err()}
}

// keyReused returns the non-retryable error for an idempotency key reused
// with different parameters.
func keyReused(kind, key string) error {
	return &payment.ProviderError{Err: fmt.Errorf("%s key %q: %w", kind, key, payment.ErrIdempotencyKeyReused)}
}

// wait sleeps for d, or returns a retryable ProviderError if ctx ends first
// (or has already ended).
func wait(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return cancelled(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return cancelled(ctx)
	case <-t.C:
		return nil
	}
}
