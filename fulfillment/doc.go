// Package fulfillment ships paid orders through a warehouse.
//
// Warehouse is the contract the service depends on. Every ShipmentRequest
// carries an idempotency key, such as "<order id>/fulfill", and an
// implementation must honour it: a repeated key returns the original
// Shipment and never ships twice, so a caller whose outcome is unknown may
// always retry with the same key.
//
// Errors are classed as final or retryable: a *WarehouseError says for
// itself, and IsRetryable answers false for anything else.
//
// Simulator is the built-in simulated warehouse used as the embedded default
// and in tests. It ships every request except one containing SKUOutOfStock,
// and FailNext injects transient failures.
//
// The package imports neither net/http nor any SQL package.
package fulfillment
