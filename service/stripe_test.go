package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/stripesim"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// keyLog is a payment.Gateway that records the idempotency key of every
// call that changes something, in order, before passing it on.
type keyLog struct {
	payment.Gateway
	mu                          sync.Mutex
	prepares, confirms, refunds []string
	// afterRefund, if set, runs after the provider answered a Refund and
	// before the service sees the answer.
	afterRefund atomic.Pointer[func(payment.RefundRequest, payment.Refund, error)]
}

func (g *keyLog) note(to *[]string, key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	*to = append(*to, key)
}

// keys returns a copy of the keys recorded in *from.
func (g *keyLog) keys(from *[]string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), *from...)
}

func (g *keyLog) Prepare(ctx context.Context, req payment.PrepareRequest) (payment.Intent, error) {
	g.note(&g.prepares, req.IdempotencyKey)
	return g.Gateway.Prepare(ctx, req)
}

func (g *keyLog) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	g.note(&g.confirms, req.IdempotencyKey)
	return g.Gateway.Confirm(ctx, req)
}

func (g *keyLog) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	g.note(&g.refunds, req.IdempotencyKey)
	rf, err := g.Gateway.Refund(ctx, req)
	if h := g.afterRefund.Load(); h != nil {
		(*h)(req, rf, err)
	}
	return rf, err
}

// stripeFixture is a service paying through the Stripe adapter
// (payment/stripepay) against paysim's Stripe mode (paysim/stripesim) on a
// store of one kind; the service, the store's database, the adapter and
// paysim share one controllable clock, so moving it ages leases, client
// keys and paysim's saved idempotency answers together.
type stripeFixture struct {
	svc   *service.Service
	st    store.Store
	gw    *keyLog
	sim   *stripesim.Server
	url   string
	clk   *testclock.Clock
	admin *paysim.AdminClient
}

// newStripeFixture starts paysim in Stripe mode (no search lag) and a
// service with a 10s lease, client keys kept 72h, ORDERD_UNRESOLVED_AFTER
// 48h (so an attempt may outlive paysim's 24h key retention unparked) and
// the default ProviderKeyMaxAge (23h), changed by configure if non-nil.
func newStripeFixture(t *testing.T, kind string, configure func(*service.Config)) *stripeFixture {
	t.Helper()
	ctx := context.Background()
	clk := newClock()
	l, err := paysim.OpenLedger(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	native, err := paysim.NewServer(l, paysim.Config{Faults: paysim.Faults{TimeoutDelay: paysim.MaxDelay}})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := stripesim.New(ctx, l, native, stripesim.Config{SearchLag: -1, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { sim.StopDelays(); ts.Close(); l.Close() })
	sgw, err := stripepay.New(stripepay.Options{SecretKey: "sk_test_orderly", APIBase: ts.URL, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.New(t, kind, testenv.Options{Clock: clk})
	cfg := service.Config{KeyTTL: 72 * time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 96 * time.Hour,
		LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, UnresolvedAfter: 48 * time.Hour, Now: clk.Now}
	if configure != nil {
		configure(&cfg)
	}
	gw := &keyLog{Gateway: sgw}
	return &stripeFixture{svc: service.New(env.Store, gw, simulator.NewWarehouse(), cfg), st: env.Store, gw: gw, sim: sim,
		url: ts.URL, clk: clk, admin: paysim.NewAdminClient(ts.URL)}
}

// eachStripeStore runs fn on a Stripe fixture of each store kind.
func eachStripeStore(t *testing.T, configure func(*service.Config), fn func(t *testing.T, f *stripeFixture)) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, newStripeFixture(t, kind, configure))
		})
	}
}

func (f *stripeFixture) order(t *testing.T) order.Order {
	t.Helper()
	res, err := f.svc.Create(context.Background(), "t1", idempotency.Key{}, input)
	if err != nil {
		t.Fatal(err)
	}
	return res.Order
}

// pay pays o with method under client key k.
func (f *stripeFixture) pay(o order.Order, k, method string) (service.Result, error) {
	return f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)},
		service.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: method})
}

