package service_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/stripesim"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
)

// Asynchronous payments (issue 16) with the in-process simulator, on both
// stores: a pay whose intent waits for 3-D Secure or a bank debit answers
// with a pending payment (the api's 202), its key replays it, and a retry,
// the completer or a cancel settles it with one capture at most.

var (
	pay3DS   = service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: simulator.MethodThreeDSecure}
	payDebit = service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: simulator.MethodBankDebit}
)

// pending pays o with in under k and requires a pending payment in status
// want, the order still RCVD, and the attempt open in that status.
func (f *fixture) pending(t *testing.T, o order.Order, k string, in service.PayInput, want payment.AttemptStatus) service.Result {
	t.Helper()
	ctx := context.Background()
	res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)}, in)
	if err != nil || res.Payment == nil || res.Payment.Status != want || res.Order.State != order.Received {
		t.Fatalf("pay with %s = %+v (payment %+v), %v; want a pending payment %s on a RCVD order", in.PaymentMethod, res, res.Payment, err, want)
	}
	a, err := f.st.GetAttempt(ctx, chargeKeyOf(o))
	if err != nil || a.Status != want || a.IntentID != res.Payment.IntentID || !a.Status.Open() {
		t.Fatalf("attempt = %+v, %v; want it open in %s on intent %s", a, err, want, res.Payment.IntentID)
	}
	return res
}

func chargeKeyOf(o order.Order) string { return o.ID + "/pay/" + itoa(o.Version) }

func itoa(v int64) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + v%10)}, b...)
		if v /= 10; v == 0 {
			return string(b)
		}
	}
}

// TestThreeDSecurePendingThenPaidOnRetry: 3-D Secure → a pending payment
// with next_action and client_secret; the same key replays it (no second
// confirm); after the customer authenticates, the retry of the same key
// reads the intent and ends PAID with one capture.
func TestThreeDSecurePendingThenPaidOnRetry(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		res := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction)
		p := res.Payment
		if p.ClientSecret == "" || p.NextAction == nil || p.NextAction.Type != "redirect_to_url" || p.NextAction.RedirectURL == "" {
			t.Fatalf("pending payment = %+v; want a client secret and a redirect_to_url next action", p)
		}
		if res.Replayed {
			t.Fatal("the first answer says replayed")
		}
		confirms := f.gw.Calls()
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}
		again, err := f.svc.Pay(ctx, call, pay3DS)
		if err != nil || again.Payment == nil || !again.Replayed || again.Payment.IntentID != p.IntentID || again.Order.State != order.Received {
			t.Fatalf("same key while pending = %+v, %v; want the pending payment replayed", again, err)
		}
		if f.gw.Calls() != confirms {
			t.Fatalf("the replay confirmed again (%d confirms)", f.gw.Calls()-confirms)
		}
		if err := f.gw.Authenticate(p.IntentID, true); err != nil {
			t.Fatal(err)
		}
		paid, err := f.svc.Pay(ctx, call, pay3DS)
		if err != nil || paid.Order.State != order.Paid || paid.Payment != nil {
			t.Fatalf("retry after authentication = %+v, %v; want PAID", paid, err)
		}
		if f.gw.Calls() != confirms || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("%d more confirms, %d captures; want none and 1", f.gw.Calls()-confirms, f.gw.Captures(o.ID))
		}
		replay, err := f.svc.Pay(ctx, call, pay3DS)
		if err != nil || !replay.Replayed || replay.Order.State != order.Paid {
			t.Fatalf("replay after PAID = %+v, %v", replay, err)
		}
		if a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o)); a.Status != payment.AttemptSucceeded {
			t.Fatalf("attempt %s, want succeeded", a.Status)
		}
	})
}

// TestThreeDSecureFailedThenAnotherMethod: failed authentication declines
// the attempt; the order stays RCVD and another method pays it under a new
// key, once.
func TestThreeDSecureFailedThenAnotherMethod(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		if err := f.gw.Authenticate(p.IntentID, false); err != nil {
			t.Fatal(err)
		}
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}
		if _, err := f.svc.Pay(ctx, call, pay3DS); apperr.ErrorCode(err) != apperr.EDeclined {
			t.Fatalf("retry after failed authentication: %v, want EDeclined", err)
		}
		if a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o)); a.Status != payment.AttemptDeclined {
			t.Fatalf("attempt %s, want declined", a.Status)
		}
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")}, payIn)
		if err != nil || res.Order.State != order.Paid || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("pay with another method = %+v, %v, %d captures; want PAID once", res, err, f.gw.Captures(o.ID))
		}
	})
}

