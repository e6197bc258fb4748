// Package natsbus takes Orderly's commands from NATS JetStream: a durable
// pull consumer on the subjects orderly.<tenant>.commands.<pay|fulfill|cancel>
// runs each message as the HTTP request it stands for (api.Commands), with
// the message's Nats-Msg-Id as the Idempotency-Key, so a command and its
// HTTP twin share one idempotency ledger.
//
// # Messages
//
// The subject names the tenant (which must be a configured tenant) and the
// operation; the header Orderly-Order-Id names the order; the body is what
// the HTTP request would send (pay: {"amount","currency","payment_method"};
// fulfil and cancel: empty or {}). The Nats-Msg-Id header is required: it is
// the idempotency key, and JetStream's duplicate window drops a republish
// within it.
//
// # Acknowledgement
//
// A message is acknowledged only after its effect is committed (a 2xx
// outcome, a replay included). A retryable outcome — the key or the order
// busy (409), the store or provider unavailable (503), overload — is Nak'd
// with the Retry-After delay, so JetStream redelivers it. Any other outcome
// is final and is published to the dead-letter subject
// orderly.<tenant>.commands.dead.<op> (the problem JSON as body; headers
// Orderly-Command-Subject, Orderly-Order-Id, Orderly-Reason, and Nats-Msg-Id
// "<key>/dead", so a redelivered rejection is dead-lettered once within the
// duplicate window), then Term'd: a key reused for another request
// (idempotency_key_reused), a declined payment, a missing order, an invalid
// transition, malformed input, an unknown tenant or operation.
package natsbus
