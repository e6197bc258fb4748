package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// crashPay leaves a pay of o whose worker recorded its attempt and died
// before calling the provider: its key is in progress under a lease of
// 10s from now, its attempt pending.
func crashPay(t *testing.T, f *fixture, o order.Order, k string) {
	t.Helper()
	ctx := context.Background()
	now := f.clk.Now()
	claim := store.Claim{Record: idempotency.Record{TenantID: "t1", KeyHash: idempotency.HashKey(k), Fingerprint: "fp-" + k,
		ResourceID: o.ID}, TTL: time.Hour, Lease: 10 * time.Second}
	rec, ok, err := f.st.AcquireLease(ctx, claim)
	if err != nil || !ok {
		t.Fatalf("AcquireLease: %v %v", ok, err)
	}
	if _, err := f.st.RecordAttempt(ctx, store.LeaseOf(rec), payment.Attempt{ProviderKey: o.ID + "/pay/1", TenantID: "t1",
		OrderID: o.ID, Kind: payment.AttemptCharge, Status: payment.AttemptPending, Amount: o.Amount, Currency: o.Currency,
		PaymentMethod: testmode.MethodApproved, CreatedAt: now, UpdatedAt: now}, o.Version); err != nil {
		t.Fatal(err)
	}
}

// TestCompleterIsFair reproduces the starvation of issue 9: 60 unknown
// outcomes that cannot be resolved (the provider's lookup is down) must not
// starve a crashed pay behind them, and each of them backs off once asked.
func TestCompleterIsFair(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		const unknowns, limit = 60, 50
		f.gw.lookupDown.Store(true)
		for i := range unknowns {
			o := f.order(t)
			f.gw.dropNext.Store(true)
			if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key(fmt.Sprint("U", i))}, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("pay with a lost reply: %v, want EUnavailable", err)
			}
		}
		dead := f.order(t)
		crashPay(t, f, dead, "D")
		// Its worker may have sent the charge before dying: the completer
		// asks first, and the provider answers for this one.
		f.gw.lookupUp.Store(dead.ID+"/pay/1", true)
		f.clk.Advance(11 * time.Second) // the crashed pay's lease expires

		b, err := f.svc.CompleterBacklog(ctx)
		if err != nil || b.ExpiredLeases != 1 || b.UnknownDue != unknowns || b.UnknownDeferred != 0 || b.OldestDue.IsZero() {
			t.Fatalf("backlog = %+v, %v; want 1 expired lease and %d unknown outcomes due", b, err, unknowns)
		}
		paid := false
		for pass := 0; pass < 2 && !paid; pass++ {
			if _, err := f.svc.RecoverAbandoned(ctx, limit); err != nil {
				t.Fatalf("pass %d: %v", pass, err)
			}
			got, _ := f.st.GetOrder(ctx, "t1", dead.ID)
			paid = got.State == order.Paid
		}
		if !paid {
			t.Fatalf("the crashed pay was not recovered in two passes of %d behind %d unresolvable unknown outcomes", limit, unknowns)
		}
		if n := f.gw.Captures(dead.ID); n != 1 {
			t.Fatalf("crashed pay captured %d times, want 1", n)
		}
		// Every unknown outcome was asked once and now backs off: a pass
		// at the same instant takes nothing.
		if n, err := f.svc.RecoverAbandoned(ctx, limit); err != nil || n != 0 {
			t.Fatalf("a pass right after took %d keys (%v), want 0: asked keys back off", n, err)
		}
		b, err = f.svc.CompleterBacklog(ctx)
		if err != nil || b.ExpiredLeases != 0 || b.UnknownDue != 0 || b.UnknownDeferred != unknowns {
			t.Fatalf("backlog = %+v, %v; want %d unknown outcomes deferred", b, err, unknowns)
		}
		f.clk.Advance(service.DefaultCompleterBackoff + time.Second)
		if b, _ = f.svc.CompleterBacklog(ctx); b.UnknownDue != unknowns {
			t.Fatalf("backlog after the backoff = %+v, want %d unknown outcomes due", b, unknowns)
		}
	})
}

