// Package fulfillment is the seam between the service and a warehouse: the
// Warehouse interface, its request and result types, and the errors a
// Warehouse returns. It holds no implementation. The in-process simulator is
// package paysim/simulator (Warehouse); the HTTP client of paysim is package
// paysim/paysimclient (Warehouse). Package fulfillment/warehousetest is the
// conformance suite every implementation passes.
//
// Every ShipmentRequest carries an idempotency key, such as
// "<order id>/fulfill", and an implementation must honour it: a repeated key
// returns the original Shipment and never ships twice, so a caller whose
// outcome is unknown may retry with the same key while the warehouse keeps
// it. Every request also carries a Reference set by the caller (the order id
// and the step's key), which the warehouse stores on its shipment.
//
// Recovery never looks a request up by its idempotency key, which real
// warehouse and 3PL APIs do not offer: a shipment that may or may not have
// been made wraps ErrUnknownOutcome (IsUnknownOutcome), and the caller learns
// the truth with Find by the Reference it set (or Retrieve by the shipment id
// once known). Find answering ErrShipmentNotFound means nothing was shipped
// under the reference; a warehouse whose index lags answers a retryable
// error instead while a miss may be younger than its lag.
//
// Errors are classed as final or retryable: a *WarehouseError says for
// itself, and IsRetryable answers false for anything else.
// ShipmentRequest.Validate gives the final error of a request no warehouse
// would accept.
//
// The package imports neither net/http nor any SQL package.
package fulfillment
