package simulator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// errInjected is the cause inside the WarehouseError of a FailNext failure.
var errInjected = errors.New("simulated warehouse unavailable")

// Warehouse is an in-memory fulfillment.Warehouse that behaves like a real
// one with idempotency keys. It ships every request except one containing
// testmode.SKUOutOfStock, and keeps a ledger keyed by IdempotencyKey that
// remembers shipments and final failures: a repeated key with the same
// Reference, OrderID and Items returns the same Shipment (same ID) or the
// same final error and never ships again; a repeated key with different
// parameters fails with a non-retryable *fulfillment.WarehouseError wrapping
// fulfillment.ErrIdempotencyKeyReused. Transient failures (FailNext, a
// context that has ended) are not remembered. Find reads the ledger by the
// request's Reference (the first request that carried it) and Retrieve by
// shipment id; neither lags. LoseAnswers makes Ship commit and then lose its
// answer (an unknown outcome).
//
// A Warehouse is safe for concurrent use. The zero value is not usable; call
// NewWarehouse.
type Warehouse struct {
	mu        sync.Mutex
	ledger    map[string]*shipEntry // by idempotency key
	byRef     map[fulfillment.Reference]*shipEntry
	byID      map[string]*shipEntry
	lose      int            // Ship calls still to commit and then lose their answer
	shipments map[string]int // order id → distinct shipments
	total     int            // distinct shipments
	calls     int            // Ship calls received
	failNext  int            // Ship calls still to fail transiently
}

// shipEntry is the remembered outcome of a shipment key.
type shipEntry struct {
	orderID  string
	ref      fulfillment.Reference
	items    []order.Item
	shipment fulfillment.Shipment
	err      *fulfillment.WarehouseError // final failure; nil if shipped
}

var _ fulfillment.Warehouse = (*Warehouse)(nil)

// NewWarehouse returns an empty Warehouse.
func NewWarehouse() *Warehouse {
	return &Warehouse{
		ledger:    make(map[string]*shipEntry),
		byRef:     make(map[fulfillment.Reference]*shipEntry),
		byID:      make(map[string]*shipEntry),
		shipments: make(map[string]int),
	}
}

// FailNext makes the next n Ship calls, whatever their keys, fail with a
// retryable *fulfillment.WarehouseError without shipping or remembering
// anything. A non-positive n cancels pending failures.
func (w *Warehouse) FailNext(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failNext = max(n, 0)
}

// LoseAnswers makes the next n Ship calls that pass validation take effect
// as usual (ship, or remember a refusal, or replay) and then answer a
// non-retryable *fulfillment.WarehouseError wrapping
// fulfillment.ErrUnknownOutcome, as a connection dropped after the commit
// would. A non-positive n cancels pending losses.
func (w *Warehouse) LoseAnswers(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lose = max(n, 0)
}

// Ship implements fulfillment.Warehouse. Under the Warehouse's lock it fails
// transiently if ctx has ended or FailNext is pending, then replays the
// outcome remembered for req.IdempotencyKey or ships and remembers the
// outcome (under the key, req.Reference if no earlier request carried it,
// and the shipment id). A request that req.Validate refuses fails with its
// non-retryable *fulfillment.WarehouseError. A pending LoseAnswers replaces
// the answer with an unknown outcome.
func (w *Warehouse) Ship(ctx context.Context, req fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sh, err := w.ship(ctx, req)
	if w.lose > 0 && req.Validate() == nil && !fulfillment.IsRetryable(err) {
		w.lose--
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Err: fmt.Errorf("%w: simulated answer lost after the commit", fulfillment.ErrUnknownOutcome)}
	}
	return sh, err
}

func (w *Warehouse) ship(ctx context.Context, req fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	w.calls++
	if err := ctx.Err(); err != nil {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Retryable: true, Err: err}
	}
	if w.failNext > 0 {
		w.failNext--
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Retryable: true, Err: errInjected}
	}
	if err := req.Validate(); err != nil {
		return fulfillment.Shipment{}, err
	}
	if e, ok := w.ledger[req.IdempotencyKey]; ok {
		if e.orderID != req.OrderID || e.ref != req.Reference || !slices.Equal(e.items, req.Items) {
			return fulfillment.Shipment{}, &fulfillment.WarehouseError{Err: fmt.Errorf("shipment key %q: %w", req.IdempotencyKey, fulfillment.ErrIdempotencyKeyReused)}
		}
		if e.err != nil {
			we := *e.err
			return fulfillment.Shipment{}, &we
		}
		return e.shipment, nil
	}

	e := &shipEntry{orderID: req.OrderID, ref: req.Reference, items: slices.Clone(req.Items)}
	w.ledger[req.IdempotencyKey] = e
	if _, ok := w.byRef[req.Reference]; !ok {
		w.byRef[req.Reference] = e
	}
	for _, it := range req.Items {
		if msg := testmode.OutOfStock(it.SKU); msg != "" {
			e.err = &fulfillment.WarehouseError{Err: fmt.Errorf("%w: %s", fulfillment.ErrOutOfStock, msg)}
			we := *e.err
			return fulfillment.Shipment{}, &we
		}
	}
	e.shipment = fulfillment.Shipment{
		ID:             testmode.NewID("sh_"),
		Reference:      req.Reference,
		IdempotencyKey: req.IdempotencyKey,
		OrderID:        req.OrderID,
		CreatedAt:      time.Now().UTC(),
	}
	w.byID[e.shipment.ID] = e
	w.shipments[req.OrderID]++
	w.total++
	return e.shipment, nil
}

// Find implements fulfillment.Warehouse: it returns the Shipment of the
// first request that carried ref, a copy of its remembered final
// *fulfillment.WarehouseError, or an error wrapping
// fulfillment.ErrShipmentNotFound. Transient failures are never remembered,
// so a reference whose only calls failed transiently is not found. The index
// never lags. A context that has ended yields a retryable
// *fulfillment.WarehouseError.
func (w *Warehouse) Find(ctx context.Context, ref fulfillment.Reference) (fulfillment.Shipment, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Retryable: true, Err: err}
	}
	e, ok := w.byRef[ref]
	switch {
	case !ok:
		return fulfillment.Shipment{}, fmt.Errorf("%w: no shipment has reference %s", fulfillment.ErrShipmentNotFound, ref)
	case e.err != nil:
		we := *e.err
		return fulfillment.Shipment{}, &we
	}
	return e.shipment, nil
}

// Retrieve implements fulfillment.Warehouse: the Shipment with id id, or an
// error wrapping fulfillment.ErrShipmentNotFound. A context that has ended
// yields a retryable *fulfillment.WarehouseError.
func (w *Warehouse) Retrieve(ctx context.Context, id string) (fulfillment.Shipment, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fulfillment.Shipment{}, &fulfillment.WarehouseError{Retryable: true, Err: err}
	}
	e, ok := w.byID[id]
	if !ok {
		return fulfillment.Shipment{}, fmt.Errorf("%w: no shipment has id %q", fulfillment.ErrShipmentNotFound, id)
	}
	return e.shipment, nil
}

// Shipments returns the number of distinct shipments ever made for orderID.
// It stays 1 however often a shipment is repeated under the same idempotency
// key.
func (w *Warehouse) Shipments(orderID string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shipments[orderID]
}

// TotalShipments returns the number of distinct shipments made for all
// orders.
func (w *Warehouse) TotalShipments() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.total
}

// Calls returns the number of Ship calls received, including repeats and
// calls that failed.
func (w *Warehouse) Calls() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls
}
