package service_test

import (
	"context"
	"encoding/json"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// crashingCapture is the test gateway whose Capture can end its goroutine
// the way a SIGKILL ends the process: before the capture reaches the
// provider (crashBefore), or after the provider captured and before the
// answer is used (crashAfter). Nothing after it runs: no phase 3, no
// release; the key stays in progress until its lease lapses.
type crashingCapture struct {
	*gateway
	crashBefore, crashAfter atomic.Bool
	captures                atomic.Int64 // Capture calls
	lose                    atomic.Bool  // the next Capture takes effect and its answer is lost
}

func (g *crashingCapture) Capture(ctx context.Context, req payment.CaptureRequest) (payment.Intent, error) {
	g.captures.Add(1)
	if g.crashBefore.CompareAndSwap(true, false) {
		runtime.Goexit()
	}
	in, err := g.gateway.Capture(ctx, req)
	if g.crashAfter.CompareAndSwap(true, false) {
		runtime.Goexit()
	}
	if g.lose.CompareAndSwap(true, false) {
		return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	return in, err
}

type captureFixture struct {
	*fixture
	cg *crashingCapture
}

// eachStoreCapturing runs fn on both stores with a service that captures
// at fulfilment.
func eachStoreCapturing(t *testing.T, fn func(t *testing.T, f *captureFixture)) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk := newClock()
			env := testenv.New(t, kind, testenv.Options{Clock: clk})
			sim := simulator.NewIntentGateway()
			sim.Now = clk.Now
			f := &fixture{st: env.Store, gw: &gateway{IntentGateway: sim}, clk: clk, feedURL: feedURL(env)}
			cg := &crashingCapture{gateway: f.gw}
			f.svc = service.New(f.st, cg, simulator.NewWarehouse(), service.Config{
				KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 2 * time.Hour,
				LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now,
				Capture: service.CaptureAtFulfilment,
			})
			fn(t, &captureFixture{fixture: f, cg: cg})
		})
	}
}

// get reads o as GET /v1/orders/{id} shows it.
func (f *fixture) get(t *testing.T, o order.Order) order.Order {
	t.Helper()
	got, err := f.svc.Get(context.Background(), "t1", o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// eventsOf returns the types of o's events, in order.
func (f *fixture) eventsOf(t *testing.T, o order.Order) []event.Type {
	t.Helper()
	es, ok := f.st.(store.EventStore)
	if !ok {
		t.Fatal("the store keeps no events")
	}
	f.awaitFeed(t)
	got, err := es.ListEvents(context.Background(), "t1", event.Filter{OrderID: o.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var types []event.Type
	for _, e := range got {
		types = append(types, e.Type)
	}
	return types
}

func countType(ts []event.Type, want event.Type) int {
	n := 0
	for _, t := range ts {
		if t == want {
			n++
		}
	}
	return n
}

// TestCaptureAtFulfilment (issue 16): the pay authorizes (PAID, payment
// authorized, nothing captured, a partial refund refused
// payment_not_captured); the fulfil ships and captures once (the
// provider's ledger: one authorization, one capture of the whole amount);
// retries of the fulfil under the same key and a new one ship and capture
// nothing more; order.captured is written once; a partial refund then
// works.
func TestCaptureAtFulfilment(t *testing.T) {
	eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		got := f.get(t, o)
		if got.Payment == nil || got.Payment.Status != order.PaymentAuthorized || got.Payment.AmountCapturable != 1500 ||
			got.Payment.IntentID == "" || got.Payment.CaptureBefore == nil || *got.AmountCaptured != 0 {
			t.Fatalf("after pay: payment %+v, captured %v; want authorized 1500, nothing captured", got.Payment, *got.AmountCaptured)
		}
		if n, moved := f.gw.Authorizations(o.ID), f.gw.Moves(o.ID); n != 1 || moved != 0 {
			t.Fatalf("provider: %d authorizations, %d captures; want 1, 0", n, moved)
		}
		_, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("r-early")},
			service.RefundInput{Amount: 100, Currency: "EUR"})
		if apperr.ErrorCode(err) != apperr.ENotCaptured {
			t.Fatalf("refund before the capture = %v, want payment_not_captured", err)
		}
		for _, k := range []string{"ship", "ship", "ship-again"} {
			res, err := f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)})
			if err != nil || res.Order.State != order.Fulfilled {
				t.Fatalf("fulfil %s = %+v, %v", k, res, err)
			}
		}
		if moved, received := f.gw.Moves(o.ID), f.gw.Received(o.ID); moved != 1 || received != 1500 || f.cg.captures.Load() != 1 {
			t.Fatalf("provider: %d captures (%d calls), %d received; want 1 capture of 1500", moved, f.cg.captures.Load(), received)
		}
		got = f.get(t, o)
		if got.Payment == nil || got.Payment.Status != order.PaymentCaptured || got.Payment.AmountCapturable != 0 ||
			*got.AmountCaptured != 1500 || got.State != order.Fulfilled {
			t.Fatalf("after fulfil: %s, payment %+v, captured %d", got.State, got.Payment, *got.AmountCaptured)
		}
		ts := f.eventsOf(t, o)
		if countType(ts, event.OrderCaptured) != 1 || countType(ts, event.OrderFulfilled) != 1 || ts[len(ts)-1] != event.OrderCaptured {
			t.Fatalf("events = %v; want one order.fulfilled, then one order.captured", ts)
		}
		rr, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("r-late")},
			service.RefundInput{Amount: 400, Currency: "EUR"})
		if err != nil || rr.Totals.Captured != 1500 || rr.Totals.Refunded != 400 {
			t.Fatalf("refund after the capture = %+v, %v", rr, err)
		}
	})
}

