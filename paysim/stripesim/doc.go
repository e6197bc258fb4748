// Package stripesim is paysim's Stripe mode: the PaymentIntents subset of
// Stripe's v1 API that Orderly's Stripe adapter uses, with Stripe's
// documented semantics, over the paysim ledger's SQLite file (tables
// stripe_*, migration 00010_stripe.sql), so that the adapter meets the
// failures a real Stripe account produces. Command paysim serves it with
// -api stripe.
//
// # Requests
//
// Form-encoded (as stripe-go sends them), authenticated by an sk_test_ API
// key (Authorization: Bearer, or HTTP Basic with the key as user name); an
// sk_live_ key is refused (401). Unknown parameters are a 400
// parameter_unknown. Errors are {"error":{"type","code","decline_code",
// "message","param","charge","payment_intent"}} (docs.stripe.com/api/errors).
// Ids are pi_…, ch_…, re_…, evt_….
//
//	POST /v1/payment_intents                amount, currency, metadata[k], capture_method,
//	                                        confirm, payment_method, description → 200 PaymentIntent
//	GET  /v1/payment_intents/{id}           expand[]=latest_charge → 200 | 404 resource_missing
//	POST /v1/payment_intents/{id}/confirm   payment_method → 200 | 402 card_error (the intent back
//	                                        in requires_payment_method, error.payment_intent set)
//	POST /v1/payment_intents/{id}/capture   amount_to_capture (a requires_capture intent; at most
//	                                        amount_capturable, else 400 amount_too_large; a partial
//	                                        capture releases the rest)
//	POST /v1/payment_intents/{id}/cancel    cancellation_reason
//	GET  /v1/payment_intents                created[gte|gt|lte|lt], limit, starting_after → list (consistent)
//	GET  /v1/payment_intents/search         query=metadata['k']:'v' [AND status:'s'] → search_result
//	POST /v1/refunds                        payment_intent | charge, amount, metadata[k], reason
//	GET  /v1/refunds                        payment_intent, charge, limit, starting_after → list
//	GET  /v1/refunds/{id}
//
// Authorize, then capture (docs.stripe.com/payments/place-a-hold-on-a-payment-method):
// a confirm of a capture_method=manual intent ends in requires_capture with
// its charge's payment_method_details.card.capture_before set to the
// confirm's time plus Config.AuthorizationWindow (7 days by default); a
// cancel then voids it; once capture_before passes, the intent is canceled
// (cancellation_reason automatic, payment_intent.canceled sent) by
// Server.ExpireAuthorizations, which runs before every /v1/ request.
//
// A state a request cannot act on is a 400 payment_intent_unexpected_state
// (docs.stripe.com/payments/paymentintents/lifecycle).
//
// # Idempotency (docs.stripe.com/api/idempotent_requests, /error-low-level)
//
// Every POST may carry an Idempotency-Key (at most 255 characters). The
// status and body of the first request under a key that began executing
// are saved in the same transaction as its effect and replayed, with
// Idempotent-Replayed: true, to every later request with that key — 402
// declines, 400s of the operation, and 500s included. The same key with
// other parameters, or on another endpoint, is a 400 idempotency_error; a
// key whose first request is still executing is a 409
// idempotency_key_in_use (nothing saved; Stripe-Should-Retry: true). A 401,
// a parameter that fails validation and a 429 save nothing. A key whose
// answer is older than Config.IdempotencyRetention (default 24h) is pruned
// and starts a new request. Keys of requests still executing when the
// process stopped are cleared at start (their effect rolled back with
// them). Saved and answered 500s carry Stripe-Should-Retry: false; 429
// lock_timeout and 409 idempotency_key_in_use carry Stripe-Should-Retry:
// true. (Stripe documents the header only as advice its libraries follow —
// stripe-go's comments expect false on most 500s "since our idempotency
// framework would typically replay it anyway" and true on lock timeouts —
// not the exact answers that carry it; these are paysim's choice.)
//
// # Search
//
// A PaymentIntent becomes visible to search Config.SearchLag (default 1
// minute, Stripe's "under normal operating conditions, data is searchable
// in under 1 minute", docs.stripe.com/search) after it was created;
// retrieve by id is never stale.
//
// # Payment methods
//
// See the Method constants: Stripe's test PaymentMethods that succeed,
// decline (with Stripe's code and decline_code), require 3-D Secure
// (requires_action until POST /admin/stripe/payment_intents/{id}/authenticate)
// or debit a bank account (processing until POST
// /admin/stripe/payment_intents/{id}/settle); both take ?outcome=success|failure.
// MethodRefundFail's refunds fail after they succeeded (POST
// /admin/stripe/refunds/{id}/fail).
//
// # Faults
//
// The run-level paysim.Faults keep their knobs with Stripe's meaning:
// ErrorRate saves and answers a 500 before anything moved; TimeoutRate
// holds the request with its key claimed (a retry meanwhile is a 409),
// then closes the connection having saved nothing; DropRate commits and
// saves the answer, then closes the connection; DeclineRate declines a
// card confirmation card_declined/generic_decline; Latency delays every
// /v1/ request. Config.Commit500Rate commits, then saves and answers a
// 500; Config.LockTimeoutRate answers 429 lock_timeout before the
// idempotency layer. Per request, the Paysim-Fault header names one of
// error, commit-500, drop-after-commit, timeout, lock-timeout, decline,
// and latency=<duration>. The pm_card_paysim_* methods fire their fault on
// a PaymentIntent's first confirmation only. GET and PUT /admin/faults
// read and set paysim's Faults (the native shape); GET and PUT
// /admin/stripe/faults the same plus commit_500_rate and lock_timeout_rate.
//
// # Webhooks
//
// With Config.Webhooks.URL set, every state change sends a Stripe Event
// (api_version APIVersion) signed in SignatureHeader with one v1 per
// secret, delivered at least once with backoff; paysim.WebhookFaults
// duplicate, drop, delay and reorder them. Types: payment_intent.created,
// .succeeded, .payment_failed, .canceled, .processing, .requires_action,
// .amount_capturable_updated; charge.succeeded, .failed, .captured,
// .refunded, .refund.updated; refund.created, .updated, .failed. Refunds
// succeed at once; a refund of a charge paid with MethodRefundFail fails
// later when POST /admin/stripe/refunds/{id}/fail says so (Stripe's
// refund_fail test card), which sends charge.refund.updated,
// refund.updated and refund.failed.
//
// # Ledger views
//
// GET /admin/ledger and GET /admin/stats answer in the native shapes (see
// Server.Snapshot), so harnesses that check the native ledger
// (orderstorm) check the Stripe mode's captures and refunds unchanged;
// GET /admin/stripe/ledger lists the PaymentIntents, charges and refunds
// in Stripe's shapes. Other routes (the warehouse, /healthz) are the
// native Server's.
package stripesim
