package store

import (
	"context"
	"math"
	"time"

	"github.com/orderly/orderly/event"
)

// EventStore is the read side of the outbox and the state of webhook
// delivery. Events themselves are written by Executor.AppendEvent (and by
// CreateOrder and CreateOrders for order.created) in the transaction of the
// change they report; each appended event is fanned out, in that same
// transaction, to one pending delivery per enabled endpoint of its tenant
// that subscribes to its type.
//
// Errors: ErrNotFound, ErrLeaseLost, an *apperr.Error with code EInvalid
// (a malformed cursor), an error wrapping ErrUnavailable, or another error.
type EventStore interface {
	// ListEvents returns the tenant's events matching f, oldest first, at
	// most f.Limit of them, after the cursor f.After. An event appears only
	// once every transaction that could commit an event before it has
	// ended, so a consumer that resumes after the last cursor it saw never
	// misses one. tenantID "" lists every tenant's events (the in-process
	// publishers); the API always passes the caller's tenant.
	ListEvents(ctx context.Context, tenantID string, f event.Filter) ([]event.Stored, error)

	// GetEvent returns the tenant's event id, or ErrNotFound.
	GetEvent(ctx context.Context, tenantID, id string) (event.Stored, error)

	// CreateEndpoint stores e (enabled, with its secret), unless its
	// tenant already has maxPerTenant endpoints (enabled or not; 0: no
	// cap), when it returns ErrLimitReached and stores nothing. Concurrent
	// creates of one tenant are serialized, so the cap holds under races.
	CreateEndpoint(ctx context.Context, e event.Endpoint, maxPerTenant int) error

	// ListEndpoints returns the tenant's endpoints, oldest first, without
	// their secrets.
	ListEndpoints(ctx context.Context, tenantID string) ([]event.Endpoint, error)

	// GetEndpoint returns the tenant's endpoint id without its secret, or
	// ErrNotFound.
	GetEndpoint(ctx context.Context, tenantID, id string) (event.Endpoint, error)

	// EndpointSecret returns the signing secret of the tenant's endpoint id
	// (for the replay of its registration), or ErrNotFound.
	EndpointSecret(ctx context.Context, tenantID, id string) (string, error)

	// DeleteEndpoint deletes the tenant's endpoint id and its deliveries,
	// or returns ErrNotFound.
	DeleteEndpoint(ctx context.Context, tenantID, id string) error

	// ListDeliveries returns the deliveries of the tenant's endpoint,
	// newest first, at most limit of them (ErrNotFound if the endpoint is
	// not the tenant's).
	ListDeliveries(ctx context.Context, tenantID, endpointID string, limit int) ([]event.Delivery, error)

	// ClaimDeliveries leases to the caller, for c.Lease, at most c.Limit
	// deliveries due as of the database's clock — pending with
	// NextAttemptAt reached, or held under a lease that expired (a crashed
	// instance) — of enabled endpoints, and only the first undelivered
	// event of each (endpoint, order), so an order's events are delivered
	// in sequence order. Each returned delivery carries its new Attempts
	// (the lease's fencing token), the event body and the endpoint's URL
	// and secret.
	//
	// Fairness: a tenant never has more than c.PerTenant deliveries in
	// flight (delivering under an unexpired lease, on every instance
	// together), an endpoint never more than c.PerEndpoint (0: no cap);
	// and the claim interleaves tenants, and each tenant's endpoints: the
	// due deliveries are ranked within their endpoint and then within
	// their tenant, and taken rank by rank, so a tenant with a thousand
	// due deliveries gets its first in a claim beside every other tenant's
	// first, never ahead of them. Claimers are serialized (an advisory
	// lock on PostgreSQL, the write lock on SQLite), so the caps hold with
	// several instances and no two hold one delivery at once.
	ClaimDeliveries(ctx context.Context, c DeliveryClaim) ([]event.Delivery, error)

	// FinishDelivery records the outcome of the attempt fenced by
	// (o.EndpointID, o.EventID, o.Attempts), or returns ErrLeaseLost when
	// another instance took the delivery over.
	FinishDelivery(ctx context.Context, o DeliveryOutcome) error

	// LeaseCursor takes (or renews) the named cursor for holder, for
	// lease, when it is free, its lease expired (on the database's clock),
	// or it is already holder's; it returns the cursor and whether holder
	// now holds it.
	LeaseCursor(ctx context.Context, name, holder string, lease time.Duration) (cursor string, held bool, err error)

	// AdvanceCursor moves the named cursor to cursor if holder still holds
	// it (ErrLeaseLost otherwise).
	AdvanceCursor(ctx context.Context, name, holder, cursor string) error
}

// DeliveryClaim is what ClaimDeliveries is asked for: Lease (how long the
// claimer holds each delivery), Limit (at most this many; at least 1), and
// the fairness caps PerTenant and PerEndpoint, the deliveries one tenant,
// or one endpoint, may have in flight at once across every instance (0:
// no cap).
type DeliveryClaim struct {
	Lease       time.Duration
	Limit       int
	PerTenant   int
	PerEndpoint int
}

// Caps returns the claim's caps with 0 (none) as the largest int32, for a
// statement's parameters.
func (c DeliveryClaim) Caps() (perTenant, perEndpoint int) {
	perTenant, perEndpoint = c.PerTenant, c.PerEndpoint
	if perTenant <= 0 {
		perTenant = math.MaxInt32
	}
	if perEndpoint <= 0 {
		perEndpoint = math.MaxInt32
	}
	return perTenant, perEndpoint
}

// DeliveryOutcome is the end of one delivery attempt, recorded at the
// database's clock. Status is event.DeliverySucceeded, event.DeliveryFailed
// (given up) or event.DeliveryPending (retry RetryIn after the database's
// now). DisableEndpoint, when set, disables the endpoint with that reason
// (a 410 Gone).
type DeliveryOutcome struct {
	EndpointID      string
	EventID         string
	Attempts        int
	Status          event.DeliveryStatus
	RetryIn         time.Duration
	LastStatus      int
	LastError       string
	DisableEndpoint string
}
