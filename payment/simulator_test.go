package payment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// req returns a valid ChargeRequest for orderID paid with method.
func req(orderID, method string) ChargeRequest {
	return ChargeRequest{
		IdempotencyKey: orderID + "/pay",
		OrderID:        orderID,
		Amount:         4200,
		Currency:       "USD",
		PaymentMethod:  method,
	}
}

func TestSimulatorCharge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		wantDecline string // DeclineError.Code; "" if not declined
		wantRetry   bool   // a retryable ProviderError
	}{
		{name: "approves the README card", method: TestMethodApproved},
		{name: "approves any other method", method: "pm_card_mastercard"},
		{name: "declines the declined test card", method: TestMethodDeclined, wantDecline: DeclineCardDeclined},
		{name: "declines for insufficient funds", method: TestMethodInsufficientFunds, wantDecline: DeclineInsufficientFunds},
		{name: "declines an empty payment method", method: "", wantDecline: DeclineInvalidPaymentMethod},
		{name: "fails transiently for the provider error card", method: TestMethodProviderError, wantRetry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			r := req("ord_1", tt.method)
			c, err := s.Charge(context.Background(), r)

			wantCaptures := 0
			switch {
			case tt.wantDecline != "":
				var de *DeclineError
				if !errors.As(err, &de) || de.Code != tt.wantDecline {
					t.Fatalf("err = %v, want DeclineError with code %q", err, tt.wantDecline)
				}
				if !errors.Is(err, ErrDeclined) {
					t.Errorf("errors.Is(err, ErrDeclined) = false for %v", err)
				}
				if IsRetryable(err) {
					t.Errorf("IsRetryable(%v) = true, want false (declines are final)", err)
				}
			case tt.wantRetry:
				var pe *ProviderError
				if !errors.As(err, &pe) || !pe.Retryable {
					t.Fatalf("err = %v, want retryable ProviderError", err)
				}
				if !IsRetryable(err) {
					t.Errorf("IsRetryable(%v) = false, want true", err)
				}
			default:
				if err != nil {
					t.Fatalf("Charge: %v", err)
				}
				wantCaptures = 1
				if len(c.ID) != len("ch_")+24 || c.ID[:3] != "ch_" {
					t.Errorf("ID = %q, want ch_ and 24 hex digits", c.ID)
				}
				want := Charge{ID: c.ID, IdempotencyKey: r.IdempotencyKey, OrderID: r.OrderID,
					Amount: r.Amount, Currency: r.Currency, Status: ChargeCaptured, CreatedAt: c.CreatedAt}
				if c != want {
					t.Errorf("Charge = %+v, want %+v", c, want)
				}
				if c.CreatedAt.IsZero() || c.CreatedAt.Location() != time.UTC {
					t.Errorf("CreatedAt = %v, want a UTC time", c.CreatedAt)
				}
			}
			if got := s.Captures("ord_1"); got != wantCaptures {
				t.Errorf("Captures = %d, want %d", got, wantCaptures)
			}
			if got := s.TotalCaptures(); got != wantCaptures {
				t.Errorf("TotalCaptures = %d, want %d", got, wantCaptures)
			}
			if got := s.Calls(); got != 1 {
				t.Errorf("Calls = %d, want 1", got)
			}
		})
	}
}

func TestSimulatorChargeRepeatedKeyReturnsSameChargeAndCapturesOnce(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	r := req("ord_1", TestMethodApproved)
	first, err := s.Charge(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		again, err := s.Charge(context.Background(), r)
		if err != nil {
			t.Fatalf("repeat %d: %v", i, err)
		}
		if again != first {
			t.Fatalf("repeat %d = %+v, want %+v", i, again, first)
		}
	}
	if got := s.Captures("ord_1"); got != 1 {
		t.Errorf("Captures = %d, want 1", got)
	}
	if got := s.Calls(); got != 6 {
		t.Errorf("Calls = %d, want 6", got)
	}
	if got := len(s.Charges()); got != 1 {
		t.Errorf("len(Charges) = %d, want 1", got)
	}
}

func TestSimulatorChargeRepeatedDeclineIsRemembered(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	r := req("ord_1", TestMethodInsufficientFunds)
	_, err1 := s.Charge(context.Background(), r)
	_, err2 := s.Charge(context.Background(), r)
	var d1, d2 *DeclineError
	if !errors.As(err1, &d1) || !errors.As(err2, &d2) {
		t.Fatalf("errs = %v, %v; want two declines", err1, err2)
	}
	if *d1 != *d2 {
		t.Errorf("repeat decline = %+v, want %+v", *d2, *d1)
	}
	if got := s.TotalCaptures(); got != 0 {
		t.Errorf("TotalCaptures = %d, want 0", got)
	}
}