// TestBankDebitSettledByCompleter: a processing debit is settled by the
// completer reading the intent (no client retry): success → PAID once; a
// failed debit → declined, the order payable again.
func TestBankDebitSettledByCompleter(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "D", payDebit, payment.AttemptProcessing).Payment
		// While the bank collects, the completer leaves it pending, never
		// parked.
		if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o)); a.Status != payment.AttemptProcessing {
			t.Fatalf("attempt %s after a completer pass while processing, want processing", a.Status)
		}
		if err := f.gw.Settle(p.IntentID, true); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(time.Hour) // past the completer's backoff
		if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
			t.Fatal(err)
		}
		got, err := f.svc.Get(ctx, "t1", o.ID)
		if err != nil || got.State != order.Paid || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("after settle and a completer pass: %+v, %v, %d captures; want PAID once", got, err, f.gw.Captures(o.ID))
		}

		o2 := f.order(t)
		p2 := f.pending(t, o2, "E", payDebit, payment.AttemptProcessing).Payment
		if err := f.gw.Settle(p2.IntentID, false); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o2.ID, Key: key("E")}, payDebit); apperr.ErrorCode(err) != apperr.EDeclined {
			t.Fatalf("retry after a failed debit: %v, want EDeclined", err)
		}
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o2.ID, Key: key("F")}, payIn)
		if err != nil || res.Order.State != order.Paid || f.gw.Captures(o2.ID) != 1 {
			t.Fatalf("pay again after a failed debit = %+v, %v; want PAID once", res, err)
		}
	})
}

// TestCancelDuringPendingCancelsIntent: cancelling an order whose payment
// waits for 3-D Secure cancels the intent first; the customer can no longer
// complete it, nothing is captured, and the pay's key answers that its
// payment was declined (canceled).
func TestCancelDuringPendingCancelsIntent(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		res, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")})
		if err != nil || res.Order.State != order.Cancelled {
			t.Fatalf("cancel during a pending payment = %+v, %v; want CANCELLED", res, err)
		}
		in, err := f.gw.Retrieve(ctx, p.IntentID)
		if err != nil || in.Status != payment.IntentCanceled {
			t.Fatalf("intent = %+v, %v; want canceled", in, err)
		}
		if err := f.gw.Authenticate(p.IntentID, true); err == nil {
			t.Fatal("the customer authenticated a canceled intent")
		}
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, pay3DS); apperr.ErrorCode(err) != apperr.EDeclined {
			t.Fatalf("pay key after the cancel: %v, want EDeclined (canceled)", err)
		}
		if a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o)); a.Status != payment.AttemptDeclined || a.ErrorCode != "canceled" {
			t.Fatalf("attempt = %s %s, want declined canceled", a.Status, a.ErrorCode)
		}
		if f.gw.Captures(o.ID) != 0 || f.gw.Refunds(o.ID) != 0 {
			t.Fatalf("%d captures, %d refunds; want none", f.gw.Captures(o.ID), f.gw.Refunds(o.ID))
		}
	})
}

// TestCancelAfterLateSuccessRefunds: the customer authenticated before the
// cancel reached the provider: the cancel finds the money received, the
// order goes PAID (its event) and is refunded once, then CANCELLED.
func TestCancelAfterLateSuccessRefunds(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		if err := f.gw.Authenticate(p.IntentID, true); err != nil {
			t.Fatal(err)
		}
		res, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")})
		if err != nil || res.Order.State != order.Cancelled || res.Order.PaidAt == nil {
			t.Fatalf("cancel after a late success = %+v, %v; want CANCELLED from PAID", res, err)
		}
		if f.gw.Captures(o.ID) != 1 || f.gw.Refunds(o.ID) != 1 || f.gw.Received(o.ID) != 1500 {
			t.Fatalf("%d captures, %d refunds; want 1 and 1", f.gw.Captures(o.ID), f.gw.Refunds(o.ID))
		}
		if in, _ := f.gw.Retrieve(ctx, p.IntentID); in.AmountRefunded != in.AmountReceived {
			t.Fatalf("intent refunded %d of %d", in.AmountRefunded, in.AmountReceived)
		}
	})
}

