// Package webhook delivers Orderly's events to tenants' webhook endpoints
// and manages those endpoints.
//
// Deliveries are rows the outbox writes in the transaction of each change
// (see package event and store.EventStore). A Dispatcher in every orderd
// leases due deliveries (claimers take turns under an advisory lock on
// PostgreSQL, so no two instances send one delivery at once; a crashed
// instance's leases expire and another takes its deliveries over), POSTs
// each event's JSON signed
// with the endpoint's secret (event.Sign, the Stripe scheme), and records
// the outcome fenced by the lease's attempt number:
//
//   - 2xx: delivered;
//   - 410 Gone: the endpoint is disabled and the delivery given up;
//   - anything else, a timeout or a refused connection: retried after an
//     exponential backoff with full jitter, or after the Retry-After the
//     endpoint asked for (RFC 9110 §10.2.3) when that is later, until the
//     retry window (three days by default) from the event has passed; a
//     wait past the window's end is cut to one last attempt at its end.
//
// Fairness: Dispatcher.Run sends each delivery in a slot of its own (a
// pool of Config.Workers), freed when that delivery ends, so none waits
// for a slower one; claims interleave tenants and their endpoints, and cap
// the deliveries a tenant and an endpoint have in flight across instances
// (Config.InFlightPerTenant, Config.InFlightPerEndpoint), so a tenant whose
// endpoints hang holds a few slots, never all; Endpoints.MaxPerTenant caps
// a tenant's endpoints.
//
// An order's events reach an endpoint in sequence order: a delivery is
// leased only when no earlier event of the same order to the same endpoint
// is still pending. Delivery is at least once: a receiver deduplicates on
// the Orderly-Event-Id header.
//
// Targets are refused when they resolve to anything but a global unicast
// address (every prefix of the IANA special-purpose address registries,
// through code.dny.dev/ssrf), at registration and again in the dialer's
// Control at connect time (so DNS rebinding cannot reach an internal
// address), unless Config.AllowPrivate is set. A delivery's last_error
// names the kind of failure, never the address a name resolved to.
package webhook
