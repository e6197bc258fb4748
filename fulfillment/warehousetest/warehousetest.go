// Package warehousetest is the conformance suite of fulfillment.Warehouse,
// as payment/gatewaytest is for payment gateways: one suite every
// implementation passes, stating the seam's contract as tests:
//
//   - Ship stores the request's Reference on the shipment, and the same
//     idempotency key returns the same shipment and never ships twice, also
//     when many run at once; the same key with another request is a final
//     error wrapping fulfillment.ErrIdempotencyKeyReused;
//   - Find by reference returns the shipment, and Retrieve by its id;
//   - after a Ship whose answer was lost (an unknown outcome), Find by the
//     reference shows the one shipment made, and a repeat under the same
//     key ships nothing more;
//   - Find of a reference never used (or used by another order) is
//     fulfillment.ErrShipmentNotFound: nothing was shipped, and shipping
//     under that reference then ships once;
//   - an out-of-stock item is a final error wrapping fulfillment.ErrOutOfStock,
//     replayed under its key, and Find of its reference answers that
//     refusal or fulfillment.ErrShipmentNotFound, never a shipment;
//   - a request Validate refuses is a final error that ships nothing;
//   - Retrieve of an unknown id is fulfillment.ErrShipmentNotFound.
//
// Run it from an implementation's test with a Factory that returns a fresh
// Subject (a Warehouse with its test SKUs and optional hooks); tests that
// need a hook the Subject does not have are skipped.
package warehousetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/order"
)

// Subject is one Warehouse under test.
type Subject struct {
	// Warehouse is the implementation under test; required.
	Warehouse fulfillment.Warehouse
	// SKUInStock is a SKU the warehouse ships; required.
	SKUInStock string
	// SKUOutOfStock is a SKU the warehouse never ships (final
	// fulfillment.ErrOutOfStock); "" skips the out-of-stock test.
	SKUOutOfStock string
	// LoseAnswers, if set, runs call with the warehouse set so that every
	// Ship takes effect and then loses its answer (commit-then-drop), and
	// restores it afterwards. Nil skips the tests of lost answers.
	LoseAnswers func(t *testing.T, call func())
	// Shipments, if set, returns how many distinct shipments the warehouse
	// made for orderID (its own ledger), so the suite can count them
	// besides comparing ids.
	Shipments func(t *testing.T, orderID string) int
	// FindLag is how long Find may report a fresh shipment as a retryable
	// *fulfillment.WarehouseError (a lagging index); the suite retries Find
	// for up to that long. Zero: Find never lags.
	FindLag time.Duration
}

// Factory returns a fresh Subject for one test; it registers its own
// cleanup with t.
type Factory func(t *testing.T) Subject

// Run runs the suite. Subtests run in parallel, each with its own Subject,
// and use order ids unique to the run so that a shared warehouse is fine.
func Run(t *testing.T, newSubject Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s *suite)
	}{
		{"ShipStoresTheReference", testShip},
		{"ShipIsIdempotent", testShipIsIdempotent},
		{"ConcurrentShipsShipOnce", testConcurrentShips},
		{"KeyReusedWithAnotherRequest", testKeyReused},
		{"ShipRefusesBadRequests", testBadRequests},
		{"FindAfterALostShip", testLostShip},
		{"FindOfAnUnusedReference", testFindUnused},
		{"OutOfStockIsFinal", testOutOfStock},
		{"RetrieveOfAnUnknownShipment", testRetrieveUnknown},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, &suite{Subject: newSubject(t), run: fmt.Sprintf("%x", time.Now().UnixNano())})
		})
	}
}

var seq atomic.Int64

type suite struct {
	Subject
	run string
}

// req returns a fresh request of one in-stock item (or of skus): an order id
// unique to the run, the service's key and reference shapes.
func (s *suite) req(skus ...string) fulfillment.ShipmentRequest {
	id := fmt.Sprintf("ord_wht_%s_%d", s.run, seq.Add(1))
	if len(skus) == 0 {
		skus = []string{s.SKUInStock}
	}
	items := make([]order.Item, len(skus))
	for i, sku := range skus {
		items[i] = order.Item{SKU: sku, Quantity: 1, UnitPrice: 1500}
	}
	return fulfillment.ShipmentRequest{IdempotencyKey: id + "/fulfill", OrderID: id,
		Reference: fulfillment.Reference{OrderID: id, Key: id + "/fulfill"}, Items: items}
}

