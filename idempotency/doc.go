// Package idempotency implements Orderly's side of the Idempotency-Key HTTP
// header field (IETF draft-ietf-httpapi-idempotency-key-header): parsing the
// key, fingerprinting the request it came with, deriving a key when the
// client sent none, and the Record a store keeps for each key.
//
// A Record holds the key, the request fingerprint and the outcome (status
// code, resource id, and for a final error its code and detail) — never the
// whole response body. A replay re-reads the resource so the client sees its
// current state. The package imports neither net/http nor SQL.
package idempotency