// TestCaptureCrashBetweenShipAndCapture (issue 16): the fulfil's process
// dies after the ship's phase 3 (the order FULFILLED, the capture attempt
// pending), before the capture reaches the provider, or after the provider
// captured and before its answer was written; the completer, once the
// lease lapsed, finishes: one shipment, one capture. A capture whose
// answer was lost is resolved by reading the intent, not captured again.
func TestCaptureCrashBetweenShipAndCapture(t *testing.T) {
	for _, when := range []string{"before", "after", "lost"} {
		t.Run(when, func(t *testing.T) {
			eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
				ctx := context.Background()
				o := f.paidOrder(t)
				switch when {
				case "before":
					f.cg.crashBefore.Store(true)
				case "after":
					f.cg.crashAfter.Store(true)
				default:
					// The capture takes effect, its answer is lost and the
					// read after it fails: the outcome stays unknown.
					f.cg.lose.Store(true)
					f.gw.readDown.Store(true)
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("ship")})
				}()
				<-done
				now, err := f.st.GetOrder(ctx, "t1", o.ID)
				if err != nil || now.State != order.Fulfilled {
					t.Fatalf("after the crash: %+v, %v; want FULFILLED (shipped)", now, err)
				}
				a, err := f.st.GetAttempt(ctx, o.ID+"/capture/1")
				if err != nil || !a.Status.Open() {
					t.Fatalf("capture attempt after the crash = %+v, %v; want open", a, err)
				}
				f.clk.Advance(time.Minute) // past the lease and the completer's backoff
				if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
					t.Fatal(err)
				}
				if moved := f.gw.Moves(o.ID); moved != 1 {
					t.Fatalf("provider: %d captures, want 1", moved)
				}
				if a, _ := f.st.GetAttempt(ctx, o.ID+"/capture/1"); a.Status != payment.AttemptSucceeded {
					t.Fatalf("capture attempt = %s, want succeeded", a.Status)
				}
				got := f.get(t, o)
				if got.Payment.Status != order.PaymentCaptured || *got.AmountCaptured != 1500 {
					t.Fatalf("payment = %+v, captured %d", got.Payment, *got.AmountCaptured)
				}
				res, err := f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("ship")})
				if err != nil || res.Order.State != order.Fulfilled {
					t.Fatalf("retry of the fulfil = %+v, %v", res, err)
				}
				if moved := f.gw.Moves(o.ID); moved != 1 {
					t.Fatalf("provider after the retry: %d captures, want 1", moved)
				}
				if ts := f.eventsOf(t, o); countType(ts, event.OrderCaptured) != 1 || countType(ts, event.OrderFulfilled) != 1 {
					t.Fatalf("events = %v", ts)
				}
			})
		})
	}
}

