package fulfillment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderly/orderly/order"
)

// MaxKeyLen is the longest idempotency key or reference key a Warehouse
// accepts, in characters (the limit payment providers use too,
// docs.stripe.com/api/idempotent_requests).
const MaxKeyLen = 255

// Warehouse ships orders. It is built on warehouse objects (shipments), not
// on looking requests up by idempotency key, which real warehouse and 3PL
// APIs do not offer: the caller sets a Reference on every shipment request,
// the warehouse stores it on the shipment it makes, and a caller whose Ship
// ended with an unknown outcome (IsUnknownOutcome) resolves it with Find by
// that reference, or with Retrieve once it knows the shipment's id.
//
// Implementations must honour IdempotencyKey: a repeated key with the same
// request returns the original Shipment (or the original final error) and
// never ships twice; a repeated key with another request is a final
// *WarehouseError wrapping ErrIdempotencyKeyReused. Implementations must be
// safe for concurrent use. The conformance suite fulfillment/warehousetest
// states this contract as tests.
type Warehouse interface {
	// Ship ships req.Items for req.OrderID and stores req.Reference on the
	// shipment. Errors are *WarehouseError values classed by IsRetryable
	// and IsUnknownOutcome.
	Ship(ctx context.Context, req ShipmentRequest) (Shipment, error)

	// Find returns the shipment whose Reference (set by Ship) is ref; it
	// changes nothing. An error wrapping ErrShipmentNotFound says the
	// warehouse holds no shipment under ref, so nothing was shipped and the
	// request may be sent again under the usual rules. A warehouse that
	// remembers a final refusal of the request that carried ref (such as
	// one wrapping ErrOutOfStock) may return it as the same non-retryable
	// *WarehouseError Ship gave; one that does not answers
	// ErrShipmentNotFound, and shipping again gets the refusal again.
	// Lag rule: a warehouse whose index of references lags reports a miss
	// while the request may still be younger than its documented lag as a
	// retryable *WarehouseError, never as ErrShipmentNotFound. Any other
	// failure is a retryable *WarehouseError (Find may always be repeated).
	Find(ctx context.Context, ref Reference) (Shipment, error)

	// Retrieve returns the shipment with the warehouse's id id; it changes
	// nothing. An unknown id yields an error wrapping ErrShipmentNotFound;
	// a warehouse that gives refused requests ids too (paysim) may answer
	// the refusal as the final *WarehouseError Ship gave; any other failure
	// is a retryable *WarehouseError.
	Retrieve(ctx context.Context, id string) (Shipment, error)
}

// Reference is what the caller sets on a shipment so it can find the
// shipment again without its id. OrderID is the order's id; Key is the
// caller's key of the step, such as "<order id>/fulfill", at most MaxKeyLen
// characters. One Reference names at most one shipment: the first request
// that carried it.
type Reference struct {
	// OrderID is the id of the order shipped.
	OrderID string
	// Key is the caller's key of the shipment step.
	Key string
}

// IsZero reports whether r is the zero Reference.
func (r Reference) IsZero() bool { return r == Reference{} }

// String returns "<Key> (order <OrderID>)".
func (r Reference) String() string { return fmt.Sprintf("%s (order %s)", r.Key, r.OrderID) }

// ShipmentRequest asks a Warehouse to ship the items of one order.
type ShipmentRequest struct {
	// IdempotencyKey is the warehouse-side key, such as "<order id>/fulfill":
	// one shipment per order. It is required, at most MaxKeyLen characters.
	IdempotencyKey string
	// Reference is stored on the shipment so Find can find it; Key is
	// required (at most MaxKeyLen characters) and OrderID must equal the
	// request's OrderID.
	Reference Reference
	// OrderID is the id of the order being shipped; required.
	OrderID string
	// Items are the order's lines; at least one is required. UnitPrice is in
	// minor currency units and is ignored by the warehouse.
	Items []order.Item
}

// Validate returns nil for a request a warehouse may accept, and otherwise
// the final *WarehouseError a Warehouse answers without shipping anything:
// for a request without IdempotencyKey, OrderID, Reference.Key or Items, a
// key longer than MaxKeyLen, or a Reference of another order.
func (r ShipmentRequest) Validate() error {
	switch {
	case r.IdempotencyKey == "":
		return &WarehouseError{Err: errors.New("idempotency key is required")}
	case len(r.IdempotencyKey) > MaxKeyLen:
		return &WarehouseError{Err: fmt.Errorf("idempotency key is %d characters, more than %d", len(r.IdempotencyKey), MaxKeyLen)}
	case r.OrderID == "":
		return &WarehouseError{Err: errors.New("order id is required")}
	case r.Reference.Key == "":
		return &WarehouseError{Err: errors.New("reference key is required")}
	case len(r.Reference.Key) > MaxKeyLen:
		return &WarehouseError{Err: fmt.Errorf("reference key is %d characters, more than %d", len(r.Reference.Key), MaxKeyLen)}
	case r.Reference.OrderID != r.OrderID:
		return &WarehouseError{Err: fmt.Errorf("reference order %q is not the shipment's order %q", r.Reference.OrderID, r.OrderID)}
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
	// Reference is what the ShipmentRequest that created the shipment set.
	Reference Reference
	// IdempotencyKey is the key of the ShipmentRequest that created the
	// shipment, when the warehouse echoes it ("" otherwise). Recovery never
	// depends on it.
	IdempotencyKey string
	// OrderID is the id of the shipped order.
	OrderID string
	// CreatedAt is when the shipment was made (UTC).
	CreatedAt time.Time
}
