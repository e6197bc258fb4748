package simulator_test

import (
	"testing"
	"time"

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

// TestIntentGatewayAuthorizationExpires: an authorization left uncaptured
// past AuthorizationWindow is canceled by the gateway, as Stripe cancels an
// uncaptured PaymentIntent after its window; nothing was received and a
// Capture afterwards is refused.
func TestIntentGatewayAuthorizationExpires(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	g := simulator.NewIntentGateway()
	g.AuthorizationWindow = time.Hour
	g.Now = func() time.Time { return now }
	ref := payment.Reference{OrderID: "ord_1", Key: "ord_1/pay/1"}
	in, err := g.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_1/pay/1/prepare", Reference: ref, Amount: 500,
		Currency: "EUR", CaptureMode: payment.CaptureManual})
	if err != nil {
		t.Fatal(err)
	}
	got, err := g.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: "ord_1/pay/1/confirm", IntentID: in.ID,
		PaymentMethod: testmode.MethodApproved, Reference: ref})
	if err != nil || got.Status != payment.IntentRequiresCapture || !got.CaptureBefore.Equal(now.Add(time.Hour)) {
		t.Fatalf("Confirm = %+v, %v; want requires_capture until %v", got, err, now.Add(time.Hour))
	}
	if g.Authorizations("ord_1") != 1 || g.Captures("ord_1") != 0 {
		t.Fatalf("authorizations %d, captures %d; want 1 and 0", g.Authorizations("ord_1"), g.Captures("ord_1"))
	}
	now = now.Add(time.Hour)
	if got, err := g.Retrieve(ctx, in.ID); err != nil || got.Status != payment.IntentCanceled || got.AmountReceived != 0 {
		t.Fatalf("Retrieve past the window = %+v, %v; want canceled with nothing received", got, err)
	}
	_, err = g.Capture(ctx, payment.CaptureRequest{IdempotencyKey: "ord_1/capture", IntentID: in.ID, Amount: 500, Reference: ref})
	if err == nil || payment.IsRetryable(err) || g.Captures("ord_1") != 0 || g.Received("ord_1") != 0 {
		t.Fatalf("Capture of an expired authorization: %v (captures %d); want a final error, nothing captured", err, g.Captures("ord_1"))
	}
}
