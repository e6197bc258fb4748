package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// orderEvents returns the order's events from the feed, oldest first,
// waiting (bounded) until it holds want of them: the PostgreSQL feed shows
// an event once every transaction that began before its own has ended.
func orderEvents(t *testing.T, f *fixture, orderID string, want int) []event.Event {
	t.Helper()
	es := f.st.(store.EventStore)
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := es.ListEvents(t.Context(), "t1", event.Filter{OrderID: orderID, Limit: event.MaxLimit})
		if err != nil {
			t.Fatalf("ListEvents: %v", err)
		}
		if len(page) >= want || time.Now().After(deadline) {
			out := make([]event.Event, len(page))
			for i, s := range page {
				if err := json.Unmarshal(s.Body, &out[i]); err != nil {
					t.Fatal(err)
				}
			}
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertHistory checks an order's events: one per change, numbered 1…n
// without gaps, each carrying the order at its version, of the types
// given, and the last one carrying the order as it is now.
func assertHistory(t *testing.T, f *fixture, orderID string, types ...event.Type) []event.Event {
	t.Helper()
	evs := orderEvents(t, f, orderID, len(types))
	if len(evs) != len(types) {
		t.Fatalf("order %s has %d events %v, want %v", orderID, len(evs), typesOf(evs), types)
	}
	cur, err := f.st.GetOrder(t.Context(), "t1", orderID)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Type != types[i] || e.Sequence != int64(i+1) || e.OrderVersion != e.Sequence || e.Order.Version != e.Sequence ||
			e.TenantID != "t1" || e.OrderID != orderID {
			t.Fatalf("event %d = %+v; want %s at sequence %d", i, e, types[i], i+1)
		}
	}
	if last := evs[len(evs)-1].Order; last.Version != cur.Version || last.State != cur.State {
		t.Fatalf("last event carries %s v%d, the order is %s v%d", last.State, last.Version, cur.State, cur.Version)
	}
	return evs
}

func typesOf(evs []event.Event) []event.Type {
	out := make([]event.Type, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// TestEveryChangeWritesOneEvent: creates, declines, payments, shipments and
// cancels each write exactly one event; replays and no-ops write none.
func TestEveryChangeWritesOneEvent(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		call := func(id, k string) service.Call { return service.Call{TenantID: "t1", OrderID: id, Key: key(k)} }
		must := func(_ service.Result, err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		res, err := f.svc.Create(ctx, "t1", key("create"), input)
		must(res, err)
		must(f.svc.Create(ctx, "t1", key("create"), input)) // replay
		o := res.Order
		declined := payIn
		declined.PaymentMethod = testmode.MethodDeclined
		if _, err := f.svc.Pay(ctx, call(o.ID, "pay-declined"), declined); err == nil {
			t.Fatal("a declined pay succeeded")
		}
		_, _ = f.svc.Pay(ctx, call(o.ID, "pay-declined"), declined) // replay of the decline
		must(f.svc.Pay(ctx, call(o.ID, "pay"), payIn))
		must(f.svc.Pay(ctx, call(o.ID, "pay"), payIn))       // replay
		must(f.svc.Pay(ctx, call(o.ID, "pay-again"), payIn)) // no-op on PAID
		must(f.svc.Fulfill(ctx, call(o.ID, "ship")))
		must(f.svc.Fulfill(ctx, call(o.ID, "ship-again"))) // no-op
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaymentFailed, event.OrderPaid, event.OrderFulfilled)

		refunded := f.order(t)
		must(f.svc.Pay(ctx, call(refunded.ID, "pay-r"), payIn))
		must(f.svc.Cancel(ctx, call(refunded.ID, "cancel-r")))
		evs := assertHistory(t, f, refunded.ID, event.OrderCreated, event.OrderPaid, event.OrderCancelled)
		if r := evs[2].Refunded; r == nil || !*r {
			t.Fatalf("cancel from PAID: refunded = %v, want true", r)
		}

		plain := f.order(t)
		must(f.svc.Cancel(ctx, call(plain.ID, "cancel-p")))
		must(f.svc.Cancel(ctx, call(plain.ID, "cancel-p2"))) // no-op
		evs = assertHistory(t, f, plain.ID, event.OrderCreated, event.OrderCancelled)
		if r := evs[1].Refunded; r == nil || *r {
			t.Fatalf("cancel from RCVD: refunded = %v, want false", r)
		}
	})
}

// TestRacingPaysWriteOneEvent: many pays of one order with different keys
// race; one charge, one order.paid.
func TestRacingPaysWriteOneEvent(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		o := f.order(t)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				_, _ = f.svc.Pay(context.Background(), service.Call{TenantID: "t1", OrderID: o.ID, Key: key(fmt.Sprint("race-", i))}, payIn)
			})
		}
		wg.Wait()
		got, err := f.st.GetOrder(t.Context(), "t1", o.ID)
		if err != nil || got.State != order.Paid {
			t.Fatalf("order = %+v, %v; want PAID", got, err)
		}
		assertHistory(t, f, o.ID, event.OrderCreated, event.OrderPaid)
	})
}
