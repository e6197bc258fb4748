package service_test

import (
	"context"
	"fmt"
	"net/http/httptest"
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
	return &nativeFixture{svc: service.New(env.Store, lc, simulator.NewWarehouse(), cfg), gw: lc, sim: sim, admin: paysim.NewAdminClient(ts.URL)}
}

// lossCount counts the refunds whose answer was lost (an unknown outcome).
type lossCount struct {
	payment.Gateway
	lost atomic.Int64
}

func (g *lossCount) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	rf, err := g.Gateway.Refund(ctx, req)
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
		if mine[r.ChargeID] {
			out = append(out, r.Amount)
		}
	}
	return out
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