func (f *stripeFixture) cancel(o order.Order, k string) (service.Result, error) {
	return f.svc.Cancel(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)})
}

// faults sets paysim's run-level faults (Stripe meanings: ErrorRate saves a
// 500 before anything moved, DropRate commits and closes the connection)
// and its commit-500 rate.
func (f *stripeFixture) faults(t *testing.T, fs paysim.Faults, commit500 float64) {
	t.Helper()
	fs.TimeoutDelay = paysim.MaxDelay
	if err := f.sim.SetFaults(fs, commit500, 0); err != nil {
		t.Fatal(err)
	}
}

// captures returns how many charges of o paysim captured (its ledger, as
// orderstorm counts them).
func (f *stripeFixture) captures(t *testing.T, o order.Order) int {
	t.Helper()
	s, err := f.admin.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range s.Charges {
		if c.OrderID == o.ID && c.Status != paysim.ChargeFailed {
			n++
		}
	}
	return n
}

// refunds returns paysim's refunds of o's charges, in minor units each.
func (f *stripeFixture) refunds(t *testing.T, o order.Order) []int64 {
	t.Helper()
	s, err := f.admin.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, c := range s.Charges {
		mine[c.ID] = c.OrderID == o.ID
	}
	var out []int64
	for _, r := range s.Refunds { // Stripe mode names a refund's charge, not its order
		if mine[r.ChargeID] {
			out = append(out, r.Amount)
		}
	}
	return out
}

// stripeIntent is a PaymentIntent as GET /admin/stripe/ledger lists it.
type stripeIntent struct {
	ID             string            `json:"id"`
	Status         string            `json:"status"`
	AmountReceived int64             `json:"amount_received"`
	Metadata       map[string]string `json:"metadata"`
}

