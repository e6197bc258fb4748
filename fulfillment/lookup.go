package fulfillment

import (
	"context"
	"fmt"
)

// Lookup implements Warehouse: it returns the Shipment remembered under key,
// a copy of the remembered final *WarehouseError, or an error wrapping
// ErrShipmentNotFound. Transient failures are never remembered, so a key
// whose only calls failed transiently is not found. A context that has ended
// yields a retryable *WarehouseError.
func (s *Simulator) Lookup(ctx context.Context, key string) (Shipment, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Shipment{}, &WarehouseError{Retryable: true, Err: err}
	}
	e, ok := s.ledger[key]
	switch {
	case !ok:
		return Shipment{}, fmt.Errorf("%w: no shipment has key %q", ErrShipmentNotFound, key)
	case e.err != nil:
		we := *e.err
		return Shipment{}, &we
	}
	return e.shipment, nil
}
