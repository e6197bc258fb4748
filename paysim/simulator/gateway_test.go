package simulator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/testmode"
)

// chargeReq returns a valid payment.ChargeRequest for orderID paid with method.
func chargeReq(orderID, method string) payment.ChargeRequest {
	return payment.ChargeRequest{
		IdempotencyKey: orderID + "/pay",
		OrderID:        orderID,
		Amount:         4200,
		Currency:       "USD",
		PaymentMethod:  method,
	}
}

func TestGatewayCharge(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		wantDecline string // payment.DeclineError.Code; "" if not declined
		wantRetry   bool   // a retryable payment.ProviderError
	}{
		{name: "approves the README card", method: testmode.MethodApproved},
		{name: "approves any other method", method: "pm_card_mastercard"},
		{name: "declines the declined test card", method: testmode.MethodDeclined, wantDecline: payment.DeclineCardDeclined},
		{name: "declines for insufficient funds", method: testmode.MethodInsufficientFunds, wantDecline: payment.DeclineInsufficientFunds},
		{name: "declines an empty payment method", method: "", wantDecline: payment.DeclineInvalidPaymentMethod},
		{name: "fails transiently for the provider error card", method: MethodProviderError, wantRetry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewGateway()
			r := chargeReq("ord_1", tt.method)
			c, err := s.Charge(context.Background(), r)

			wantCaptures := 0
			switch {
			case tt.wantDecline != "":
				var de *payment.DeclineError
				if !errors.As(err, &de) || de.Code != tt.wantDecline {
					t.Fatalf("err = %v, want payment.DeclineError with code %q", err, tt.wantDecline)
				}
				if !errors.Is(err, payment.ErrDeclined) {
					t.Errorf("errors.Is(err, payment.ErrDeclined) = false for %v", err)
				}
				if payment.IsRetryable(err) {
					t.Errorf("payment.IsRetryable(%v) = true, want false (declines are final)", err)
				}
			case tt.wantRetry:
				var pe *payment.ProviderError
				if !errors.As(err, &pe) || !pe.Retryable {
					t.Fatalf("err = %v, want retryable payment.ProviderError", err)
				}
				if !payment.IsRetryable(err) {
					t.Errorf("payment.IsRetryable(%v) = false, want true", err)
				}
			default:
				if err != nil {
					t.Fatalf("Charge: %v", err)
				}
				wantCaptures = 1
				if len(c.ID) != len("ch_")+24 || c.ID[:3] != "ch_" {
					t.Errorf("ID = %q, want ch_ and 24 hex digits", c.ID)
				}
				want := payment.Charge{ID: c.ID, IdempotencyKey: r.IdempotencyKey, OrderID: r.OrderID,
					Amount: r.Amount, Currency: r.Currency, Status: payment.ChargeCaptured, CreatedAt: c.CreatedAt}
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

func TestGatewayChargeRepeatedKeyReturnsSameChargeAndCapturesOnce(t *testing.T) {
	t.Parallel()
	s := NewGateway()
	r := chargeReq("ord_1", testmode.MethodApproved)
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

func TestGatewayChargeRepeatedDeclineIsRemembered(t *testing.T) {
	t.Parallel()
	s := NewGateway()
	r := chargeReq("ord_1", testmode.MethodInsufficientFunds)
	_, err1 := s.Charge(context.Background(), r)
	_, err2 := s.Charge(context.Background(), r)
	var d1, d2 *payment.DeclineError
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

func TestGatewayChargeTransientFailureIsNotRemembered(t *testing.T) {
	t.Parallel()
	s := NewGateway()
	r := chargeReq("ord_1", MethodProviderError)
	if _, err := s.Charge(context.Background(), r); !payment.IsRetryable(err) {
		t.Fatalf("err = %v, want retryable", err)
	}
	r.PaymentMethod = testmode.MethodApproved
	if _, err := s.Charge(context.Background(), r); err != nil {
		t.Fatalf("retry after a transient failure: %v", err)
	}
	if got := s.Captures("ord_1"); got != 1 {
		t.Errorf("Captures = %d, want 1", got)
	}
}

func TestGatewayChargeConcurrentSameKeyCapturesOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	s := NewGateway()
	s.Delay = time.Millisecond // make the calls overlap
	r := chargeReq("ord_1", testmode.MethodApproved)

	oneID(t, n, func() (string, error) {
		c, err := s.Charge(context.Background(), r)
		return c.ID, err
	})
	if got := s.Captures("ord_1"); got != 1 {
		t.Errorf("Captures = %d, want 1", got)
	}
	if got := s.Calls(); got != n {
		t.Errorf("Calls = %d, want %d", got, n)
	}
}

func TestGatewayChargeKeyReuseWithDifferentParamsFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*payment.ChargeRequest)
	}{
		{name: "different amount", change: func(r *payment.ChargeRequest) { r.Amount++ }},
		{name: "different currency", change: func(r *payment.ChargeRequest) { r.Currency = "EUR" }},
		{name: "different payment method", change: func(r *payment.ChargeRequest) { r.PaymentMethod = "pm_card_amex" }},
		{name: "different order", change: func(r *payment.ChargeRequest) { r.OrderID = "ord_2" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewGateway()
			r := chargeReq("ord_1", testmode.MethodApproved)
			first, err := s.Charge(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			r2 := r
			tt.change(&r2)
			_, err = s.Charge(context.Background(), r2)
			var pe *payment.ProviderError
			if !errors.As(err, &pe) || pe.Retryable {
				t.Fatalf("err = %v, want non-retryable payment.ProviderError", err)
			}
			if !errors.Is(err, payment.ErrIdempotencyKeyReused) {
				t.Errorf("errors.Is(err, payment.ErrIdempotencyKeyReused) = false for %v", err)
			}
			if payment.IsRetryable(err) {
				t.Errorf("payment.IsRetryable(%v) = true", err)
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

func TestGatewayChargeRejectsMalformedRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*payment.ChargeRequest)
	}{
		{name: "missing idempotency key", change: func(r *payment.ChargeRequest) { r.IdempotencyKey = "" }},
		{name: "missing currency", change: func(r *payment.ChargeRequest) { r.Currency = "" }},
		{name: "negative amount", change: func(r *payment.ChargeRequest) { r.Amount = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewGateway()
			r := chargeReq("ord_1", testmode.MethodApproved)
			tt.change(&r)
			_, err := s.Charge(context.Background(), r)
			var pe *payment.ProviderError
			if !errors.As(err, &pe) || pe.Retryable {
				t.Fatalf("err = %v, want non-retryable payment.ProviderError", err)
			}
			if got := s.TotalCaptures(); got != 0 {
				t.Errorf("TotalCaptures = %d, want 0", got)
			}
		})
	}
}

func TestGatewayChargeContextEndsBeforeCapture(t *testing.T) {
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
			s := NewGateway()
			s.Delay = tt.delay
			ctx, cancel := tt.ctx()
			defer cancel()
			r := chargeReq("ord_1", testmode.MethodApproved)
			_, err := s.Charge(ctx, r)
			var pe *payment.ProviderError
			if !errors.As(err, &pe) || !pe.Retryable {
				t.Fatalf("err = %v, want retryable payment.ProviderError", err)
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

func TestGatewayRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("refunds a charge and marks it refunded", func(t *testing.T) {
		t.Parallel()
		s := NewGateway()
		c, err := s.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved))
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: c.Amount})
		if err != nil {
			t.Fatal(err)
		}
		if r.ChargeID != c.ID || r.Amount != c.Amount || r.ID[:3] != "re_" || r.CreatedAt.IsZero() {
			t.Errorf("Refund = %+v, want re_ id for charge %s and amount %d", r, c.ID, c.Amount)
		}
		if got := s.Charges()[0].Status; got != payment.ChargeRefunded {
			t.Errorf("Status = %q, want %q", got, payment.ChargeRefunded)
		}
		if again, err := s.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved)); err != nil || again.Status != payment.ChargeRefunded || again.ID != c.ID {
			t.Errorf("replayed charge = %+v, %v; want %s refunded", again, err, c.ID)
		}
	})

	t.Run("repeated refund key returns the same refund once", func(t *testing.T) {
		t.Parallel()
		s := NewGateway()
		if _, err := s.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved)); err != nil {
			t.Fatal(err)
		}
		rr := payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 4200}
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
		s := NewGateway()
		if _, err := s.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved)); err != nil {
			t.Fatal(err)
		}
		rr := payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 100}
		if _, err := s.Refund(ctx, rr); err != nil {
			t.Fatal(err)
		}
		rr.Amount = 200
		_, err := s.Refund(ctx, rr)
		if !errors.Is(err, payment.ErrIdempotencyKeyReused) || payment.IsRetryable(err) {
			t.Errorf("err = %v, want final payment.ErrIdempotencyKeyReused", err)
		}
	})

	t.Run("refund beyond the captured amount fails", func(t *testing.T) {
		t.Parallel()
		s := NewGateway()
		if _, err := s.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "a", ChargeKey: "ord_1/pay", Amount: 4000}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "b", ChargeKey: "ord_1/pay", Amount: 201})
		var pe *payment.ProviderError
		if !errors.As(err, &pe) || pe.Retryable {
			t.Errorf("err = %v, want non-retryable payment.ProviderError", err)
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
		{name: "refund of a declined charge key is not found", method: testmode.MethodDeclined},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewGateway()
			if tt.method != "" {
				_, _ = s.Charge(ctx, chargeReq("ord_1", tt.method))
			}
			_, err := s.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 1})
			if !errors.Is(err, payment.ErrChargeNotFound) {
				t.Errorf("err = %v, want payment.ErrChargeNotFound", err)
			}
			if payment.IsRetryable(err) {
				t.Errorf("payment.IsRetryable(%v) = true", err)
			}
		})
	}
}