// TestUnresolvedAttemptNeedsAttention: an unknown charge the provider no
// longer knows of, past UnresolvedAfter, is never charged again: it is
// parked, listed, its key answers needs_attention, and its order moves
// neither to PAID nor to CANCELLED.
func TestUnresolvedAttemptNeedsAttention(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixtureWith(t, kind, func(c *service.Config) { c.UnresolvedAfter = 30 * time.Minute })
			ctx := context.Background()
			o := f.order(t)
			call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("A")}
			f.gw.lostBeforeProvider.Store(true)
			if _, err := f.svc.Pay(ctx, call, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("pay with a lost call: %v, want EUnavailable", err)
			}
			f.gw.lostBeforeProvider.Store(false)
			f.clk.Advance(31 * time.Minute)
			calls := f.gw.Calls()
			if n, err := f.svc.RecoverAbandoned(ctx, 10); err != nil || n != 1 {
				t.Fatalf("completer took %d (%v), want 1", n, err)
			}
			if f.gw.Calls() != calls || f.gw.Captures(o.ID) != 0 {
				t.Fatalf("the completer charged an unresolved attempt again (%d calls, %d captures)", f.gw.Calls()-calls, f.gw.Captures(o.ID))
			}
			if info, err := f.svc.KeyStatus(ctx, "t1", "A"); err != nil || info.State != service.KeyNeedsAttention {
				t.Fatalf("key = %+v, %v; want needs_attention", info, err)
			}
			parked, err := f.svc.AttemptsNeedingAttention(ctx, "t1", 10)
			if err != nil || len(parked) != 1 || parked[0].OrderID != o.ID || parked[0].Status != payment.AttemptNeedsAttention {
				t.Fatalf("attempts needing attention = %+v, %v; want the charge of %s", parked, err, o.ID)
			}
			if other, _ := f.svc.AttemptsNeedingAttention(ctx, "t2", 10); len(other) != 0 {
				t.Fatalf("another tenant sees %d parked attempts", len(other))
			}
			if b, _ := f.svc.CompleterBacklog(ctx); b.NeedsAttention != 1 || b.UnknownDue+b.UnknownDeferred != 0 {
				t.Fatalf("backlog = %+v; want 1 needing attention and no unknown outcome", b)
			}
			// The client's retry, a new pay and a cancel all leave the order
			// alone and charge nothing.
			if _, err := f.svc.Pay(ctx, call, payIn); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("retry: %v, want needs_attention", err)
			}
			if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("B")}, payIn); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("a new pay: %v, want needs_attention", err)
			}
			if _, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")}); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("cancel: %v, want needs_attention (the order is parked, not busy)", err)
			}
			if got, _ := f.st.GetOrder(ctx, "t1", o.ID); got.State != order.Received || f.gw.Calls() != calls {
				t.Fatalf("order %s, %d provider calls since; want RCVD and none", got.State, f.gw.Calls()-calls)
			}
		})
	}
}

// TestCancelRefundsACaptureAnswered5xx: a provider that captured and then
// answered 5xx leaves the attempt failed; a cancel asks and refunds before
// the order is CANCELLED.
func TestCancelRefundsACaptureAnswered5xx(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		f.gw.failAfterCapture.Store(true)
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("P")}, payIn); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay answered 5xx: %v, want EUnavailable", err)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("%d captures, want 1 (captured before the 5xx)", n)
		}
		res, err := f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")})
		if err != nil || res.Order.State != order.Cancelled {
			t.Fatalf("cancel = %+v, %v; want CANCELLED", res, err)
		}
		if n := f.gw.Refunds(o.ID); n != 1 {
			t.Fatalf("%d refunds, want 1: the order was cancelled with its charge captured", n)
		}

		// A 5xx that captured nothing: the cancel asks, finds no charge,
		// and refunds nothing.
		f.gw.failAfterCapture.Store(false)
		other := f.order(t)
		failing := payIn
		failing.PaymentMethod = simulator.MethodProviderError
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: other.ID, Key: key("P2")}, failing); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay answered 5xx: %v, want EUnavailable", err)
		}
		res, err = f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: other.ID, Key: key("C2")})
		if err != nil || res.Order.State != order.Cancelled || f.gw.Captures(other.ID) != 0 || f.gw.Refunds(other.ID) != 0 {
			t.Fatalf("cancel = %+v, %v with %d captures, %d refunds; want CANCELLED with none", res, err,
				f.gw.Captures(other.ID), f.gw.Refunds(other.ID))
		}
	})
}

// TestInProgressRetryAfterIsTheLeaseLeft: a duplicate of a request holding
// its key is told to come back when the holder's lease ends.
func TestInProgressRetryAfterIsTheLeaseLeft(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		o := f.order(t)
		crashPay(t, f, o, "H") // leased for 10s from now
		f.clk.Advance(3 * time.Second)
		_, err := f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key("H")}, payIn)
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.EKeyInProgress || e.RetryAfter != 7*time.Second {
			t.Fatalf("duplicate = %v (retry after %v), want EKeyInProgress after 7s", err, e)
		}
	})
}

// lostWarehouse loses every shipment before it reaches the warehouse.
type lostWarehouse struct {
	*simulator.Warehouse
	ships *atomic.Int64
}

func (w lostWarehouse) Ship(context.Context, fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	w.ships.Add(1)
	return fulfillment.Shipment{}, &fulfillment.WarehouseError{Err: fulfillment.ErrUnknownOutcome}
}

