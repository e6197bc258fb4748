package simulator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/fulfillment/warehousetest"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// shipReq returns a valid ShipmentRequest for orderID with the given SKUs.
func shipReq(orderID string, skus ...string) fulfillment.ShipmentRequest {
	if len(skus) == 0 {
		skus = []string{"sku_mug"}
	}
	items := make([]order.Item, len(skus))
	for i, sku := range skus {
		items[i] = order.Item{SKU: sku, Quantity: 1, UnitPrice: 1500}
	}
	return fulfillment.ShipmentRequest{IdempotencyKey: orderID + "/fulfill", OrderID: orderID,
		Reference: fulfillment.Reference{OrderID: orderID, Key: orderID + "/fulfill"}, Items: items}
}

func TestWarehouseShip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		req            fulfillment.ShipmentRequest
		wantOutOfStock bool
		wantFinal      bool // a non-retryable fulfillment.WarehouseError
	}{
		{name: "ships an order", req: shipReq("ord_1")},
		{name: "ships several items", req: shipReq("ord_1", "sku_mug", "sku_tee")},
		{name: "out-of-stock SKU fails finally", req: shipReq("ord_1", "sku_mug", testmode.SKUOutOfStock), wantOutOfStock: true, wantFinal: true},
		{name: "missing idempotency key fails finally", req: fulfillment.ShipmentRequest{OrderID: "ord_1", Reference: shipReq("ord_1").Reference, Items: shipReq("ord_1").Items}, wantFinal: true},
		{name: "missing reference fails finally", req: fulfillment.ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Items: shipReq("ord_1").Items}, wantFinal: true},
		{name: "no items fails finally", req: fulfillment.ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1", Reference: shipReq("ord_1").Reference}, wantFinal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewWarehouse()
			sh, err := s.Ship(context.Background(), tt.req)
			wantShipments := 0
			if tt.wantFinal {
				var we *fulfillment.WarehouseError
				if !errors.As(err, &we) || we.Retryable {
					t.Fatalf("err = %v, want non-retryable fulfillment.WarehouseError", err)
				}
				if fulfillment.IsRetryable(err) {
					t.Errorf("fulfillment.IsRetryable(%v) = true", err)
				}
				if got := errors.Is(err, fulfillment.ErrOutOfStock); got != tt.wantOutOfStock {
					t.Errorf("errors.Is(err, fulfillment.ErrOutOfStock) = %v, want %v (err %v)", got, tt.wantOutOfStock, err)
				}
			} else {
				if err != nil {
					t.Fatalf("Ship: %v", err)
				}
				wantShipments = 1
				if len(sh.ID) != len("sh_")+24 || sh.ID[:3] != "sh_" {
					t.Errorf("ID = %q, want sh_ and 24 hex digits", sh.ID)
				}
				if sh.IdempotencyKey != tt.req.IdempotencyKey || sh.OrderID != tt.req.OrderID || sh.Reference != tt.req.Reference {
					t.Errorf("Shipment = %+v, want key %q, order %q and reference %s", sh, tt.req.IdempotencyKey, tt.req.OrderID, tt.req.Reference)
				}
				if sh.CreatedAt.IsZero() || sh.CreatedAt.Location() != time.UTC {
					t.Errorf("CreatedAt = %v, want a UTC time", sh.CreatedAt)
				}
			}
			if got := s.Shipments("ord_1"); got != wantShipments {
				t.Errorf("Shipments = %d, want %d", got, wantShipments)
			}
			if got := s.TotalShipments(); got != wantShipments {
				t.Errorf("TotalShipments = %d, want %d", got, wantShipments)
			}
			if got := s.Calls(); got != 1 {
				t.Errorf("Calls = %d, want 1", got)
			}
		})
	}
}