// TestCancelDuringProcessingIsBusy: a processing debit cannot be cancelled
// at the provider, so the cancel is a 409 order_busy and the order stays
// RCVD; once the debit settles the cancel refunds it.
func TestCancelDuringProcessingIsBusy(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "D", payDebit, payment.AttemptProcessing).Payment
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")}
		if _, err := f.svc.Cancel(ctx, call); apperr.ErrorCode(err) != apperr.EOrderBusy {
			t.Fatalf("cancel while processing: %v, want EOrderBusy", err)
		}
		if got, _ := f.svc.Get(ctx, "t1", o.ID); got.State != order.Received {
			t.Fatalf("order %s, want RCVD", got.State)
		}
		if err := f.gw.Settle(p.IntentID, true); err != nil {
			t.Fatal(err)
		}
		res, err := f.svc.Cancel(ctx, call)
		if err != nil || res.Order.State != order.Cancelled || f.gw.Refunds(o.ID) != 1 || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("cancel after the debit settled = %+v, %v; want CANCELLED and refunded once", res, err)
		}
	})
}

// TestPendingPaymentExpires: a 3-D Secure never completed is expired by the
// completer past PendingPaymentExpiry: its intent is cancelled, the
// attempt declined payment_expired, and the order can be paid again.
func TestPendingPaymentExpires(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o)); a.Status != payment.AttemptRequiresAction {
			t.Fatalf("attempt %s before the expiry, want requires_action", a.Status)
		}
		f.clk.Advance(service.DefaultPendingPaymentExpiry + time.Minute)
		if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
			t.Fatal(err)
		}
		a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o))
		if a.Status != payment.AttemptDeclined || a.ErrorCode != "payment_expired" {
			t.Fatalf("attempt = %s %s after the expiry, want declined payment_expired", a.Status, a.ErrorCode)
		}
		if in, _ := f.gw.Retrieve(ctx, p.IntentID); in.Status != payment.IntentCanceled {
			t.Fatalf("intent %s, want canceled", in.Status)
		}
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")},
			service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: testmode.MethodApproved})
		if err != nil || res.Order.State != order.Paid || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("pay after the expiry = %+v, %v; want PAID once", res, err)
		}
	})
}

