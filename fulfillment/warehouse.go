package fulfillment

import (
	"context"
	"errors"
	"time"

	"github.com/orderly/orderly/order"
)

// Warehouse ships orders. Implementations must honour IdempotencyKey: a
// repeated key returns the original Shipment (or the original final error)
// and never ships twice. Implementations must be safe for concurrent use.
type Warehouse interface {
	// Ship ships req.Items for req.OrderID. Errors are *WarehouseError
	// values classed by IsRetryable.
	Ship(ctx context.Context, req ShipmentRequest) (Shipment, error)
	// Lookup returns the outcome the warehouse recorded under the shipment
	// idempotency key: the Shipment, the remembered final failure as a
	// non-retryable *WarehouseError (such as one wrapping ErrOutOfStock), or
	// an error wrapping ErrShipmentNotFound if the warehouse has nothing
	// under the key. It changes nothing, so a caller whose Ship ended with
	// an unknown outcome (IsUnknownOutcome) may use it to learn what
	// happened.
	Lookup(ctx context.Context, idempotencyKey string) (Shipment, error)
}

// ShipmentRequest asks a Warehouse to ship the items of one order.
type ShipmentRequest struct {
	// IdempotencyKey is the warehouse-side key, such as "<order id>/fulfill":
	// one shipment per order. It is required.
	IdempotencyKey string
	// OrderID is the id of the order being shipped.
	OrderID string
	// Items are the order's lines; at least one is required. UnitPrice is in
	// minor currency units and is ignored by the warehouse.
	Items []order.Item
}

// Validate returns nil for a request a warehouse may accept, and otherwise
// the final *WarehouseError a Warehouse answers without shipping anything:
// for a request without IdempotencyKey or without Items.
func (r ShipmentRequest) Validate() error {
	switch {
	case r.IdempotencyKey == "":
		return &WarehouseError{Err: errors.New("idempotency key is required")}
	case len(r.Items) == 0:
		return &WarehouseError{Err: errors.New("a shipment needs at least one item")}
	}
	return nil
}

// Shipment is a shipment as the warehouse records it.
type Shipment struct {
	// ID is the warehouse's shipment id, such as "sh_" followed by 24 hex
	// digits.
	ID string
	// IdempotencyKey is the key of the ShipmentRequest that created the
	// shipment.
	IdempotencyKey string
	// OrderID is the id of the shipped order.
	OrderID string
	// CreatedAt is when the shipment was made (UTC).
	CreatedAt time.Time
}
