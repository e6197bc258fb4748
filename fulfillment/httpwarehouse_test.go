package fulfillment_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
)

// warehouse is a paysim server on a loopback httptest.Server.
type warehouse struct {
	*httptest.Server
	sim *paysim.Server
}

// startWarehouse serves a fresh paysim ledger with faults f until the test
// ends.
func startWarehouse(t *testing.T, f paysim.Faults) warehouse {
	t.Helper()
	l, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sim, err := paysim.NewServer(l, paysim.Config{Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.StopDelays()
		ts.Close()
		l.Close()
	})
	return warehouse{Server: ts, sim: sim}
}

// shipments returns the warehouse's number of shipments for orderID.
func (w warehouse) shipments(t *testing.T, orderID string) int {
	t.Helper()
	st, err := w.sim.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.ShipmentsByOrder[orderID]
}

func newWarehouse(t *testing.T, url string, opts ...fulfillment.HTTPOption) *fulfillment.HTTPWarehouse {
	t.Helper()
	w, err := fulfillment.NewHTTPWarehouse(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// shipReq returns a request to ship one of each SKU for orderID.
func shipReq(orderID string, skus ...string) fulfillment.ShipmentRequest {
	if len(skus) == 0 {
		skus = []string{"sku_mug"}
	}
	items := make([]order.Item, len(skus))
	for i, s := range skus {
		items[i] = order.Item{SKU: s, Quantity: 1, UnitPrice: 1500}
	}
	return fulfillment.ShipmentRequest{IdempotencyKey: orderID + "/fulfill", OrderID: orderID, Items: items}
}

func TestHTTPWarehouseShip(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	ctx := context.Background()
	sh, err := wh.Ship(ctx, shipReq("ord_1", "sku_mug", "sku_tee"))
	if err != nil {
		t.Fatalf("Ship: %v", err)
	}
	if len(sh.ID) != 27 || sh.ID[:3] != "sh_" || sh.IdempotencyKey != "ord_1/fulfill" || sh.OrderID != "ord_1" || sh.CreatedAt.Location() != time.UTC {
		t.Errorf("Shipment = %+v", sh)
	}
	if again, err := wh.Ship(ctx, shipReq("ord_1", "sku_mug", "sku_tee")); err != nil || again != sh {
		t.Errorf("repeat = %+v, %v; want %+v", again, err, sh)
	}
	if found, err := wh.Lookup(ctx, "ord_1/fulfill"); err != nil || found != sh {
		t.Errorf("Lookup = %+v, %v; want %+v", found, err, sh)
	}
	if _, err := wh.Ship(ctx, shipReq("ord_1", "sku_mug")); !errors.Is(err, fulfillment.ErrIdempotencyKeyReused) || fulfillment.IsRetryable(err) {
		t.Errorf("different items under the key = %v, want final ErrIdempotencyKeyReused", err)
	}
	if n := w.shipments(t, "ord_1"); n != 1 {
		t.Errorf("shipments = %d, want 1", n)
	}
}

func TestHTTPWarehouseOutOfStockIsFinalAndRemembered(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	req := shipReq("ord_1", "sku_mug", fulfillment.SKUOutOfStock)
	_, err := wh.Ship(context.Background(), req)
	if !errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err) || fulfillment.IsUnknownOutcome(err) {
		t.Fatalf("err = %v, want final ErrOutOfStock", err)
	}
	// The same message as the Simulator's.
	_, simErr := fulfillment.NewSimulator().Ship(context.Background(), req)
	if err.Error() != simErr.Error() {
		t.Errorf("err = %q, Simulator says %q", err, simErr)
	}
	if _, err := wh.Lookup(context.Background(), req.IdempotencyKey); !errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err) {
		t.Errorf("Lookup err = %v, want the remembered ErrOutOfStock", err)
	}
}

func TestHTTPWarehouse503IsRetryable(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	req := shipReq("ord_1", paysim.SKUFault503)
	_, err := wh.Ship(context.Background(), req)
	if !fulfillment.IsRetryable(err) || fulfillment.IsUnknownOutcome(err) {
		t.Fatalf("err = %v, want retryable", err)
	}
	if _, err := wh.Lookup(context.Background(), req.IdempotencyKey); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Lookup after a 503 = %v, want ErrShipmentNotFound", err)
	}
	if _, err := wh.Ship(context.Background(), req); err != nil {
		t.Errorf("retry: %v", err)
	}
	if n := w.shipments(t, "ord_1"); n != 1 {
		t.Errorf("shipments = %d, want 1", n)
	}
}

func TestHTTPWarehouseConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	wh := newWarehouse(t, "http://"+addr)
	_, err = wh.Ship(context.Background(), shipReq("ord_1"))
	var oe *net.OpError
	if !fulfillment.IsRetryable(err) || fulfillment.IsUnknownOutcome(err) || !errors.As(err, &oe) || oe.Op != "dial" {
		t.Errorf("err = %v, want a retryable error wrapping a dial error", err)
	}
}