// TestAsyncPaymentsWithStripeAdapter runs the flows through the Stripe
// adapter against paysim's Stripe mode, completing 3-D Secure and bank
// debits with its admin endpoints: authenticated → the retry of the same
// key is PAID with one capture; failed authentication → another method
// pays; a settled debit → PAID, a failed one → payable again; a cancel
// during 3-D Secure cancels the PaymentIntent and nothing is captured;
// another card during 3-D Secure cancels it and pays once.
func TestAsyncPaymentsWithStripeAdapter(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts, gw := stripeSim(t)
			env := testenv.New(t, kind, testenv.Options{})
			svc := service.New(env.Store, gw, simulator.NewWarehouse(), service.Config{LeaseDuration: 10 * time.Second})
			admin := func(id, what, outcome string) {
				t.Helper()
				resp, err := http.Post(ts.URL+"/admin/stripe/payment_intents/"+id+"/"+what+"?outcome="+outcome, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s %s: %d", what, id, resp.StatusCode)
				}
			}
			captures := func(orderID string) int {
				t.Helper()
				s, err := paysim.NewAdminClient(ts.URL).Ledger(ctx)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for _, c := range s.Charges {
					if c.OrderID == orderID && c.Status == paysim.ChargeCaptured {
						n++
					}
				}
				return n
			}
			newOrder := func() order.Order {
				res, err := svc.Create(ctx, "t1", idempotency.Key{}, input)
				if err != nil {
					t.Fatal(err)
				}
				return res.Order
			}
			with := func(method string) service.PayInput {
				return service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: method}
			}
			pending := func(o order.Order, k, method string, want payment.AttemptStatus) *service.PendingPayment {
				t.Helper()
				res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)}, with(method))
				if err != nil || res.Payment == nil || res.Payment.Status != want || res.Order.State != order.Received {
					t.Fatalf("pay with %s = %+v, %v; want pending %s", method, res, err, want)
				}
				return res.Payment
			}

			// 3-D Secure, authenticated, completed by a retry of the key.
			o := newOrder()
			p := pending(o, "A", stripesim.Method3DS2Required, payment.AttemptRequiresAction)
			if p.NextAction == nil || p.NextAction.Type != "redirect_to_url" || p.NextAction.RedirectURL == "" || p.ClientSecret == "" {
				t.Fatalf("pending payment %+v: want Stripe's next_action redirect_to_url and a client_secret", p)
			}
			again, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, with(stripesim.Method3DS2Required))
			if err != nil || !again.Replayed || again.Payment == nil || again.Payment.IntentID != p.IntentID {
				t.Fatalf("same key while pending = %+v, %v; want the pending payment replayed", again, err)
			}
			admin(p.IntentID, "authenticate", "success")
			res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, with(stripesim.Method3DS2Required))
			if err != nil || res.Order.State != order.Paid || captures(o.ID) != 1 {
				t.Fatalf("retry after authentication = %+v, %v, %d captures; want PAID once", res, err, captures(o.ID))
			}

			// 3-D Secure failed: another method pays under a new key.
			o = newOrder()
			p = pending(o, "B", stripesim.Method3DS2Required, payment.AttemptRequiresAction)
			admin(p.IntentID, "authenticate", "failure")
			if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")}, with(stripesim.Method3DS2Required)); apperr.ErrorCode(err) != apperr.EDeclined {
				t.Fatalf("retry after failed authentication: %v, want EDeclined", err)
			}
			// The declined intent was cancelled: the customer, who holds
			// its client secret, cannot confirm it again with another card
			// (that money would be a second charge once the order is paid
			// under its next version).
			if st := confirmDirectly(t, ts.URL, p.IntentID, stripesim.MethodVisa); st == http.StatusOK || captures(o.ID) != 0 {
				t.Fatalf("a confirm of the declined intent by the customer answered %d with %d captures; want it refused, none", st, captures(o.ID))
			}
			if res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B2")}, with(stripesim.MethodVisa)); err != nil || res.Order.State != order.Paid || captures(o.ID) != 1 {
				t.Fatalf("pay with another method = %+v, %v; want PAID once", res, err)
			}

			// A bank debit settled, then one that fails.
			o = newOrder()
			p = pending(o, "C", stripesim.MethodSEPADebit, payment.AttemptProcessing)
			admin(p.IntentID, "settle", "success")
			if res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")}, with(stripesim.MethodSEPADebit)); err != nil || res.Order.State != order.Paid || captures(o.ID) != 1 {
				t.Fatalf("retry after the debit settled = %+v, %v; want PAID once", res, err)
			}
			o = newOrder()
			p = pending(o, "D", stripesim.MethodUSBankAccount, payment.AttemptProcessing)
			// Stripe cancels a processing debit only in rare cases, and
			// paysim not at all: the cancel is a 409 order_busy and the
			// order stays RCVD with its debit.
			if _, err := svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("D-cancel")}); apperr.ErrorCode(err) != apperr.EOrderBusy {
				t.Fatalf("cancel during a processing debit: %v, want EOrderBusy", err)
			}
			if in, err := gw.Retrieve(ctx, p.IntentID); err != nil || in.Status != payment.IntentProcessing {
				t.Fatalf("PaymentIntent after the refused cancel = %+v, %v; want still processing", in, err)
			}
			admin(p.IntentID, "settle", "failure")
			if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("D")}, with(stripesim.MethodUSBankAccount)); apperr.ErrorCode(err) != apperr.EDeclined {
				t.Fatalf("retry after a failed debit: %v, want EDeclined", err)
			}
			if res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("D2")}, with(stripesim.MethodVisa)); err != nil || res.Order.State != order.Paid || captures(o.ID) != 1 {
				t.Fatalf("pay again after a failed debit = %+v, %v; want PAID once", res, err)
			}

			// Cancel during 3-D Secure: the PaymentIntent is canceled first.
			o = newOrder()
			p = pending(o, "E", stripesim.Method3DS2Required, payment.AttemptRequiresAction)
			if res, err := svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("E2")}); err != nil || res.Order.State != order.Cancelled {
				t.Fatalf("cancel during 3-D Secure = %+v, %v; want CANCELLED", res, err)
			}
			if in, err := gw.Retrieve(ctx, p.IntentID); err != nil || in.Status != payment.IntentCanceled {
				t.Fatalf("PaymentIntent = %+v, %v; want canceled", in, err)
			}
			resp, err := http.Post(ts.URL+"/admin/stripe/payment_intents/"+p.IntentID+"/authenticate?outcome=success", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || captures(o.ID) != 0 {
				t.Fatalf("authenticating the canceled PaymentIntent: %d, %d captures; want refused, none", resp.StatusCode, captures(o.ID))
			}

			// 3-D Secure abandoned for another card: the PaymentIntent is
			// canceled and the card pays once.
			o = newOrder()
			p = pending(o, "F", stripesim.Method3DS2Required, payment.AttemptRequiresAction)
			if res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("F2")}, with(stripesim.MethodVisa)); err != nil || res.Order.State != order.Paid || captures(o.ID) != 1 {
				t.Fatalf("pay with another card during 3-D Secure = %+v, %v, %d captures; want PAID once", res, err, captures(o.ID))
			}
			if in, err := gw.Retrieve(ctx, p.IntentID); err != nil || in.Status != payment.IntentCanceled {
				t.Fatalf("abandoned PaymentIntent = %+v, %v; want canceled", in, err)
			}
		})
	}
}

