// Package paysimclient adapts paysim's HTTP API to the seams the service
// depends on: Intents is a [payment.Gateway] and Warehouse a
// [fulfillment.Warehouse], each talking to a paysim server (command paysim,
// or a [paysimwire.Server] in a test) over HTTP.
//
// Both honour the seams' idempotency contract by sending every request's
// idempotency key as paysim's Idempotency-Key header, and both class their
// errors the same way: internal/provhttp gives every failed call one
// verdict (retryable, final, unknown outcome) from whether the request was
// sent and what status came back, and this package turns the verdict and
// paysim's error body into the seam's own errors (a *payment.DeclineError,
// a *payment.ProviderError, a *fulfillment.WarehouseError wrapping
// fulfillment.ErrOutOfStock, and so on). The rules are listed on Intents
// and Warehouse.
//
// An outcome is unknown when a request that changes something was sent but
// no usable answer came back; payment.IsUnknownOutcome and
// fulfillment.IsUnknownOutcome report it, and reading the object
// (Intents.Retrieve, Find or FindRefund; Warehouse.Find) by its id or the
// request's reference (or repeating the request with
// the same key) tells what happened. Neither client lets
// net/http resend a request by itself, so every such failure is reported.
//
// Options (WithTimeout, WithHTTPClient) apply to both.
package paysimclient
