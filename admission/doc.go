// Package admission bounds the work Orderly takes in, per tenant first and
// for the whole server last, for every transport alike: the HTTP API
// (package api) and the NATS command consumer (package natsbus) share one
// Gate, so a tenant's commands count against the same rate and the same
// in-flight slots as its HTTP requests.
//
// # Bounds, in the order they apply
//
//  1. A tenant's rate (a token bucket, golang.org/x/time/rate): past its
//     burst and sustained rate, ErrRateLimited — 429 rate_limited with the
//     Retry-After the bucket computes.
//  2. A tenant's in-flight slots (Config.TenantMaxInFlight): a tenant that
//     already has that many requests or commands running gets
//     CodeTooManyRequests — 429 too_many_requests with Retry-After — at
//     once, never queued (Stripe's per-account concurrency limiter). One
//     tenant's slow calls therefore hold only its own slots.
//  3. The server's in-flight slots (Config.MaxInFlight): the last line,
//     answered with CodeOverloaded — 503 overloaded with Retry-After. With
//     TenantMaxInFlight below MaxInFlight no single tenant can reach it.
//
// A transport takes a slot only once the request is authenticated and its
// (bounded) body has arrived, so a client that trickles a body in holds
// nothing but its own connection.
package admission
