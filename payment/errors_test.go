package payment

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// unknownOutcome returns the documented form of an unknown outcome: a
// non-retryable *ProviderError wrapping ErrUnknownOutcome and the cause.
func unknownOutcome(cause error) error {
	return &ProviderError{Err: fmt.Errorf("%w: %w", ErrUnknownOutcome, cause)}
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"decline", &DeclineError{Code: DeclineCardDeclined}, false},
		{"wrapped decline", fmt.Errorf("pay: %w", &DeclineError{Code: DeclineInsufficientFunds}), false},
		{"bare ErrDeclined", ErrDeclined, false},
		{"decline inside a retryable provider error", &ProviderError{Retryable: true, Err: &DeclineError{}}, false},
		{"retryable provider error", &ProviderError{Retryable: true, Err: errors.New("503")}, true},
		{"wrapped retryable provider error", fmt.Errorf("pay: %w", &ProviderError{Retryable: true}), true},
		{"final provider error", &ProviderError{Err: errors.New("400")}, false},
		{"provider error for a cancelled call", &ProviderError{Retryable: true, Err: context.Canceled}, true},
		{"not found", ErrNotFound, false},
		{"bare deadline exceeded is unknown", context.DeadlineExceeded, false},
		{"unknown error", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := IsRetryable(tt.err); got != tt.want {
				t.Errorf("IsRetryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{&DeclineError{Code: "card_declined", Message: "Your card was declined."}, "payment: declined (card_declined): Your card was declined."},
		{&DeclineError{Code: "card_declined"}, "payment: declined (card_declined)"},
		{&ProviderError{Retryable: true, Err: errors.New("503")}, "payment: provider error (retryable): 503"},
		{&ProviderError{}, "payment: provider error (final)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		err         error
		wantUnknown bool
	}{
		{"nil", nil, false},
		{"unknown outcome", unknownOutcome(context.DeadlineExceeded), true},
		{"wrapped unknown outcome", errors.Join(errors.New("pay"), unknownOutcome(errors.New("EOF"))), true},
		{"retryable provider error", &ProviderError{Retryable: true}, false},
		{"decline", &DeclineError{Code: DeclineCardDeclined}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := IsUnknownOutcome(tt.err); got != tt.wantUnknown {
				t.Errorf("IsUnknownOutcome(%v) = %v, want %v", tt.err, got, tt.wantUnknown)
			}
			if tt.wantUnknown && IsRetryable(tt.err) {
				t.Errorf("IsRetryable(%v) = true for an unknown outcome", tt.err)
			}
		})
	}
	if err := unknownOutcome(context.DeadlineExceeded); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%v does not match its cause", err)
	}
}
