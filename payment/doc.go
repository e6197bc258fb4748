// Package payment charges and refunds orders through a payment provider.
//
// Gateway is the provider contract the service depends on. Every request
// carries an idempotency key, such as "<order id>/pay" for the one logical
// charge of an order, and an implementation must honour it: a repeated key
// returns the original result and never captures twice, so a caller whose
// outcome is unknown (a timeout, a crash between the charge and recording it)
// may always retry with the same key.
//
// Errors are classed as final or retryable. A decline (ErrDeclined, carried
// by *DeclineError) is final. A *ProviderError says for itself whether it is
// retryable. IsRetryable applies that rule and answers false for anything
// else.
//
// Simulator is the built-in simulated provider used as the embedded default
// and in tests. It approves every payment method except the documented test
// methods (TestMethodDeclined, TestMethodInsufficientFunds,
// TestMethodProviderError).
//
// The package imports neither net/http nor any SQL package. Amounts are int64
// in minor currency units (cents for USD, yen for JPY); currencies are
// ISO 4217 alphabetic codes such as "USD".
package payment
