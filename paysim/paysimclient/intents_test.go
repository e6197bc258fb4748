package paysimclient_test

import (
	"testing"

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
