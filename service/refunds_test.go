package service_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
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
		// One order.refunded per succeeded refund, in the feed, with the
		// amounts and the running total; replays and refusals wrote none.
		evs := assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid, event.OrderRefunded, event.OrderRefunded, event.OrderRefunded)
		for i, want := range []struct{ amount, refunded int64 }{{500, 500}, {700, 1200}, {300, 1500}} {
			r := evs[2+i].Refund
			if r == nil || r.Amount != want.amount || r.AmountRefunded != want.refunded || r.AmountCaptured != 1500 ||
				r.Currency != "EUR" || r.ProviderRef == "" || evs[2+i].Order.State != order.Paid {
				t.Fatalf("order.refunded %d = %+v (refund %+v), want %d refunded to %d of 1500", i, evs[2+i], r, want.amount, want.refunded)
			}
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

// TestRefundOfFulfilledAndCancelOfRefunded: a FULFILLED order is refunded
// in part (a return) and stays FULFILLED; a PAID order refunded in part and
// then cancelled gets only the rest refunded (the provider refunded exactly
// what was captured, once).
func TestRefundOfFulfilledAndCancelOfRefunded(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		in := service.RefundInput{Amount: 400, Currency: "EUR", Reason: "one item returned"}

		shipped := f.paidOrder(t)
		if _, err := f.svc.Fulfill(ctx, service.Call{TenantID: "t1", OrderID: shipped.ID, Key: key("ship")}); err != nil {
			t.Fatal(err)
		}
		res, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: shipped.ID, Key: key("ret")}, in)
		if err != nil || res.Totals.Refunded != 400 || res.Refund.Reason != in.Reason {
			t.Fatalf("refund of a fulfilled order = %+v, %v", res, err)
		}
		if o, _ := f.st.GetOrder(ctx, "t1", shipped.ID); o.State != order.Fulfilled {
			t.Fatalf("order %s after a return, want FULFILLED", o.State)
		}

		paid := f.paidOrder(t)
		if _, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: paid.ID, Key: key("part")}, in); err != nil {
			t.Fatal(err)
		}
		cres, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: paid.ID, Key: key("cancel")})
		if err != nil || cres.Order.State != order.Cancelled {
			t.Fatalf("cancel of a partly refunded order = %+v, %v", cres, err)
		}
		if got := f.refundedAtProvider(t, paid); got != 1500 {
			t.Fatalf("the provider refunded %d of 1500 in all, want 1500 (400, then the rest)", got)
		}
		if _, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: paid.ID, Key: key("late")}, in); apperr.ErrorCode(err) != apperr.EInvalidTransition {
			t.Fatalf("a refund of a cancelled order = %v, want invalid_transition", err)
		}
		// The cancel's refund recorded what it refunded: its attempt, the
		// order's totals (closed: nothing more fits) and its event.
		if a, err := f.st.GetAttempt(ctx, paid.ID+"/refund"); err != nil || a.Amount != 1100 || a.Status != payment.AttemptSucceeded {
			t.Fatalf("the cancel's refund attempt = %+v, %v; want 1100 succeeded", a, err)
		}
		if tot, err := f.st.(store.RefundStore).RefundTotals(ctx, "t1", paid.ID); err != nil ||
			tot != (store.RefundTotals{Captured: 1500, Reserved: 1500, Refunded: 1500}) {
			t.Fatalf("totals after the cancel = %+v, %v; want 1500 captured, reserved and refunded", tot, err)
		}
		if got, err := f.svc.Get(ctx, "t1", paid.ID); err != nil || *got.AmountCaptured != 1500 || *got.AmountRefunded != 1500 {
			t.Fatalf("order after the cancel = %+v, %v; want 1500 of 1500 refunded", got, err)
		}
		evs := assertHistory(t, f, paid.ID, event.OrderCreated, event.OrderPaid, event.OrderRefunded, event.OrderCancelled)
		if r := evs[3].Refund; r == nil || r.ID != paid.ID+"/refund" || r.Amount != 1100 || r.AmountCaptured != 1500 ||
			r.AmountRefunded != 1500 || r.Currency != "EUR" || evs[3].Refunded == nil || !*evs[3].Refunded {
			t.Fatalf("order.cancelled = %+v (refund %+v); want refunded, the refund of 1100 bringing 1500 of 1500", evs[3], r)
		}

		// A cancel of a PAID order never refunded in part refunds it all.
		whole := f.paidOrder(t)
		if _, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: whole.ID, Key: key("cancel-whole")}); err != nil {
			t.Fatal(err)
		}
		evs = assertHistory(t, f, whole.ID, event.OrderCreated, event.OrderPaid, event.OrderCancelled)
		if r := evs[2].Refund; r == nil || r.Amount != 1500 || r.AmountRefunded != 1500 || r.AmountCaptured != 1500 {
			t.Fatalf("order.cancelled of a whole refund carries %+v, want 1500 of 1500", r)
		}
		if tot, err := f.st.(store.RefundStore).RefundTotals(ctx, "t1", whole.ID); err != nil || tot.Refunded != 1500 || tot.Reserved != 1500 {
			t.Fatalf("totals after a whole cancel = %+v, %v", tot, err)
		}
		if _, err := f.svc.Refund(ctx, service.Call{TenantID: "t1", OrderID: whole.ID, Key: key("late-whole")}, in); apperr.ErrorCode(err) != apperr.EInvalidTransition {
			t.Fatalf("a refund after a cancel = %v, want invalid_transition", err)
		}
	})
}

