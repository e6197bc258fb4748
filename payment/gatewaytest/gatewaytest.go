// Package gatewaytest is the conformance suite of payment.Gateway, as
// store/storetest is for stores: one suite every adapter passes, stating the
// seam's contract as tests (docs.stripe.com/api/idempotent_requests,
// docs.stripe.com/payments/paymentintents/lifecycle):
//
//   - Prepare moves no money, and the same key returns the same intent; the
//     same key with other parameters is a final error wrapping
//     payment.ErrIdempotencyKeyReused;
//   - Confirm moves the intent's amount once: a repeat under its key
//     returns the same result and never moves money twice, also when many
//     run at once;
//   - after a Confirm (or a Prepare) whose answer was lost, Retrieve (or
//     Find by reference) shows the truth, and a repeat under the same key
//     moves nothing more;
//   - Find by reference finds a prepared intent; a reference never used is
//     payment.ErrNotFound (nothing moved);
//   - a decline is final for its payment method (a *payment.DeclineError,
//     replayed under its key), leaves the intent requires_payment_method
//     with LastDecline, and the intent can be confirmed again with another
//     method under another key;
//   - Refund is idempotent, never above what was received, and found again
//     by FindRefund; Cancel cancels an unconfirmed intent, idempotently, and
//     refuses one that received money;
//   - Retrieve of an unknown id is payment.ErrNotFound;
//   - authorize, then capture (docs.stripe.com/payments/place-a-hold-on-a-payment-method):
//     Confirm of an intent prepared with payment.CaptureManual ends in
//     requires_capture with nothing received; Capture receives the captured
//     amount once, also under retries of its key and after a lost answer; a
//     second Capture (another key) and a Capture above the authorization
//     are final errors; a partial Capture receives only its amount and
//     refunds are bounded by it; Cancel of an authorization voids it
//     (nothing received) and a Capture afterwards is refused.
//
// Run it from an adapter's test with a Factory that returns a fresh
// Subject (a Gateway with its test payment methods and optional fault
// hooks); tests that need a hook the Subject does not have are skipped.
package gatewaytest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
)

// Subject is one Gateway under test.
type Subject struct {
	// Gateway is the adapter under test; required.
	Gateway payment.Gateway
	// Currency is the currency of the suite's intents (default "USD").
	Currency string
	// MethodApproved is a payment method the provider approves at once
	// (Stripe: "pm_card_visa"); required.
	MethodApproved string
	// MethodDeclined is a payment method the provider declines (Stripe:
	// "pm_card_chargeDeclined"); required.
	MethodDeclined string
	// LoseAnswers, if set, runs call with the provider set so that every
	// request that changes something takes effect and then loses its answer
	// (commit-then-drop), and restores it afterwards. Nil skips the tests
	// of lost answers.
	LoseAnswers func(t *testing.T, call func())
	// FindLag is how long Find may report a fresh intent as a retryable
	// *payment.ProviderError (a lagging search index); the suite retries
	// Find for up to that long. Zero: Find never lags.
	FindLag time.Duration
}

// Factory returns a fresh Subject for one test; it registers its own
// cleanup with t.
type Factory func(t *testing.T) Subject

