package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/service"
)

func (f *stripeFixture) refund(o order.Order, k string, amount int64) (service.RefundResult, error) {
	return f.svc.Refund(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)},
		service.RefundInput{Amount: amount, Currency: o.Currency})
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}

// TestStripeRacingPartialRefunds (issue 16) through the Stripe adapter
// against paysim's Stripe mode: 20 partial refunds of 100 race on an order
// that captured 1500; paysim's ledger shows 15 refunds of 100 (never above
// the captured amount), and each key replays its first answer.
func TestStripeRacingPartialRefunds(t *testing.T) {
	eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
		o := f.order(t)
		f.paid(t, o, "P")
		errs := make([]error, 20)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				for {
					_, err := f.refund(o, fmt.Sprintf("race-%d", i), 100)
					if c := apperr.ErrorCode(err); c == apperr.EUnavailable || c == apperr.EKeyInProgress || c == apperr.EOrderBusy {
						continue // nothing final: the client retries with the same key
					}
					errs[i] = err
					return
				}
			})
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			if err == nil {
				ok++
			} else if apperr.ErrorCode(err) != apperr.ERefundExceedsCaptured {
				t.Fatalf("refund %d = %v", i, err)
			}
			res, rerr := f.refund(o, fmt.Sprintf("race-%d", i), 100)
			if apperr.ErrorCode(rerr) != apperr.ErrorCode(err) || (rerr == nil && !res.Replayed) {
				t.Fatalf("replay of refund %d = %+v, %v; first answer %v", i, res, rerr, err)
			}
		}
		rs := f.refunds(t, o)
		if ok != 15 || len(rs) != 15 || sum(rs) != o.Amount {
			t.Fatalf("%d refunds answered, paysim refunded %v; want 15 of 100 (= %d)", ok, rs, o.Amount)
		}
	})
}

// TestStripePartialRefundUnderFaultsRefundsOnce: a partial refund whose
// first answer is a saved 500 (before or after the refund) or a dropped
// connection after it is retried with the same key: one refund of its
// amount lands, and a cancel afterwards refunds only the rest.
func TestStripePartialRefundUnderFaultsRefundsOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		faults    paysim.Faults
		commit500 float64
	}{
		{name: "saved 500 before the refund", faults: paysim.Faults{ErrorRate: 1}},
		{name: "saved 500 after the refund", commit500: 1},
		{name: "dropped after the refund", faults: paysim.Faults{DropRate: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStripeStore(t, nil, func(t *testing.T, f *stripeFixture) {
				o := f.order(t)
				f.paid(t, o, "P")
				f.faults(t, tc.faults, tc.commit500)
				_, err := f.refund(o, "R", 400)
				f.faults(t, paysim.Faults{}, 0)
				if err != nil && apperr.ErrorCode(err) != apperr.EUnavailable {
					t.Fatalf("refund under the fault: %v, want success or EUnavailable", err)
				}
				var res service.RefundResult
				for range 3 {
					if res, err = f.refund(o, "R", 400); err == nil {
						break
					}
				}
				if err != nil || res.Totals.Refunded != 400 {
					t.Fatalf("refund retried = %+v, %v; want 400 refunded", res, err)
				}
				if rs := f.refunds(t, o); len(rs) != 1 || rs[0] != 400 {
					t.Fatalf("paysim refunds %v, want one of 400", rs)
				}
				if cres, err := f.cancel(o, "C"); err != nil || cres.Order.State != order.Cancelled {
					t.Fatalf("cancel = %+v, %v", cres, err)
				}
				if rs := f.refunds(t, o); len(rs) != 2 || sum(rs) != o.Amount {
					t.Fatalf("paysim refunds %v after the cancel, want 400 and the rest (%d in all)", rs, o.Amount)
				}
			})
		})
	}
}