// lostRefund is the fixture's gateway whose next Refund takes effect and
// loses its answer (an unknown outcome).
type lostRefund struct {
	*gateway
	drop     atomic.Bool
	lookLost atomic.Bool // the next FindRefund is lost too
}

func (g *lostRefund) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	rf, err := g.gateway.Refund(ctx, req)
	if err == nil && g.drop.CompareAndSwap(true, false) {
		return payment.Refund{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	return rf, err
}

// FindRefund fails once with the answer (the lookup is lost too), so the
// outcome stays unknown past the request.
func (g *lostRefund) FindRefund(ctx context.Context, id string, ref payment.Reference) (payment.Refund, error) {
	if g.lookLost.CompareAndSwap(true, false) {
		return payment.Refund{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	return g.gateway.FindRefund(ctx, id, ref)
}

// TestPartialRefundUnknownOutcomeResolvedOnce: the provider refunded but
// the answer was lost; the retry with the same key asks (FindRefund by the
// refund's reference) instead of refunding again: one refund at the
// provider, one order.refunded, the totals counted once.
func TestPartialRefundUnknownOutcomeResolvedOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		gw := &lostRefund{gateway: f.gw}
		svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
			TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now})
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("lost")}
		in := service.RefundInput{Amount: 600, Currency: "EUR"}
		gw.drop.Store(true)
		gw.lookLost.Store(true)
		if _, err := svc.Refund(ctx, call, in); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("refund whose answer was lost = %v, want EUnavailable", err)
		}
		if got := f.refundedAtProvider(t, o); got != 600 {
			t.Fatalf("the provider refunded %d, want 600", got)
		}
		res, err := svc.Refund(ctx, call, in)
		if err != nil || res.Totals.Refunded != 600 || res.Totals.Reserved != 600 || res.Refund.Status != payment.AttemptSucceeded {
			t.Fatalf("retry = %+v, %v; want the refund found, 600 refunded", res, err)
		}
		if got := f.refundedAtProvider(t, o); got != 600 {
			t.Fatalf("after the retry the provider refunded %d, want 600 (once)", got)
		}
	})
}

