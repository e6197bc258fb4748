package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
)

// nativeFixture is a service paying through paysim's native mode over HTTP
// (paysimclient.Intents) on a store of one kind.
type nativeFixture struct {
	svc   *service.Service
	gw    *lossCount
	sim   *paysim.Server
	admin *paysim.AdminClient
	url   string
}

func newNativeFixture(t *testing.T, kind string) *nativeFixture {
	t.Helper()
	l, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sim, err := paysim.NewServer(l, paysim.Config{Faults: paysim.Faults{TimeoutDelay: paysim.MaxDelay}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() { sim.StopDelays(); ts.Close(); l.Close() })
	gw, err := paysimclient.NewIntents(ts.URL, paysimclient.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	env := testenv.New(t, kind, testenv.Options{Clock: clk})
	cfg := service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 2 * time.Hour,
		LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: clk.Now}
	lc := &lossCount{Gateway: gw}
	return &nativeFixture{svc: service.New(env.Store, lc, simulator.NewWarehouse(), cfg), gw: lc, sim: sim, admin: paysim.NewAdminClient(ts.URL),
		url: ts.URL}
}

// lossCount counts the refunds whose answer was lost (an unknown outcome).
type lossCount struct {
	payment.Gateway
	lost atomic.Int64
	// afterRefund, if set, runs after paysim answered a Refund and before
	// the service sees the answer.
	afterRefund atomic.Pointer[func(payment.RefundRequest)]
}

func (g *lossCount) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	rf, err := g.Gateway.Refund(ctx, req)
	if h := g.afterRefund.Load(); h != nil {
		(*h)(req)
	}
	if payment.IsUnknownOutcome(err) {
		g.lost.Add(1)
	}
	return rf, err
}

// refunded returns paysim's refunds of o's charges (its ledger), in minor
// units each.
func (f *nativeFixture) refunded(t *testing.T, o order.Order) []int64 {
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
	for _, r := range s.Refunds {
		if mine[r.ChargeID] && r.Status != paysim.RefundFailed {
			out = append(out, r.Amount)
		}
	}
	return out
}

// failRefund fails paysim's refund made under provider key key (POST
// /admin/refunds/{id}/fail) and returns the webhook event paysim sends
// for it, as paysimclient parses it.
func (f *nativeFixture) failRefund(t *testing.T, key string) payment.ProviderEvent {
	t.Helper()
	s, err := f.admin.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	id := ""
	for _, r := range s.Refunds {
		if strings.HasPrefix(r.IdempotencyKey, key) {
			id = r.ID
		}
	}
	resp, err := http.Post(f.url+"/admin/refunds/"+id+"/fail", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rf paysim.Refund
	if err := json.NewDecoder(resp.Body).Decode(&rf); err != nil || resp.StatusCode != http.StatusOK || rf.Status != paysim.RefundFailed {
		t.Fatalf("failing refund %q at paysim: %d %+v %v", id, resp.StatusCode, rf, err)
	}
	body, _ := json.Marshal(paysim.WebhookEvent{ID: "evt_failed_" + rf.ID, Type: paysim.EventRefundFailed, Created: time.Now().Unix(),
		Data: paysim.WebhookData{ObjectID: rf.ID, IdempotencyKey: rf.IdempotencyKey, ChargeID: rf.ChargeID, OrderID: rf.OrderID,
			Amount: rf.Amount, Currency: rf.Currency}})
	ev, err := paysimclient.Webhooks{}.Parse(body)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestNativePartialRefundFails (issue 16) through paysim's native mode
// with a charge paid with paysim.MethodRefundFail: a partial refund that
// succeeded and then failed at paysim is reversed once by its
// refund.failed event (applied, then already_settled): nothing refunded,
// its key replays its first answer, the whole amount refunds afterwards;
// and a refund that failed before its lost answer was looked up is a
// refund_rejected, its amount released.
func TestNativePartialRefundFails(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newNativeFixture(t, kind)
			ctx := context.Background()
			res, err := f.svc.Create(ctx, "t1", key("create"), input)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Order
			in := payIn
			in.PaymentMethod = paysim.MethodRefundFail
			if res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay")}, in); err != nil || res.Order.State != order.Paid {
				t.Fatalf("pay = %+v, %v", res, err)
			}
			refund := func(k string, amount int64) (service.RefundResult, error) {
				return f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)},
					service.RefundInput{Amount: amount, Currency: o.Currency})
			}
			first, err := refund("R", 300)
			if err != nil || first.Totals.Refunded != 300 {
				t.Fatalf("refund = %+v, %v; want 300 refunded", first, err)
			}
			ev := f.failRefund(t, first.Refund.ProviderKey)
			for i, want := range []service.InboxOutcome{service.InboxApplied, service.InboxAlreadySettled} {
				ev.EventID = fmt.Sprintf("evt_failed_%d", i)
				if out, err := f.svc.TakeProviderEvent(ctx, ev); err != nil || out != want {
					t.Fatalf("refund.failed %d = %q, %v; want %q", i, out, err, want)
				}
			}
			if got, err := f.svc.Get(ctx, "t1", o.ID); err != nil || *got.AmountRefunded != 0 {
				t.Fatalf("order after the failure = %+v, %v; want nothing refunded", got, err)
			}
			if again, err := refund("R", 300); err != nil || !again.Replayed || again.Refund.ProviderRef != first.Refund.ProviderRef {
				t.Fatalf("replay after the failure = %+v, %v; want the first answer", again, err)
			}

			// A refund whose answer is lost fails at paysim before the lookup.
			hook := func(req payment.RefundRequest) { f.failRefund(t, req.Reference.Key) }
			f.gw.afterRefund.Store(&hook)
			if err := f.sim.SetFaults(paysim.Faults{DropRate: 1, TimeoutDelay: paysim.MaxDelay}); err != nil {
				t.Fatal(err)
			}
			_, err = refund("lost", 200)
			f.gw.afterRefund.Store(nil)
			if err := f.sim.SetFaults(paysim.Faults{}); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if i > 0 {
					_, err = refund("lost", 200)
				}
				if apperr.ErrorCode(err) != apperr.ERefundRejected || !strings.Contains(err.Error(), "failed") {
					t.Fatalf("answer %d of the refund that failed before its lookup = %v; want refund_rejected (failed)", i, err)
				}
			}
			if all, err := refund("ALL", o.Amount); err != nil || all.Totals.Refunded != o.Amount {
				t.Fatalf("refund of the whole amount = %+v, %v; want %d refunded", all, err, o.Amount)
			}
			if rs := f.refunded(t, o); len(rs) != 1 || rs[0] != o.Amount {
				t.Fatalf("paysim's refunds that did not fail %v, want one of %d", rs, o.Amount)
			}
		})
	}
}