// TestPendingPaymentHoldsTheOrder: while a payment waits, a pay under a new
// key with the same method joins it (the same pending payment); one with
// another method supersedes a 3-D Secure the customer abandoned (its intent
// cancelled, its attempt declined "superseded", the order paid once by the
// new method, the first key answering the decline), but not a debit the
// bank is processing (409 order_busy).
func TestPendingPaymentHoldsTheOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")}, pay3DS)
		if err != nil || res.Payment == nil || res.Payment.IntentID != p.IntentID || res.Replayed {
			t.Fatalf("pay with the same method under a new key = %+v, %v; want the same pending payment", res, err)
		}
		res, err = f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")}, payIn)
		if err != nil || res.Order.State != order.Paid || res.Payment != nil {
			t.Fatalf("pay with another method while 3-D Secure waits = %+v, %v; want PAID by it", res, err)
		}
		if in, _ := f.gw.Retrieve(ctx, p.IntentID); in.Status != payment.IntentCanceled {
			t.Fatalf("the abandoned 3-D Secure intent is %s, want canceled", in.Status)
		}
		if a, _ := f.st.GetAttempt(ctx, chargeKeyOf(o)); a.Status != payment.AttemptDeclined || a.ErrorCode != "superseded" {
			t.Fatalf("the abandoned attempt = %s %s, want declined superseded", a.Status, a.ErrorCode)
		}
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, pay3DS); apperr.ErrorCode(err) != apperr.EDeclined {
			t.Fatalf("the abandoned pay's key: %v, want EDeclined", err)
		}
		if f.gw.Captures(o.ID) != 1 {
			t.Fatalf("%d captures, want 1", f.gw.Captures(o.ID))
		}
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaymentFailed, event.OrderPaid)

		o2 := f.order(t)
		f.pending(t, o2, "D", payDebit, payment.AttemptProcessing)
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o2.ID, Key: key("E")}, payIn); apperr.ErrorCode(err) != apperr.EOrderBusy {
			t.Fatalf("pay with another method while a debit processes: %v, want EOrderBusy", err)
		}
	})
}

// TestProviderEventSettlesPendingPayment: the provider-event inbox (issue
// 15) settles a pending payment as it settles an unknown outcome: a
// payment.succeeded for the waiting attempt moves the order to PAID (one
// order.paid event), a duplicate changes nothing, and the pay's key then
// answers PAID without confirming again; a payment.failed for another
// order's pending payment declines it and the order is payable again.
func TestProviderEventSettlesPendingPayment(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		if err := f.gw.Authenticate(p.IntentID, true); err != nil {
			t.Fatal(err)
		}
		ev := chargeEvent("evt_3ds_ok", payment.EventPaymentSucceeded, o)
		for i, want := range []service.InboxOutcome{service.InboxApplied, service.InboxDuplicate} {
			if got, err := f.svc.TakeProviderEvent(ctx, ev); err != nil || got != want {
				t.Fatalf("delivery %d = %q, %v; want %q", i+1, got, err, want)
			}
		}
		confirms := f.gw.Calls()
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, pay3DS)
		if err != nil || res.Order.State != order.Paid || res.Payment != nil || f.gw.Calls() != confirms || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("the pay's key after the webhook = %+v, %v, %d captures; want PAID once, no confirm", res, err, f.gw.Captures(o.ID))
		}
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid)

		o2 := f.order(t)
		f.pending(t, o2, "B", payDebit, payment.AttemptProcessing)
		if got, err := f.svc.TakeProviderEvent(ctx, chargeEvent("evt_debit_failed", payment.EventPaymentFailed, o2)); err != nil || got != service.InboxApplied {
			t.Fatalf("payment.failed = %q, %v", got, err)
		}
		if got, _ := f.svc.Get(ctx, "t1", o2.ID); got.State != order.Received || got.Version != o2.Version+1 {
			t.Fatalf("after the failed debit: %s v%d, want RCVD v%d", got.State, got.Version, o2.Version+1)
		}
		if res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o2.ID, Key: key("C")}, payIn); err != nil || res.Order.State != order.Paid {
			t.Fatalf("pay again after the failed debit = %+v, %v; want PAID", res, err)
		}
	})
}