// TestCancelWithAPartialRefundInFlight (issue 16): a partial refund whose
// outcome is unknown is in flight; a cancel then is order_busy (409), calls
// no provider and changes neither the order nor its refund totals; once the
// refund is resolved, the cancel refunds exactly the rest and closes the
// totals.
func TestCancelWithAPartialRefundInFlight(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		gw := &lostRefund{gateway: f.gw}
		svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
			TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now})
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("inflight")}
		in := service.RefundInput{Amount: 350, Currency: "EUR"}
		gw.drop.Store(true)
		gw.lookLost.Store(true)
		if _, err := svc.Refund(ctx, call, in); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("refund whose answer was lost = %v, want EUnavailable", err)
		}
		before, err := f.st.(store.RefundStore).RefundTotals(ctx, "t1", o.ID)
		if err != nil || before.Reserved != 350 || before.Refunded != 0 {
			t.Fatalf("totals with the refund in flight = %+v, %v; want 350 reserved, 0 refunded", before, err)
		}
		if _, err := svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("cancel-busy")}); apperr.ErrorCode(err) != apperr.EOrderBusy {
			t.Fatalf("cancel with a partial refund in flight = %v, want order_busy", err)
		}
		if after, err := f.st.(store.RefundStore).RefundTotals(ctx, "t1", o.ID); err != nil || after != before {
			t.Fatalf("totals after the refused cancel = %+v, %v; want %+v", after, err, before)
		}
		if got, _ := f.st.GetOrder(ctx, "t1", o.ID); got.State != order.Paid || got.Version != o.Version {
			t.Fatalf("order after the refused cancel = %s v%d, want PAID v%d", got.State, got.Version, o.Version)
		}
		if got := f.refundedAtProvider(t, o); got != 350 {
			t.Fatalf("the provider refunded %d, want 350 (the cancel called it not)", got)
		}
		if _, err := svc.Refund(ctx, call, in); err != nil {
			t.Fatalf("retry of the refund = %v", err)
		}
		if _, err := svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("cancel-after")}); err != nil {
			t.Fatalf("cancel after the refund settled = %v", err)
		}
		if got := f.refundedAtProvider(t, o); got != 1500 {
			t.Fatalf("the provider refunded %d in all, want 1500 (350, then 1150)", got)
		}
		evs := assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid, event.OrderRefunded, event.OrderCancelled)
		if r := evs[3].Refund; r == nil || r.Amount != 1150 || r.AmountRefunded != 1500 || r.AmountCaptured != 1500 {
			t.Fatalf("order.cancelled carries %+v, want the refund of 1150 bringing 1500 of 1500", r)
		}
	})
}

// TestCompleterResolvesAPartialRefund: a partial refund whose answer and
// lookup were both lost is left unknown; without any retry, the completer
// takes the key over, finds the refund by its reference, settles it (one
// refund at the provider, one order.refunded) and the key replays it.
func TestCompleterResolvesAPartialRefund(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		gw := &lostRefund{gateway: f.gw}
		svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
			TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now})
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("abandoned")}
		in := service.RefundInput{Amount: 250, Currency: "EUR"}
		gw.drop.Store(true)
		gw.lookLost.Store(true)
		if _, err := svc.Refund(ctx, call, in); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("refund whose answer was lost = %v, want EUnavailable", err)
		}
		if n, err := svc.RecoverAbandoned(ctx, 10); err != nil || n != 1 {
			t.Fatalf("completer took %d keys, %v; want 1", n, err)
		}
		got, err := svc.Get(ctx, "t1", o.ID)
		if err != nil || *got.AmountRefunded != 250 || *got.AmountCaptured != 1500 || got.Version != o.Version+1 {
			t.Fatalf("order after the completer = %+v, %v; want 250 of 1500 refunded, one version on", got, err)
		}
		if n := f.refundedAtProvider(t, o); n != 250 {
			t.Fatalf("the provider refunded %d, want 250 (once)", n)
		}
		res, err := svc.Refund(ctx, call, in)
		if err != nil || !res.Replayed || res.Totals.Refunded != 250 {
			t.Fatalf("the client's retry = %+v, %v; want the refund replayed", res, err)
		}
	})
}

