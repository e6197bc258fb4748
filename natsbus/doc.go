// Package natsbus takes Orderly's commands from NATS JetStream: a durable
// pull consumer on the subjects
// orderly.<tenant>.commands.<pay|fulfill|cancel|refund> runs each message as
// the HTTP request it stands for, decoded, validated
// and fingerprinted by package intake as the HTTP API does it, with the
// message's Nats-Msg-Id as the Idempotency-Key, so a command and its HTTP
// twin share one idempotency ledger.
//
// # Trust model
//
// A command is authorized, not trusted: the subject names a tenant, and
// the message must prove it with SignatureHeader, an HMAC-SHA256 made with
// one of that tenant's API keys over the subject, the Nats-Msg-Id, the
// Orderly-Order-Id, a timestamp and the body (see SignatureHeader). Whoever
// can sign for a tenant could make the same request over HTTP with the same
// key, so the bus gives no one more than the HTTP API does. A command
// whose signature is missing or wrong, or whose timestamp is more than
// Config.SignatureTolerance from when the stream stored it (a replay window
// judged on the NATS server's clock, which a publisher does not set), is
// dead-lettered as "unauthorized" and never run. A replay within the window
// carries the original's Nats-Msg-Id: the stream drops it or the ledger
// replays the outcome.
//
// NATS permissions are the second line, and the deployment must set them:
// each tenant's publisher may publish only to its own
// <root>.<tenant>.commands.{pay,fulfill,cancel,refund}; only orderd may publish to
// <root>.*.commands.dead.> and consume the stream. orderd cannot see who
// published a message, which is why it checks the signature itself.
//
// # Bounds
//
// Commands share the HTTP API's admission.Gate: the tenant's rate, its
// in-flight slots, the server's. They run concurrently, each in a slot of
// its tenant, so one tenant's slow commands hold only its own slots; a
// command past a bound is Nak'd with the Retry-After it would get over HTTP
// and redelivered, while other tenants' commands go on.
//
// # Messages
//
// The subject names the tenant (which must have an API key) and the
// operation; the header Orderly-Order-Id names the order; the body is what
// the HTTP request would send (pay: {"amount","currency","payment_method"};
// fulfil and cancel: empty or {}; refund, POST /v1/orders/{id}/refunds's:
// {"amount","currency","reason"}). The Nats-Msg-Id header is required: it is
// the idempotency key, and JetStream's duplicate window drops a republish
// within it. Sign signs a message.
//
// # Acknowledgement
//
// A message is acknowledged only after its effect is committed (a 2xx
// outcome, a replay included). A retryable outcome — the key or the order
// busy (409), the store or provider unavailable (503), a bound (429, 503)
// — is Nak'd with the Retry-After delay, so JetStream redelivers it. Any
// other outcome is final and is published to the dead-letter subject
// orderly.<tenant>.commands.dead.<op> (the problem JSON as body; headers
// Orderly-Command-Subject, Orderly-Order-Id, Orderly-Command-Sequence,
// Orderly-Reason), then Term'd: a key reused for another request
// (idempotency_key_reused), a declined payment, a missing order, an invalid
// transition, a refund above what is left to refund
// (refund_exceeds_captured), malformed input, an unknown tenant or operation, a command
// that does not prove its tenant (unauthorized).
//
// A dead letter's Nats-Msg-Id is "dead:<stream>:<stream sequence of the
// command>", so a redelivered rejection is dead-lettered once within the
// duplicate window. That id can be guessed, so a publish JetStream answers
// as a duplicate is checked against the stored message: unless it is this
// very dead letter, it was forged, and the dead letter is published again
// under a fresh id before the command is terminated. A command's dead
// letter, with its true reason, is always in the stream.
package natsbus
