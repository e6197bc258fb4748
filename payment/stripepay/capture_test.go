package stripepay_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

// TestAuthorizationExpiresInStripeMode: a manual-capture intent confirmed
// in paysim's Stripe mode is requires_capture with CaptureBefore from its
// charge's payment_method_details.card.capture_before (the confirm plus
// -stripe-authorization-window), with payment_intent.amount_capturable_updated
// sent; once the window passes the provider cancels it (cancellation_reason
// automatic, payment_intent.canceled sent), nothing is received, and a
// Capture is a final error.
func TestAuthorizationExpiresInStripeMode(t *testing.T) {
	types := make(chan map[string]any, 64)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev map[string]any
		if json.Unmarshal(b, &ev) == nil {
			types <- ev
		}
	}))
	defer recv.Close()
	e := start(t, stripesim.Config{AuthorizationWindow: 2 * time.Hour,
		Webhooks: stripesim.WebhookConfig{URL: recv.URL, Secrets: []string{"whsec_new_0123456789"}}})
	ctx := t.Context()
	ref := payment.Reference{OrderID: "x1", Key: "x1/pay/1"}
	in, err := e.gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "x1/pay/1/prepare", Reference: ref, Amount: 1500,
		Currency: "EUR", CaptureMode: payment.CaptureManual})
	if err != nil {
		t.Fatal(err)
	}
	confirmedAt := e.clock.Now()
	got, err := e.gw.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: "x1/pay/1/confirm", IntentID: in.ID,
		PaymentMethod: stripesim.MethodVisa, Reference: ref})
	if err != nil || got.Status != payment.IntentRequiresCapture || got.AmountReceived != 0 || got.CaptureMode != payment.CaptureManual {
		t.Fatalf("Confirm = %+v, %v; want requires_capture with nothing received", got, err)
	}
	if want := confirmedAt.Add(2 * time.Hour).Truncate(time.Second); !got.CaptureBefore.Equal(want) {
		t.Fatalf("CaptureBefore = %v, want %v", got.CaptureBefore, want)
	}
	if r, err := e.gw.Retrieve(ctx, in.ID); err != nil || !r.CaptureBefore.Equal(got.CaptureBefore) {
		t.Fatalf("Retrieve = %+v, %v; want CaptureBefore %v", r, err, got.CaptureBefore)
	}
	e.clock.Advance(2*time.Hour + time.Second)
	r, err := e.gw.Retrieve(ctx, in.ID)
	if err != nil || r.Status != payment.IntentCanceled || r.AmountReceived != 0 || !r.CaptureBefore.IsZero() {
		t.Fatalf("Retrieve past the window = %+v, %v; want canceled with nothing received", r, err)
	}
	_, err = e.gw.Capture(ctx, payment.CaptureRequest{IdempotencyKey: "x1/capture", IntentID: in.ID, Amount: 1500, Reference: ref})
	var pe *payment.ProviderError
	if err == nil || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) || !errors.As(err, &pe) || pe.Code != "payment_intent_unexpected_state" {
		t.Fatalf("Capture of an expired authorization: %v, want a final payment_intent_unexpected_state", err)
	}
	res, err := http.Get(e.ts.URL + "/admin/ledger")
	if err != nil {
		t.Fatal(err)
	}
	var snap paysim.Snapshot
	err = json.NewDecoder(res.Body).Decode(&snap)
	res.Body.Close()
	if err != nil || len(snap.Charges) != 0 {
		t.Fatalf("GET /admin/ledger = %+v, %v; want no capture", snap.Charges, err)
	}
	want := map[string]bool{"payment_intent.amount_capturable_updated": false, "payment_intent.canceled": false}
	deadline := time.After(30 * time.Second)
	for seen := 0; seen < len(want); {
		select {
		case ev := <-types:
			typ, _ := ev["type"].(string)
			if done, ok := want[typ]; ok && !done {
				want[typ], seen = true, seen+1
				if typ == "payment_intent.canceled" {
					obj, _ := ev["data"].(map[string]any)["object"].(map[string]any)
					if obj["cancellation_reason"] != "automatic" {
						t.Fatalf("payment_intent.canceled: cancellation_reason %v, want automatic", obj["cancellation_reason"])
					}
				}
			}
		case <-deadline:
			t.Fatalf("webhooks seen: %v", want)
		}
	}
}

// TestPartialCaptureInStripeMode: a capture of part of the authorization
// receives that part only (amount_received), the rest is released, and
// the webhook-free ledger counts one capture of that amount.
func TestPartialCaptureInStripeMode(t *testing.T) {
	e := start(t, stripesim.Config{})
	ctx := t.Context()
	ref := payment.Reference{OrderID: "p1", Key: "p1/pay/1"}
	in, err := e.gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "p1/pay/1/prepare", Reference: ref, Amount: 1500,
		Currency: "EUR", CaptureMode: payment.CaptureManual})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.gw.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: "p1/pay/1/confirm", IntentID: in.ID,
		PaymentMethod: stripesim.MethodVisa, Reference: ref}); err != nil {
		t.Fatal(err)
	}
	got, err := e.gw.Capture(ctx, payment.CaptureRequest{IdempotencyKey: "p1/capture", IntentID: in.ID, Amount: 900, Reference: ref})
	if err != nil || got.Status != payment.IntentSucceeded || got.AmountReceived != 900 || !got.CaptureBefore.IsZero() {
		t.Fatalf("Capture of 900 = %+v, %v; want succeeded with 900 received", got, err)
	}
	res, err := http.Get(e.ts.URL + "/admin/ledger")
	if err != nil {
		t.Fatal(err)
	}
	var snap paysim.Snapshot
	err = json.NewDecoder(res.Body).Decode(&snap)
	res.Body.Close()
	if err != nil || len(snap.Charges) != 1 || snap.Charges[0].Amount != 900 || snap.Charges[0].OrderID != "p1" {
		t.Fatalf("GET /admin/ledger = %+v, %v; want one capture of 900", snap.Charges, err)
	}
}