func (s *suite) ship(t *testing.T, req fulfillment.ShipmentRequest) fulfillment.Shipment {
	t.Helper()
	sh, err := s.Warehouse.Ship(t.Context(), req)
	if err != nil {
		t.Fatalf("Ship(%s): %v", req.Reference, err)
	}
	return sh
}

// find calls Find, retrying a retryable error for up to FindLag.
func (s *suite) find(t *testing.T, ref fulfillment.Reference) (fulfillment.Shipment, error) {
	t.Helper()
	deadline := time.Now().Add(s.FindLag)
	for {
		sh, err := s.Warehouse.Find(t.Context(), ref)
		if err == nil || !fulfillment.IsRetryable(err) || !time.Now().Before(deadline) {
			return sh, err
		}
		time.Sleep(min(s.FindLag/10, 200*time.Millisecond))
	}
}

// count checks the warehouse's own count of shipments of orderID, if it has
// one.
func (s *suite) count(t *testing.T, orderID string, want int) {
	t.Helper()
	if s.Shipments == nil {
		return
	}
	if got := s.Shipments(t, orderID); got != want {
		t.Errorf("the warehouse made %d shipments of %s, want %d", got, orderID, want)
	}
}

func testShip(t *testing.T, s *suite) {
	req := s.req()
	sh := s.ship(t, req)
	if sh.ID == "" || sh.Reference != req.Reference || sh.OrderID != req.OrderID || sh.CreatedAt.IsZero() ||
		sh.CreatedAt.Location() != time.UTC {
		t.Errorf("Ship = %+v; want an id, reference %s, order %s and a UTC time", sh, req.Reference, req.OrderID)
	}
	found, err := s.find(t, req.Reference)
	if err != nil || found.ID != sh.ID || found.Reference != req.Reference {
		t.Errorf("Find = %+v, %v; want shipment %s", found, err, sh.ID)
	}
	got, err := s.Warehouse.Retrieve(t.Context(), sh.ID)
	if err != nil || got.ID != sh.ID || got.Reference != req.Reference || got.OrderID != req.OrderID {
		t.Errorf("Retrieve = %+v, %v; want shipment %s", got, err, sh.ID)
	}
	s.count(t, req.OrderID, 1)
}

func testShipIsIdempotent(t *testing.T, s *suite) {
	req := s.req()
	first := s.ship(t, req)
	for range 3 {
		if again := s.ship(t, req); again.ID != first.ID {
			t.Fatalf("a repeat under key %s shipped %s, want the original %s", req.IdempotencyKey, again.ID, first.ID)
		}
	}
	s.count(t, req.OrderID, 1)
}

func testConcurrentShips(t *testing.T, s *suite) {
	req := s.req()
	const n = 8
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sh, err := s.Warehouse.Ship(t.Context(), req)
			ids[i], errs[i] = sh.ID, err
		})
	}
	wg.Wait()
	want := ""
	for i := range n {
		switch {
		case errs[i] != nil && fulfillment.IsRetryable(errs[i]):
			// The key was in use by a concurrent request: retryable, nothing
			// more shipped.
		case errs[i] != nil:
			t.Fatalf("concurrent Ship: %v", errs[i])
		case want == "":
			want = ids[i]
		case ids[i] != want:
			t.Fatalf("concurrent Ships under one key returned shipments %s and %s", want, ids[i])
		}
	}
	if want == "" {
		want = s.ship(t, req).ID
	}
	if found, err := s.find(t, req.Reference); err != nil || found.ID != want {
		t.Errorf("Find = %+v, %v; want %s", found, err, want)
	}
	s.count(t, req.OrderID, 1)
}

func testKeyReused(t *testing.T, s *suite) {
	req := s.req()
	first := s.ship(t, req)
	other := req
	other.Items = append([]order.Item{}, req.Items...)
	other.Items[0].Quantity = 2
	_, err := s.Warehouse.Ship(t.Context(), other)
	if !errors.Is(err, fulfillment.ErrIdempotencyKeyReused) || fulfillment.IsRetryable(err) {
		t.Errorf("the key with other items = %v, want a final fulfillment.ErrIdempotencyKeyReused", err)
	}
	if found, err := s.find(t, req.Reference); err != nil || found.ID != first.ID {
		t.Errorf("Find = %+v, %v; want %s", found, err, first.ID)
	}
	s.count(t, req.OrderID, 1)
}

