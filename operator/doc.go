// Package operator is the operator API of Orderly: an http.Handler, apart
// from the tenants' API, that cmd/orderd mounts under Prefix on the admin
// listener. Operators read across tenants (each read takes an optional
// tenant filter) and act on what the service cannot settle alone: an
// attempt parked as needs_attention, a webhook delivery that failed for
// good, an endpoint disabled by a 410.
//
// # Trust model
//
// Every request carries "Authorization: Bearer <operator token>"
// (RFC 6750). Operator credentials are configured apart from tenant API
// keys (ParseCredentials; a tenant key is refused here with a 401) and
// have a role: RoleReader reads, RoleOperator reads and acts; a reader's
// write is a 403. Failed authentications are rate limited per client
// address (golang.org/x/time/rate): past the allowance a 429 with
// Retry-After answers before the credential is looked at.
//
// # Writes
//
// Every write takes an Idempotency-Key (draft-ietf-httpapi-idempotency-
// key-header), scoped to the operator, and a required reason. The action,
// its answer and its audit event (event.OperatorAction, in the outbox, so
// it reaches the feed, webhooks and NATS like any event) are written in
// the transaction of the action's effect: a replay answers the same body
// with Idempotency-Replayed: true, the same key with another body is a 422
// idempotency_key_reused. Each action goes through the service's guarded
// paths (service.Operations), never a raw UPDATE.
//
// The web console (package operator/console) serves the same reads and
// actions as HTML pages beside it, with the same credentials
// (Authenticator).
//
// The package imports no SQL; problems are RFC 9457 problem+json from
// the one table in package api.
package operator
