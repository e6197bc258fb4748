// Package paysim is a simulated payment provider and warehouse with its own
// durable ledger and a small Stripe-like JSON API, for exercising Orderly's
// promise — "a client may retry anything, and money moves once" — against a
// real network peer that fails in controlled ways. Command paysim serves it.
//
// # Ledger
//
// Ledger keeps every outcome in one SQLite file (WAL, synchronous=FULL;
// schema applied with goose from the embedded migrations directory). Each
// idempotency key is a PRIMARY KEY written by the same statement or
// transaction as its outcome, so a repeated key never captures, refunds or
// ships twice — under concurrency and across restarts. Declines and
// out-of-stock failures are outcomes too, remembered under their keys.
//
// # API
//
// Every POST needs an Idempotency-Key header. A new key answers 201; the
// same key with the same parameters replays the remembered outcome (200, or
// the same 402/409) with "Idempotent-Replayed: true"; with different
// parameters it answers 422 idempotency_error. Errors are
// {"error":{"type","code","message"}}.
//
//	POST /v1/charges    {"order_id","amount","currency","payment_method"}
//	                    201 charge {"id":"ch_…","idempotency_key","order_id","amount",
//	                    "currency","payment_method","status":"captured","amount_refunded","created_at"}
//	                    402 card_error, code card_declined | insufficient_funds | invalid_payment_method
//	POST /v1/payment_intents  {"order_id","reference","amount","currency","capture_method"}
//	                    201 intent {"id":"pi_…","idempotency_key","order_id","reference","amount",
//	                    "currency","status":"requires_payment_method","capture_method",
//	                    "amount_received":0,"amount_refunded":0,"created_at"}; moves no money;
//	                    capture_method "automatic" (the default) or "manual"
//	POST /v1/payment_intents/{id}/confirm  {"payment_method"}
//	                    201 intent, "status":"succeeded", "amount_received" = amount: a
//	                    charge of the intent is recorded under the confirm's key (the
//	                    charges' faults and one-shot methods apply); 402 card_error (the
//	                    intent stays requires_payment_method with "last_decline":{"code",
//	                    "message"} and may be confirmed again under another key); 404;
//	                    400 payment_intent_unexpected_state (canceled, authorized or
//	                    captured already: an intent captures at most once). A manual
//	                    intent only authorizes: "status":"requires_capture",
//	                    "amount_received":0, "capture_before" = now + Config.AuthorizationWindow
//	                    (an authorizations row, no charge, no webhook); past capture_before
//	                    it reads "canceled"
//	POST /v1/payment_intents/{id}/capture  {"amount"} (minor units, > 0, required)
//	                    201 intent "status":"succeeded", "amount_received" = amount: the
//	                    intent's one charge, of amount (the rest of the authorization is
//	                    released), sent as charge.succeeded; 400 amount_too_large (above the
//	                    authorization); 400 payment_intent_unexpected_state (not
//	                    requires_capture: unconfirmed, captured, voided, expired); 404
//	POST /v1/payment_intents/{id}/cancel   {}   201 intent "status":"canceled" (again: the
//	                    same; of a requires_capture intent it voids the authorization,
//	                    nothing received); 400 payment_intent_unexpected_state if it
//	                    captured; 404
//	GET  /v1/payment_intents/{id}          200 intent as it stands | 404
//	GET  /v1/payment_intents?reference=R&order_id=O   200 the intent made with that
//	                    reference | 404 (the index is written with the intent: no lag)
//	POST /v1/refunds    {"charge_key" | "payment_intent","amount","reference"}
//	                    201 refund {"id":"re_…","idempotency_key","charge_id","charge_key",
//	                    "payment_intent","reference","order_id","currency","amount",
//	                    "created_at"}; marks the charge "refunded"; 404 if the key has no
//	                    capture or the intent does not exist; 400
//	                    payment_intent_unexpected_state if the intent captured nothing;
//	                    400 amount_too_large
//	GET  /v1/refunds?idempotency_key=K    200 refund | 404
//	GET  /v1/refunds?payment_intent=ID    200 {"data":[refund…]} | 404
//	POST /v1/shipments  {"order_id","reference","items":[{"sku","quantity","unit_price"}]}
//	                    201 shipment {"id":"sh_…","idempotency_key","order_id","reference","items",
//	                    "status":"shipped","created_at"}
//	                    409 out_of_stock (SKUOutOfStock), final and remembered
//	GET  /v1/shipments?reference=R&order_id=O  200 the first shipment of order O that set
//	                    reference R | 409 remembered | 404 (the index is written with the
//	                    shipment: no lag)
//	GET  /v1/shipments/{id}               200 shipment | 409 remembered | 404
//	GET  /v1/shipments?idempotency_key=K  200 shipment | 409 remembered | 404 (paysim's own;
//	                    the warehouse seam never looks a request up by key)
//	POST /admin/refunds/{id}/fail  a succeeded refund of a charge paid with MethodRefundFail
//	                    fails later (Stripe's refund_fail test card): status "failed", its
//	                    amount the charge's again, refund.failed sent; 200 refund | 404 |
//	                    400 (another method's refund, or not succeeded)
//	GET  /admin/ledger  {"intents":[…],"charges":[…],"refunds":[…],"shipments":[…]}
//	GET  /admin/stats   Stats: {"captures_by_order","max_captures_per_order","shipments_by_order",
//	                    "max_shipments_per_order","charges","declines","refunds","shipments",
//	                    "out_of_stock","requests","faults_injected":{"latency","error","timeout","drop","decline"},
//	                    "delays_abandoned","webhooks"}
//	GET  /admin/faults, PUT /admin/faults   the run-level Faults as JSON
//	GET  /healthz       {"status":"ok"}
//
// [AdminClient] calls the admin routes for a harness.
//
// Other malformed input answers 400 (413 for a body over the limit).
//
// # Faults
//
// Faults are injected at three levels, and only into POSTs whose key holds
// no outcome yet: a replay is always answered normally, so a client can
// always learn the outcome by retrying with the key, or by reading the
// object (an intent by id or reference; a refund or shipment also by key).
//
//   - Per request, the Paysim-Fault header (FaultHeader):
//     "drop-after-commit", "error", "timeout", "decline" (charges only) and
//     "latency=250ms", comma-separated. Lookups honour it too (a dropped
//     lookup commits nothing).
//   - By payment method or SKU, so that faults can be triggered through a
//     client that only passes them along: MethodFaultDropAfterCommit,
//     MethodFault503, MethodFaultTimeout and the SKUFault* equivalents fire
//     on the FIRST request for a key only — the ledger records that they
//     fired, so this holds across restarts — and the key's next request is
//     processed normally (an approved charge, a shipment).
//     MethodFaultLatency and SKUFaultLatency add MethodLatency every time.
//   - Per run, Faults: Latency, and the rates ErrorRate, TimeoutRate,
//     DropRate and DeclineRate drawn from a source seeded with Seed.
//
// The kinds mean: error answers 503 and commits nothing; timeout holds the
// request for Faults.TimeoutDelay (default 30s, at most MaxDelay) or until
// the client disconnects, commits nothing, and answers 504 if the client is
// still there; drop commits the outcome, then hijacks the connection and
// closes it without a response; decline declines a new charge with
// card_declined and remembers it; latency delays the answer. Counters per
// kind are in GET /admin/stats.
//
// # Webhooks
//
// With Config.Webhooks.URL set, every new charge, decline and refund sends a
// WebhookEvent (charge.succeeded, charge.failed, refund.succeeded, and
// refund.failed when a refund is failed by POST /admin/refunds/{id}/fail, with a
// provider event id; its data carries the object id, the idempotency key,
// the order id, the amount and the currency — a refund's also its charge id) signed with Sign (SignatureHeader; VerifySignature
// checks it), delivered at least once: retried with exponential backoff and
// full jitter until a 2xx or WebhookConfig.RetryFor, from memory (a crash
// loses the deliveries still pending). WebhookFaults duplicate, drop, delay
// and reorder them.
//
// # Stripe mode
//
// Package paysim/stripesim serves, in front of a Server and over the same
// ledger file (its own tables, migration 00010), the PaymentIntents subset
// of Stripe's v1 API with Stripe's idempotency semantics (saved answers
// including 500s, idempotency_error, 409 idempotency_key_in_use, keys
// pruned after a retention), Stripe's test payment methods and
// Stripe-signed webhooks; command paysim serves it with -api stripe. See
// that package for the routes.
//
// # Packages beside it
//
// Package paysim/paysimwire holds the API's wire format (bodies, headers,
// error types, webhook events and their signature), which this package
// aliases and the client imports, so that orderd links no server. Package
// paysim/paysimclient is the client of this API that Orderly uses:
// a payment.Gateway on the payment intents routes (Intents) and a
// fulfillment.Warehouse over HTTP; it never calls the key lookups
// (?idempotency_key=), which are paysim's own, for harnesses and tests. Package
// paysim/simulator is the in-process equivalent, without a network or a
// ledger file. Package paysim/testmode holds what the server and the
// in-process simulators share: the test payment methods and SKUs that
// decline or are out of stock, their codes and messages, and the form of
// ids.
package paysim