// Run runs the suite. Subtests run in parallel, each with its own Subject,
// and use order ids unique to the run so that a shared provider is fine.
func Run(t *testing.T, newSubject Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"PrepareMovesNoMoney", testPrepareMovesNoMoney},
		{"PrepareIsIdempotent", testPrepareIsIdempotent},
		{"PrepareRefusesBadRequests", testPrepareRefusesBadRequests},
		{"ConfirmMovesMoneyOnce", testConfirmMovesMoneyOnce},
		{"ConcurrentConfirmsMoveMoneyOnce", testConcurrentConfirms},
		{"RetrieveShowsTheTruthAfterALostConfirm", testLostConfirm},
		{"FindByReference", testFindByReference},
		{"FindAfterALostPrepare", testLostPrepare},
		{"DeclineIsFinalAndAnotherMethodCanPay", testDecline},
		{"RefundIsIdempotentAndNeverAboveReceived", testRefund},
		{"FindRefundAfterALostRefund", testLostRefund},
		{"CancelOfAnUnconfirmedIntent", testCancel},
		{"RetrieveOfAnUnknownIntent", testRetrieveUnknown},
		{"ManualConfirmAuthorizesAndMovesNoMoney", testManualConfirm},
		{"CaptureMovesMoneyOnce", testCaptureOnce},
		{"RetrieveShowsTheTruthAfterALostCapture", testLostCapture},
		{"PartialCaptureThenRefund", testPartialCapture},
		{"CancelOfAnAuthorizationVoidsIt", testVoid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := newSubject(t)
			if sub.Currency == "" {
				sub.Currency = "USD"
			}
			tc.fn(t, &suite{Subject: sub, run: fmt.Sprintf("%x", time.Now().UnixNano())})
		})
	}
}

var seq atomic.Int64

type suite struct {
	Subject
	run string
}

// ref returns a fresh reference: an order id unique to the run and its
// first charge's provider key.
func (s *suite) ref() payment.Reference {
	id := fmt.Sprintf("ord_gwt_%s_%d", s.run, seq.Add(1))
	return payment.Reference{OrderID: id, Key: id + "/pay/1"}
}

func (s *suite) prepare(t *testing.T, ref payment.Reference, amount int64) payment.Intent {
	t.Helper()
	in, err := s.Gateway.Prepare(t.Context(), payment.PrepareRequest{IdempotencyKey: ref.Key + "/prepare", Reference: ref,
		Amount: amount, Currency: s.Currency})
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return in
}

func (s *suite) confirmReq(in payment.Intent, key, method string) payment.ConfirmRequest {
	return payment.ConfirmRequest{IdempotencyKey: key, IntentID: in.ID, PaymentMethod: method, Reference: in.Reference}
}

func (s *suite) retrieve(t *testing.T, id string) payment.Intent {
	t.Helper()
	in, err := s.Gateway.Retrieve(t.Context(), id)
	if err != nil {
		t.Fatalf("Retrieve(%s): %v", id, err)
	}
	return in
}