func TestSimulatorChargeTransientFailureIsNotRemembered(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	r := req("ord_1", TestMethodProviderError)
	if _, err := s.Charge(context.Background(), r); !IsRetryable(err) {
		t.Fatalf("err = %v, want retryable", err)
	}
	r.PaymentMethod = TestMethodApproved
	if _, err := s.Charge(context.Background(), r); err != nil {
		t.Fatalf("retry after a transient failure: %v", err)
	}
	if got := s.Captures("ord_1"); got != 1 {
		t.Errorf("Captures = %d, want 1", got)
	}
}

func TestSimulatorChargeConcurrentSameKeyCapturesOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	s := NewSimulator()
	s.Delay = time.Millisecond // make the calls overlap
	r := req("ord_1", TestMethodApproved)

	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			c, err := s.Charge(context.Background(), r)
			ids[i], errs[i] = c.ID, err
		})
	}
	close(start)
	wg.Wait()

	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("goroutine %d got charge %q, goroutine 0 got %q", i, ids[i], ids[0])
		}
	}
	if got := s.Captures("ord_1"); got != 1 {
		t.Errorf("Captures = %d, want 1", got)
	}
	if got := s.Calls(); got != n {
		t.Errorf("Calls = %d, want %d", got, n)
	}
}

func TestSimulatorChargeKeyReuseWithDifferentParamsFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*ChargeRequest)
	}{
		{name: "different amount", change: func(r *ChargeRequest) { r.Amount++ }},
		{name: "different currency", change: func(r *ChargeRequest) { r.Currency = "EUR" }},
		{name: "different payment method", change: func(r *ChargeRequest) { r.PaymentMethod = "pm_card_amex" }},
		{name: "different order", change: func(r *ChargeRequest) { r.OrderID = "ord_2" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			r := req("ord_1", TestMethodApproved)
			first, err := s.Charge(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			r2 := r
			tt.change(&r2)
			_, err = s.Charge(context.Background(), r2)
			var pe *ProviderError
			if !errors.As(err, &pe) || pe.Retryable {
				t.Fatalf("err = %v, want non-retryable ProviderError", err)
			}
			if !errors.Is(err, ErrIdempotencyKeyReused) {
				t.Errorf("errors.Is(err, ErrIdempotencyKeyReused) = false for %v", err)
			}
			if IsRetryable(err) {
				t.Errorf("IsRetryable(%v) = true", err)
			}
			if got := s.TotalCaptures(); got != 1 {
				t.Errorf("TotalCaptures = %d, want 1", got)
			}
			if again, err := s.Charge(context.Background(), r); err != nil || again != first {
				t.Errorf("original request replays %+v, %v; want %+v", again, err, first)
			}
		})
	}
}

func TestSimulatorChargeRejectsMalformedRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*ChargeRequest)
	}{
		{name: "missing idempotency key", change: func(r *ChargeRequest) { r.IdempotencyKey = "" }},
		{name: "missing currency", change: func(r *ChargeRequest) { r.Currency = "" }},
		{name: "negative amount", change: func(r *ChargeRequest) { r.Amount = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			r := req("ord_1", TestMethodApproved)
			tt.change(&r)
			_, err := s.Charge(context.Background(), r)
			var pe *ProviderError
			if !errors.As(err, &pe) || pe.Retryable {
				t.Fatalf("err = %v, want non-retryable ProviderError", err)
			}
			if got := s.TotalCaptures(); got != 0 {
				t.Errorf("TotalCaptures = %d, want 0", got)
			}
		})
	}
}

func TestSimulatorChargeContextEndsBeforeCapture(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		delay   time.Duration
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{
			name:  "deadline passes during delay",
			delay: time.Minute,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 10*time.Millisecond)
			},
			wantErr: context.DeadlineExceeded,
		},
		{
			name: "context already cancelled",
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			wantErr: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			s.Delay = tt.delay
			ctx, cancel := tt.ctx()
			defer cancel()
			r := req("ord_1", TestMethodApproved)
			_, err := s.Charge(ctx, r)
			var pe *ProviderError
			if !errors.As(err, &pe) || !pe.Retryable {
				t.Fatalf("err = %v, want retryable ProviderError", err)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("errors.Is(err, %v) = false for %v", tt.wantErr, err)
			}
			if got := s.Captures("ord_1"); got != 0 {
				t.Fatalf("Captures = %d, want 0", got)
			}
			// The key was not used up: a retry with the same key captures.
			s.Delay = 0 // no call is in flight
			if _, err := s.Charge(context.Background(), r); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := s.Captures("ord_1"); got != 1 {
				t.Errorf("Captures after retry = %d, want 1", got)
			}
		})
	}
}

func TestSimulatorRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("refunds a charge and marks it refunded", func(t *testing.T) {
		t.Parallel()
		s := NewSimulator()
		c, err := s.Charge(ctx, req("ord_1", TestMethodApproved))
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Refund(ctx, RefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: c.Amount})
		if err != nil {
			t.Fatal(err)
		}
		if r.ChargeID != c.ID || r.Amount != c.Amount || r.ID[:3] != "re_" || r.CreatedAt.IsZero() {
			t.Errorf("Refund = %+v, want re_ id for charge %s and amount %d", r, c.ID, c.Amount)
		}
		if got := s.Charges()[0].Status; got != ChargeRefunded {
			t.Errorf("Status = %q, want %q", got, ChargeRefunded)
		}
		if again, err := s.Charge(ctx, req("ord_1", TestMethodApproved)); err != nil || again.Status != ChargeRefunded || again.ID != c.ID {
			t.Errorf("replayed charge = %+v, %v; want %s refunded", again, err, c.ID)
		}
	})

	t.Run("repeated refund key returns the same refund once", func(t *testing.T) {
		t.Parallel()
		s := NewSimulator()
		if _, err := s.Charge(ctx, req("ord_1", TestMethodApproved)); err != nil {
			t.Fatal(err)
		}
		rr := RefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 4200}
		first, err := s.Refund(ctx, rr)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			again, err := s.Refund(ctx, rr)
			if err != nil || again != first {
				t.Fatalf("repeat %d = %+v, %v; want %+v", i, again, err, first)
			}
		}
		if got := s.Refunds("ord_1"); got != 1 {
			t.Errorf("Refunds = %d, want 1", got)
		}
	})

	t.Run("refund key reuse with different amount fails", func(t *testing.T) {
		t.Parallel()
		s := NewSimulator()
		if _, err := s.Charge(ctx, req("ord_1", TestMethodApproved)); err != nil {
			t.Fatal(err)
		}
		rr := RefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 100}
		if _, err := s.Refund(ctx, rr); err != nil {
			t.Fatal(err)
		}
		rr.Amount = 200
		_, err := s.Refund(ctx, rr)
		if !errors.Is(err, ErrIdempotencyKeyReused) || IsRetryable(err) {
			t.Errorf("err = %v, want final ErrIdempotencyKeyReused", err)
		}
	})

	t.Run("refund beyond the captured amount fails", func(t *testing.T) {
		t.Parallel()
		s := NewSimulator()
		if _, err := s.Charge(ctx, req("ord_1", TestMethodApproved)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Refund(ctx, RefundRequest{IdempotencyKey: "a", ChargeKey: "ord_1/pay", Amount: 4000}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Refund(ctx, RefundRequest{IdempotencyKey: "b", ChargeKey: "ord_1/pay", Amount: 201})
		var pe *ProviderError
		if !errors.As(err, &pe) || pe.Retryable {
			t.Errorf("err = %v, want non-retryable ProviderError", err)
		}
		if got := s.Refunds("ord_1"); got != 1 {
			t.Errorf("Refunds = %d, want 1", got)
		}
	})

	for _, tt := range []struct {
		name   string
		method string // "" means no charge at all
	}{
		{name: "refund of an unknown charge key is not found"},
		{name: "refund of a declined charge key is not found", method: TestMethodDeclined},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			if tt.method != "" {
				_, _ = s.Charge(ctx, req("ord_1", tt.method))
			}
			_, err := s.Refund(ctx, RefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 1})
			if !errors.Is(err, ErrChargeNotFound) {
				t.Errorf("err = %v, want ErrChargeNotFound", err)
			}
			if IsRetryable(err) {
				t.Errorf("IsRetryable(%v) = true", err)
			}
		})
	}
}

func TestSimulatorChargesReturnsACopy(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	if _, err := s.Charge(context.Background(), req("ord_1", TestMethodApproved)); err != nil {
		t.Fatal(err)
	}
	cs := s.Charges()
	cs[0].Amount = 1
	if got := s.Charges()[0].Amount; got != 4200 {
		t.Errorf("Amount after mutating the copy = %d, want 4200", got)
	}
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
		{"charge not found", ErrChargeNotFound, false},
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
