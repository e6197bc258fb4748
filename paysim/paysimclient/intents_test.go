package paysimclient_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/gatewaytest"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
)

// TestIntentsConformance runs the payment.Gateway conformance suite against
// paysimclient.Intents and a real paysim server (its own ledger per test),
// losing answers with paysim's commit-then-drop fault.
func TestIntentsConformance(t *testing.T) {
	gatewaytest.Run(t, func(t *testing.T) gatewaytest.Subject {
		p := startProvider(t, paysim.Faults{})
		gw, err := paysimclient.NewIntents(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		return gatewaytest.Subject{
			Gateway:        gw,
			MethodApproved: "pm_card_visa",
			MethodDeclined: paysim.MethodDeclined,
			LoseAnswers: func(t *testing.T, call func()) {
				if err := p.sim.SetFaults(paysim.Faults{DropRate: 1}); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := p.sim.SetFaults(paysim.Faults{}); err != nil {
						t.Fatal(err)
					}
				}()
				call()
			},
		}
	})
}

// TestIntentCapturesOnceAcrossKeys: confirms of one intent under many keys
// at once capture once in paysim's ledger (the captures a storm checker
// counts), and a refund through the intent is recorded against that
// capture.
func TestIntentCapturesOnceAcrossKeys(t *testing.T) {
	p := startProvider(t, paysim.Faults{})
	gw, err := paysimclient.NewIntents(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ref := payment.Reference{OrderID: "ord_race", Key: "ord_race/pay/1"}
	in, err := gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_race/pay/1/prepare", Reference: ref, Amount: 4200, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	if n := p.captures(t, ref.OrderID); n != 0 {
		t.Fatalf("captures after Prepare = %d, want 0", n)
	}
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			_, err := gw.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: fmt.Sprintf("ord_race/pay/1/confirm-%d", i),
				IntentID: in.ID, PaymentMethod: "pm_card_visa", Reference: ref})
			if err == nil {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if n := p.captures(t, ref.OrderID); n != 1 || ok.Load() != 1 {
		t.Fatalf("captures = %d, successful confirms = %d; want 1 and 1", n, ok.Load())
	}
	if _, err := gw.Refund(ctx, payment.RefundRequest{IdempotencyKey: "ord_race/refund", IntentID: in.ID, Amount: 4200,
		Reference: payment.Reference{OrderID: ref.OrderID, Key: "ord_race/refund"}}); err != nil {
		t.Fatal(err)
	}
	if st := p.stats(t); st.Refunds != 1 {
		t.Fatalf("refunds = %d, want 1", st.Refunds)
	}
}
