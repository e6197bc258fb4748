package store

import (
	"context"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// TenantFilter selects the tenants an operator query reads. It exists only
// in OperatorStore: every other read of a store is scoped to one tenant.
// All must be set to read every tenant; otherwise TenantID names the one
// tenant read, and an empty TenantID with All unset matches nothing.
type TenantFilter struct {
	All      bool
	TenantID string
}

// AnyTenant is the TenantFilter that reads every tenant.
var AnyTenant = TenantFilter{All: true}

// OneTenant is the TenantFilter that reads tenant id alone.
func OneTenant(id string) TenantFilter { return TenantFilter{TenantID: id} }

// Matches reports whether tenantID is selected by f.
func (f TenantFilter) Matches(tenantID string) bool {
	return f.All || (f.TenantID != "" && f.TenantID == tenantID)
}

// OrderHistory is everything a store holds about one order: its events
// (oldest first), provider attempts (oldest first), webhook deliveries of
// its events (oldest first) and the idempotency keys that name it.
type OrderHistory struct {
	Order      order.Order
	Events     []event.Stored
	Attempts   []payment.Attempt
	Deliveries []event.Delivery
	Keys       []idempotency.Record
}

// OperatorAction is the stored record of one operator action: the
// operators' idempotency key (KeyHash, idempotency.HashKey of the
// operator's name and the Idempotency-Key) with the request's Fingerprint,
// the audit fields (see event.Action), the answer a replay gives (Result,
// JSON) and the id of the audit event written with it.
type OperatorAction struct {
	KeyHash     string
	Fingerprint string
	ID          string
	Actor       string
	Action      string
	TenantID    string
	Target      string
	Reason      string
	Result      []byte
	EventID     string
	CreatedAt   time.Time
}

// ParkedFilter selects parked attempts (needs_attention) for operators.
type ParkedFilter struct {
	Tenants TenantFilter
	Limit   int
}

// OperatorStore is the operators' capability of a store: reads across
// tenants (each with an explicit TenantFilter) and the writes of operator
// actions, each in one transaction with its audit record. Both stores
// implement it; store/storetest holds them to one contract.
//
// Errors: ErrNotFound, ErrVersionConflict (a guarded write found the row
// no longer in the state it requires: someone else acted first), an error
// wrapping ErrUnavailable, or another error.
type OperatorStore interface {
	OperatorLister

	// ParkedAttempts returns at most f.Limit attempts in status
	// needs_attention of the tenants f selects, oldest first.
	ParkedAttempts(ctx context.Context, f ParkedFilter) ([]payment.Attempt, error)

	// FindOrder returns order id if its tenant is selected, or ErrNotFound.
	FindOrder(ctx context.Context, tenants TenantFilter, id string) (order.Order, error)

	// History returns order id's history (see OrderHistory) if its tenant
	// is selected, or ErrNotFound.
	History(ctx context.Context, tenants TenantFilter, id string) (OrderHistory, error)

	// FindKeys returns the records of the idempotency key with keyHash
	// (idempotency.HashKey of the key) in every selected tenant, by tenant.
	FindKeys(ctx context.Context, tenants TenantFilter, keyHash string) ([]idempotency.Record, error)

	// FindEvent returns event id if its tenant is selected, or ErrNotFound.
	FindEvent(ctx context.Context, tenants TenantFilter, id string) (event.Stored, error)

	// FindEndpoint returns webhook endpoint id (without its secret) if its
	// tenant is selected, or ErrNotFound.
	FindEndpoint(ctx context.Context, tenants TenantFilter, id string) (event.Endpoint, error)

	// FindDelivery returns the delivery of event eventID to endpoint
	// endpointID if its tenant is selected, or ErrNotFound.
	FindDelivery(ctx context.Context, tenants TenantFilter, endpointID, eventID string) (event.Delivery, error)

	// GetOperatorAction returns the action recorded under keyHash, or
	// ErrNotFound.
	GetOperatorAction(ctx context.Context, keyHash string) (OperatorAction, error)

	// OperatorTx runs fn in one transaction, as Store.InTx does, with the
	// operators' guarded writes beside the Executor's.
	OperatorTx(ctx context.Context, fn func(tx OperatorExecutor) error) error
}

// OperatorExecutor is an Executor inside an OperatorTx, with the writes
// only operator actions make. Each is guarded: it changes a row only in
// the state the action requires, and returns ErrVersionConflict (someone
// acted first; nothing written) or ErrNotFound otherwise.
type OperatorExecutor interface {
	Executor

	// SettleParkedAttempt applies u to its attempt only while the attempt
	// is needs_attention.
	SettleParkedAttempt(ctx context.Context, u AttemptUpdate) error

	// ResolveParkedKeys completes every idempotency key parked
	// (needs_attention) on the attempt providerKey with out's ResourceID,
	// ErrorCode and ErrorDetail (the answer its replay gives), and returns
	// how many it completed.
	ResolveParkedKeys(ctx context.Context, providerKey string, out idempotency.Record) (int, error)

	// RequeueDelivery makes the failed delivery of event eventID to
	// endpoint endpointID pending again, due at once, keeping its attempt
	// count (the fencing token). It returns the delivery's tenant.
	// ErrVersionConflict: the delivery is not failed.
	RequeueDelivery(ctx context.Context, endpointID, eventID string) (tenantID string, err error)

	// RequeueFailedDeliveries makes every failed delivery of endpoint
	// endpointID that failed at or after since (its last update) pending
	// again, due at once, keeping their attempt counts, and returns the
	// endpoint's tenant and how many it requeued (0 is no error).
	// ErrNotFound: no such endpoint.
	RequeueFailedDeliveries(ctx context.Context, endpointID string, since time.Time) (tenantID string, n int, err error)

	// RotateEndpointSecret makes secret endpoint endpointID's signing
	// secret. With grace > 0 its former secret keeps signing beside it
	// until grace after now on the store's clock (ClaimDeliveries returns
	// it as Delivery.PreviousSecret until then); with grace 0 it stops at
	// once. It returns the endpoint's tenant. ErrNotFound: no such
	// endpoint.
	RotateEndpointSecret(ctx context.Context, endpointID, secret string, grace time.Duration) (tenantID string, err error)

	// EnableEndpoint clears a disabled endpoint's reason, so deliveries
	// are claimed for it again, and returns its tenant.
	// ErrVersionConflict: the endpoint is enabled.
	EnableEndpoint(ctx context.Context, endpointID string) (tenantID string, err error)

	// RecordOperatorAction inserts a unless an action with its KeyHash
	// exists, and reports whether it did (false: nothing was written; the
	// caller rolls back and replays the holder).
	RecordOperatorAction(ctx context.Context, a OperatorAction) (recorded bool, err error)
}
