// Package simulator is Orderly's in-process simulated provider:
// IntentGateway is a [payment.Gateway] and Warehouse a
// [fulfillment.Warehouse], both in memory, used by orderd as the built-in default (when no provider URL is
// configured) and by tests that want a provider without a network.
//
// Both honour the seams' idempotency contract as a real provider does: every
// outcome, a decline or an out-of-stock failure included, is remembered
// under its idempotency key, so a repeated key replays it and never captures
// or ships twice, and a key reused with different parameters fails with
// the seam's ErrIdempotencyKeyReused. Transient failures are not remembered.
//
// They understand the same test payment methods and SKUs as paysim's HTTP
// server, from package [github.com/orderly/orderly/paysim/testmode]:
// testmode.MethodDeclined and testmode.MethodInsufficientFunds are declined,
// testmode.SKUOutOfStock is never in stock, with the same codes and
// messages. Faults are injected differently: IntentGateway fails a
// Confirm with MethodProviderError transiently, can wait Delay before
// answering and can lose answers (LoseAnswers); Warehouse.FailNext fails
// the next calls transiently. Counters (Captures, Refunds, Shipments,
// Calls) let tests check that money moved once.
package simulator
