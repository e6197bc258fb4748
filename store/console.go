package store

import (
	"context"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// OrderSearch selects orders for operators: of the tenants Tenants
// selects, with CustomerID and State when set (empty: any), newest first
// (by id, a UUIDv7), at most Limit (1 or more).
type OrderSearch struct {
	Tenants    TenantFilter
	CustomerID string
	State      order.State
	Limit      int
}

// DeliverySearch selects webhook deliveries for operators: of the tenants
// Tenants selects, to EndpointID and in Status when set (empty: any), the
// most recently updated first, at most Limit (1 or more).
type DeliverySearch struct {
	Tenants    TenantFilter
	EndpointID string
	Status     event.DeliveryStatus
	Limit      int
}

// ActionSearch selects recorded operator actions (the audit log): of the
// tenants Tenants selects, newest first, at most Limit (1 or more).
type ActionSearch struct {
	Tenants TenantFilter
	Limit   int
}

// DeliveryBacklog is the webhook outbox at one instant: Failed deliveries
// (given up; only an operator's resend sends them again), Pending ones
// (pending or being delivered) and the creation time of the oldest of
// those (zero when none): Now minus OldestPending is the outbox's lag.
// Now is the store's clock.
type DeliveryBacklog struct {
	Failed        int
	Pending       int
	OldestPending time.Time
	Now           time.Time
}

// OperatorLister is the operators' list reads, across tenants with an
// explicit TenantFilter, as the web console shows them. Part of
// OperatorStore. Secrets are never read. Errors: an error wrapping
// ErrUnavailable, or another error.
type OperatorLister interface {
	// SearchOrders returns the orders s selects.
	SearchOrders(ctx context.Context, s OrderSearch) ([]order.Order, error)

	// SearchDeliveries returns the webhook deliveries s selects.
	SearchDeliveries(ctx context.Context, s DeliverySearch) ([]event.Delivery, error)

	// AllEndpoints returns the webhook endpoints of the selected tenants
	// (without their secrets), by tenant then id.
	AllEndpoints(ctx context.Context, tenants TenantFilter) ([]event.Endpoint, error)

	// ListOperatorActions returns the recorded operator actions s selects.
	ListOperatorActions(ctx context.Context, s ActionSearch) ([]OperatorAction, error)

	// AttemptsByProviderRef returns the provider attempts of the selected
	// tenants whose provider object id (ProviderRef: a charge's or a
	// shipment's id at the provider) is ref, oldest first.
	AttemptsByProviderRef(ctx context.Context, tenants TenantFilter, ref string) ([]payment.Attempt, error)

	// DeliveryBacklog counts the webhook outbox as of the store's clock.
	DeliveryBacklog(ctx context.Context) (DeliveryBacklog, error)
}