// TestNativeRacingPartialRefunds (issue 16) through paysim's native mode:
// 20 partial refunds of 100 race on an order that captured 1500, with
// paysim dropping every other answer after acting; the clients retry with
// their keys; paysim's ledger shows 15 refunds of 100, never more, and
// each key replays its first final answer.
func TestNativeRacingPartialRefunds(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newNativeFixture(t, kind)
			ctx := context.Background()
			res, err := f.svc.Create(ctx, "t1", key("create"), input)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Order
			if res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay")}, payIn); err != nil || res.Order.State != order.Paid {
				t.Fatalf("pay = %+v, %v", res, err)
			}
			if err := f.sim.SetFaults(paysim.Faults{DropRate: 0.5, TimeoutDelay: paysim.MaxDelay}); err != nil {
				t.Fatal(err)
			}
			refund := func(i int) (service.RefundResult, error) {
				return f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(fmt.Sprintf("race-%d", i))},
					service.RefundInput{Amount: 100, Currency: o.Currency})
			}
			errs := make([]error, 20)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Go(func() {
					for range 200 {
						_, err := refund(i)
						if c := apperr.ErrorCode(err); c == apperr.EUnavailable || c == apperr.EKeyInProgress || c == apperr.EOrderBusy {
							errs[i] = err
							continue // nothing final: the client retries with the same key
						}
						errs[i] = err
						return
					}
				})
			}
			wg.Wait()
			if err := f.sim.SetFaults(paysim.Faults{}); err != nil {
				t.Fatal(err)
			}
			ok := 0
			for i, err := range errs {
				switch apperr.ErrorCode(err) {
				case "":
					ok++
				case apperr.ERefundExceedsCaptured:
				default:
					t.Fatalf("refund %d = %v", i, err)
				}
				res, rerr := refund(i)
				if apperr.ErrorCode(rerr) != apperr.ErrorCode(err) || (rerr == nil && !res.Replayed) {
					t.Fatalf("replay of refund %d = %+v, %v; first answer %v", i, res, rerr, err)
				}
			}
			if f.gw.lost.Load() == 0 {
				t.Fatal("no refund lost its answer: the fault never ran")
			}
			rs := f.refunded(t, o)
			if ok != 15 || len(rs) != 15 || sum(rs) != o.Amount {
				t.Fatalf("%d refunds answered, paysim refunded %v; want 15 of 100 (= %d)", ok, rs, o.Amount)
			}
		})
	}
}
