package service_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/stripesim"
	"github.com/orderly/orderly/service"
)

// TestReplayedConfirm500ResolvesByRetrieve: the provider moved the money
// and answered a 500 it saved under the confirm's key (Stripe replays it to
// every repeat). The retry reads the intent recorded before confirming,
// sends no confirm, and ends PAID with exactly one capture.
func TestReplayedConfirm500ResolvesByRetrieve(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		f.gw.saved500.Store(true)
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("R")}
		if _, err := f.svc.Pay(ctx, call, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay answered a 500 after the payment: %v, want EUnavailable", err)
		}
		calls := f.gw.Calls()
		res, err := f.svc.Pay(ctx, call, payIn)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry while the 500 is replayed = %+v, %v; want PAID (read from the intent)", res, err)
		}
		if f.gw.Calls() != calls {
			t.Fatalf("the retry confirmed again (%d confirms); the intent showed the money moved", f.gw.Calls()-calls)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
		a, err := f.st.GetAttempt(ctx, o.ID+"/pay/1")
		if err != nil || a.IntentID == "" || a.Status != payment.AttemptSucceeded || a.KeySentAt.IsZero() {
			t.Fatalf("attempt = %+v, %v; want succeeded with its intent and KeySentAt recorded", a, err)
		}
	})
}

// TestLostPrepareAnswerResolvedByFind: Prepare created the intent but its
// answer was lost, so no intent id was recorded. The retry finds the
// intent by its Reference (never preparing a second one), records it, and
// pays once.
func TestLostPrepareAnswerResolvedByFind(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		f.gw.LoseAnswers(1) // the Prepare takes effect; its answer is lost
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("P")}
		if _, err := f.svc.Pay(ctx, call, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay with a lost prepare answer: %v, want EUnavailable", err)
		}
		if a, _ := f.st.GetAttempt(ctx, o.ID+"/pay/1"); a.IntentID != "" {
			t.Fatalf("attempt records intent %q though Prepare's answer was lost", a.IntentID)
		}
		res, err := f.svc.Pay(ctx, call, payIn)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry = %+v, %v; want PAID", res, err)
		}
		intents := 0
		for _, in := range f.gw.Intents() {
			if in.Reference.OrderID == o.ID {
				intents++
			}
		}
		if intents != 1 || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("%d intents, %d captures; want the one found by its reference, captured once", intents, f.gw.Captures(o.ID))
		}
	})
}

// TestOldProviderKeyIsNeverResent: a prepare whose outcome is unknown, older
// than ProviderKeyMaxAge (the provider may have pruned its key and would
// start a new request under it), is not sent again under that key: the
// retry finds nothing by the Reference and prepares under a key of its own
// lease, and no provider key is ever sent twice.
func TestOldProviderKeyIsNeverResent(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixtureWith(t, kind, func(c *service.Config) {
				c.ProviderKeyMaxAge, c.UnresolvedAfter = time.Hour, 48*time.Hour
			})
			ctx := context.Background()
			o := f.order(t)
			call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("O")}
			f.gw.prepareLost.Store(true)
			if _, err := f.svc.Pay(ctx, call, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("pay with a lost prepare: %v, want EUnavailable", err)
			}
			f.gw.prepareLost.Store(false)
			f.clk.Advance(2 * time.Hour)
			res, err := f.svc.Pay(ctx, call, payIn)
			if err != nil || res.Order.State != order.Paid || f.gw.Captures(o.ID) != 1 {
				t.Fatalf("retry past the key's max age = %+v, %v, %d captures; want PAID once", res, err, f.gw.Captures(o.ID))
			}
			f.gw.prepares.Range(func(k, n any) bool {
				if got := n.(*atomic.Int64).Load(); got != 1 {
					t.Errorf("prepare key %s sent %d times, want once", k, got)
				}
				return true
			})
			if n, ok := f.gw.prepares.Load(o.ID + "/pay/1/prepare"); !ok || n.(*atomic.Int64).Load() != 1 {
				t.Fatalf("the first prepare key was not sent exactly once")
			}
		})
	}
}

