package paysim_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimwire"
	"github.com/orderly/orderly/paysim/testmode"
)

// authorize creates a manual-capture intent of amount for orderID and
// confirms it with an approved card, returning the intent.
func (e *env) authorize(orderID string, amount int64) paysim.Intent {
	e.t.Helper()
	var in paysim.Intent
	decode(e.t, e.do(request{method: http.MethodPost, path: "/v1/payment_intents", key: orderID + "/prepare",
		body: paysim.IntentParams{OrderID: orderID, Reference: orderID + "/pay/1", Amount: amount, Currency: "EUR",
			CaptureMethod: paysimwire.CaptureManual}}), http.StatusCreated, &in)
	decode(e.t, e.do(request{method: http.MethodPost, path: "/v1/payment_intents/" + in.ID + "/confirm", key: orderID + "/confirm",
		body: paysim.ConfirmParams{PaymentMethod: testmode.MethodApproved}}), http.StatusCreated, &in)
	return in
}

// TestManualCaptureLedger: an authorization is not a capture: the ledger
// and /admin/stats count none until the capture, which counts once (also
// when its key is retried) at the captured amount; a second capture and a
// capture above the authorization are refused.
func TestManualCaptureLedger(t *testing.T) {
	e := start(t, paysim.Faults{})
	in := e.authorize("ord_m1", 5000)
	if in.Status != paysimwire.IntentRequiresCapture || in.AmountReceived != 0 || in.CaptureBefore == nil ||
		in.CaptureBefore.Sub(in.CreatedAt) < paysim.DefaultAuthorizationWindow-time.Minute {
		t.Fatalf("confirm of a manual intent = %+v, want requires_capture for 7 days with nothing received", in)
	}
	if st := e.stats(); st.CapturesByOrder["ord_m1"] != 0 || st.Charges != 0 {
		t.Fatalf("stats after an authorization: %+v, want no capture", st.Counts)
	}
	if snap := e.snapshot(); len(snap.Charges) != 0 {
		t.Fatalf("ledger after an authorization: %+v, want no charge", snap.Charges)
	}
	path := "/v1/payment_intents/" + in.ID + "/capture"
	wantError(t, e.do(request{method: http.MethodPost, path: path, key: "ord_m1/capture-over", body: paysim.CaptureParams{Amount: 5001}}),
		http.StatusBadRequest, paysim.ErrTypeInvalidRequest, paysim.CodeAmountTooLarge)
	for i, want := range []int{http.StatusCreated, http.StatusOK} {
		var got paysim.Intent
		r := e.do(request{method: http.MethodPost, path: path, key: "ord_m1/capture", body: paysim.CaptureParams{Amount: 3000}})
		decode(t, r, want, &got)
		if got.Status != paysimwire.IntentSucceeded || got.AmountReceived != 3000 || (i == 1) != r.replayed() {
			t.Fatalf("capture #%d = %+v (replayed %v), want succeeded with 3000 received", i+1, got, r.replayed())
		}
	}
	wantError(t, e.do(request{method: http.MethodPost, path: path, key: "ord_m1/capture-2", body: paysim.CaptureParams{Amount: 2000}}),
		http.StatusBadRequest, paysim.ErrTypeInvalidRequest, paysim.CodeIntentState)
	st := e.stats()
	if st.CapturesByOrder["ord_m1"] != 1 || st.Charges != 1 {
		t.Fatalf("stats after the capture: %+v, want one capture", st.Counts)
	}
	if snap := e.snapshot(); len(snap.Charges) != 1 || snap.Charges[0].Amount != 3000 || snap.Charges[0].PaymentIntent != in.ID {
		t.Fatalf("ledger after the capture: %+v, want one charge of 3000", snap.Charges)
	}
}

// TestManualCaptureVoidAndExpiry: a cancel voids an authorization (no
// charge, a capture afterwards refused), and an authorization past its
// window reads as canceled and cannot be captured.
func TestManualCaptureVoidAndExpiry(t *testing.T) {
	e := start(t, paysim.Faults{})
	in := e.authorize("ord_v1", 5000)
	var got paysim.Intent
	decode(t, e.do(request{method: http.MethodPost, path: "/v1/payment_intents/" + in.ID + "/cancel", key: "ord_v1/cancel", body: struct{}{}}),
		http.StatusCreated, &got)
	if got.Status != paysimwire.IntentCanceled || got.AmountReceived != 0 {
		t.Fatalf("cancel of an authorization = %+v, want canceled with nothing received", got)
	}
	wantError(t, e.do(request{method: http.MethodPost, path: "/v1/payment_intents/" + in.ID + "/capture", key: "ord_v1/capture",
		body: paysim.CaptureParams{Amount: 5000}}), http.StatusBadRequest, paysim.ErrTypeInvalidRequest, paysim.CodeIntentState)

	x := startWith(t, t.TempDir(), paysim.Config{AuthorizationWindow: time.Nanosecond})
	in = x.authorize("ord_x1", 5000)
	decode(t, x.do(request{method: http.MethodGet, path: "/v1/payment_intents/" + in.ID}), http.StatusOK, &got)
	if got.Status != paysimwire.IntentCanceled || got.AmountReceived != 0 {
		t.Fatalf("an authorization past its window = %+v, want canceled with nothing received", got)
	}
	wantError(t, x.do(request{method: http.MethodPost, path: "/v1/payment_intents/" + in.ID + "/capture", key: "ord_x1/capture",
		body: paysim.CaptureParams{Amount: 5000}}), http.StatusBadRequest, paysim.ErrTypeInvalidRequest, paysim.CodeIntentState)
	if st := x.stats(); st.Charges != 0 {
		t.Fatalf("stats after an expired authorization: %+v, want no capture", st.Counts)
	}
}
