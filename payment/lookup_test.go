package payment

import (
	"context"
	"errors"
	"testing"
)

func TestSimulatorLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewSimulator()
	c, err := s.Charge(ctx, req("ord_1", TestMethodApproved))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, "ord_1/pay"); err != nil || got != c {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, c)
	}

	t.Run("a refund shows in the status", func(t *testing.T) {
		if _, err := s.Refund(ctx, RefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 4200}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Lookup(ctx, "ord_1/pay"); err != nil || got.Status != ChargeRefunded || got.ID != c.ID {
			t.Errorf("Lookup = %+v, %v; want %s refunded", got, err, c.ID)
		}
	})
	t.Run("a decline is remembered", func(t *testing.T) {
		if _, err := s.Charge(ctx, req("ord_2", TestMethodDeclined)); !errors.Is(err, ErrDeclined) {
			t.Fatal(err)
		}
		_, err := s.Lookup(ctx, "ord_2/pay")
		var de *DeclineError
		if !errors.As(err, &de) || de.Code != DeclineCardDeclined {
			t.Errorf("Lookup err = %v, want the card_declined DeclineError", err)
		}
	})
	t.Run("a transient failure is not remembered", func(t *testing.T) {
		if _, err := s.Charge(ctx, req("ord_3", TestMethodProviderError)); !IsRetryable(err) {
			t.Fatal(err)
		}
		if _, err := s.Lookup(ctx, "ord_3/pay"); !errors.Is(err, ErrChargeNotFound) {
			t.Errorf("Lookup err = %v, want ErrChargeNotFound", err)
		}
	})
	t.Run("an ended context is retryable", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Lookup(cctx, "ord_1/pay"); !IsRetryable(err) || !errors.Is(err, context.Canceled) {
			t.Errorf("Lookup err = %v, want retryable context.Canceled", err)
		}
	})
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