// TestCancelOfAuthorizedVoids (issue 16): cancelling a PAID order whose
// payment is only authorized voids it at the provider (the intent
// canceled): no capture, no refund attempt, the order CANCELLED with
// order.cancelled voided; a fulfil afterwards is refused and captures
// nothing.
func TestCancelOfAuthorizedVoids(t *testing.T) {
	eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		for range 2 {
			res, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("cancel")})
			if err != nil || res.Order.State != order.Cancelled {
				t.Fatalf("cancel = %+v, %v", res, err)
			}
		}
		got := f.get(t, o)
		in, err := f.gw.Retrieve(ctx, got.Payment.IntentID)
		if err != nil || in.Status != payment.IntentCanceled || in.AmountReceived != 0 {
			t.Fatalf("intent = %+v, %v; want canceled, nothing received", in, err)
		}
		if got.Payment.Status != order.PaymentVoided || *got.AmountCaptured != 0 || *got.AmountRefunded != 0 {
			t.Fatalf("payment %+v, captured %d, refunded %d", got.Payment, *got.AmountCaptured, *got.AmountRefunded)
		}
		if _, err := f.st.GetAttempt(ctx, o.ID+"/refund"); err == nil {
			t.Fatal("a refund attempt was recorded for a voided order")
		}
		if _, err := f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("ship")}); apperr.ErrorCode(err) != apperr.EInvalidTransition {
			t.Fatalf("fulfil after the void = %v, want invalid_transition", err)
		}
		if f.gw.Moves(o.ID) != 0 || f.cg.captures.Load() != 0 || f.gw.Refunds(o.ID) != 0 {
			t.Fatalf("provider: %d captures, %d refunds; want none", f.gw.Moves(o.ID), f.gw.Refunds(o.ID))
		}
		f.awaitFeed(t)
		es, err := f.st.(store.EventStore).ListEvents(ctx, "t1", event.Filter{OrderID: o.ID, Type: event.OrderCancelled, Limit: 10})
		if err != nil || len(es) != 1 {
			t.Fatalf("order.cancelled = %+v, %v; want one", es, err)
		}
		var e event.Event
		if err := json.Unmarshal(es[0].Body, &e); err != nil || e.Voided == nil || !*e.Voided || e.Refunded == nil || *e.Refunded {
			t.Fatalf("order.cancelled = %s, %v; want voided, not refunded", es[0].Body, err)
		}
		// A void refunds nothing: no refund on the event, the totals as
		// the authorization left them (nothing captured, nothing refunded).
		if e.Refund != nil {
			t.Fatalf("order.cancelled of a void carries refund %+v, want none", e.Refund)
		}
		if tot, err := f.st.(store.RefundStore).RefundTotals(ctx, "t1", o.ID); err != nil || tot.Captured != 0 || tot.Reserved != 0 || tot.Refunded != 0 {
			t.Fatalf("totals after a void = %+v, %v; want all 0", tot, err)
		}
	})
}

// TestRefusedShipmentVoids (issue 16): a shipment refused for good (out of
// stock) of an authorized order voids the authorization and cancels the
// order; the fulfil answers fulfillment_rejected, and its replay too.
func TestRefusedShipmentVoids(t *testing.T) {
	eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
		ctx := context.Background()
		res, err := f.svc.Create(ctx, "t1", key("c"), order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR",
			Items: []order.Item{{SKU: testmode.SKUOutOfStock, Quantity: 1, UnitPrice: 1500}}})
		if err != nil {
			t.Fatal(err)
		}
		o := res.Order
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay")}, payIn); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("ship")}); apperr.ErrorCode(err) != apperr.EFulfillmentRejected {
				t.Fatalf("fulfil = %v, want fulfillment_rejected", err)
			}
		}
		got := f.get(t, o)
		if got.State != order.Cancelled || got.Payment.Status != order.PaymentVoided {
			t.Fatalf("after the refusal: %s, payment %+v; want CANCELLED, voided", got.State, got.Payment)
		}
		if in, _ := f.gw.Retrieve(ctx, got.Payment.IntentID); in.Status != payment.IntentCanceled {
			t.Fatalf("intent = %s, want canceled", in.Status)
		}
		if f.gw.Moves(o.ID) != 0 || f.gw.Refunds(o.ID) != 0 {
			t.Fatal("a refused shipment captured or refunded")
		}
	})
}

