package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// forgetfulWarehouse is the simulator as a warehouse whose idempotency keys
// cannot be relied on (pruned, or never offered for lookup): every Ship is
// a new request, so only Find by the reference tells whether an earlier
// one shipped. It can lose the next Ship's answer after the shipment was
// made (lose), lose the next Ship before it reaches the warehouse (drop),
// and fail every Find (findDown). It counts Ship and Find calls.
type forgetfulWarehouse struct {
	*simulator.Warehouse
	mu                 sync.Mutex
	lose, drop         int
	findDown           bool
	ships, finds, sent int
}

func newForgetful() *forgetfulWarehouse {
	return &forgetfulWarehouse{Warehouse: simulator.NewWarehouse()}
}

func (w *forgetfulWarehouse) Ship(ctx context.Context, req fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	w.mu.Lock()
	w.ships++
	drop, lose := w.drop > 0, w.lose > 0
	if drop {
		w.drop--
	} else if lose {
		w.lose--
	}
	w.sent++
	req.IdempotencyKey = fmt.Sprintf("%s#%d", req.IdempotencyKey, w.sent) // a new request every time
	w.mu.Unlock()
	unknown := &fulfillment.WarehouseError{Err: fmt.Errorf("%w: the connection broke", fulfillment.ErrUnknownOutcome)}
	if drop {
		return fulfillment.Shipment{}, unknown
	}
	sh, err := w.Warehouse.Ship(ctx, req)
	if lose && err == nil {
		return fulfillment.Shipment{}, unknown
	}
	return sh, err
}

func (w *forgetfulWarehouse) Find(ctx context.Context, ref fulfillment.Reference) (fulfillment.Shipment, error) {
	w.mu.Lock()
	w.finds++
	down := w.findDown
	w.mu.Unlock()
	if down {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Retryable: true, Err: errors.New("503: search unavailable")}
	}
	return w.Warehouse.Find(ctx, ref)
}

func (w *forgetfulWarehouse) set(f func(w *forgetfulWarehouse)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
}

func (w *forgetfulWarehouse) counts() (ships, finds int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ships, w.finds
}

// paidOrder returns a service over wh and a PAID order.
func paidOrder(t *testing.T, kind string, wh fulfillment.Warehouse) (*service.Service, store.Store, order.Order) {
	t.Helper()
	clk := newClock()
	env := testenv.New(t, kind, testenv.Options{Clock: clk})
	svc := service.New(env.Store, simulator.NewIntentGateway(), wh, service.Config{LeaseDuration: 10 * time.Second, Now: clk.Now})
	ctx := context.Background()
	res, err := svc.Create(ctx, "t1", idempotency.Key{}, input)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: res.Order.ID, Key: key("P")}, payIn); err != nil {
		t.Fatal(err)
	}
	return svc, env.Store, res.Order
}

// recoverBy is how an unknown shipment outcome is driven to its end: by the
// client's retry under the same key, or by the completer.
var recoverBy = []struct {
	name string
	run  func(t *testing.T, svc *service.Service, call service.Call)
}{
	{"retry", func(t *testing.T, svc *service.Service, call service.Call) {
		if _, err := svc.Fulfill(context.Background(), call); err != nil {
			t.Fatalf("retried fulfil: %v", err)
		}
	}},
	{"completer", func(t *testing.T, svc *service.Service, _ service.Call) {
		if n, err := svc.RecoverAbandoned(context.Background(), 10); err != nil || n != 1 {
			t.Fatalf("completer took %d keys (%v), want 1", n, err)
		}
	}},
}

