package simulator_test

import (
	"testing"

	"github.com/orderly/orderly/payment/gatewaytest"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
)

// TestIntentGatewayConformance runs the payment.Gateway conformance suite
// against the in-process simulator, with its lost-answer hook.
func TestIntentGatewayConformance(t *testing.T) {
	gatewaytest.Run(t, func(t *testing.T) gatewaytest.Subject {
		g := simulator.NewIntentGateway()
		return gatewaytest.Subject{
			Gateway:        g,
			MethodApproved: testmode.MethodApproved,
			MethodDeclined: testmode.MethodDeclined,
			LoseAnswers: func(t *testing.T, call func()) {
				g.LoseAnswers(1 << 30)
				defer g.LoseAnswers(0)
				call()
			},
		}
	})
}