func testBadRequests(t *testing.T, s *suite) {
	base := s.req()
	noRef := base
	noRef.Reference = fulfillment.Reference{}
	noItems := base
	noItems.Items = nil
	otherOrder := base
	otherOrder.Reference.OrderID = base.OrderID + "_other"
	for name, req := range map[string]fulfillment.ShipmentRequest{
		"no reference": noRef, "no items": noItems, "a reference of another order": otherOrder,
	} {
		_, err := s.Warehouse.Ship(t.Context(), req)
		var we *fulfillment.WarehouseError
		if !errors.As(err, &we) || we.Retryable || fulfillment.IsUnknownOutcome(err) {
			t.Errorf("Ship with %s = %v, want a final *fulfillment.WarehouseError", name, err)
		}
	}
	if _, err := s.find(t, base.Reference); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Find after refused requests = %v, want fulfillment.ErrShipmentNotFound", err)
	}
	s.count(t, base.OrderID, 0)
}

func testLostShip(t *testing.T, s *suite) {
	if s.LoseAnswers == nil {
		t.Skip("the subject cannot lose answers")
	}
	req := s.req()
	var err error
	s.LoseAnswers(t, func() { _, err = s.Warehouse.Ship(t.Context(), req) })
	if !fulfillment.IsUnknownOutcome(err) || fulfillment.IsRetryable(err) {
		t.Fatalf("Ship with a lost answer = %v, want an unknown outcome", err)
	}
	found, err := s.find(t, req.Reference)
	if err != nil || found.ID == "" || found.Reference != req.Reference {
		t.Fatalf("Find after the lost answer = %+v, %v; want the shipment made", found, err)
	}
	if again := s.ship(t, req); again.ID != found.ID {
		t.Errorf("a repeat under the key shipped %s, want the one found, %s", again.ID, found.ID)
	}
	if got, err := s.Warehouse.Retrieve(t.Context(), found.ID); err != nil || got.ID != found.ID {
		t.Errorf("Retrieve(%s) = %+v, %v", found.ID, got, err)
	}
	s.count(t, req.OrderID, 1)
}

func testFindUnused(t *testing.T, s *suite) {
	req := s.req()
	if _, err := s.find(t, req.Reference); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Fatalf("Find of an unused reference = %v, want fulfillment.ErrShipmentNotFound", err)
	}
	s.count(t, req.OrderID, 0)
	// Nothing shipped, so shipping under the reference ships once.
	sh := s.ship(t, req)
	if found, err := s.find(t, req.Reference); err != nil || found.ID != sh.ID {
		t.Errorf("Find after shipping = %+v, %v; want %s", found, err, sh.ID)
	}
	// The same key under another order is another reference.
	other := fulfillment.Reference{OrderID: req.OrderID + "_other", Key: req.Reference.Key}
	if _, err := s.find(t, other); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Find of %s = %v, want fulfillment.ErrShipmentNotFound", other, err)
	}
	s.count(t, req.OrderID, 1)
}

func testOutOfStock(t *testing.T, s *suite) {
	if s.SKUOutOfStock == "" {
		t.Skip("the subject has no out-of-stock SKU")
	}
	req := s.req(s.SKUInStock, s.SKUOutOfStock)
	for i := range 2 {
		_, err := s.Warehouse.Ship(t.Context(), req)
		if !errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err) {
			t.Fatalf("Ship %d with an out-of-stock item = %v, want a final fulfillment.ErrOutOfStock", i+1, err)
		}
	}
	_, err := s.find(t, req.Reference)
	if !errors.Is(err, fulfillment.ErrShipmentNotFound) &&
		(!errors.Is(err, fulfillment.ErrOutOfStock) || fulfillment.IsRetryable(err)) {
		t.Errorf("Find of a refused shipment = %v, want the final refusal or fulfillment.ErrShipmentNotFound", err)
	}
	s.count(t, req.OrderID, 0)
}

func testRetrieveUnknown(t *testing.T, s *suite) {
	if _, err := s.Warehouse.Retrieve(t.Context(), "sh_unknown_"+s.run); !errors.Is(err, fulfillment.ErrShipmentNotFound) {
		t.Errorf("Retrieve of an unknown id = %v, want fulfillment.ErrShipmentNotFound", err)
	}
}