// intents returns paysim's PaymentIntents of o.
func (f *stripeFixture) intents(t *testing.T, o order.Order) []stripeIntent {
	t.Helper()
	resp, err := http.Get(f.url + "/admin/stripe/ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var led struct {
		PaymentIntents []stripeIntent `json:"payment_intents"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&led); err != nil {
		t.Fatal(err)
	}
	var out []stripeIntent
	for _, in := range led.PaymentIntents {
		if in.Metadata["orderly_order_id"] == o.ID {
			out = append(out, in)
		}
	}
	return out
}

// state returns o's state as stored.
func (f *stripeFixture) state(t *testing.T, o order.Order) order.State {
	t.Helper()
	got, err := f.st.GetOrder(context.Background(), "t1", o.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got.State
}

// paid pays o with pm_card_visa under key k and fails the test unless it
// ends PAID with one capture.
func (f *stripeFixture) paid(t *testing.T, o order.Order, k string) {
	t.Helper()
	if res, err := f.pay(o, k, "pm_card_visa"); err != nil || res.Order.State != order.Paid {
		t.Fatalf("pay = %+v, %v; want PAID", res, err)
	}
	if n := f.captures(t, o); n != 1 {
		t.Fatalf("%d captures after the pay, want 1", n)
	}
}

// TestStripeCommit500AfterCaptureIsPaidOnce: paysim captures, saves a 500
// under the confirm's key and answers it (replayed to every repeat, as
// Stripe does). The pay is a 503; its retry reads the PaymentIntent, sends
// no confirm, and the order is PAID with one capture.
func TestStripeCommit500AfterCaptureIsPaidOnce(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		o := f.order(t)
		if _, err := f.pay(o, "P", stripesim.MethodFaultCommit500); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay answered a saved 500 after the capture: %v, want EUnavailable", err)
		}
		if f.state(t, o) != order.Received || f.captures(t, o) != 1 {
			t.Fatalf("after the 500: order %s, %d captures; want RCVD, captured once", f.state(t, o), f.captures(t, o))
		}
		res, err := f.pay(o, "P", stripesim.MethodFaultCommit500)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry = %+v, %v; want PAID", res, err)
		}
		if n := f.captures(t, o); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
		if c := f.gw.keys(&f.gw.confirms); len(c) != 1 {
			t.Fatalf("confirms sent %v, want one: the retry reads the intent", c)
		}
	})
}

// TestStripeCommitThenDropIsPaidOnce: paysim captures and closes the
// connection before answering (the adapter never lets net/http resend).
// The pay is a 503; the retry reads the PaymentIntent and the order is
// PAID with one capture.
func TestStripeCommitThenDropIsPaidOnce(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		o := f.order(t)
		if _, err := f.pay(o, "D", stripesim.MethodFaultDropAfterCommit); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay whose answer was dropped: %v, want EUnavailable", err)
		}
		res, err := f.pay(o, "D", stripesim.MethodFaultDropAfterCommit)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry = %+v, %v; want PAID", res, err)
		}
		if n := f.captures(t, o); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
		if c := f.gw.keys(&f.gw.confirms); len(c) != 1 {
			t.Fatalf("confirms sent %v, want one: the retry reads the intent", c)
		}
	})
}

// TestStripeKeyInUseSettlesUnderTheSameKey: while the first confirm of an
// attempt still runs at paysim (held by its timeout fault), a second
// request joined to the attempt confirms under the same key and is
// answered 409 idempotency_key_in_use (retryable). Both end 503; once the
// held request has ended having saved nothing, a retry confirms under the
// same key (never a new one: nothing showed the key was spent) and the
// order is PAID with one capture.
func TestStripeKeyInUseSettlesUnderTheSameKey(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		ctx := context.Background()
		o := f.order(t)
		first := make(chan error, 1)
		go func() {
			_, err := f.pay(o, "A", stripesim.MethodFaultTimeout)
			first <- err
		}()
		waitFor(t, "paysim to hold the first confirm", func() bool {
			st, err := f.admin.Stats(ctx)
			return err == nil && st.FaultsInjected[paysim.FaultTimeout] > 0
		})
		if _, err := f.pay(o, "B", stripesim.MethodFaultTimeout); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("joined pay while the key is in use: %v, want EUnavailable", err)
		}
		if c := f.gw.keys(&f.gw.confirms); len(c) != 2 || c[0] != c[1] {
			t.Fatalf("confirms sent %v, want two under the one key of the attempt", c)
		}
		f.sim.StopDelays() // the held confirm ends: connection closed, nothing saved
		if err := <-first; apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("held pay: %v, want EUnavailable", err)
		}
		var res service.Result
		var err error
		// The key stays in use until paysim has cleared the held request:
		// retry until the answer is not "unavailable" (a bound for a loaded
		// machine, not a timing).
		waitFor(t, "the retry to find the key free", func() bool {
			res, err = f.pay(o, "A", stripesim.MethodFaultTimeout)
			return apperr.ErrorCode(err) != apperr.EUnavailable
		})
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry = %+v, %v; want PAID", res, err)
		}
		want := o.ID + "/pay/1/confirm"
		for _, k := range f.gw.keys(&f.gw.confirms) {
			if k != want {
				t.Fatalf("a confirm went under %q; every confirm must use %q", k, want)
			}
		}
		if n := f.captures(t, o); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
	})
}

// TestStripeKeyPastRetentionIsResolvedByReading: the prepare's answer is
// lost after paysim created the PaymentIntent (commit, then the connection
// closes), and the retry comes 25 hours later, when paysim has pruned the
// prepare's key (its retention, Stripe's, is 24h) and the key is older than
// ProviderKeyMaxAge (23h). The retry never resends that key (it would
// create a second PaymentIntent): it finds the intent by its reference,
// confirms it under a key of its own lease, and the order is PAID with one
// intent and one capture.
func TestStripeKeyPastRetentionIsResolvedByReading(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		o := f.order(t)
		f.faults(t, paysim.Faults{DropRate: 1}, 0)
		if _, err := f.pay(o, "R", "pm_card_visa"); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay whose prepare answer was dropped: %v, want EUnavailable", err)
		}
		f.faults(t, paysim.Faults{}, 0)
		if n := len(f.intents(t, o)); n != 1 {
			t.Fatalf("%d PaymentIntents after the dropped prepare, want 1", n)
		}
		f.clk.Advance(25 * time.Hour)
		res, err := f.pay(o, "R", "pm_card_visa")
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry past the key's retention = %+v, %v; want PAID", res, err)
		}
		if p := f.gw.keys(&f.gw.prepares); len(p) != 1 {
			t.Fatalf("prepares sent %v, want the first only", p)
		}
		if ins := f.intents(t, o); len(ins) != 1 || ins[0].Status != "succeeded" {
			t.Fatalf("PaymentIntents %+v, want one, succeeded", ins)
		}
		if n := f.captures(t, o); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
	})
}

// TestStripeDeclineLeavesTheOrderPayable: a declined card is a 402
// payment_declined; the order stays RCVD with its version moved on, and
// another payment method under a new client key pays it, once.
func TestStripeDeclineLeavesTheOrderPayable(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		ctx := context.Background()
		o := f.order(t)
		for i, m := range []string{"pm_card_chargeDeclinedInsufficientFunds", "pm_card_chargeDeclined"} {
			k := string(rune('1' + i))
			if _, err := f.pay(o, "X"+k, m); apperr.ErrorCode(err) != apperr.EDeclined {
				t.Fatalf("pay with %s: %v, want EDeclined", m, err)
			}
			// The same client key replays the decline; nothing is sent.
			sent := len(f.gw.keys(&f.gw.confirms))
			if _, err := f.pay(o, "X"+k, m); apperr.ErrorCode(err) != apperr.EDeclined || len(f.gw.keys(&f.gw.confirms)) != sent {
				t.Fatalf("replay of the decline: %v; want EDeclined without a confirm", err)
			}
		}
		got, err := f.st.GetOrder(ctx, "t1", o.ID)
		if err != nil || got.State != order.Received || got.Version != o.Version+2 || f.captures(t, o) != 0 {
			t.Fatalf("after two declines: %s v%d, %v, %d captures; want RCVD v%d, none", got.State, got.Version, err,
				f.captures(t, o), o.Version+2)
		}
		f.paid(t, o, "Y")
	})
}

// TestStripeAmountRefusedAtPrepareIsADecline: an amount Stripe refuses
// when the PaymentIntent is created (0: amount_too_small, not sent; above
// 99999999 minor units) is a final 402 decline, replayed
// under its key, with the order still RCVD and nothing captured — never a
// 503 that a client would retry for good (README, Connect Stripe's table).
func TestStripeAmountRefusedAtPrepareIsADecline(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		ctx := context.Background()
		for _, tc := range []struct {
			name      string
			unitPrice int64
			code      string
		}{
			{"zero", 0, "amount_too_small"},
			{"above Stripe's maximum", 100_000_000, "parameter_invalid_integer"}, // paysim's code, as the README's table lists
		} {
			t.Run(tc.name, func(t *testing.T) {
				in := input
				in.Items = []order.Item{{SKU: "sku", Quantity: 1, UnitPrice: tc.unitPrice}}
				res, err := f.svc.Create(ctx, "t1", idempotency.Key{}, in)
				if err != nil {
					t.Fatal(err)
				}
				o := res.Order
				for i := range 2 { // the first answer, then its replay
					_, err := f.pay(o, "A"+tc.name, "pm_card_visa")
					var e *apperr.Error
					if !errors.As(err, &e) || e.Code != apperr.EDeclined || !strings.Contains(e.Error(), tc.code) {
						t.Fatalf("pay %d of %d minor units: %v, want EDeclined naming %s", i, o.Amount, err, tc.code)
					}
				}
				got, err := f.st.GetOrder(ctx, "t1", o.ID)
				if err != nil || got.State != order.Received || f.captures(t, o) != 0 {
					t.Fatalf("order %s, %v, %d captures; want RCVD and none", got.State, err, f.captures(t, o))
				}
			})
		}
	})
}

// TestStripeCancelOfAPaidOrderRefundsOnce: cancelling a PAID order
// refunds its PaymentIntent once whatever paysim does to the refund — a
// 500 saved before anything moved, a 500 saved after the refund, the
// connection closed after the refund — and however often the cancel is
// retried, with its key or another.
func TestStripeCancelOfAPaidOrderRefundsOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		faults    paysim.Faults
		commit500 float64
	}{
		{name: "no fault"},
		{name: "saved 500 before the refund", faults: paysim.Faults{ErrorRate: 1}},
		{name: "saved 500 after the refund", commit500: 1},
		{name: "dropped after the refund", faults: paysim.Faults{DropRate: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
				o := f.order(t)
				f.paid(t, o, "P")
				f.faults(t, tc.faults, tc.commit500)
				_, err := f.cancel(o, "C")
				f.faults(t, paysim.Faults{}, 0)
				if err != nil && apperr.ErrorCode(err) != apperr.EUnavailable {
					t.Fatalf("cancel under the fault: %v, want CANCELLED or EUnavailable", err)
				}
				var res service.Result
				for range 3 {
					if res, err = f.cancel(o, "C"); err == nil {
						break
					}
				}
				if err != nil || res.Order.State != order.Cancelled {
					t.Fatalf("cancel retried = %+v, %v; want CANCELLED", res, err)
				}
				if _, err := f.cancel(o, "C2"); err != nil && apperr.ErrorCode(err) != apperr.EInvalidTransition {
					t.Fatalf("a cancel under another key: %v", err)
				}
				if rs := f.refunds(t, o); len(rs) != 1 || rs[0] != o.Amount {
					t.Fatalf("refunds %v, want one of %d", rs, o.Amount)
				}
			})
		})
	}
}

// TestStripeRefundResentUnderALeaseKey: the refund's first answer is a 500
// paysim saved before anything moved (Stripe replays it to every repeat of
// the key), and FindRefund finds no refund under the attempt's reference.
// The cancel's retry refunds under a key of its own lease,
// "<order id>/refund/<keyhash8>.<fencing token>", never again under
// "<order id>/refund", and one refund lands.
func TestStripeRefundResentUnderALeaseKey(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		ctx := context.Background()
		o := f.order(t)
		f.paid(t, o, "P")
		f.faults(t, paysim.Faults{ErrorRate: 1}, 0)
		if _, err := f.cancel(o, "C"); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("cancel whose refund answered a saved 500: %v, want EUnavailable", err)
		}
		f.faults(t, paysim.Faults{}, 0)
		if a, err := f.st.GetAttempt(ctx, o.ID+"/refund"); err != nil || a.Status != payment.AttemptUnknown {
			t.Fatalf("refund attempt = %+v, %v; want unknown", a, err)
		}
		if rs := f.refunds(t, o); len(rs) != 0 {
			t.Fatalf("refunds %v after a 500 saved before the refund, want none", rs)
		}
		res, err := f.cancel(o, "C")
		if err != nil || res.Order.State != order.Cancelled {
			t.Fatalf("retry = %+v, %v; want CANCELLED", res, err)
		}
		keys := f.gw.keys(&f.gw.refunds)
		lease := regexp.MustCompile("^" + regexp.QuoteMeta(o.ID) + `/refund/[0-9a-f]{8}\.[0-9]+$`)
		if len(keys) != 2 || keys[0] != o.ID+"/refund" || !lease.MatchString(keys[1]) {
			t.Fatalf("refund keys %q, want %s/refund then %s/refund/<keyhash8>.<token>", keys, o.ID, o.ID)
		}
		if rs := f.refunds(t, o); len(rs) != 1 || rs[0] != o.Amount {
			t.Fatalf("refunds %v, want one of %d", rs, o.Amount)
		}
	})
}

// waitFor polls cond every 5ms until it holds, failing the test after 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