// TestUnknownShipmentIsFoundByReference: a Ship whose answer was lost after
// the warehouse shipped is resolved by Find with the attempt's reference,
// never by sending it again: one shipment, the order FULFILLED with the
// found shipment's id — although the warehouse would ship again under the
// same idempotency key.
func TestUnknownShipmentIsFoundByReference(t *testing.T) {
	for _, kind := range testenv.Kinds {
		for _, by := range recoverBy {
			t.Run(kind+"/"+by.name, func(t *testing.T) {
				t.Parallel()
				wh := newForgetful()
				svc, st, o := paidOrder(t, kind, wh)
				ctx := context.Background()
				call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("S")}
				wh.set(func(w *forgetfulWarehouse) { w.lose = 1 })
				if _, err := svc.Fulfill(ctx, call); apperr.ErrorCode(err) != apperr.EUnavailable {
					t.Fatalf("fulfil with a lost answer: %v, want EUnavailable", err)
				}
				if n := wh.Shipments(o.ID); n != 1 {
					t.Fatalf("the warehouse made %d shipments, want 1", n)
				}
				ships, finds := wh.counts()
				by.run(t, svc, call)
				got, _ := st.GetOrder(ctx, "t1", o.ID)
				sh, err := wh.Warehouse.Find(ctx, fulfillment.Reference{OrderID: o.ID, Key: o.ID + "/fulfill"})
				if err != nil {
					t.Fatalf("the shipment is not under the attempt's reference: %v", err)
				}
				a, err := st.GetAttempt(ctx, o.ID+"/fulfill")
				if err != nil {
					t.Fatal(err)
				}
				s2, f2 := wh.counts()
				if got.State != order.Fulfilled || wh.Shipments(o.ID) != 1 || s2 != ships || f2 == finds ||
					a.Status != payment.AttemptSucceeded || a.ProviderRef != sh.ID {
					t.Fatalf("order %s, %d shipments, %d Ship and %d Find calls since, attempt %s ref %q; "+
						"want FULFILLED, 1, no Ship and a Find, succeeded with %s",
						got.State, wh.Shipments(o.ID), s2-ships, f2-finds, a.Status, a.ProviderRef, sh.ID)
				}
			})
		}
	}
}

// TestUnknownShipmentNotFoundShipsAgain: a Ship lost before it reached the
// warehouse leaves nothing under its reference; Find says so, and the
// shipment is sent again under the same rules (same key and reference):
// one shipment, FULFILLED.
func TestUnknownShipmentNotFoundShipsAgain(t *testing.T) {
	for _, kind := range testenv.Kinds {
		for _, by := range recoverBy {
			t.Run(kind+"/"+by.name, func(t *testing.T) {
				t.Parallel()
				wh := newForgetful()
				svc, st, o := paidOrder(t, kind, wh)
				ctx := context.Background()
				call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("S")}
				wh.set(func(w *forgetfulWarehouse) { w.drop = 1 })
				if _, err := svc.Fulfill(ctx, call); apperr.ErrorCode(err) != apperr.EUnavailable {
					t.Fatalf("fulfil with a lost request: %v, want EUnavailable", err)
				}
				ships, finds := wh.counts()
				by.run(t, svc, call)
				got, _ := st.GetOrder(ctx, "t1", o.ID)
				s2, f2 := wh.counts()
				if got.State != order.Fulfilled || wh.Shipments(o.ID) != 1 || s2-ships != 1 || f2 == finds {
					t.Fatalf("order %s, %d shipments, %d Ship and %d Find calls since; want FULFILLED, 1, 1 Ship after a Find",
						got.State, wh.Shipments(o.ID), s2-ships, f2-finds)
				}
			})
		}
	}
}

// TestUnknownShipmentStaysUnknownWhileFindFails: while Find cannot answer,
// the shipment is neither sent again nor taken as failed: the attempt stays
// unknown and the order PAID; once Find answers, the one shipment is found.
func TestUnknownShipmentStaysUnknownWhileFindFails(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			wh := newForgetful()
			svc, st, o := paidOrder(t, kind, wh)
			ctx := context.Background()
			call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("S")}
			wh.set(func(w *forgetfulWarehouse) { w.lose, w.findDown = 1, true })
			if _, err := svc.Fulfill(ctx, call); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("fulfil with a lost answer: %v, want EUnavailable", err)
			}
			ships, _ := wh.counts()
			if _, err := svc.Fulfill(ctx, call); apperr.ErrorCode(err) != apperr.EUnavailable {
				t.Fatalf("retry while Find fails: %v, want EUnavailable", err)
			}
			a, err := st.GetAttempt(ctx, o.ID+"/fulfill")
			if s, _ := wh.counts(); err != nil || a.Status != payment.AttemptUnknown || s != ships {
				t.Fatalf("attempt %v (%v), %d Ship calls since; want unknown and none", a.Status, err, s-ships)
			}
			wh.set(func(w *forgetfulWarehouse) { w.findDown = false })
			if _, err := svc.Fulfill(ctx, call); err != nil {
				t.Fatalf("retry once Find answers: %v", err)
			}
			got, _ := st.GetOrder(ctx, "t1", o.ID)
			if s, _ := wh.counts(); got.State != order.Fulfilled || wh.Shipments(o.ID) != 1 || s != ships {
				t.Fatalf("order %s, %d shipments, %d Ship calls since; want FULFILLED, 1, none", got.State, wh.Shipments(o.ID), s-ships)
			}
		})
	}
}