// TestPartialRefundEventSettlesIt: a provider's refund.succeeded about a
// partial refund whose outcome is still unknown settles it (issue 16): the
// order stays PAID (a partial refund's event never cancels, as a cancel's
// refund event would), its refunded total grows by the amount once, one
// order.refunded names the provider's refund; the same refund's event
// again (another event id, under a lease-scoped resend key) is
// already_settled; the client's retry answers the refund, counted once.
func TestPartialRefundEventSettlesIt(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		gw := &lostRefund{gateway: f.gw}
		svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
			TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now})
		gw.drop.Store(true)
		gw.lookLost.Store(true)
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("ev")}
		in := service.RefundInput{Amount: 300, Currency: "EUR"}
		if _, err := svc.Refund(ctx, call, in); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("refund with a lost answer = %v, want EUnavailable", err)
		}
		pk := o.ID + "/refunds/" + idempotency.HashKey("ev")[:16]
		if a, err := f.st.GetAttempt(ctx, pk); err != nil || a.Status != payment.AttemptUnknown {
			t.Fatalf("attempt %s = %+v, %v; want unknown", pk, a, err)
		}
		for i, c := range []struct {
			key  string
			want service.InboxOutcome
		}{{pk, service.InboxApplied}, {pk + "/ab12cd34.2", service.InboxAlreadySettled}} {
			out, err := f.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: fmt.Sprintf("evt_r%d", i),
				Type: payment.EventRefundSucceeded, ObjectID: "re_partial", Reference: payment.Reference{OrderID: o.ID, Key: c.key},
				Amount: 300, Currency: "EUR"})
			if err != nil || out != c.want {
				t.Fatalf("refund event %d under %s = %q, %v; want %q", i, c.key, out, err, c.want)
			}
		}
		if got, err := f.svc.Get(ctx, "t1", o.ID); err != nil || got.State != order.Paid || *got.AmountRefunded != 300 {
			t.Fatalf("order after the events = %+v, %v; want PAID with 300 refunded", got, err)
		}
		if a, err := f.st.GetAttempt(ctx, pk); err != nil || a.Status != payment.AttemptSucceeded || a.ProviderRef != "re_partial" {
			t.Fatalf("attempt after the event = %+v, %v; want succeeded as re_partial", a, err)
		}
		if res, err := svc.Refund(ctx, call, in); err != nil || res.Totals.Refunded != 300 || res.Refund.ProviderRef != "re_partial" {
			t.Fatalf("retry = %+v, %v; want the refund re_partial, 300 refunded", res, err)
		}
		if res, err := svc.Refund(ctx, call, in); err != nil || !res.Replayed || res.Totals.Refunded != 300 {
			t.Fatalf("second retry = %+v, %v; want a replay, 300 refunded", res, err)
		}
		if got, err := f.svc.Get(ctx, "t1", o.ID); err != nil || got.State != order.Paid || *got.AmountRefunded != 300 {
			t.Fatalf("order after the retries = %+v, %v; want PAID with 300 refunded", got, err)
		}
		if ts := f.eventsOf(t, o); countType(ts, event.OrderRefunded) != 1 || countType(ts, event.OrderCancelled) != 0 {
			t.Fatalf("events %v; want one order.refunded, no cancel", ts)
		}
		if n := f.refundedAtProvider(t, o); n != 300 {
			t.Fatalf("the provider refunded %d, want 300 (once)", n)
		}
	})
}

// eventRacingRefund is the fixture's gateway whose Refund, once the
// provider made the refund and before its answer reaches the request, lets
// the provider's refund.succeeded webhook in (deliver).
type eventRacingRefund struct {
	*gateway
	deliver func(rf payment.Refund, req payment.RefundRequest)
}

func (g *eventRacingRefund) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	rf, err := g.gateway.Refund(ctx, req)
	if err == nil && g.deliver != nil {
		g.deliver(rf, req)
	}
	return rf, err
}

// TestPartialRefundEventRacingItsRequest: the webhook settles a partial
// refund while its request still holds the key's lease (the provider's
// answer not yet back); the request then finds it settled: its answer is
// the refund, the total counted once, one order.refunded.
func TestPartialRefundEventRacingItsRequest(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		gw := &eventRacingRefund{gateway: f.gw}
		var outs []service.InboxOutcome
		gw.deliver = func(rf payment.Refund, req payment.RefundRequest) {
			out, err := f.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: "evt_" + rf.ID,
				Type: payment.EventRefundSucceeded, ObjectID: rf.ID, Reference: req.Reference, Amount: req.Amount, Currency: "EUR"})
			if err != nil {
				t.Errorf("webhook during the request: %v", err)
			}
			outs = append(outs, out)
		}
		svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
			TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now})
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("race")}
		res, err := svc.Refund(ctx, call, service.RefundInput{Amount: 450, Currency: "EUR"})
		if err != nil || res.Totals.Refunded != 450 || res.Refund.Status != payment.AttemptSucceeded {
			t.Fatalf("refund = %+v, %v; want succeeded, 450 refunded", res, err)
		}
		if len(outs) != 1 || outs[0] != service.InboxApplied {
			t.Fatalf("webhook outcomes %v; want [applied]", outs)
		}
		if got, err := f.svc.Get(ctx, "t1", o.ID); err != nil || got.State != order.Paid || *got.AmountRefunded != 450 {
			t.Fatalf("order = %+v, %v; want PAID with 450 refunded", got, err)
		}
		if ts := f.eventsOf(t, o); countType(ts, event.OrderRefunded) != 1 {
			t.Fatalf("events %v; want one order.refunded", ts)
		}
		if res, err := svc.Refund(ctx, call, service.RefundInput{Amount: 450, Currency: "EUR"}); err != nil || !res.Replayed || res.Totals.Refunded != 450 {
			t.Fatalf("retry = %+v, %v; want a replay of 450 refunded", res, err)
		}
	})
}

