// Package payment is the seam between the service and a payment provider:
// the Gateway interface (Prepare, Confirm, Retrieve, Find, Capture, Refund,
// FindRefund, Cancel on provider objects: Intent and Refund, found again by
// the Reference Orderly sets on them), its request and result types, the
// provider events (ProviderEvent) adapters parse from webhooks, and the
// errors a Gateway returns. Recovery of an unknown outcome reads the
// provider's object (Retrieve by id, Find by Reference); it never looks a
// request up by its idempotency key (docs.stripe.com/api/idempotent_requests,
// docs.stripe.com/payments/paymentintents/lifecycle). The service pays
// through Gateway: Prepare (moves no money), the intent's id recorded in
// the attempt fenced by its lease, then Confirm; an unknown outcome is read
// back (Retrieve, Find), a refund's by FindRefund. The package holds no
// implementation. The in-process simulator is package
// paysim/simulator (IntentGateway); paysim's HTTP client is package
// paysim/paysimclient (Intents); the Stripe adapter is payment/stripepay.
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
// ErrUnknownOutcome (IsUnknownOutcome); the caller learns it by reading the
// provider's object (Retrieve, Find, FindRefund). The Validate methods of the requests give the final
// error of a request no provider would accept, so every implementation
// refuses it the same way.
//
// The package imports neither net/http nor any SQL package. Amounts are int64
// in minor currency units (cents for USD, yen for JPY); currencies are
// ISO 4217 alphabetic codes such as "USD".
package payment