func TestGatewayChargesReturnsACopy(t *testing.T) {
	t.Parallel()
	s := NewGateway()
	if _, err := s.Charge(context.Background(), chargeReq("ord_1", testmode.MethodApproved)); err != nil {
		t.Fatal(err)
	}
	cs := s.Charges()
	cs[0].Amount = 1
	if got := s.Charges()[0].Amount; got != 4200 {
		t.Errorf("Amount after mutating the copy = %d, want 4200", got)
	}
}

func TestGatewayLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewGateway()
	c, err := s.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, "ord_1/pay"); err != nil || got != c {
		t.Errorf("Lookup = %+v, %v; want %+v", got, err, c)
	}

	t.Run("a refund shows in the status", func(t *testing.T) {
		if _, err := s.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 4200}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Lookup(ctx, "ord_1/pay"); err != nil || got.Status != payment.ChargeRefunded || got.ID != c.ID {
			t.Errorf("Lookup = %+v, %v; want %s refunded", got, err, c.ID)
		}
	})
	t.Run("a decline is remembered", func(t *testing.T) {
		if _, err := s.Charge(ctx, chargeReq("ord_2", testmode.MethodDeclined)); !errors.Is(err, payment.ErrDeclined) {
			t.Fatal(err)
		}
		_, err := s.Lookup(ctx, "ord_2/pay")
		var de *payment.DeclineError
		if !errors.As(err, &de) || de.Code != payment.DeclineCardDeclined {
			t.Errorf("Lookup err = %v, want the card_declined payment.DeclineError", err)
		}
	})
	t.Run("a transient failure is not remembered", func(t *testing.T) {
		if _, err := s.Charge(ctx, chargeReq("ord_3", MethodProviderError)); !payment.IsRetryable(err) {
			t.Fatal(err)
		}
		if _, err := s.Lookup(ctx, "ord_3/pay"); !errors.Is(err, payment.ErrChargeNotFound) {
			t.Errorf("Lookup err = %v, want payment.ErrChargeNotFound", err)
		}
	})
	t.Run("an ended context is retryable", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Lookup(cctx, "ord_1/pay"); !payment.IsRetryable(err) || !errors.Is(err, context.Canceled) {
			t.Errorf("Lookup err = %v, want retryable context.Canceled", err)
		}
	})
}
