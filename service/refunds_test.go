package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/service"
)

func (f *fixture) paidOrder(t *testing.T) order.Order {
	t.Helper()
	o := f.order(t)
	res, err := f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key("pay-" + o.ID)}, payIn)
	if err != nil || res.Order.State != order.Paid {
		t.Fatalf("pay = %+v, %v", res, err)
	}
	return res.Order
}

// refundedAtProvider is what the provider's intent of o says it refunded.
func (f *fixture) refundedAtProvider(t *testing.T, o order.Order) int64 {
	t.Helper()
	in, err := f.gw.Find(context.Background(), payment.Reference{OrderID: o.ID, Key: o.ID + "/pay/1"})
	if err != nil {
		t.Fatal(err)
	}
	return in.AmountRefunded
}

// TestPartialRefunds (issue 16): two partial refunds, then one bringing
// the total to what was captured; one more is refused with
// refund_exceeds_captured; each replays under its key with the same
// answer, a key reused with another amount is a 422; the order stays PAID
// and the provider refunded exactly the total.
func TestPartialRefunds(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		refund := func(k string, amount int64) (service.RefundResult, error) {
			return f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: o.ID,
				Key: idempotency.Key{Value: k, Fingerprint: fmt.Sprintf("fp-%s-%d", k, amount)}},
				service.RefundInput{Amount: amount, Currency: "EUR", Reason: "return"})
		}
		for i, step := range []struct {
			amount, refunded int64
		}{{500, 500}, {700, 1200}, {300, 1500}} {
			res, err := refund(fmt.Sprintf("r%d", i), step.amount)
			if err != nil || res.Refund.Status != payment.AttemptSucceeded || res.Totals.Refunded != step.refunded ||
				res.Totals.Captured != 1500 || res.Refund.ProviderRef == "" {
				t.Fatalf("refund %d of %d = %+v, %v; want succeeded, %d refunded of 1500", i, step.amount, res, err, step.refunded)
			}
		}
		if _, err := refund("r3", 1); apperr.ErrorCode(err) != apperr.ERefundExceedsCaptured {
			t.Fatalf("a refund past the captured amount = %v, want refund_exceeds_captured", err)
		}
		if _, err := refund("r3", 1); apperr.ErrorCode(err) != apperr.ERefundExceedsCaptured {
			t.Fatalf("its replay = %v, want the same refund_exceeds_captured", err)
		}
		res, err := refund("r1", 700)
		if err != nil || !res.Replayed || res.Refund.Amount != 700 || res.Refund.Status != payment.AttemptSucceeded {
			t.Fatalf("replay of r1 = %+v, %v; want the 700 refund, replayed", res, err)
		}
		if _, err := refund("r1", 800); apperr.ErrorCode(err) != apperr.EKeyReused {
			t.Fatalf("r1 with another amount = %v, want idempotency_key_reused", err)
		}
		if got := f.refundedAtProvider(t, o); got != 1500 {
			t.Fatalf("the provider refunded %d, want 1500", got)
		}
		now, err := f.st.GetOrder(ctx, "t1", o.ID)
		if err != nil || now.State != order.Paid || now.Version != o.Version+3 {
			t.Fatalf("order = %+v, %v; want PAID at version %d (one per refund)", now, err, o.Version+3)
		}
		if _, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("cur")},
			service.RefundInput{Amount: 1, Currency: "USD"}); apperr.ErrorCode(err) != apperr.EMismatch {
			t.Fatalf("a refund in another currency = %v, want mismatch", err)
		}
	})
}

// TestRacingPartialRefunds: 20 refunds of 100 race on an order that
// captured 1500: exactly 15 succeed, 5 are refused, the provider refunded
// 1500, and each replays under its key with its first answer.
func TestRacingPartialRefunds(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		call := func(i int) service.Call {
			return service.Call{TenantID: "t1", OrderID: o.ID, Key: key(fmt.Sprintf("race-%d", i))}
		}
		in := service.RefundInput{Amount: 100, Currency: "EUR"}
		errs := make([]error, 20)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				for {
					_, err := f.svc.Refund(ctx, call(i), in)
					if c := apperr.ErrorCode(err); c == apperr.EUnavailable || c == apperr.EKeyInProgress || c == apperr.EOrderBusy {
						continue // nothing final: the client retries with the same key
					}
					errs[i] = err
					return
				}
			})
		}
		wg.Wait()
		ok, refused := 0, 0
		for i, err := range errs {
			switch apperr.ErrorCode(err) {
			case "":
				ok++
			case apperr.ERefundExceedsCaptured:
				refused++
			default:
				t.Fatalf("refund %d = %v", i, err)
			}
			res, rerr := f.svc.Refund(ctx, call(i), in)
			if apperr.ErrorCode(rerr) != apperr.ErrorCode(err) || (rerr == nil && (!res.Replayed || res.Refund.Amount != 100)) {
				t.Fatalf("replay of refund %d = %+v, %v; first answer %v", i, res, rerr, err)
			}
		}
		if ok != 15 || refused != 5 {
			t.Fatalf("%d refunds succeeded and %d were refused, want 15 and 5", ok, refused)
		}
		if got := f.refundedAtProvider(t, o); got != 1500 {
			t.Fatalf("the provider refunded %d, want 1500", got)
		}
	})
}