func TestWarehouseShipOutOfStockMessageNamesTheSKU(t *testing.T) {
	t.Parallel()
	_, err := NewWarehouse().Ship(context.Background(), shipReq("ord_1", testmode.SKUOutOfStock))
	want := `fulfillment: warehouse error (final): fulfillment: out of stock: SKU "sku_out_of_stock" cannot be shipped`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestWarehouseShipRepeatedKeyReturnsSameShipmentAndShipsOnce(t *testing.T) {
	t.Parallel()
	s := NewWarehouse()
	r := shipReq("ord_1")
	first, err := s.Ship(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		again, err := s.Ship(context.Background(), shipReq("ord_1")) // equal, not identical, items
		if err != nil || again != first {
			t.Fatalf("repeat %d = %+v, %v; want %+v", i, again, err, first)
		}
	}
	if got := s.Shipments("ord_1"); got != 1 {
		t.Errorf("Shipments = %d, want 1", got)
	}
	if got := s.Calls(); got != 6 {
		t.Errorf("Calls = %d, want 6", got)
	}
}

func TestWarehouseShipRepeatedOutOfStockIsRemembered(t *testing.T) {
	t.Parallel()
	s := NewWarehouse()
	r := shipReq("ord_1", testmode.SKUOutOfStock)
	_, err1 := s.Ship(context.Background(), r)
	_, err2 := s.Ship(context.Background(), r)
	if !errors.Is(err1, fulfillment.ErrOutOfStock) || !errors.Is(err2, fulfillment.ErrOutOfStock) || err1.Error() != err2.Error() {
		t.Errorf("errs = %v, %v; want the same out-of-stock error twice", err1, err2)
	}
	if got := s.TotalShipments(); got != 0 {
		t.Errorf("TotalShipments = %d, want 0", got)
	}
}

func TestWarehouseShipRequestIsCopied(t *testing.T) {
	t.Parallel()
	s := NewWarehouse()
	r := shipReq("ord_1")
	first, err := s.Ship(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	r.Items[0].Quantity = 99 // the caller reuses its slice
	if again, err := s.Ship(context.Background(), shipReq("ord_1")); err != nil || again != first {
		t.Errorf("replay after mutating the caller's items = %+v, %v; want %+v", again, err, first)
	}
}

func TestWarehouseShipConcurrentSameKeyShipsOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	s := NewWarehouse()
	oneID(t, n, func() (string, error) {
		sh, err := s.Ship(context.Background(), shipReq("ord_1"))
		return sh.ID, err
	})
	if got := s.Shipments("ord_1"); got != 1 {
		t.Errorf("Shipments = %d, want 1", got)
	}
	if got := s.Calls(); got != n {
		t.Errorf("Calls = %d, want %d", got, n)
	}
}

func TestWarehouseShipKeyReuseWithDifferentParamsFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*fulfillment.ShipmentRequest)
	}{
		{name: "different order", change: func(r *fulfillment.ShipmentRequest) { r.OrderID, r.Reference.OrderID = "ord_2", "ord_2" }},
		{name: "different reference", change: func(r *fulfillment.ShipmentRequest) { r.Reference.Key = "ord_1/fulfill/2" }},
		{name: "different quantity", change: func(r *fulfillment.ShipmentRequest) { r.Items[0].Quantity = 2 }},
		{name: "extra item", change: func(r *fulfillment.ShipmentRequest) {
			r.Items = append(r.Items, order.Item{SKU: "sku_tee", Quantity: 1})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewWarehouse()
			if _, err := s.Ship(context.Background(), shipReq("ord_1")); err != nil {
				t.Fatal(err)
			}
			r := shipReq("ord_1")
			tt.change(&r)
			_, err := s.Ship(context.Background(), r)
			if !errors.Is(err, fulfillment.ErrIdempotencyKeyReused) || fulfillment.IsRetryable(err) {
				t.Errorf("err = %v, want final fulfillment.ErrIdempotencyKeyReused", err)
			}
			if got := s.TotalShipments(); got != 1 {
				t.Errorf("TotalShipments = %d, want 1", got)
			}
		})
	}
}

func TestWarehouseFailNext(t *testing.T) {
	t.Parallel()
	s := NewWarehouse()
	s.FailNext(2)
	r := shipReq("ord_1")
	for i := range 2 {
		_, err := s.Ship(context.Background(), r)
		var we *fulfillment.WarehouseError
		if !errors.As(err, &we) || !we.Retryable || !fulfillment.IsRetryable(err) {
			t.Fatalf("call %d: err = %v, want retryable fulfillment.WarehouseError", i, err)
		}
		if got := s.Shipments("ord_1"); got != 0 {
			t.Fatalf("call %d: Shipments = %d, want 0", i, got)
		}
	}
	first, err := s.Ship(context.Background(), r)
	if err != nil {
		t.Fatalf("third call: %v", err)
	}

	t.Run("failure does not replace a remembered shipment", func(t *testing.T) {
		s.FailNext(1)
		if _, err := s.Ship(context.Background(), r); !fulfillment.IsRetryable(err) {
			t.Fatalf("err = %v, want retryable", err)
		}
		if again, err := s.Ship(context.Background(), r); err != nil || again != first {
			t.Errorf("replay = %+v, %v; want %+v", again, err, first)
		}
	})

	t.Run("non-positive n cancels pending failures", func(t *testing.T) {
		s.FailNext(3)
		s.FailNext(0)
		if _, err := s.Ship(context.Background(), r); err != nil {
			t.Errorf("Ship: %v", err)
		}
	})

	if got := s.Shipments("ord_1"); got != 1 {
		t.Errorf("Shipments = %d, want 1", got)
	}
	if got := s.Calls(); got != 6 {
		t.Errorf("Calls = %d, want 6", got)
	}
}

