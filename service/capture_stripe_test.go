package service_test

import (
	"context"
	"testing"

	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
)

// TestStripeCaptureAtFulfilment (issue 16) through the Stripe adapter
// against paysim's Stripe mode: the pay leaves the PaymentIntent in
// requires_capture (nothing received) and the order PAID, authorized; the
// fulfil, retried under its key and a new one, captures it once (paysim's
// ledger: succeeded, amount_received the whole amount); a second order
// cancelled while authorized is voided (its intent canceled, nothing
// received, no refund).
func TestStripeCaptureAtFulfilment(t *testing.T) {
	eachStripeStore(t, func(c *service.Config) { c.Capture = service.CaptureAtFulfilment }, func(t *testing.T, f *stripeFixture) {
		ctx := context.Background()
		o := f.order(t)
		if res, err := f.pay(o, "P", "pm_card_visa"); err != nil || res.Order.State != order.Paid {
			t.Fatalf("pay = %+v, %v; want PAID", res, err)
		}
		if ins := f.intents(t, o); len(ins) != 1 || ins[0].Status != "requires_capture" || ins[0].AmountReceived != 0 {
			t.Fatalf("intents after the pay = %+v; want one requires_capture, nothing received", ins)
		}
		got, err := f.svc.Get(ctx, "t1", o.ID)
		if err != nil || got.Payment == nil || got.Payment.Status != order.PaymentAuthorized || *got.AmountCaptured != 0 {
			t.Fatalf("GET after the pay = %+v, %v", got, err)
		}
		for _, k := range []string{"F", "F", "F2"} {
			res, err := f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)})
			if err != nil || res.Order.State != order.Fulfilled {
				t.Fatalf("fulfil %s = %+v, %v", k, res, err)
			}
		}
		if ins := f.intents(t, o); len(ins) != 1 || ins[0].Status != "succeeded" || ins[0].AmountReceived != o.Amount {
			t.Fatalf("intents after the fulfil = %+v; want one succeeded with %d received", ins, o.Amount)
		}
		if got, _ = f.svc.Get(ctx, "t1", o.ID); got.Payment.Status != order.PaymentCaptured || *got.AmountCaptured != o.Amount {
			t.Fatalf("GET after the fulfil: payment %+v, captured %d", got.Payment, *got.AmountCaptured)
		}

		o2 := f.order(t)
		if _, err := f.pay(o2, "P2", "pm_card_visa"); err != nil {
			t.Fatal(err)
		}
		if res, err := f.cancel(o2, "C2"); err != nil || res.Order.State != order.Cancelled {
			t.Fatalf("cancel = %+v, %v", res, err)
		}
		if ins := f.intents(t, o2); len(ins) != 1 || ins[0].Status != "canceled" || ins[0].AmountReceived != 0 {
			t.Fatalf("intents after the cancel = %+v; want one canceled, nothing received", ins)
		}
		if rs := f.refunds(t, o2); len(rs) != 0 {
			t.Fatalf("refunds of the voided order = %v, want none", rs)
		}
	})
}
