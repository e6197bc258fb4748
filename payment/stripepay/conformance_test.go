package stripepay_test

import (
	"testing"

	"github.com/orderly/orderly/payment/gatewaytest"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

// TestConformance runs the gateway conformance suite against the Stripe
// adapter on paysim's Stripe mode (real HTTP, its SQLite ledger). Lost
// answers are paysim's commit-then-drop at rate 1; Find's lag is the
// adapter's search lag.
func TestConformance(t *testing.T) {
	gatewaytest.Run(t, func(t *testing.T) gatewaytest.Subject {
		e := start(t, stripesim.Config{})
		return gatewaytest.Subject{
			Gateway:        e.gw,
			MethodApproved: stripesim.MethodVisa,
			MethodDeclined: stripesim.MethodDeclined,
			FindLag:        stripepay.DefaultSearchLag,
			LoseAnswers: func(t *testing.T, call func()) {
				if err := e.sim.SetFaults(paysim.Faults{DropRate: 1}, 0, 0); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := e.sim.SetFaults(paysim.Faults{}, 0, 0); err != nil {
						t.Fatal(err)
					}
				}()
				call()
			},
		}
	})
}