// find calls Find, retrying a retryable error for up to FindLag.
func (s *suite) find(t *testing.T, ref payment.Reference) (payment.Intent, error) {
	t.Helper()
	deadline := time.Now().Add(s.FindLag)
	for {
		in, err := s.Gateway.Find(t.Context(), ref)
		if err == nil || !payment.IsRetryable(err) || time.Now().After(deadline) {
			return in, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func wantFinal(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || payment.IsRetryable(err) || payment.IsUnknownOutcome(err) || errors.Is(err, payment.ErrDeclined) {
		t.Fatalf("%s: err = %v, want a final error", what, err)
	}
}

// wantCode fails unless err is a final *payment.ProviderError with code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	wantFinal(t, what, err)
	var pe *payment.ProviderError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("%s: err = %v, want a *payment.ProviderError with code %q", what, err, code)
	}
}

func wantNoMoney(t *testing.T, what string, in payment.Intent) {
	t.Helper()
	if in.AmountReceived != 0 || in.Status == payment.IntentSucceeded {
		t.Fatalf("%s: intent %+v received money", what, in)
	}
}

func testPrepareMovesNoMoney(t *testing.T, s *suite) {
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	if in.ID == "" || in.Reference != ref || in.Amount != 4200 || in.Currency != s.Currency || !in.Status.Valid() || in.CreatedAt.IsZero() {
		t.Fatalf("Prepare = %+v, want an intent of 4200 %s with reference %v", in, s.Currency, ref)
	}
	wantNoMoney(t, "after Prepare", in)
	if in.Status != payment.IntentRequiresPaymentMethod && in.Status != payment.IntentRequiresConfirmation {
		t.Fatalf("Prepare status = %s, want requires_payment_method or requires_confirmation", in.Status)
	}
	got := s.retrieve(t, in.ID)
	wantNoMoney(t, "Retrieve after Prepare", got)
	if got.ID != in.ID || got.Reference != ref || got.Amount != 4200 {
		t.Fatalf("Retrieve = %+v, want %+v", got, in)
	}
}

func testPrepareIsIdempotent(t *testing.T, s *suite) {
	ref := s.ref()
	req := payment.PrepareRequest{IdempotencyKey: ref.Key + "/prepare", Reference: ref, Amount: 4200, Currency: s.Currency}
	a, err := s.Gateway.Prepare(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Gateway.Prepare(t.Context(), req)
	if err != nil || b.ID != a.ID {
		t.Fatalf("repeated Prepare = %+v, %v; want intent %s again", b, err, a.ID)
	}
	other := req
	other.Amount = 4300
	_, err = s.Gateway.Prepare(t.Context(), other)
	wantFinal(t, "Prepare under a used key with another amount", err)
	if !errors.Is(err, payment.ErrIdempotencyKeyReused) {
		t.Fatalf("Prepare under a used key with another amount: %v, want ErrIdempotencyKeyReused", err)
	}
}

func testPrepareRefusesBadRequests(t *testing.T, s *suite) {
	ref := s.ref()
	for _, req := range []payment.PrepareRequest{
		{Reference: ref, Amount: 1, Currency: s.Currency},
		{IdempotencyKey: ref.Key + "/p", Reference: ref, Amount: -1, Currency: s.Currency},
		{IdempotencyKey: ref.Key + "/p", Reference: ref, Amount: 1},
	} {
		_, err := s.Gateway.Prepare(t.Context(), req)
		wantFinal(t, fmt.Sprintf("Prepare(%+v)", req), err)
	}
	if _, err := s.find(t, ref); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Find after refused Prepares: %v, want ErrNotFound", err)
	}
}

func testConfirmMovesMoneyOnce(t *testing.T, s *suite) {
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	req := s.confirmReq(in, ref.Key+"/confirm", s.MethodApproved)
	a, err := s.Gateway.Confirm(t.Context(), req)
	if err != nil || a.ID != in.ID || a.Status != payment.IntentSucceeded || a.AmountReceived != 4200 {
		t.Fatalf("Confirm = %+v, %v; want intent %s succeeded with 4200 received", a, err, in.ID)
	}
	b, err := s.Gateway.Confirm(t.Context(), req)
	if err != nil || b.ID != a.ID || b.Status != payment.IntentSucceeded || b.AmountReceived != 4200 {
		t.Fatalf("repeated Confirm = %+v, %v; want the same answer", b, err)
	}
	// Another key on a succeeded intent never moves money again.
	if c, err := s.Gateway.Confirm(t.Context(), s.confirmReq(in, ref.Key+"/confirm-2", s.MethodApproved)); err == nil && c.AmountReceived != 4200 {
		t.Fatalf("Confirm under another key = %+v", c)
	}
	if got := s.retrieve(t, in.ID); got.AmountReceived != 4200 || got.Status != payment.IntentSucceeded {
		t.Fatalf("Retrieve = %+v, want 4200 received once", got)
	}
}

func testConcurrentConfirms(t *testing.T, s *suite) {
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	req := s.confirmReq(in, ref.Key+"/confirm", s.MethodApproved)
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 8 {
		wg.Go(func() {
			got, err := s.Gateway.Confirm(t.Context(), req)
			switch {
			case err == nil && got.AmountReceived == 4200:
				ok.Add(1)
			case err == nil:
				t.Errorf("concurrent Confirm = %+v", got)
			case !payment.IsRetryable(err) && !payment.IsUnknownOutcome(err):
				t.Errorf("concurrent Confirm: %v, want success or a retryable error (a key in use)", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() == 0 {
		t.Fatal("no concurrent Confirm succeeded")
	}
	if got := s.retrieve(t, in.ID); got.AmountReceived != 4200 {
		t.Fatalf("after concurrent confirms: %+v, want 4200 received once", got)
	}
}

func testLostConfirm(t *testing.T, s *suite) {
	if s.LoseAnswers == nil {
		t.Skip("the subject cannot lose answers")
	}
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	req := s.confirmReq(in, ref.Key+"/confirm", s.MethodApproved)
	var err error
	s.LoseAnswers(t, func() { _, err = s.Gateway.Confirm(t.Context(), req) })
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Confirm with a lost answer: %v, want an unknown outcome", err)
	}
	if got := s.retrieve(t, in.ID); got.Status != payment.IntentSucceeded || got.AmountReceived != 4200 {
		t.Fatalf("Retrieve after a lost Confirm = %+v, want succeeded with 4200 received", got)
	}
	again, err := s.Gateway.Confirm(t.Context(), req)
	if err != nil || again.AmountReceived != 4200 {
		t.Fatalf("Confirm again under its key = %+v, %v; want the saved success", again, err)
	}
	if got := s.retrieve(t, in.ID); got.AmountReceived != 4200 {
		t.Fatalf("after the repeat: %+v, want 4200 received once", got)
	}
}

func testFindByReference(t *testing.T, s *suite) {
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	got, err := s.find(t, ref)
	if err != nil || got.ID != in.ID || got.Reference != ref {
		t.Fatalf("Find(%v) = %+v, %v; want intent %s", ref, got, err, in.ID)
	}
	never := s.ref()
	if _, err := s.find(t, never); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Find of a reference never used: %v, want ErrNotFound", err)
	}
}

func testLostPrepare(t *testing.T, s *suite) {
	if s.LoseAnswers == nil {
		t.Skip("the subject cannot lose answers")
	}
	ref := s.ref()
	req := payment.PrepareRequest{IdempotencyKey: ref.Key + "/prepare", Reference: ref, Amount: 4200, Currency: s.Currency}
	var err error
	s.LoseAnswers(t, func() { _, err = s.Gateway.Prepare(t.Context(), req) })
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Prepare with a lost answer: %v, want an unknown outcome", err)
	}
	found, err := s.find(t, ref)
	if err != nil || found.Reference != ref || found.Amount != 4200 {
		t.Fatalf("Find after a lost Prepare = %+v, %v; want the intent", found, err)
	}
	wantNoMoney(t, "Find after a lost Prepare", found)
	again, err := s.Gateway.Prepare(t.Context(), req)
	if err != nil || again.ID != found.ID {
		t.Fatalf("Prepare again under its key = %+v, %v; want intent %s", again, err, found.ID)
	}
}

func testDecline(t *testing.T, s *suite) {
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	req := s.confirmReq(in, ref.Key+"/confirm", s.MethodDeclined)
	_, err := s.Gateway.Confirm(t.Context(), req)
	var de *payment.DeclineError
	if !errors.As(err, &de) || payment.IsRetryable(err) || de.Code == "" {
		t.Fatalf("Confirm with a declined method: %v, want a final *payment.DeclineError with a code", err)
	}
	got := s.retrieve(t, in.ID)
	wantNoMoney(t, "after a decline", got)
	if got.Status != payment.IntentRequiresPaymentMethod || got.LastDecline == nil {
		t.Fatalf("after a decline: %+v, want requires_payment_method with LastDecline", got)
	}
	if _, err := s.Gateway.Confirm(t.Context(), req); !errors.As(err, &de) {
		t.Fatalf("repeated declined Confirm: %v, want the same decline", err)
	}
	ok, err := s.Gateway.Confirm(t.Context(), s.confirmReq(in, ref.Key+"/confirm-2", s.MethodApproved))
	if err != nil || ok.Status != payment.IntentSucceeded || ok.AmountReceived != 4200 {
		t.Fatalf("Confirm with another method = %+v, %v; want succeeded", ok, err)
	}
}

// paid returns a fresh intent that received amount.
func (s *suite) paid(t *testing.T, amount int64) payment.Intent {
	t.Helper()
	ref := s.ref()
	in := s.prepare(t, ref, amount)
	got, err := s.Gateway.Confirm(t.Context(), s.confirmReq(in, ref.Key+"/confirm", s.MethodApproved))
	if err != nil || got.AmountReceived != amount {
		t.Fatalf("Confirm = %+v, %v", got, err)
	}
	return got
}

func testRefund(t *testing.T, s *suite) {
	in := s.paid(t, 4200)
	rref := payment.Reference{OrderID: in.Reference.OrderID, Key: in.Reference.OrderID + "/refund"}
	req := payment.RefundRequest{IdempotencyKey: rref.Key, IntentID: in.ID, Amount: 4000, Reference: rref}
	a, err := s.Gateway.Refund(t.Context(), req)
	if err != nil || a.ID == "" || a.IntentID != in.ID || a.Amount != 4000 || a.Reference != rref || a.Status != payment.RefundSucceeded {
		t.Fatalf("Refund = %+v, %v; want 4000 of %s succeeded", a, err, in.ID)
	}
	b, err := s.Gateway.Refund(t.Context(), req)
	if err != nil || b.ID != a.ID {
		t.Fatalf("repeated Refund = %+v, %v; want refund %s again", b, err, a.ID)
	}
	if got := s.retrieve(t, in.ID); got.AmountRefunded != 4000 || got.AmountReceived != 4200 {
		t.Fatalf("after the refund: %+v, want 4000 of 4200 refunded", got)
	}
	over := payment.RefundRequest{IdempotencyKey: rref.Key + "-2", IntentID: in.ID, Amount: 201,
		Reference: payment.Reference{OrderID: rref.OrderID, Key: rref.Key + "-2"}}
	_, err = s.Gateway.Refund(t.Context(), over)
	wantFinal(t, "Refund above what is left", err)
	rest := over
	rest.IdempotencyKey, rest.Reference.Key, rest.Amount = rref.Key+"-3", rref.Key+"-3", 200
	if _, err := s.Gateway.Refund(t.Context(), rest); err != nil {
		t.Fatalf("Refund of the rest: %v", err)
	}
	if got := s.retrieve(t, in.ID); got.AmountRefunded != 4200 {
		t.Fatalf("after refunding all: %+v, want 4200 refunded", got)
	}
	found, err := s.Gateway.FindRefund(t.Context(), in.ID, rref)
	if err != nil || found.ID != a.ID {
		t.Fatalf("FindRefund = %+v, %v; want refund %s", found, err, a.ID)
	}
	if _, err := s.Gateway.FindRefund(t.Context(), in.ID, payment.Reference{OrderID: rref.OrderID, Key: rref.Key + "-never"}); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("FindRefund of a reference never used: %v, want ErrNotFound", err)
	}
	// An intent that received nothing cannot be refunded.
	ref := s.ref()
	unpaid := s.prepare(t, ref, 4200)
	_, err = s.Gateway.Refund(t.Context(), payment.RefundRequest{IdempotencyKey: ref.OrderID + "/refund", IntentID: unpaid.ID,
		Amount: 1, Reference: payment.Reference{OrderID: ref.OrderID, Key: ref.OrderID + "/refund"}})
	wantFinal(t, "Refund of an intent that received nothing", err)
}

func testLostRefund(t *testing.T, s *suite) {
	if s.LoseAnswers == nil {
		t.Skip("the subject cannot lose answers")
	}
	in := s.paid(t, 4200)
	rref := payment.Reference{OrderID: in.Reference.OrderID, Key: in.Reference.OrderID + "/refund"}
	req := payment.RefundRequest{IdempotencyKey: rref.Key, IntentID: in.ID, Amount: 4200, Reference: rref}
	var err error
	s.LoseAnswers(t, func() { _, err = s.Gateway.Refund(t.Context(), req) })
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Refund with a lost answer: %v, want an unknown outcome", err)
	}
	found, err := s.Gateway.FindRefund(t.Context(), in.ID, rref)
	if err != nil || found.Amount != 4200 {
		t.Fatalf("FindRefund after a lost Refund = %+v, %v; want the refund", found, err)
	}
	again, err := s.Gateway.Refund(t.Context(), req)
	if err != nil || again.ID != found.ID {
		t.Fatalf("Refund again under its key = %+v, %v; want refund %s", again, err, found.ID)
	}
	if got := s.retrieve(t, in.ID); got.AmountRefunded != 4200 {
		t.Fatalf("after the repeat: %+v, want 4200 refunded once", got)
	}
}

func testCancel(t *testing.T, s *suite) {
	ref := s.ref()
	in := s.prepare(t, ref, 4200)
	req := payment.CancelRequest{IdempotencyKey: ref.OrderID + "/cancel", IntentID: in.ID}
	a, err := s.Gateway.Cancel(t.Context(), req)
	if err != nil || a.ID != in.ID || a.Status != payment.IntentCanceled {
		t.Fatalf("Cancel = %+v, %v; want intent %s canceled", a, err, in.ID)
	}
	if b, err := s.Gateway.Cancel(t.Context(), req); err != nil || b.Status != payment.IntentCanceled {
		t.Fatalf("repeated Cancel = %+v, %v; want canceled", b, err)
	}
	if c, err := s.Gateway.Confirm(t.Context(), s.confirmReq(in, ref.Key+"/confirm", s.MethodApproved)); err == nil {
		t.Fatalf("Confirm of a canceled intent = %+v, want an error", c)
	}
	got := s.retrieve(t, in.ID)
	wantNoMoney(t, "after Confirm of a canceled intent", got)
	if got.Status != payment.IntentCanceled {
		t.Fatalf("Retrieve = %+v, want canceled", got)
	}
	paid := s.paid(t, 4200)
	_, err = s.Gateway.Cancel(t.Context(), payment.CancelRequest{IdempotencyKey: paid.Reference.OrderID + "/cancel", IntentID: paid.ID})
	wantFinal(t, "Cancel of an intent that received money", err)
	if got := s.retrieve(t, paid.ID); got.Status != payment.IntentSucceeded || got.AmountReceived != 4200 {
		t.Fatalf("after a refused Cancel: %+v, want succeeded", got)
	}
}

func testRetrieveUnknown(t *testing.T, s *suite) {
	if _, err := s.Gateway.Retrieve(t.Context(), "pi_gatewaytest_never_"+s.run); !errors.Is(err, payment.ErrNotFound) {
		t.Fatalf("Retrieve of an unknown id: %v, want ErrNotFound", err)
	}
}

// authorized returns a fresh intent of amount prepared with
// payment.CaptureManual and confirmed: authorized, nothing received.
func (s *suite) authorized(t *testing.T, amount int64) payment.Intent {
	t.Helper()
	ref := s.ref()
	in, err := s.Gateway.Prepare(t.Context(), payment.PrepareRequest{IdempotencyKey: ref.Key + "/prepare", Reference: ref,
		Amount: amount, Currency: s.Currency, CaptureMode: payment.CaptureManual})
	if err != nil {
		t.Fatalf("Prepare (manual capture): %v", err)
	}
	wantNoMoney(t, "after a manual Prepare", in)
	got, err := s.Gateway.Confirm(t.Context(), s.confirmReq(in, ref.Key+"/confirm", s.MethodApproved))
	if err != nil || got.ID != in.ID || got.Status != payment.IntentRequiresCapture || got.Amount != amount || got.CaptureMode != payment.CaptureManual {
		t.Fatalf("Confirm (manual capture) = %+v, %v; want requires_capture of %d", got, err, amount)
	}
	wantNoMoney(t, "after a manual Confirm", got)
	return got
}

func (s *suite) captureReq(in payment.Intent, key string, amount int64) payment.CaptureRequest {
	return payment.CaptureRequest{IdempotencyKey: key, IntentID: in.ID, Amount: amount, Reference: in.Reference}
}

func testManualConfirm(t *testing.T, s *suite) {
	in := s.authorized(t, 4200)
	got := s.retrieve(t, in.ID)
	wantNoMoney(t, "Retrieve of an authorization", got)
	if got.Status != payment.IntentRequiresCapture || got.Amount != 4200 || got.CaptureMode != payment.CaptureManual {
		t.Fatalf("Retrieve of an authorization = %+v, want requires_capture of 4200", got)
	}
	if !got.CaptureBefore.IsZero() && !got.CaptureBefore.After(got.CreatedAt) {
		t.Fatalf("CaptureBefore %v is not after the intent's creation %v", got.CaptureBefore, got.CreatedAt)
	}
	// An automatic intent is never left waiting for a capture, and cannot be
	// captured.
	paid := s.paid(t, 4200)
	if paid.CaptureMode != payment.CaptureAutomatic {
		t.Fatalf("automatic intent's CaptureMode = %q, want %q", paid.CaptureMode, payment.CaptureAutomatic)
	}
	_, err := s.Gateway.Capture(t.Context(), s.captureReq(paid, paid.Reference.Key+"/capture", 4200))
	wantFinal(t, "Capture of an automatic intent that received its money", err)
	// Nor can an intent that was never confirmed.
	ref := s.ref()
	unconfirmed := s.prepare(t, ref, 4200)
	_, err = s.Gateway.Capture(t.Context(), s.captureReq(unconfirmed, ref.Key+"/capture", 4200))
	wantCode(t, "Capture of an unconfirmed intent", err, "payment_intent_unexpected_state")
	wantNoMoney(t, "after a refused Capture", s.retrieve(t, unconfirmed.ID))
}

func testCaptureOnce(t *testing.T, s *suite) {
	in := s.authorized(t, 4200)
	req := s.captureReq(in, in.Reference.Key+"/capture", 4200)
	a, err := s.Gateway.Capture(t.Context(), req)
	if err != nil || a.ID != in.ID || a.Status != payment.IntentSucceeded || a.AmountReceived != 4200 {
		t.Fatalf("Capture = %+v, %v; want succeeded with 4200 received", a, err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			b, err := s.Gateway.Capture(t.Context(), req)
			if err == nil && (b.Status != payment.IntentSucceeded || b.AmountReceived != 4200) {
				t.Errorf("repeated Capture = %+v, want the saved answer", b)
			} else if err != nil && !payment.IsRetryable(err) {
				t.Errorf("repeated Capture: %v, want the saved answer", err)
			}
		})
	}
	wg.Wait()
	_, err = s.Gateway.Capture(t.Context(), s.captureReq(in, in.Reference.Key+"/capture-2", 4200))
	wantCode(t, "a second Capture under another key", err, "payment_intent_unexpected_state")
	if got := s.retrieve(t, in.ID); got.Status != payment.IntentSucceeded || got.AmountReceived != 4200 {
		t.Fatalf("after the captures: %+v, want 4200 received once", got)
	}
}

