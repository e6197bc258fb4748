// Package client is a Go client for the Orderly order service, built around
// the service's promise: a client may retry anything, and money moves once.
//
// # Calls
//
// [New] returns a [Client] for a base URL and an API key. It has one typed
// method per endpoint: [Client.CreateOrder], [Client.GetOrder],
// [Client.ListOrders], [Client.PayOrder], [Client.FulfillOrder],
// [Client.CancelOrder] and [Client.KeyStatus]. Each returns a [Response]
// holding the decoded value and what the protocol said about it: the status
// code, whether the answer was a replay (Idempotency-Replayed), the
// idempotency key used, when that key expires, and how many attempts it took.
// The *Response is never nil, even with an error, so that a caller whose
// request failed for good can read the key and retry later with
// [WithIdempotencyKey].
//
// # Idempotency
//
// Every side-effecting POST is one logical operation with one
// Idempotency-Key: a fresh UUIDv4 by default ([WithKeyGenerator] replaces the
// generator, [WithIdempotencyKey] sets the key of one call). Every retry of
// the operation sends the same key and the same body bytes, so the server
// runs it at most once and answers a retry with the original outcome. GET
// requests carry no key.
//
// # Retries
//
// A call is retried, up to [WithMaxAttempts] attempts in all (5 by default)
// and never past the caller's context, on:
//
//   - network errors: connection refused or reset, EOF, timeouts (including
//     the per-attempt timeout of [WithAttemptTimeout]);
//   - 409 with problem type idempotency_key_in_progress or order_busy;
//   - 429, 500, 502, 503 and 504.
//
// Everything else is final: 400, 401, 403, 404, 422, a 409 of any other type
// (such as invalid_transition), 402, and a response whose body cannot be
// decoded. Between attempts the client waits the response's Retry-After
// (delta-seconds or an HTTP date), capped at [WithMaxRetryAfter] (30s by
// default), or else an exponential backoff with full jitter: a uniformly
// random delay in [0, min(max, base·2ⁿ)] before retry n (n from 0), with
// base and max set by [WithBackoff]. Cancelling the context stops at once
// and returns the context's error, wrapped.
//
// # Errors
//
// A problem+json answer (RFC 9457) is returned as an [*Error]; use
// [errors.As] to read it, or the predicates [IsNotFound], [IsDeclined],
// [IsInvalidTransition], [IsConflict], [IsKeyReused] and [IsRetryable]:
//
//	res, err := c.PayOrder(ctx, id, in)
//	if err == nil && res.Value.Pending() {
//		// 202: send res.Value.Payment.ClientSecret to the browser (3-D
//		// Secure), then pay again with WithIdempotencyKey(res.IdempotencyKey)
//	}
//	var apiErr *client.Error
//	switch {
//	case client.IsDeclined(err):
//		// ask for another card
//	case errors.As(err, &apiErr):
//		log.Printf("%d %s: %s", apiErr.StatusCode, apiErr.Code, apiErr.Detail)
//	case err != nil:
//		// a network failure or a cancelled context
//	}
//
// A network failure that outlasts every attempt is a [*NetworkError] that
// records the attempt count and wraps the last cause. After such a failure
// (or an [*Error] with Retryable set) the operation may or may not have
// happened; calling again with the same key, from [Response.IdempotencyKey],
// is safe and tells which.
package client
