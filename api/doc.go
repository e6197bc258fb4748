// Package api is Orderly's HTTP interface on github.com/go-chi/chi/v5: JSON
// in and out, RFC 9457 problem+json for every error, bearer API keys mapped
// to tenants, and the Idempotency-Key header field
// (draft-ietf-httpapi-idempotency-key-header) on every side-effecting POST.
//
// The one table from application error codes to HTTP status and problem
// type is in problem.go. Request bodies are read through
// http.MaxBytesReader (413 past the limit), must be application/json (415),
// and are decoded strictly: unknown members, duplicate members, trailing
// data and malformed JSON are 400s that change nothing.
//
// The API's contract is the OpenAPI 3.1 document openapi.yaml, embedded and
// served at GET /openapi.yaml and GET /openapi.json (see OpenAPIYAML and
// OpenAPIJSON). The package's tests validate every request and response
// they make against it, and check that its paths are the router's routes and
// its problem types the table's.
//
// Load is bounded, never queued: Config.MaxInFlight API requests are served
// at once and one more is refused at once with a 503 "overloaded" problem
// and Retry-After (the health probes are exempt); Config.RequestTimeout is
// a deadline on each request's context, past which a request waiting on the
// store is a 503 "unavailable".
package api
