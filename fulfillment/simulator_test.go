package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/order"
)

// req returns a valid ShipmentRequest for orderID with the given SKUs.
func req(orderID string, skus ...string) ShipmentRequest {
	if len(skus) == 0 {
		skus = []string{"sku_mug"}
	}
	items := make([]order.Item, len(skus))
	for i, sku := range skus {
		items[i] = order.Item{SKU: sku, Quantity: 1, UnitPrice: 1500}
	}
	return ShipmentRequest{IdempotencyKey: orderID + "/fulfill", OrderID: orderID, Items: items}
}

func TestSimulatorShip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		req            ShipmentRequest
		wantOutOfStock bool
		wantFinal      bool // a non-retryable WarehouseError
	}{
		{name: "ships an order", req: req("ord_1")},
		{name: "ships several items", req: req("ord_1", "sku_mug", "sku_tee")},
		{name: "out-of-stock SKU fails finally", req: req("ord_1", "sku_mug", SKUOutOfStock), wantOutOfStock: true, wantFinal: true},
		{name: "missing idempotency key fails finally", req: ShipmentRequest{OrderID: "ord_1", Items: req("ord_1").Items}, wantFinal: true},
		{name: "no items fails finally", req: ShipmentRequest{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1"}, wantFinal: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			sh, err := s.Ship(context.Background(), tt.req)
			wantShipments := 0
			if tt.wantFinal {
				var we *WarehouseError
				if !errors.As(err, &we) || we.Retryable {
					t.Fatalf("err = %v, want non-retryable WarehouseError", err)
				}
				if IsRetryable(err) {
					t.Errorf("IsRetryable(%v) = true", err)
				}
				if got := errors.Is(err, ErrOutOfStock); got != tt.wantOutOfStock {
					t.Errorf("errors.Is(err, ErrOutOfStock) = %v, want %v (err %v)", got, tt.wantOutOfStock, err)
				}
			} else {
				if err != nil {
					t.Fatalf("Ship: %v", err)
				}
				wantShipments = 1
				if len(sh.ID) != len("sh_")+24 || sh.ID[:3] != "sh_" {
					t.Errorf("ID = %q, want sh_ and 24 hex digits", sh.ID)
				}
				if sh.IdempotencyKey != tt.req.IdempotencyKey || sh.OrderID != tt.req.OrderID {
					t.Errorf("Shipment = %+v, want key %q and order %q", sh, tt.req.IdempotencyKey, tt.req.OrderID)
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

func TestSimulatorShipOutOfStockMessageNamesTheSKU(t *testing.T) {
	t.Parallel()
	_, err := NewSimulator().Ship(context.Background(), req("ord_1", SKUOutOfStock))
	want := `fulfillment: warehouse error (final): fulfillment: out of stock: SKU "sku_out_of_stock" cannot be shipped`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}

func TestSimulatorShipRepeatedKeyReturnsSameShipmentAndShipsOnce(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	r := req("ord_1")
	first, err := s.Ship(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		again, err := s.Ship(context.Background(), req("ord_1")) // equal, not identical, items
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

func TestSimulatorShipRepeatedOutOfStockIsRemembered(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	r := req("ord_1", SKUOutOfStock)
	_, err1 := s.Ship(context.Background(), r)
	_, err2 := s.Ship(context.Background(), r)
	if !errors.Is(err1, ErrOutOfStock) || !errors.Is(err2, ErrOutOfStock) || err1.Error() != err2.Error() {
		t.Errorf("errs = %v, %v; want the same out-of-stock error twice", err1, err2)
	}
	if got := s.TotalShipments(); got != 0 {
		t.Errorf("TotalShipments = %d, want 0", got)
	}
}

func TestSimulatorShipRequestIsCopied(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	r := req("ord_1")
	first, err := s.Ship(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	r.Items[0].Quantity = 99 // the caller reuses its slice
	if again, err := s.Ship(context.Background(), req("ord_1")); err != nil || again != first {
		t.Errorf("replay after mutating the caller's items = %+v, %v; want %+v", again, err, first)
	}
}

func TestSimulatorShipConcurrentSameKeyShipsOnce(t *testing.T) {
	t.Parallel()
	const n = 50
	s := NewSimulator()
	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			sh, err := s.Ship(context.Background(), req("ord_1"))
			ids[i], errs[i] = sh.ID, err
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("goroutine %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("goroutine %d got shipment %q, goroutine 0 got %q", i, ids[i], ids[0])
		}
	}
	if got := s.Shipments("ord_1"); got != 1 {
		t.Errorf("Shipments = %d, want 1", got)
	}
	if got := s.Calls(); got != n {
		t.Errorf("Calls = %d, want %d", got, n)
	}
}

func TestSimulatorShipKeyReuseWithDifferentParamsFails(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*ShipmentRequest)
	}{
		{name: "different order", change: func(r *ShipmentRequest) { r.OrderID = "ord_2" }},
		{name: "different quantity", change: func(r *ShipmentRequest) { r.Items[0].Quantity = 2 }},
		{name: "extra item", change: func(r *ShipmentRequest) { r.Items = append(r.Items, order.Item{SKU: "sku_tee", Quantity: 1}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewSimulator()
			if _, err := s.Ship(context.Background(), req("ord_1")); err != nil {
				t.Fatal(err)
			}
			r := req("ord_1")
			tt.change(&r)
			_, err := s.Ship(context.Background(), r)
			if !errors.Is(err, ErrIdempotencyKeyReused) || IsRetryable(err) {
				t.Errorf("err = %v, want final ErrIdempotencyKeyReused", err)
			}
			if got := s.TotalShipments(); got != 1 {
				t.Errorf("TotalShipments = %d, want 1", got)
			}
		})
	}
}

func TestSimulatorFailNext(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	s.FailNext(2)
	r := req("ord_1")
	for i := range 2 {
		_, err := s.Ship(context.Background(), r)
		var we *WarehouseError
		if !errors.As(err, &we) || !we.Retryable || !IsRetryable(err) {
			t.Fatalf("call %d: err = %v, want retryable WarehouseError", i, err)
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
		if _, err := s.Ship(context.Background(), r); !IsRetryable(err) {
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

func TestSimulatorShipCancelledContextDoesNotShip(t *testing.T) {
	t.Parallel()
	s := NewSimulator()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Ship(ctx, req("ord_1"))
	if !errors.Is(err, context.Canceled) || !IsRetryable(err) {
		t.Fatalf("err = %v, want retryable WarehouseError wrapping context.Canceled", err)
	}
	if got := s.Shipments("ord_1"); got != 0 {
		t.Errorf("Shipments = %d, want 0", got)
	}
	if _, err := s.Ship(context.Background(), req("ord_1")); err != nil {
		t.Errorf("retry with the same key: %v", err)
	}
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"retryable warehouse error", &WarehouseError{Retryable: true, Err: errors.New("503")}, true},
		{"wrapped retryable warehouse error", fmt.Errorf("fulfill: %w", &WarehouseError{Retryable: true}), true},
		{"final warehouse error", &WarehouseError{Err: ErrOutOfStock}, false},
		{"bare ErrOutOfStock", ErrOutOfStock, false},
		{"bare deadline exceeded is unknown", context.DeadlineExceeded, false},
		{"unknown error", errors.New("boom"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := IsRetryable(tt.err); got != tt.want {
				t.Errorf("IsRetryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestWarehouseErrorMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  *WarehouseError
		want string
	}{
		{&WarehouseError{Retryable: true, Err: errors.New("503")}, "fulfillment: warehouse error (retryable): 503"},
		{&WarehouseError{}, "fulfillment: warehouse error (final)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}
