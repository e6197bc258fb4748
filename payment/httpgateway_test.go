package payment_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
)

// provider is a paysim server on a loopback httptest.Server.
type provider struct {
	*httptest.Server
	sim *paysim.Server
}

// startProvider serves a fresh paysim ledger with faults f until the test
// ends.
func startProvider(t *testing.T, f paysim.Faults) provider {
	t.Helper()
	l, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sim, err := paysim.NewServer(l, paysim.Config{Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.StopDelays()
		ts.Close()
		l.Close()
	})
	return provider{Server: ts, sim: sim}
}

// captures returns the provider's number of captures for orderID.
func (p provider) captures(t *testing.T, orderID string) int {
	t.Helper()
	st, err := p.sim.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.CapturesByOrder[orderID]
}

func newGateway(t *testing.T, url string, opts ...payment.HTTPOption) *payment.HTTPGateway {
	t.Helper()
	gw, err := payment.NewHTTPGateway(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

func chargeReq(orderID, method string) payment.ChargeRequest {
	return payment.ChargeRequest{IdempotencyKey: orderID + "/pay", OrderID: orderID, Amount: 4200, Currency: "USD", PaymentMethod: method}
}

func TestHTTPGatewayCharge(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL+"/")
	ctx := context.Background()
	c, err := gw.Charge(ctx, chargeReq("ord_1", payment.TestMethodApproved))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if len(c.ID) != 27 || c.ID[:3] != "ch_" || c.IdempotencyKey != "ord_1/pay" || c.OrderID != "ord_1" ||
		c.Amount != 4200 || c.Currency != "USD" || c.Status != payment.ChargeCaptured || c.CreatedAt.Location() != time.UTC {
		t.Errorf("Charge = %+v", c)
	}
	again, err := gw.Charge(ctx, chargeReq("ord_1", payment.TestMethodApproved))
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

func TestHTTPGatewayDecline(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	for _, tt := range []struct{ method, code string }{
		{payment.TestMethodDeclined, payment.DeclineCardDeclined},
		{payment.TestMethodInsufficientFunds, payment.DeclineInsufficientFunds},
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

func TestHTTPGateway503IsRetryable(t *testing.T) {
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

func TestHTTPGatewayConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	gw := newGateway(t, "http://"+addr)
	_, err = gw.Charge(context.Background(), chargeReq("ord_1", payment.TestMethodApproved))
	var oe *net.OpError
	if !payment.IsRetryable(err) || payment.IsUnknownOutcome(err) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("err = %v, want a retryable ProviderError wrapping a dial error", err)
	}
	if _, err := gw.Lookup(context.Background(), "ord_1/pay"); !payment.IsRetryable(err) {
		t.Errorf("Lookup err = %v, want retryable", err)
	}
}

func TestHTTPGatewayDropAfterCommitIsUnknownThenLookupFindsTheCharge(t *testing.T) {
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

func TestHTTPGatewayTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{TimeoutDelay: 30 * time.Second})
	gw := newGateway(t, p.URL, payment.WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	req := chargeReq("ord_1", paysim.MethodFaultTimeout)
	began := time.Now()
	_, err := gw.Charge(ctx, req)
	if !payment.IsUnknownOutcome(err) || payment.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want an unknown outcome caused by the deadline", err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("Charge took %s with a 200ms timeout", d)
	}
	if _, err := gw.Lookup(ctx, req.IdempotencyKey); !errors.Is(err, payment.ErrChargeNotFound) {
		t.Errorf("Lookup = %v, want ErrChargeNotFound (a timeout commits nothing)", err)
	}
	if c, err := gw.Charge(ctx, req); err != nil || c.Status != payment.ChargeCaptured {
		t.Errorf("retry = %+v, %v; want a capture", c, err)
	}
}

func TestHTTPGatewayCancelledContextIsRetryable(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := gw.Charge(ctx, chargeReq("ord_1", payment.TestMethodApproved))
	if !payment.IsRetryable(err) || !errors.Is(err, context.Canceled) || payment.IsUnknownOutcome(err) {
		t.Errorf("err = %v, want a retryable error wrapping context.Canceled", err)
	}
	if n := p.captures(t, "ord_1"); n != 0 {
		t.Errorf("captures = %d, want 0", n)
	}
}

func TestHTTPGatewayLookupUnknownKey(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	_, err := newGateway(t, p.URL).Lookup(context.Background(), "nope/pay")
	if !errors.Is(err, payment.ErrChargeNotFound) || payment.IsRetryable(err) {
		t.Errorf("err = %v, want ErrChargeNotFound", err)
	}
}

func TestHTTPGatewayKeyReusedIsFinal(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	if _, err := gw.Charge(context.Background(), chargeReq("ord_1", payment.TestMethodApproved)); err != nil {
		t.Fatal(err)
	}
	req := chargeReq("ord_1", payment.TestMethodApproved)
	req.Amount = 1
	_, err := gw.Charge(context.Background(), req)
	if !errors.Is(err, payment.ErrIdempotencyKeyReused) || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Errorf("err = %v, want final ErrIdempotencyKeyReused", err)
	}
}

func TestHTTPGatewayRefund(t *testing.T) {
	t.Parallel()
	p := startProvider(t, paysim.Faults{})
	gw := newGateway(t, p.URL)
	ctx := context.Background()
	c, err := gw.Charge(ctx, chargeReq("ord_1", payment.TestMethodApproved))
	if err != nil {
		t.Fatal(err)
	}
	rreq := payment.RefundRequest{IdempotencyKey: "ord_1/refund", ChargeKey: "ord_1/pay", Amount: 4200}
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
	_, err = gw.Refund(ctx, payment.RefundRequest{IdempotencyKey: "x/refund", ChargeKey: "nope/pay", Amount: 1})
	if !errors.Is(err, payment.ErrChargeNotFound) {
		t.Errorf("refund of an unknown charge = %v, want ErrChargeNotFound", err)
	}
	_, err = gw.Refund(ctx, payment.RefundRequest{IdempotencyKey: "ord_1/refund-2", ChargeKey: "ord_1/pay", Amount: 1})
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || pe.Retryable {
		t.Errorf("refund beyond the charge = %v, want a final ProviderError", err)
	}
}

func TestHTTPGatewayClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		status          int
		body            string
		wantRetry       bool // Charge's error is retryable
		wantUnknown     bool // Charge's outcome is unknown
		wantDecline     bool
		wantLookupRetry bool // Lookup's error is retryable
	}{
		{name: "500", status: 500, body: `{"error":{"type":"api_error"}}`, wantRetry: true, wantLookupRetry: true},
		{name: "503 without a body", status: 503, wantRetry: true, wantLookupRetry: true},
		{name: "400", status: 400, body: `{"error":{"type":"invalid_request_error","message":"bad"}}`},
		{name: "409", status: 409},
		{name: "429", status: 429, wantRetry: true, wantLookupRetry: true},
		{name: "402 without a code", status: 402, wantDecline: true},
		{name: "404", status: 404},
		{name: "2xx with an unreadable body", status: 200, body: `{"id":`, wantUnknown: true, wantLookupRetry: true},
		{name: "redirect", status: 302, wantUnknown: true, wantLookupRetry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer ts.Close()
			gw := newGateway(t, ts.URL)
			_, err := gw.Charge(context.Background(), chargeReq("ord_1", payment.TestMethodApproved))
			if err == nil {
				t.Fatal("Charge succeeded")
			}
			if got := payment.IsRetryable(err); got != tt.wantRetry {
				t.Errorf("IsRetryable(%v) = %v, want %v", err, got, tt.wantRetry)
			}
			if got := payment.IsUnknownOutcome(err); got != tt.wantUnknown {
				t.Errorf("IsUnknownOutcome(%v) = %v, want %v", err, got, tt.wantUnknown)
			}
			if got := errors.Is(err, payment.ErrDeclined); got != tt.wantDecline {
				t.Errorf("declined = %v, want %v (%v)", got, tt.wantDecline, err)
			}
			if errors.Is(err, payment.ErrChargeNotFound) {
				t.Errorf("a charge answered %d is not-found: %v", tt.status, err)
			}
			_, err = gw.Lookup(context.Background(), "ord_1/pay")
			if got := payment.IsRetryable(err); err == nil || got != tt.wantLookupRetry || payment.IsUnknownOutcome(err) {
				t.Errorf("Lookup err = %v (retryable %v), want retryable %v and never unknown", err, got, tt.wantLookupRetry)
			}
		})
	}
}

func TestNewHTTPGatewayRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8090", "ftp://127.0.0.1", "http://", "://x"} {
		if _, err := payment.NewHTTPGateway(u); err == nil {
			t.Errorf("NewHTTPGateway(%q) succeeded", u)
		}
	}
}