func TestWarehouseShipCancelledContextDoesNotShip(t *testing.T) {
	t.Parallel()
	s := NewWarehouse()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Ship(ctx, shipReq("ord_1"))
	if !errors.Is(err, context.Canceled) || !fulfillment.IsRetryable(err) {
		t.Fatalf("err = %v, want retryable fulfillment.WarehouseError wrapping context.Canceled", err)
	}
	if got := s.Shipments("ord_1"); got != 0 {
		t.Errorf("Shipments = %d, want 0", got)
	}
	if _, err := s.Ship(context.Background(), shipReq("ord_1")); err != nil {
		t.Errorf("retry with the same key: %v", err)
	}
}

func TestWarehouseFindAndRetrieve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewWarehouse()
	req := shipReq("ord_1")
	sh, err := s.Ship(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Find(ctx, req.Reference); err != nil || got != sh {
		t.Errorf("Find = %+v, %v; want %+v", got, err, sh)
	}
	if got, err := s.Retrieve(ctx, sh.ID); err != nil || got != sh {
		t.Errorf("Retrieve = %+v, %v; want %+v", got, err, sh)
	}
	if _, err := s.Retrieve(ctx, "sh_unknown"); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Retrieve of an unknown id = %v, want fulfillment.ErrShipmentNotFound", err)
	}
	if _, err := s.Find(ctx, fulfillment.Reference{OrderID: "ord_9", Key: req.Reference.Key}); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Find with another order's id = %v, want fulfillment.ErrShipmentNotFound", err)
	}
	oos := shipReq("ord_2", testmode.SKUOutOfStock)
	if _, err := s.Ship(ctx, oos); !errors.Is(err, fulfillment.ErrOutOfStock) {
		t.Fatal(err)
	}
	if _, err := s.Find(ctx, oos.Reference); !errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err) {
		t.Errorf("Find of an out-of-stock reference = %v, want the remembered final error", err)
	}
	s.FailNext(1)
	flaky := shipReq("ord_3")
	if _, err := s.Ship(ctx, flaky); !fulfillment.IsRetryable(err) {
		t.Fatal(err)
	}
	if _, err := s.Find(ctx, flaky.Reference); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Find after a transient failure = %v, want fulfillment.ErrShipmentNotFound", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Find(cctx, req.Reference); !fulfillment.IsRetryable(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("Find with an ended context = %v, want retryable", err)
	}
	if _, err := s.Retrieve(cctx, sh.ID); !fulfillment.IsRetryable(err) || !errors.Is(err, context.Canceled) {
		t.Errorf("Retrieve with an ended context = %v, want retryable", err)
	}
}

// TestWarehouseLoseAnswers: a lost answer is an unknown outcome after the
// shipment was made; Find shows it, and a repeat ships nothing more.
func TestWarehouseLoseAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := NewWarehouse()
	req := shipReq("ord_1")
	s.LoseAnswers(1)
	if _, err := s.Ship(ctx, req); !fulfillment.IsUnknownOutcome(err) || fulfillment.IsRetryable(err) {
		t.Fatalf("Ship with a lost answer = %v, want an unknown outcome", err)
	}
	found, err := s.Find(ctx, req.Reference)
	if err != nil || s.Shipments("ord_1") != 1 {
		t.Fatalf("Find = %+v, %v with %d shipments; want the one shipment", found, err, s.Shipments("ord_1"))
	}
	if again, err := s.Ship(ctx, req); err != nil || again.ID != found.ID || s.Shipments("ord_1") != 1 {
		t.Errorf("repeat = %+v, %v with %d shipments; want %s and 1", again, err, s.Shipments("ord_1"), found.ID)
	}
}

// TestWarehouseConformance runs the fulfillment.Warehouse conformance suite
// against the in-process simulator, with its lost-answer hook.
func TestWarehouseConformance(t *testing.T) {
	warehousetest.Run(t, func(t *testing.T) warehousetest.Subject {
		w := NewWarehouse()
		return warehousetest.Subject{
			Warehouse:     w,
			SKUInStock:    "sku_mug",
			SKUOutOfStock: testmode.SKUOutOfStock,
			LoseAnswers: func(t *testing.T, call func()) {
				w.LoseAnswers(1 << 30)
				defer w.LoseAnswers(0)
				call()
			},
			Shipments: func(_ *testing.T, orderID string) int { return w.Shipments(orderID) },
		}
	})
}