// TestPartialRefundEventsRaceRetries: after a partial refund's answer was
// lost, 8 deliveries of its refund.succeeded (distinct event ids) and 4
// client retries under its key run at once, on goroutines. The guarded
// settlement counts it once: exactly one delivery is applied (the others
// already_settled) or none when a retry settled it first; every retry that
// answers shows 300 refunded; the order holds 300 refunded, one
// order.refunded, one refund at the provider.
func TestPartialRefundEventsRaceRetries(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.paidOrder(t)
		gw := &lostRefund{gateway: f.gw}
		svc := service.New(f.st, gw, simulator.NewWarehouse(), service.Config{KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute,
			TombstoneTTL: 2 * time.Hour, LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second, Now: f.clk.Now})
		gw.drop.Store(true)
		gw.lookLost.Store(true)
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("storm")}
		in := service.RefundInput{Amount: 300, Currency: "EUR"}
		if _, err := svc.Refund(ctx, call, in); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("refund with a lost answer = %v, want EUnavailable", err)
		}
		pk := o.ID + "/refunds/" + idempotency.HashKey("storm")[:16]
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			outcomes = map[service.InboxOutcome]int{}
		)
		for i := range 8 {
			wg.Go(func() {
				out, err := f.svc.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: fmt.Sprintf("evt_storm%d", i),
					Type: payment.EventRefundSucceeded, ObjectID: "re_storm", Reference: payment.Reference{OrderID: o.ID, Key: pk},
					Amount: 300, Currency: "EUR"})
				if err != nil {
					t.Errorf("delivery %d: %v", i, err)
					return
				}
				mu.Lock()
				outcomes[out]++
				mu.Unlock()
			})
		}
		for i := range 4 {
			wg.Go(func() {
				res, err := svc.Refund(ctx, call, in)
				if c := apperr.ErrorCode(err); err != nil && c != apperr.EKeyInProgress && c != apperr.EUnavailable {
					t.Errorf("retry %d = %v; want the refund or a retryable answer", i, err)
				} else if err == nil && res.Totals.Refunded != 300 {
					t.Errorf("retry %d = %+v; want 300 refunded", i, res.Totals)
				}
			})
		}
		wg.Wait()
		if outcomes[service.InboxApplied] > 1 || outcomes[service.InboxApplied]+outcomes[service.InboxAlreadySettled] != 8 {
			t.Fatalf("delivery outcomes %v; want at most one applied, the rest already_settled", outcomes)
		}
		if res, err := svc.Refund(ctx, call, in); err != nil || res.Totals.Refunded != 300 {
			t.Fatalf("last retry = %+v, %v; want 300 refunded", res, err)
		}
		if got, err := f.svc.Get(ctx, "t1", o.ID); err != nil || got.State != order.Paid || *got.AmountRefunded != 300 {
			t.Fatalf("order = %+v, %v; want PAID with 300 refunded", got, err)
		}
		if ts := f.eventsOf(t, o); countType(ts, event.OrderRefunded) != 1 {
			t.Fatalf("events %v; want one order.refunded", ts)
		}
		if n := f.refundedAtProvider(t, o); n != 300 {
			t.Fatalf("the provider refunded %d, want 300 (once)", n)
		}
	})
}