func testLostCapture(t *testing.T, s *suite) {
	if s.LoseAnswers == nil {
		t.Skip("the subject cannot lose answers")
	}
	in := s.authorized(t, 4200)
	req := s.captureReq(in, in.Reference.Key+"/capture", 4200)
	var err error
	s.LoseAnswers(t, func() { _, err = s.Gateway.Capture(t.Context(), req) })
	if !payment.IsUnknownOutcome(err) {
		t.Fatalf("Capture with a lost answer: %v, want an unknown outcome", err)
	}
	if got := s.retrieve(t, in.ID); got.Status != payment.IntentSucceeded || got.AmountReceived != 4200 {
		t.Fatalf("Retrieve after a lost Capture = %+v, want succeeded with 4200 received", got)
	}
	again, err := s.Gateway.Capture(t.Context(), req)
	if err != nil || again.AmountReceived != 4200 {
		t.Fatalf("Capture again under its key = %+v, %v; want the saved success", again, err)
	}
	if got := s.retrieve(t, in.ID); got.AmountReceived != 4200 {
		t.Fatalf("after the repeat: %+v, want 4200 received once", got)
	}
}

func testPartialCapture(t *testing.T, s *suite) {
	in := s.authorized(t, 4200)
	_, err := s.Gateway.Capture(t.Context(), s.captureReq(in, in.Reference.Key+"/capture-over", 4201))
	wantCode(t, "Capture above the authorized amount", err, "amount_too_large")
	wantNoMoney(t, "after a Capture above the authorization", s.retrieve(t, in.ID))
	got, err := s.Gateway.Capture(t.Context(), s.captureReq(in, in.Reference.Key+"/capture", 3000))
	if err != nil || got.Status != payment.IntentSucceeded || got.AmountReceived != 3000 || got.Amount != 4200 {
		t.Fatalf("partial Capture = %+v, %v; want succeeded with 3000 of 4200 received", got, err)
	}
	// The rest was released: it can be neither captured nor refunded.
	_, err = s.Gateway.Capture(t.Context(), s.captureReq(in, in.Reference.Key+"/capture-rest", 1200))
	wantFinal(t, "Capture of the released rest", err)
	rref := payment.Reference{OrderID: in.Reference.OrderID, Key: in.Reference.OrderID + "/refund"}
	over := payment.RefundRequest{IdempotencyKey: rref.Key + "-over", IntentID: in.ID, Amount: 3001,
		Reference: payment.Reference{OrderID: rref.OrderID, Key: rref.Key + "-over"}}
	_, err = s.Gateway.Refund(t.Context(), over)
	wantFinal(t, "Refund above the captured amount", err)
	rf, err := s.Gateway.Refund(t.Context(), payment.RefundRequest{IdempotencyKey: rref.Key, IntentID: in.ID, Amount: 3000, Reference: rref})
	if err != nil || rf.Amount != 3000 || rf.Status != payment.RefundSucceeded {
		t.Fatalf("Refund of the captured amount = %+v, %v", rf, err)
	}
	if got := s.retrieve(t, in.ID); got.AmountReceived != 3000 || got.AmountRefunded != 3000 {
		t.Fatalf("after the refund: %+v, want 3000 received and refunded", got)
	}
}

func testVoid(t *testing.T, s *suite) {
	in := s.authorized(t, 4200)
	req := payment.CancelRequest{IdempotencyKey: in.Reference.OrderID + "/cancel", IntentID: in.ID}
	a, err := s.Gateway.Cancel(t.Context(), req)
	if err != nil || a.Status != payment.IntentCanceled {
		t.Fatalf("Cancel of an authorization = %+v, %v; want canceled", a, err)
	}
	wantNoMoney(t, "after a void", a)
	if b, err := s.Gateway.Cancel(t.Context(), req); err != nil || b.Status != payment.IntentCanceled {
		t.Fatalf("repeated Cancel = %+v, %v; want canceled", b, err)
	}
	_, err = s.Gateway.Capture(t.Context(), s.captureReq(in, in.Reference.Key+"/capture", 4200))
	wantCode(t, "Capture of a voided authorization", err, "payment_intent_unexpected_state")
	got := s.retrieve(t, in.ID)
	wantNoMoney(t, "after a Capture of a voided authorization", got)
	if got.Status != payment.IntentCanceled {
		t.Fatalf("Retrieve = %+v, want canceled", got)
	}
}
