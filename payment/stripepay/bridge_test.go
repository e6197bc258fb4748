package stripepay_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

// TestChargeBridge: the old seam over Stripe: a saved 500 before anything
// moved is recovered by one confirm under the retry key; a saved 500 after
// the capture and a dropped answer resolve to the capture by reading the
// intent; Lookup finds by reference; one capture each; a decline is final.
func TestChargeBridge(t *testing.T) {
	e := start(t, stripesim.Config{})
	b := stripepay.ChargeBridge{G: e.gw}
	ctx := context.Background()
	for _, pm := range []string{"pm_card_visa", stripesim.MethodFaultError, stripesim.MethodFaultCommit500, stripesim.MethodFaultDropAfterCommit} {
		order := "b-" + pm
		key := order + "/pay/1"
		ch, err := b.Charge(ctx, payment.ChargeRequest{IdempotencyKey: key, OrderID: order, Amount: 400, Currency: "EUR", PaymentMethod: pm})
		if err != nil || ch.Amount != 400 || ch.Status != payment.ChargeCaptured || ch.OrderID != order {
			t.Fatalf("%s: Charge %+v, %v", pm, ch, err)
		}
		again, err := b.Charge(ctx, payment.ChargeRequest{IdempotencyKey: key, OrderID: order, Amount: 400, Currency: "EUR", PaymentMethod: pm})
		if err != nil || again.ID != ch.ID {
			t.Fatalf("%s: repeated Charge %+v, %v", pm, again, err)
		}
		l, err := b.Lookup(ctx, key)
		if err != nil || l.ID != ch.ID {
			t.Fatalf("%s: Lookup %+v, %v", pm, l, err)
		}
		if n := e.captures(order); n != 1 {
			t.Fatalf("%s: %d captures", pm, n)
		}
		rf, err := b.Refund(ctx, payment.ChargeRefundRequest{IdempotencyKey: order + "/refund", ChargeKey: key, Amount: 400})
		if err != nil || rf.Amount != 400 || rf.ChargeID != ch.ID {
			t.Fatalf("%s: Refund %+v, %v", pm, rf, err)
		}
	}
	_, err := b.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "d/pay/1", OrderID: "d", Amount: 400, Currency: "EUR", PaymentMethod: stripesim.MethodInsufficientFunds})
	var de *payment.DeclineError
	if !errors.As(err, &de) || de.Code != payment.DeclineInsufficientFunds {
		t.Fatalf("decline: %v", err)
	}
	if _, err := b.Lookup(ctx, "d/pay/1"); !errors.As(err, &de) {
		t.Fatalf("Lookup of the decline: %v", err)
	}
	if _, err := b.Lookup(ctx, "none/pay/1"); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Lookup of nothing: %v", err)
	}
}

// faultOnce adds a Paysim-Fault header to the first request whose method
// and path match.
type faultOnce struct {
	rt           http.RoundTripper
	method, path string
	fault        string
	done         atomic.Bool
}

func (f *faultOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == f.method && r.URL.Path == f.path && f.done.CompareAndSwap(false, true) {
		r = r.Clone(r.Context())
		r.Header.Set(paysim.FaultHeader, f.fault)
	}
	return f.rt.RoundTrip(r)
}

// TestChargeBridgeRepreparesAfterASaved500 : a create that saved a 500 with
// nothing created replays it forever under its key; the bridge finds no
// intent and creates one under the next key; one capture, and a repeated
// Charge finds the paid intent.
func TestChargeBridgeRepreparesAfterASaved500(t *testing.T) {
	e := start(t, stripesim.Config{})
	ft := &faultOnce{rt: http.DefaultTransport, method: http.MethodPost, path: "/v1/payment_intents", fault: "error"}
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_x", APIBase: e.ts.URL, HTTPClient: &http.Client{Transport: ft}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	b := stripepay.ChargeBridge{G: gw}
	ctx := context.Background()
	req := payment.ChargeRequest{IdempotencyKey: "rp/pay/1", OrderID: "rp", Amount: 300, Currency: "EUR", PaymentMethod: "pm_card_visa"}
	ch, err := b.Charge(ctx, req)
	if err != nil || ch.Amount != 300 {
		t.Fatalf("Charge: %+v, %v", ch, err)
	}
	again, err := b.Charge(ctx, req)
	if err != nil || again.ID != ch.ID {
		t.Fatalf("repeated Charge: %+v, %v", again, err)
	}
	if n := e.captures("rp"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

// TestChargeBridgeRefundAfterASaved500: a refund that saved a 500 with
// nothing refunded is found missing and sent under the next key; one
// refund; a repeat finds it.
func TestChargeBridgeRefundAfterASaved500(t *testing.T) {
	e := start(t, stripesim.Config{})
	ft := &faultOnce{rt: http.DefaultTransport, method: http.MethodPost, path: "/v1/refunds", fault: "error"}
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_x", APIBase: e.ts.URL, HTTPClient: &http.Client{Transport: ft}, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	b := stripepay.ChargeBridge{G: gw}
	ctx := context.Background()
	if _, err := b.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "rr/pay/1", OrderID: "rr", Amount: 300, Currency: "EUR", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}
	req := payment.ChargeRefundRequest{IdempotencyKey: "rr/refund", ChargeKey: "rr/pay/1", Amount: 300}
	rf, err := b.Refund(ctx, req)
	if err != nil || rf.Amount != 300 {
		t.Fatalf("Refund: %+v, %v", rf, err)
	}
	again, err := b.Refund(ctx, req)
	if err != nil || again.ID != rf.ID {
		t.Fatalf("repeated Refund: %+v, %v", again, err)
	}
	s, err := paysim.NewAdminClient(e.ts.URL).Ledger(ctx)
	if err != nil || len(s.Refunds) != 1 {
		t.Fatalf("refunds: %+v, %v", s.Refunds, err)
	}
}

// TestAnAmountStripeRefusesIsADecline: a charge of 0 (refused before
// anything is sent) and one above Stripe's maximum (Stripe's 400
// invalid_request_error on param amount) are final declines, so the service
// answers 402 payment_declined rather than a 503 that a client following
// "retry with the same Idempotency-Key" would retry forever; nothing is
// captured and no intent is left behind.
func TestAnAmountStripeRefusesIsADecline(t *testing.T) {
	e := start(t, stripesim.Config{})
	b := stripepay.ChargeBridge{G: e.gw}
	for _, amount := range []int64{0, 9007199254740991} {
		order := "amt-" + strconv.FormatInt(amount, 10)
		_, err := b.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: order + "/pay/1", OrderID: order,
			Amount: amount, Currency: "EUR", PaymentMethod: "pm_card_visa"})
		var de *payment.DeclineError
		if !errors.As(err, &de) || de.Code == "" || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
			t.Fatalf("amount %d: want a final *payment.DeclineError, got %v", amount, err)
		}
		if n := e.captures(order); n != 0 {
			t.Fatalf("amount %d: %d captures", amount, n)
		}
	}
}
