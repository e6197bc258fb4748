package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// unknownOutcome returns the documented form of an unknown outcome: a
// non-retryable *WarehouseError wrapping ErrUnknownOutcome and the cause.
func unknownOutcome(cause error) error {
	return &WarehouseError{Err: fmt.Errorf("%w: %w", ErrUnknownOutcome, cause)}
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"retryable warehouse error", &WarehouseError{Retryable: true, Err: errors.New("503")}, true},
		{"wrapped retryable warehouse error", fmt.Errorf("fulfill: %w", &WarehouseError{Retryable: true}), true},
		{"final warehouse error", &WarehouseError{Err: ErrOutOfStock}, false},
		{"bare ErrOutOfStock", ErrOutOfStock, false},
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

func TestWarehouseErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  *WarehouseError
		want string
	}{
		{&WarehouseError{Retryable: true, Err: errors.New("503")}, "fulfillment: warehouse error (retryable): 503"},
		{&WarehouseError{}, "fulfillment: warehouse error (final)"},
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
	err := unknownOutcome(context.DeadlineExceeded)
	if !IsUnknownOutcome(err) || IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("unknownOutcome: %v: want unknown, not retryable, matching its cause", err)
	}
	for _, e := range []error{nil, &WarehouseError{Retryable: true}, &WarehouseError{Err: ErrOutOfStock}, ErrShipmentNotFound} {
		if IsUnknownOutcome(e) {
			t.Errorf("IsUnknownOutcome(%v) = true", e)
		}
	}
}
