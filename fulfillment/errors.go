package fulfillment

import (
	"errors"
	"fmt"
)

// ErrOutOfStock is wrapped, inside a non-retryable *WarehouseError, by the
// error a Warehouse returns when an item cannot be shipped because its SKU is
// out of stock.
var ErrOutOfStock = errors.New("fulfillment: out of stock")

// ErrIdempotencyKeyReused is wrapped, inside a non-retryable
// *WarehouseError, by the error a Warehouse returns when an idempotency key
// is reused with a different OrderID or Items. It indicates a bug in the
// caller's key derivation.
var ErrIdempotencyKeyReused = errors.New("fulfillment: idempotency key reused with different parameters")

// WarehouseError is a failure to ship. Retryable says whether the same
// request (same idempotency key) may be sent again: true for transient
// failures after which nothing was shipped or the outcome is unknown; false
// for requests the warehouse will never fulfil, such as an out-of-stock item.
type WarehouseError struct {
	// Retryable reports whether the request may be retried with the same
	// idempotency key.
	Retryable bool
	// Err is the underlying cause; it may be nil.
	Err error
}

// Error implements error.
func (e *WarehouseError) Error() string {
	kind := "final"
	if e.Retryable {
		kind = "retryable"
	}
	if e.Err == nil {
		return fmt.Sprintf("fulfillment: warehouse error (%s)", kind)
	}
	return fmt.Sprintf("fulfillment: warehouse error (%s): %v", kind, e.Err)
}

// Unwrap returns Err.
func (e *WarehouseError) Unwrap() error { return e.Err }

// IsRetryable reports whether a Ship call that failed with err may be retried
// with the same idempotency key: a *WarehouseError in err's chain says for
// itself through its Retryable field; anything else, nil and a bare context
// error from the caller's own context included, is unknown and yields false.
// After a bare context error the outcome is unknown, but retrying later with
// the same idempotency key is always safe.
func IsRetryable(err error) bool {
	var we *WarehouseError
	if errors.As(err, &we) {
		return we.Retryable
	}
	return false
}

// ErrShipmentNotFound is wrapped by the error Warehouse.Find returns when
// the warehouse holds no shipment (and no remembered final failure) under
// the reference, so nothing was shipped under it, and by the error
// Warehouse.Retrieve returns for an unknown shipment id.
var ErrShipmentNotFound = errors.New("fulfillment: shipment not found")

// ErrUnknownOutcome is wrapped, inside a non-retryable *WarehouseError, by
// the error a Warehouse returns when a Ship request reached the warehouse
// but no usable answer came back: the connection broke or the call timed out
// after the request was written. The warehouse may or may not have shipped.
// IsRetryable reports false for it and IsUnknownOutcome true: the caller
// should learn the outcome with Find by the request's Reference (or by
// repeating the request with the same idempotency key, safe while the
// warehouse keeps the key) before deciding anything. When
// the cause was a context ending, the error also matches that context error
// through errors.Is.
var ErrUnknownOutcome = errors.New("fulfillment: outcome unknown")

// IsUnknownOutcome reports whether err says a Ship call may or may not have
// taken effect (errors.Is(err, ErrUnknownOutcome)). A caller must then
// neither treat the shipment as failed nor as made, but find it by its
// Reference (Warehouse.Find) or repeat it with the same idempotency key.
func IsUnknownOutcome(err error) bool { return errors.Is(err, ErrUnknownOutcome) }
