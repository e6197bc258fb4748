package fulfillment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orderly/orderly/order"
)

// SKUOutOfStock is the test SKU that Simulator never has in stock: a request
// containing it fails with a non-retryable *WarehouseError wrapping
// ErrOutOfStock.
const SKUOutOfStock = "sku_out_of_stock"

// errInjected is the cause inside the WarehouseError of a FailNext failure.
var errInjected = errors.New("simulated warehouse unavailable")

// Simulator is an in-memory Warehouse that behaves like a real one with
// idempotency keys. It ships every request except one containing
// SKUOutOfStock, and keeps a ledger keyed by IdempotencyKey that remembers
// shipments and final failures: a repeated key with the same OrderID and
// Items returns the same Shipment (same ID) or the same final error and
// never ships again; a repeated key with different parameters fails with a
// non-retryable *WarehouseError wrapping ErrIdempotencyKeyReused. Transient
// failures (FailNext, a context that has ended) are not remembered.
//
// A Simulator is safe for concurrent use. The zero value is not usable; call
// NewSimulator.
type Simulator struct {
	mu        sync.Mutex
	ledger    map[string]*shipEntry // by idempotency key
	shipments map[string]int        // order id → distinct shipments
	total     int                   // distinct shipments
	calls     int                   // Ship calls received
	failNext  int                   // Ship calls still to fail transiently
}

// shipEntry is the remembered outcome of a shipment key.
type shipEntry struct {
	orderID  string
	items    []order.Item
	shipment Shipment
	err      *WarehouseError // final failure; nil if shipped
}

var _ Warehouse = (*Simulator)(nil)

// NewSimulator returns an empty Simulator.
func NewSimulator() *Simulator {
	return &Simulator{
		ledger:    make(map[string]*shipEntry),
		shipments: make(map[string]int),
	}
}

// FailNext makes the next n Ship calls, whatever their keys, fail with a
// retryable *WarehouseError without shipping or remembering anything. A
// non-positive n cancels pending failures.
func (s *Simulator) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = max(n, 0)
}

// Ship implements Warehouse. Under the Simulator's lock it fails
// transiently if ctx has ended or FailNext is pending, then replays the
// outcome remembered for req.IdempotencyKey or ships and remembers the
// outcome. An empty IdempotencyKey or no Items fails with a non-retryable
// *WarehouseError.
func (s *Simulator) Ship(ctx context.Context, req ShipmentRequest) (Shipment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if err := ctx.Err(); err != nil {
		return Shipment{}, &WarehouseError{Retryable: true, Err: err}
	}
	if s.failNext > 0 {
		s.failNext--
		return Shipment{}, &WarehouseError{Retryable: true, Err: errInjected}
	}
	switch {
	case req.IdempotencyKey == "":
		return Shipment{}, &WarehouseError{Err: errors.New("idempotency key is required")}
	case len(req.Items) == 0:
		return Shipment{}, &WarehouseError{Err: errors.New("a shipment needs at least one item")}
	}
	if e, ok := s.ledger[req.IdempotencyKey]; ok {
		if e.orderID != req.OrderID || !slices.Equal(e.items, req.Items) {
			return Shipment{}, &WarehouseError{Err: fmt.Errorf("shipment key %q: %w", req.IdempotencyKey, ErrIdempotencyKeyReused)}
		}
		if e.err != nil {
			we := *e.err
			return Shipment{}, &we
		}
		return e.shipment, nil
	}

	e := &shipEntry{orderID: req.OrderID, items: slices.Clone(req.Items)}
	s.ledger[req.IdempotencyKey] = e
	for _, it := range req.Items {
		if it.SKU == SKUOutOfStock {
			e.err = &WarehouseError{Err: fmt.Errorf("%w: SKU %q cannot be shipped", ErrOutOfStock, it.SKU)}
			we := *e.err
			return Shipment{}, &we
		}
	}
	e.shipment = Shipment{
		ID:             newID("sh_"),
		IdempotencyKey: req.IdempotencyKey,
		OrderID:        req.OrderID,
		CreatedAt:      time.Now().UTC(),
	}
	s.shipments[req.OrderID]++
	s.total++
	return e.shipment, nil
}

// Shipments returns the number of distinct shipments ever made for orderID.
// It stays 1 however often a shipment is repeated under the same idempotency
// key.
func (s *Simulator) Shipments(orderID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shipments[orderID]
}

// TotalShipments returns the number of distinct shipments made for all
// orders.
func (s *Simulator) TotalShipments() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Calls returns the number of Ship calls received, including repeats and
// calls that failed.
func (s *Simulator) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return prefix + hex.EncodeToString(b[:])
}
