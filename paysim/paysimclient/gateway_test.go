package paysimclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/testmode"
)

func TestGatewayCharge(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL+"/")
	ctx := context.Background()
	c, err := gw.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if len(c.ID) != 27 || c.ID[:3] != "ch_" || c.IdempotencyKey != "ord_1/pay" || c.OrderID != "ord_1" ||
		c.Amount != 4200 || c.Currency != "USD" || c.Status != payment.ChargeCaptured || c.CreatedAt.Location() != time.UTC {
		t.Errorf("Charge = %+v", c)
	}
	again, err := gw.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved))
	if err != nil || again != c {
		t.Errorf("repeat = %+v, %v; want %+v", again, err, c)
	}
	found, err := gw.Lookup(ctx, "ord_1/pay")
	if err != nil || found != c {
		t.Errorf("Lookup = %+v, %v; want %+v", found, err, c)
	}
	if n := p.captures(t, "ord_1"); n != 1 {
		t.Errorf("captures = %d, want 1", n)
	}
}

func TestGatewayDecline(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	for _, tt := range []struct{ method, code string }{
		{testmode.MethodDeclined, payment.DeclineCardDeclined},
		{testmode.MethodInsufficientFunds, payment.DeclineInsufficientFunds},
	} {
		t.Run(tt.method, func(t *testing.T) {
			req := chargeReq("ord_"+tt.code, tt.method)
			_, err := gw.Charge(context.Background(), req)
			var de *payment.DeclineError
			if !errors.As(err, &de) || de.Code != tt.code || de.Message == "" {
				t.Fatalf("err = %v, want a DeclineError %s with a message", err, tt.code)
			}
			if !errors.Is(err, payment.ErrDeclined) || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
				t.Errorf("err = %v: want a final decline", err)
			}
			_, err = gw.Lookup(context.Background(), req.IdempotencyKey)
			if !errors.As(err, &de) || de.Code != tt.code {
				t.Errorf("Lookup err = %v, want the remembered decline %s", err, tt.code)
			}
		})
	}
}

func TestGateway503IsRetryable(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	ctx := context.Background()
	req := chargeReq("ord_1", paysim.MethodFault503)
	_, err := gw.Charge(ctx, req)
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || !payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Fatalf("err = %v, want a retryable ProviderError", err)
	}
	if _, err := gw.Lookup(ctx, req.IdempotencyKey); !errors.Is(err, payment.ErrChargeNotFound) {
		t.Errorf("Lookup after a 503 = %v, want ErrChargeNotFound", err)
	}
	if c, err := gw.Charge(ctx, req); err != nil || c.Status != payment.ChargeCaptured {
		t.Errorf("retry = %+v, %v; want a capture", c, err)
	}
	if n := p.captures(t, "ord_1"); n != 1 {
		t.Errorf("captures = %d, want 1", n)
	}
}

func TestGatewayDropAfterCommitIsUnknownThenLookupFindsTheCharge(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	ctx := context.Background()
	// A first call leaves an idle connection that the charge reuses: the
	// drop must still be reported, not resent by net/http.
	if _, err := gw.Lookup(ctx, "warm-up"); !errors.Is(err, payment.ErrChargeNotFound) {
		t.Fatalf("warm-up Lookup = %v", err)
	}
	req := chargeReq("ord_1", paysim.MethodFaultDropAfterCommit)
	_, err := gw.Charge(ctx, req)
	if !payment.IsUnknownOutcome(err) || payment.IsRetryable(err) {
		t.Fatalf("err = %v, want an unknown outcome that is not retryable", err)
	}
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || pe.Retryable {
		t.Errorf("err = %v, want it carried by a non-retryable ProviderError", err)
	}
	c, err := gw.Lookup(ctx, req.IdempotencyKey)
	if err != nil || c.Status != payment.ChargeCaptured || c.Amount != 4200 {
		t.Fatalf("Lookup = %+v, %v; want the captured charge", c, err)
	}
	again, err := gw.Charge(ctx, req)
	if err != nil || again != c {
		t.Errorf("retry = %+v, %v; want %+v", again, err, c)
	}
	if n := p.captures(t, "ord_1"); n != 1 {
		t.Errorf("captures = %d, want 1", n)
	}
}

func TestGatewayTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{TimeoutDelay: paysimTimeoutDelay})
	ctx := context.Background()
	// Each try uses a new order: paysim's timeout fault fires once per key.
	for i, d := range timeouts() {
		gw := newGateway(t, p.URL, paysimclient.WithTimeout(d))
		req := chargeReq(fmt.Sprintf("ord_%d", i), paysim.MethodFaultTimeout)
		_, err := gw.Charge(ctx, req)
		if payment.IsRetryable(err) && errors.Is(err, context.DeadlineExceeded) {
			t.Logf("timeout %s ended the call before the request was written; doubling it", d)
			continue
		}
		if !payment.IsUnknownOutcome(err) || payment.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want an unknown outcome caused by the deadline", err)
		}
		if _, err := gw.Lookup(ctx, req.IdempotencyKey); !errors.Is(err, payment.ErrChargeNotFound) {
			t.Errorf("Lookup = %v, want ErrChargeNotFound (a timeout commits nothing)", err)
		}
		if c, err := gw.Charge(ctx, req); err != nil || c.Status != payment.ChargeCaptured {
			t.Errorf("retry = %+v, %v; want a capture", c, err)
		}
		return
	}
	t.Fatal("no timeout let the request be written before it ended the call")
}

func TestGatewayCancelledContextIsRetryable(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := gw.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved))
	if !payment.IsRetryable(err) || !errors.Is(err, context.Canceled) || payment.IsUnknownOutcome(err) {
		t.Errorf("err = %v, want a retryable error wrapping context.Canceled", err)
	}
	if n := p.captures(t, "ord_1"); n != 0 {
		t.Errorf("captures = %d, want 0", n)
	}
}

func TestGatewayLookupUnknownKey(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	_, err := newGateway(t, p.URL).Lookup(context.Background(), "nope/pay")
	if !errors.Is(err, payment.ErrChargeNotFound) || payment.IsRetryable(err) {
		t.Errorf("err = %v, want ErrChargeNotFound", err)
	}
}

func TestGatewayKeyReusedIsFinal(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	if _, err := gw.Charge(context.Background(), chargeReq("ord_1", testmode.MethodApproved)); err != nil {
		t.Fatal(err)
	}
	req := chargeReq("ord_1", testmode.MethodApproved)
	req.Amount = 1
	_, err := gw.Charge(context.Background(), req)
	if !errors.Is(err, payment.ErrIdempotencyKeyReused) || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Errorf("err = %v, want final ErrIdempotencyKeyReused", err)
	}
}

func TestGatewayRefund(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	ctx := context.Background()
	c, err := gw.Charge(ctx, chargeReq("ord_1", testmode.MethodApproved))
	if err != nil {
		t.Fatal(err)
	}
	rreq := payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 4200}
	r, err := gw.Refund(ctx, rreq)
	if err != nil || r.ChargeID != c.ID || r.Amount != 4200 || r.ID[:3] != "re_" {
		t.Fatalf("Refund = %+v, %v; want a refund of %s", r, err, c.ID)
	}
	if again, err := gw.Refund(ctx, rreq); err != nil || again != r {
		t.Errorf("repeat = %+v, %v; want %+v", again, err, r)
	}
	if got, err := gw.Lookup(ctx, "ord_1/pay"); err != nil || got.Status != payment.ChargeRefunded {
		t.Errorf("Lookup = %+v, %v; want a refunded charge", got, err)
	}
	_, err = gw.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "x/refund", ChargeKey: "nope/pay", Amount: 1})
	if !errors.Is(err, payment.ErrChargeNotFound) {
		t.Errorf("refund of an unknown charge = %v, want ErrChargeNotFound", err)
	}
	_, err = gw.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: "ord_1/refund-2", ChargeKey: "ord_1/pay", Amount: 1})
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || pe.Retryable {
		t.Errorf("refund beyond the charge = %v, want a final ProviderError", err)
	}
}

func TestNewGatewayRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8090", "ftp://127.0.0.1", "http://", "://x"} {
		if _, err := paysimclient.NewGateway(u); err == nil {
			t.Errorf("NewGateway(%q) succeeded", u)
		}
	}
}