// TestUnresolvedShipmentNeedsAttention: a shipment whose outcome stayed
// unknown past UnresolvedAfter, which the warehouse does not know of, is
// never sent again; its order stays PAID and cannot be cancelled meanwhile.
func TestUnresolvedShipmentNeedsAttention(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk, wh, ships := newClock(), simulator.NewWarehouse(), new(atomic.Int64)
			env := testenv.New(t, kind, testenv.Options{Clock: clk})
			svc := service.New(env.Store, simulator.NewIntentGateway(), lostWarehouse{wh, ships}, service.Config{
				LeaseDuration: 10 * time.Second, UnresolvedAfter: time.Hour, Now: clk.Now})
			ctx := context.Background()
			res, err := svc.Create(ctx, "t1", idempotency.Key{}, input)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Order
			if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("P")}, payIn); err != nil {
				t.Fatal(err)
			}
			ship := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("S")}
			if _, err := svc.Fulfill(ctx, ship); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("fulfil with a lost call: %v, want EUnavailable", err)
			}
			clk.Advance(2 * time.Hour)
			calls := ships.Load()
			if _, err := svc.Fulfill(ctx, ship); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("retry past the unresolved age: %v, want needs_attention", err)
			}
			if _, err := svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")}); apperr.ErrorCode(err) != apperr.ENeedsAttention {
				t.Fatalf("cancel beside a parked shipment: %v, want needs_attention (the order is parked, not busy)", err)
			}
			got, _ := env.Store.GetOrder(ctx, "t1", o.ID)
			if got.State != order.Paid || wh.Shipments(o.ID) != 0 || ships.Load() != calls {
				t.Fatalf("order %s, %d shipments, %d shipment calls since; want PAID and none",
					got.State, wh.Shipments(o.ID), ships.Load()-calls)
			}
		})
	}
}

// flakyWarehouse answers the first Ship a retryable 503 that ships nothing
// and counts every Ship call.
type flakyWarehouse struct {
	*simulator.Warehouse
	ships *atomic.Int64
}

func (w flakyWarehouse) Ship(ctx context.Context, req fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	if w.ships.Add(1) == 1 {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Retryable: true, Err: errors.New("503: nothing shipped")}
	}
	return w.Warehouse.Ship(ctx, req)
}

// heldRefunds holds every Refund until release is closed, after closing
// entered: a cancel's refund in flight.
type heldRefunds struct {
	*simulator.IntentGateway
	entered, release chan struct{}
	once             sync.Once
}

func (g *heldRefunds) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.release
	return g.IntentGateway.Refund(ctx, req)
}

// TestShipmentRetryNeverOverlapsARefund reproduces the fulfil ‖ cancel race
// the 100 000-operation storm of issue 20 found (two orders shipped and
// refunded): a fulfil whose shipment was answered a retryable 503 (its
// attempt failed, its key released) is retried while a cancel's refund is in
// flight. The retry must not ship beside the refund — it answers order_busy
// — and the order ends CANCELLED with one refund and no shipment.
func TestShipmentRetryNeverOverlapsARefund(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			clk, wh, ships := newClock(), simulator.NewWarehouse(), new(atomic.Int64)
			gw := &heldRefunds{IntentGateway: simulator.NewIntentGateway(), entered: make(chan struct{}), release: make(chan struct{})}
			env := testenv.New(t, kind, testenv.Options{Clock: clk})
			svc := service.New(env.Store, gw, flakyWarehouse{wh, ships}, service.Config{LeaseDuration: 10 * time.Second, Now: clk.Now})
			ctx := context.Background()
			res, err := svc.Create(ctx, "t1", idempotency.Key{}, input)
			if err != nil {
				t.Fatal(err)
			}
			o := res.Order
			if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("P")}, payIn); err != nil {
				t.Fatal(err)
			}
			fulfil := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("F")}
			if _, err := svc.Fulfill(ctx, fulfil); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("fulfil answered a 503 by the warehouse: %v, want EUnavailable", err)
			}
			cancelled := make(chan error, 1)
			go func() {
				_, err := svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")})
				cancelled <- err
			}()
			select {
			case <-gw.entered:
			case err := <-cancelled:
				t.Fatalf("the cancel ended before refunding: %v", err)
			case <-time.After(2 * time.Minute):
				t.Fatal("the cancel never reached the refund")
			}
			_, err = svc.Fulfill(ctx, fulfil)
			close(gw.release)
			if apperr.ErrorCode(err) != apperr.EOrderBusy {
				t.Errorf("fulfil retried while the refund is in flight: %v, want order_busy", err)
			}
			if err := <-cancelled; err != nil {
				t.Fatalf("cancel: %v", err)
			}
			got, _ := env.Store.GetOrder(ctx, "t1", o.ID)
			if got.State != order.Cancelled || wh.Shipments(o.ID) != 0 || ships.Load() != 1 || gw.Refunds(o.ID) != 1 {
				t.Fatalf("order %s, %d shipments (%d Ship calls), %d refunds; want CANCELLED, none (1 call, the 503), 1",
					got.State, wh.Shipments(o.ID), ships.Load(), gw.Refunds(o.ID))
			}
		})
	}
}