func TestHTTPWarehouseDropAfterCommitIsUnknownThenLookupFindsTheShipment(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{})
	wh := newWarehouse(t, w.URL)
	ctx := context.Background()
	if _, err := wh.Lookup(ctx, "warm-up"); !errors.Is(err, fulfillment.ErrShipmentNotFound) { // leaves an idle connection to reuse
		t.Fatalf("warm-up Lookup = %v", err)
	}
	req := shipReq("ord_1", "sku_mug", paysim.SKUFaultDropAfterCommit)
	_, err := wh.Ship(ctx, req)
	var we *fulfillment.WarehouseError
	if !fulfillment.IsUnknownOutcome(err) || fulfillment.IsRetryable(err) || !errors.As(err, &we) {
		t.Fatalf("err = %v, want an unknown outcome in a non-retryable WarehouseError", err)
	}
	sh, err := wh.Lookup(ctx, req.IdempotencyKey)
	if err != nil || sh.OrderID != "ord_1" {
		t.Fatalf("Lookup = %+v, %v; want the shipment", sh, err)
	}
	if again, err := wh.Ship(ctx, req); err != nil || again != sh {
		t.Errorf("retry = %+v, %v; want %+v", again, err, sh)
	}
	if n := w.shipments(t, "ord_1"); n != 1 {
		t.Errorf("shipments = %d, want 1", n)
	}
}

func TestHTTPWarehouseTimeoutIsUnknown(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{TimeoutDelay: 30 * time.Second})
	wh := newWarehouse(t, w.URL, fulfillment.WithTimeout(200*time.Millisecond))
	ctx := context.Background()
	req := shipReq("ord_1", paysim.SKUFaultTimeout)
	_, err := wh.Ship(ctx, req)
	if !fulfillment.IsUnknownOutcome(err) || fulfillment.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want an unknown outcome caused by the deadline", err)
	}
	if _, err := wh.Lookup(ctx, req.IdempotencyKey); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Lookup = %v, want ErrShipmentNotFound (a timeout commits nothing)", err)
	}
	if _, err := wh.Ship(ctx, req); err != nil {
		t.Errorf("retry: %v", err)
	}
}

func TestHTTPWarehouseCancelledContextIsRetryable(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{})
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

func TestHTTPWarehouseLookupUnknownKey(t *testing.T) {
	t.Parallel()
	w := startWarehouse(t, paysim.Faults{})
	_, err := newWarehouse(t, w.URL).Lookup(context.Background(), "nope/fulfill")
	if !errors.Is(err, fulfillment.ErrShipmentNotFound) || fulfillment.IsRetryable(err) {
		t.Errorf("err = %v, want ErrShipmentNotFound", err)
	}
}

func TestHTTPWarehouseClassifiesAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		status          int
		body            string
		wantRetry       bool // Ship's error is retryable
		wantUnknown     bool // Ship's outcome is unknown
		wantLookupRetry bool // Lookup's error is retryable
	}{
		{name: "500", status: 500, wantRetry: true, wantLookupRetry: true},
		{name: "503", status: 503, body: `{"error":{"type":"api_error"}}`, wantRetry: true, wantLookupRetry: true},
		{name: "400", status: 400, body: `{"error":{"type":"invalid_request_error"}}`},
		{name: "409 without out_of_stock", status: 409},
		{name: "429", status: 429, wantRetry: true, wantLookupRetry: true},
		{name: "2xx with an unreadable body", status: 201, body: `[`, wantUnknown: true, wantLookupRetry: true},
		{name: "redirect", status: 307, wantUnknown: true, wantLookupRetry: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer ts.Close()
			wh := newWarehouse(t, ts.URL)
			_, err := wh.Ship(context.Background(), shipReq("ord_1"))
			if err == nil {
				t.Fatal("Ship succeeded")
			}
			if got := fulfillment.IsRetryable(err); got != tt.wantRetry {
				t.Errorf("IsRetryable(%v) = %v, want %v", err, got, tt.wantRetry)
			}
			if got := fulfillment.IsUnknownOutcome(err); got != tt.wantUnknown {
				t.Errorf("IsUnknownOutcome(%v) = %v, want %v", err, got, tt.wantUnknown)
			}
			if errors.Is(err, fulfillment.ErrOutOfStock) {
				t.Errorf("%v is out of stock", err)
			}
			_, err = wh.Lookup(context.Background(), "ord_1/fulfill")
			if got := fulfillment.IsRetryable(err); err == nil || got != tt.wantLookupRetry || fulfillment.IsUnknownOutcome(err) {
				t.Errorf("Lookup err = %v (retryable %v), want retryable %v and never unknown", err, got, tt.wantLookupRetry)
			}
		})
	}
}

func TestHTTPWarehouseRejectsBadRequestsWithoutACall(t *testing.T) {
	t.Parallel()
	wh := newWarehouse(t, "http://127.0.0.1:1")
	for _, req := range []fulfillment.ShipmentRequest{
		{OrderID: "ord_1", Items: shipReq("ord_1").Items},
		{IdempotencyKey: "ord_1/fulfill", OrderID: "ord_1"},
	} {
		_, err := wh.Ship(context.Background(), req)
		var we *fulfillment.WarehouseError
		if !errors.As(err, &we) || we.Retryable {
			t.Errorf("Ship(%+v) = %v, want a final WarehouseError", req, err)
		}
	}
	for _, u := range []string{"", "localhost:8090", "ftp://127.0.0.1", "http://"} {
		if _, err := fulfillment.NewHTTPWarehouse(u); err == nil {
			t.Errorf("NewHTTPWarehouse(%q) succeeded", u)
		}
	}
}