// TestReconfirmUnderNewKeyAfterSaved500 runs the Stripe adapter against
// paysim's Stripe mode: pm_card_paysim_error makes the first confirm of an
// intent save and answer a 500 before anything moved, which Stripe replays
// under that key for as long as it keeps it. The retry reads the intent
// (nothing moved) and confirms under a key of its own lease; the order ends
// PAID with one capture.
func TestReconfirmUnderNewKeyAfterSaved500(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
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
			env := testenv.New(t, kind, testenv.Options{})
			svc := service.New(env.Store, gw, simulator.NewWarehouse(), service.Config{LeaseDuration: 10 * time.Second})
			res, err := svc.Create(ctx, "t1", idempotency.Key{}, input)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Order
			in := service.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: stripesim.MethodFaultError}
			call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("S")}
			if _, err := svc.Pay(ctx, call, in); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("pay answered a saved 500: %v, want EUnavailable", err)
			}
			res, err = svc.Pay(ctx, call, in)
			if err != nil || res.Order.State != order.Paid {
				t.Fatalf("retry = %+v, %v; want PAID (confirmed under a new key)", res, err)
			}
			s, err := paysim.NewAdminClient(ts.URL).Ledger(ctx)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range s.Charges {
				if c.OrderID == o.ID && c.Status != paysim.ChargeFailed {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d captures at the provider, want 1", n)
			}
			a, err := env.Store.GetAttempt(ctx, o.ID+"/pay/1")
			if err != nil || a.IntentID == "" || a.ProviderRef != a.IntentID {
				t.Fatalf("attempt = %+v, %v; want it to record the intent it paid", a, err)
			}
			if _, err := gw.Retrieve(ctx, a.IntentID); err != nil {
				t.Fatalf("Retrieve %s: %v", a.IntentID, err)
			}
			_ = payment.IntentSucceeded
		})
	}
}

// TestSparePreparedIntentIsCancelled: two holders of one charge attempt
// each Prepare an intent, the first one's Prepare held until the second
// has prepared (under a key of its own lease), recorded its intent and
// confirmed it. The first holder's intent is the spare: it is cancelled at
// the provider (it moved no money), and only the recorded intent is
// confirmed, once. The holders are two requests with other idempotency
// keys joined to the attempt, or one key's holder and the retry that took
// its lease over.
func TestSparePreparedIntentIsCancelled(t *testing.T) {
	for _, tc := range []struct {
		name string
		// second runs the second holder once the first is held in Prepare.
		second func(t *testing.T, f *fixture, o order.Order) (service.Result, error)
		// firstErr is the error code the first holder ends with.
		firstErr apperr.Code
	}{
		{"joined key", func(t *testing.T, f *fixture, o order.Order) (service.Result, error) {
			return f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")}, payIn)
		}, ""},
		{"lease taken over", func(t *testing.T, f *fixture, o order.Order) (service.Result, error) {
			f.clk.Advance(11 * time.Second) // the first holder's lease lapses
			return f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, payIn)
		}, apperr.EKeyInProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, f *fixture) {
				ctx := context.Background()
				o := f.order(t)
				gt := newGate()
				f.gw.prepareGate.Store(gt)
				type outcome struct {
					res service.Result
					err error
				}
				first := make(chan outcome, 1)
				go func() {
					res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}, payIn)
					first <- outcome{res, err}
				}()
				<-gt.entered // the first holder recorded the attempt and is sending its Prepare
				res, err := tc.second(t, f, o)
				if err != nil || res.Order.State != order.Paid {
					t.Fatalf("second holder = %+v, %v; want PAID", res, err)
				}
				close(gt.release) // the first holder's Prepare now creates the spare intent
				a := <-first
				if tc.firstErr == "" && (a.err != nil || a.res.Order.State != order.Paid) {
					t.Fatalf("first holder = %+v, %v; want PAID", a.res, a.err)
				}
				if tc.firstErr != "" && apperr.ErrorCode(a.err) != tc.firstErr {
					t.Fatalf("first holder = %+v, %v; want %s", a.res, a.err, tc.firstErr)
				}
				att, err := f.st.GetAttempt(ctx, o.ID+"/pay/1")
				if err != nil || att.Status != payment.AttemptSucceeded || att.IntentID == "" {
					t.Fatalf("attempt = %+v, %v; want succeeded with its intent", att, err)
				}
				var mine []payment.Intent
				for _, in := range f.gw.Intents() {
					if in.Reference.OrderID == o.ID {
						mine = append(mine, in)
					}
				}
				if len(mine) != 2 {
					t.Fatalf("%d intents for the order, want 2 (one per holder)", len(mine))
				}
				for _, in := range mine {
					switch {
					case in.ID == att.IntentID && in.Status != payment.IntentSucceeded:
						t.Errorf("the recorded intent %s is %s, want succeeded", in.ID, in.Status)
					case in.ID != att.IntentID && in.Status != payment.IntentCanceled:
						t.Errorf("the spare intent %s is %s, want canceled at the provider", in.ID, in.Status)
					}
				}
				if n := f.gw.Captures(o.ID); n != 1 {
					t.Fatalf("%d captures, want 1", n)
				}
			})
		})
	}
}