// TestPendingPaymentRace: after the customer authenticates, the webhook
// (twice), a retry of the pay's key, a pay under a new key and the
// completer race to settle the same pending payment: one capture, one
// order.paid event, the order PAID.
func TestPendingPaymentRace(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		p := f.pending(t, o, "A", pay3DS, payment.AttemptRequiresAction).Payment
		if err := f.gw.Authenticate(p.IntentID, true); err != nil {
			t.Fatal(err)
		}
		ev := chargeEvent("evt_race", payment.EventPaymentSucceeded, o)
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() {
				switch i {
				case 0, 1:
					_, _ = f.svc.TakeProviderEvent(ctx, ev)
				case 2:
					_, _ = f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, pay3DS)
				case 3:
					_, _ = f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")}, pay3DS)
				default:
					_, _ = f.svc.RecoverAbandoned(ctx, 10)
				}
			})
		}
		wg.Wait()
		// Whatever lost a race with a 409 or 503 ends on its next retry.
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, pay3DS)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("the pay's key after the race = %+v, %v; want PAID", res, err)
		}
		if f.gw.Captures(o.ID) != 1 {
			t.Fatalf("%d captures, want 1", f.gw.Captures(o.ID))
		}
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid)
	})
}

// stripeSim serves paysim's Stripe mode for t and returns it with the
// Stripe adapter pointed at it.
// confirmDirectly confirms intent id at paysim's Stripe mode base with
// method, as a customer's browser holding its client secret would
// (Stripe.js), and returns the answer's status.
func confirmDirectly(t *testing.T, base, id, method string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/payment_intents/"+id+"/confirm",
		strings.NewReader(url.Values{"payment_method": {method}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("sk_test_orderly", "")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func stripeSim(t *testing.T) (*httptest.Server, *stripepay.Gateway) {
	t.Helper()
	ctx := context.Background()
	l, err := paysim.OpenLedger(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	native, err := paysim.NewServer(l, paysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := stripesim.New(ctx, l, native, stripesim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { sim.StopDelays(); ts.Close(); l.Close() })
	gw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_orderly", APIBase: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	return ts, gw
}

// TestPendingPaymentExpiresWithStripeAdapter: a 3-D Secure never completed
// at paysim's Stripe mode is expired by the completer: the PaymentIntent is
// canceled (the customer can no longer authenticate it), the attempt
// declined payment_expired, and another card pays once.
func TestPendingPaymentExpiresWithStripeAdapter(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ts, gw := stripeSim(t)
			clk := newClock()
			env := testenv.New(t, kind, testenv.Options{Clock: clk})
			svc := service.New(env.Store, gw, simulator.NewWarehouse(), service.Config{LeaseDuration: 10 * time.Second,
				Now: clk.Now, PendingPaymentExpiry: 30 * time.Minute})
			res, err := svc.Create(ctx, "t1", idempotency.Key{}, input)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Order
			in := service.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: stripesim.Method3DS2Required}
			res, err = svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("X")}, in)
			if err != nil || res.Payment == nil || res.Payment.Status != payment.AttemptRequiresAction {
				t.Fatalf("pay = %+v, %v; want requires_action", res, err)
			}
			clk.Advance(31 * time.Minute)
			if _, err := svc.RecoverAbandoned(ctx, 10); err != nil {
				t.Fatal(err)
			}
			a, err := env.Store.GetAttempt(ctx, o.ID+"/pay/1")
			if err != nil || a.Status != payment.AttemptDeclined || a.ErrorCode != "payment_expired" {
				t.Fatalf("attempt = %+v, %v; want declined payment_expired", a, err)
			}
			if pi, err := gw.Retrieve(ctx, res.Payment.IntentID); err != nil || pi.Status != payment.IntentCanceled {
				t.Fatalf("PaymentIntent = %+v, %v; want canceled", pi, err)
			}
			resp, err := http.Post(ts.URL+"/admin/stripe/payment_intents/"+res.Payment.IntentID+"/authenticate?outcome=success", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatal("the customer authenticated an expired, canceled PaymentIntent")
			}
			in.PaymentMethod = stripesim.MethodVisa
			if res, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("Y")}, in); err != nil || res.Order.State != order.Paid {
				t.Fatalf("pay after the expiry = %+v, %v; want PAID", res, err)
			}
		})
	}
}
