package paysimclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/fulfillment/warehousetest"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
)

func TestWarehouseShip(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	ctx := context.Background()
	sh, err := wh.Ship(ctx, shipReq("ord_1", "sku_mug", "sku_tee"))
	if err != nil {
		t.Fatalf("Ship: %v", err)
	}
	if len(sh.ID) != 27 || sh.ID[:3] != "sh_" || sh.IdempotencyKey != "ord_1/fulfill" || sh.OrderID != "ord_1" ||
		sh.Reference != shipRef("ord_1") || sh.CreatedAt.Location() != time.UTC {
		t.Errorf("Shipment = %+v", sh)
	}
	if again, err := wh.Ship(ctx, shipReq("ord_1", "sku_mug", "sku_tee")); err != nil || again != sh {
		t.Errorf("repeat = %+v, %v; want %+v", again, err, sh)
	}
	if found, err := wh.Find(ctx, shipRef("ord_1")); err != nil || found != sh {
		t.Errorf("Find = %+v, %v; want %+v", found, err, sh)
	}
	if got, err := wh.Retrieve(ctx, sh.ID); err != nil || got != sh {
		t.Errorf("Retrieve = %+v, %v; want %+v", got, err, sh)
	}
	if _, err := wh.Ship(ctx, shipReq("ord_1", "sku_mug")); !errors.Is(err, fulfillment.ErrIdempotencyKeyReused) || fulfillment.IsRetryable(err) {
		t.Errorf("different items under the key = %v, want final ErrIdempotencyKeyReused", err)
	}
	if n := w.shipments(t, "ord_1"); n != 1 {
		t.Errorf("shipments = %d, want 1", n)
	}
}

func TestWarehouseOutOfStockIsFinalAndRemembered(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	req := shipReq("ord_1", "sku_mug", testmode.SKUOutOfStock)
	_, err := wh.Ship(context.Background(), req)
	if !errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err) || fulfillment.IsUnknownOutcome(err) {
		t.Fatalf("err = %v, want final ErrOutOfStock", err)
	}
	// The same message as the simulator's.
	_, simErr := simulator.NewWarehouse().Ship(context.Background(), req)
	if err.Error() != simErr.Error() {
		t.Errorf("err = %q, the simulator says %q", err, simErr)
	}
	if _, err := wh.Find(context.Background(), req.Reference); !errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err) {
		t.Errorf("Find err = %v, want the remembered ErrOutOfStock", err)
	}
}

func TestWarehouse503IsRetryable(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	req := shipReq("ord_1", paysim.SKUFault503)
	_, err := wh.Ship(context.Background(), req)
	if !fulfillment.IsRetryable(err) || fulfillment.IsUnknownOutcome(err) {
		t.Fatalf("err = %v, want retryable", err)
	}
	if _, err := wh.Find(context.Background(), req.Reference); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Find after a 503 = %v, want ErrShipmentNotFound", err)
	}
	if _, err := wh.Ship(context.Background(), req); err != nil {
		t.Errorf("retry: %v", err)
	}
	if n := w.shipments(t, "ord_1"); n != 1 {
		t.Errorf("shipments = %d, want 1", n)
	}
}

func TestWarehouseDropAfterCommitIsUnknownThenFindFindsTheShipment(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	ctx := context.Background()
	if _, err := wh.Find(ctx, shipRef("warm-up")); !errors.Is(err, fulfillment.ErrShipmentNotFound) { // leaves an idle connection to reuse
		t.Fatalf("warm-up Find = %v", err)
	}
	req := shipReq("ord_1", "sku_mug", paysim.SKUFaultDropAfterCommit)
	_, err := wh.Ship(ctx, req)
	var we *fulfillment.WarehouseError
	if !fulfillment.IsUnknownOutcome(err) || fulfillment.IsRetryable(err) || !errors.As(err, &we) {
		t.Fatalf("err = %v, want an unknown outcome in a non-retryable WarehouseError", err)
	}
	sh, err := wh.Find(ctx, req.Reference)
	if err != nil || sh.OrderID != "ord_1" || sh.Reference != req.Reference {
		t.Fatalf("Find = %+v, %v; want the shipment", sh, err)
	}
	if again, err := wh.Ship(ctx, req); err != nil || again != sh {
		t.Errorf("retry = %+v, %v; want %+v", again, err, sh)
	}
	if n := w.shipments(t, "ord_1"); n != 1 {
		t.Errorf("shipments = %d, want 1", n)
	}
}

func TestWarehouseTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{TimeoutDelay: paysimTimeoutDelay})
	ctx := context.Background()
	// Each try uses a new order: paysim's timeout fault fires once per key.
	for i, d := range timeouts() {
		wh := newWarehouse(t, w.URL, paysimclient.WithTimeout(d))
		req := shipReq(fmt.Sprintf("ord_%d", i), paysim.SKUFaultTimeout)
		_, err := wh.Ship(ctx, req)
		if fulfillment.IsRetryable(err) && errors.Is(err, context.DeadlineExceeded) {
			t.Logf("timeout %s ended the call before the request was written; doubling it", d)
			continue
		}
		if !fulfillment.IsUnknownOutcome(err) || fulfillment.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want an unknown outcome caused by the deadline", err)
		}
		if _, err := wh.Find(ctx, req.Reference); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
			t.Errorf("Find = %v, want ErrShipmentNotFound (a timeout commits nothing)", err)
		}
		if _, err := wh.Ship(ctx, req); err != nil {
			t.Errorf("retry: %v", err)
		}
		return
	}
	t.Fatal("no timeout let the request be written before it ended the call")
}

func TestWarehouseCancelledContextIsRetryable(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newWarehouse(t, w.URL).Ship(ctx, shipReq("ord_1"))
	if !fulfillment.IsRetryable(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want retryable context.Canceled", err)
	}
	if n := w.shipments(t, "ord_1"); n != 0 {
		t.Errorf("shipments = %d, want 0", n)
	}
}

func TestWarehouseFindAndRetrieveUnknown(t *testing.T) {
	t.Parallel()
	w := startProvider(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	if _, err := wh.Find(context.Background(), shipRef("nope")); !errors.Is(err, fulfillment.ErrShipmentNotFound) || fulfillment.IsRetryable(err) {
		t.Errorf("Find = %v, want ErrShipmentNotFound", err)
	}
	if _, err := wh.Retrieve(context.Background(), "sh_nope"); !errors.Is(err, fulfillment.ErrShipmentNotFound) || fulfillment.IsRetryable(err) {
		t.Errorf("Retrieve = %v, want ErrShipmentNotFound", err)
	}
}

// TestWarehouseConformance runs the fulfillment.Warehouse conformance suite
// against paysimclient.Warehouse and a real paysim server (its own ledger
// per test), losing answers with paysim's commit-then-drop fault.
func TestWarehouseConformance(t *testing.T) {
	warehousetest.Run(t, func(t *testing.T) warehousetest.Subject {
		p := startProvider(t, paysim.Faults{})
		return warehousetest.Subject{
			Warehouse:     newWarehouse(t, p.URL),
			SKUInStock:    "sku_mug",
			SKUOutOfStock: testmode.SKUOutOfStock,
			LoseAnswers: func(t *testing.T, call func()) {
				if err := p.sim.SetFaults(paysim.Faults{DropRate: 1}); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := p.sim.SetFaults(paysim.Faults{}); err != nil {
						t.Fatal(err)
					}
				}()
				call()
			},
			Shipments: p.shipments,
		}
	})
}

func TestWarehouseRejectsBadRequestsWithoutACall(t *testing.T) {
	t.Parallel()
	wh := newWarehouse(t, "http://127.0.0.1:1")
	for _, req := range []fulfillment.ShipmentRequest{
		{OrderID: "ord_1", Reference: shipRef("ord_1"), Items: shipReq("ord_1").Items},
		{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Reference: shipRef("ord_1")},
		{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Items: shipReq("ord_1").Items},
	} {
		_, err := wh.Ship(context.Background(), req)
		var we *fulfillment.WarehouseError
		if !errors.As(err, &we) || we.Retryable {
			t.Errorf("Ship(%+v) = %v, want a final WarehouseError", req, err)
		}
	}
	for _, u := range []string{"", "localhost:8090", "ftp://127.0.0.1", "http://"} {
		if _, err := paysimclient.NewWarehouse(u); err == nil {
			t.Errorf("NewWarehouse(%q) succeeded", u)
		}
	}
}
