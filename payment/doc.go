// Package payment is the seam between the service and a payment provider:
// the Gateway interface, its request and result types, and the errors a
// Gateway returns. It holds no implementation. The in-process simulator is
// package paysim/simulator (Gateway); the HTTP client of paysim is package
// paysim/paysimclient (Gateway).
//
// Every request carries an idempotency key, such as "<order id>/pay" for the
// one logical charge of an order, and an implementation must honour it: a
// repeated key returns the original result and never captures twice, so a
// caller whose outcome is unknown (a timeout, a crash between the charge and
// recording it) may always retry with the same key.
//
// Errors are classed as final or retryable. A decline (ErrDeclined, carried
// by *DeclineError) is final. A *ProviderError says for itself whether it is
// retryable. IsRetryable applies that rule and answers false for anything
// else. An outcome that may or may not have taken effect wraps
// ErrUnknownOutcome (IsUnknownOutcome); the caller learns it with Lookup.
// ChargeRequest.Validate and RefundRequest.Validate give the final error of a
// request no provider would accept, so every implementation refuses it the
// same way.
//
// The package imports neither net/http nor any SQL package. Amounts are int64
// in minor currency units (cents for USD, yen for JPY); currencies are
// ISO 4217 alphabetic codes such as "USD".
package payment