// TestExpiringAuthorizationIsFlagged (issue 16): the completer's pass
// flags an authorization within Config.CaptureMargin of capture_before,
// once; it captures nothing.
func TestExpiringAuthorizationIsFlagged(t *testing.T) {
	eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		if n, err := f.svc.FlagExpiringAuthorizations(ctx, 10); err != nil || n != 0 {
			t.Fatalf("flag at once = %d, %v; want 0 (7 days left)", n, err)
		}
		f.clk.Advance(6*24*time.Hour + time.Hour) // 23 h before capture_before
		if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
			t.Fatal(err)
		}
		got := f.get(t, o)
		if got.Payment == nil || !got.Payment.CaptureAttention || got.Payment.Status != order.PaymentAuthorized {
			t.Fatalf("payment = %+v; want authorized, flagged", got.Payment)
		}
		if n, _ := f.svc.FlagExpiringAuthorizations(ctx, 10); n != 0 || f.gw.Moves(o.ID) != 0 {
			t.Fatalf("second pass flagged %d; captures %d; want 0, 0", n, f.gw.Moves(o.ID))
		}
	})
}

// TestAuthorizedOrderAfterSwitchBack (issue 16): an order authorized under
// at_fulfilment, cancelled by an instance that runs at_pay (its phase 1
// records a refund attempt), is still voided, not refunded.
func TestAuthorizedOrderAfterSwitchBack(t *testing.T) {
	eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		atPay := service.New(f.st, f.cg, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour,
			LeaseDuration: 10 * time.Second, Now: f.clk.Now})
		res, err := atPay.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("cancel")})
		if err != nil || res.Order.State != order.Cancelled {
			t.Fatalf("cancel under at_pay = %+v, %v", res, err)
		}
		got := f.get(t, o)
		if got.Payment.Status != order.PaymentVoided || f.gw.Refunds(o.ID) != 0 || f.gw.Moves(o.ID) != 0 {
			t.Fatalf("payment %+v, %d refunds, %d captures; want voided, none", got.Payment, f.gw.Refunds(o.ID), f.gw.Moves(o.ID))
		}
		if a, err := f.st.GetAttempt(ctx, o.ID+"/refund"); err != nil || a.Status != payment.AttemptFailed {
			t.Fatalf("refund attempt = %+v, %v; want failed (never sent)", a, err)
		}
	})
}

// TestFulfilRetryAfterPendingCaptureIsReplayed (issue 16): a fulfil whose
// capture's answer was lost (and the read after it failed) answers its
// FULFILLED order: it shipped. A retry of the same key finishes the
// capture and answers the same order as a replay (Replayed, the HTTP
// Idempotency-Replayed: true), as does a retry after that; one capture,
// one shipment.
func TestFulfilRetryAfterPendingCaptureIsReplayed(t *testing.T) {
	eachStoreCapturing(t, func(t *testing.T, f *captureFixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		f.cg.lose.Store(true)
		f.gw.readDown.Store(true)
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("ship")}
		res, err := f.svc.Fulfill(ctx, call)
		if err != nil || res.Order.State != order.Fulfilled || res.Replayed {
			t.Fatalf("first fulfil = %+v, %v; want FULFILLED, not a replay", res, err)
		}
		if a, _ := f.st.GetAttempt(ctx, o.ID+"/capture/1"); a.Status != payment.AttemptUnknown {
			t.Fatalf("capture attempt = %s, want unknown", a.Status)
		}
		f.gw.readDown.Store(false)
		for i := range 2 {
			res, err := f.svc.Fulfill(ctx, call)
			if err != nil || res.Order.State != order.Fulfilled || !res.Replayed {
				t.Fatalf("retry %d of the fulfil = %+v, %v; want FULFILLED, a replay", i+1, res, err)
			}
		}
		if a, _ := f.st.GetAttempt(ctx, o.ID+"/capture/1"); a.Status != payment.AttemptSucceeded {
			t.Fatalf("capture attempt after the retry = %s, want succeeded", a.Status)
		}
		if moved := f.gw.Moves(o.ID); moved != 1 {
			t.Fatalf("provider: %d captures, want 1", moved)
		}
		if ts := f.eventsOf(t, o); countType(ts, event.OrderCaptured) != 1 || countType(ts, event.OrderFulfilled) != 1 {
			t.Fatalf("events = %v", ts)
		}
	})
}
