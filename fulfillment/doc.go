// Package fulfillment is the seam between the service and a warehouse: the
// Warehouse interface, its request and result types, and the errors a
// Warehouse returns. It holds no implementation. The in-process simulator is
// package paysim/simulator (Warehouse); the HTTP client of paysim is package
// paysim/paysimclient (Warehouse).
//
// Every ShipmentRequest carries an idempotency key, such as
// "<order id>/fulfill", and an implementation must honour it: a repeated key
// returns the original Shipment and never ships twice, so a caller whose
// outcome is unknown may always retry with the same key.
//
// Errors are classed as final or retryable: a *WarehouseError says for
// itself, and IsRetryable answers false for anything else. A shipment that
// may or may not have been made wraps ErrUnknownOutcome (IsUnknownOutcome);
// the caller learns it with Lookup. ShipmentRequest.Validate gives the final
// error of a request no warehouse would accept.
//
// The package imports neither net/http nor any SQL package.
package fulfillment
