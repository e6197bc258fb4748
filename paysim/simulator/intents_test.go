package simulator_test

import (
	"testing"

	"github.com/orderly/orderly/payment"
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

// TestIntentGatewayProviderErrorIsNotRemembered: a Confirm with
// MethodProviderError is a retryable failure that moves nothing and is not
// saved under its idempotency key, so the same key with a good method
// then pays, once.
func TestIntentGatewayProviderErrorIsNotRemembered(t *testing.T) {
	ctx := t.Context()
	g := simulator.NewIntentGateway()
	ref := payment.Reference{OrderID: "ord_1", Key: "ord_1/pay/1"}
	in, err := g.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_1/pay/1/prepare", Reference: ref, Amount: 500, Currency: "EUR"})
	if err != nil {
		t.Fatal(err)
	}
	req := payment.ConfirmRequest{IdempotencyKey: "ord_1/pay/1/confirm", IntentID: in.ID, PaymentMethod: simulator.MethodProviderError, Reference: ref}
	if _, err := g.Confirm(ctx, req); !payment.IsRetryable(err) || payment.IsUnknownOutcome(err) {
		t.Fatalf("confirm with MethodProviderError = %v, want a retryable error with a known outcome", err)
	}
	if got, _ := g.Retrieve(ctx, in.ID); got.AmountReceived != 0 || g.Captures("ord_1") != 0 {
		t.Fatalf("after the transient failure the intent received %d (%d captures), want nothing", got.AmountReceived, g.Captures("ord_1"))
	}
	req.PaymentMethod = testmode.MethodApproved
	got, err := g.Confirm(ctx, req)
	if err != nil || got.Status != payment.IntentSucceeded || got.AmountReceived != 500 || g.Captures("ord_1") != 1 {
		t.Fatalf("same key, approved method = %+v, %v (%d captures); want succeeded, 500 received once", got, err, g.Captures("ord_1"))
	}
}
