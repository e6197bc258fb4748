// Package store defines the persistence seam of Orderly: the Store interface,
// its sentinel errors, and the contract every implementation must meet. The
// implementations live in sub-packages named after what they adapt:
// store/postgres (several instances sharing one PostgreSQL database, via pgx)
// and store/sqlite (a single node, one durable file, no setup). The
// conformance suite in store/storetest proves both behave the same.
//
// The contract that makes retries harmless: an idempotency key is claimed in
// the same database transaction as the business write it guards, under a
// unique constraint on (tenant, key hash), so the key exists exactly when its
// effect does. Every order update is a compare-and-set on the version that
// was read.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
)

// ErrNotFound is returned when an order, key or attempt does not exist for
// the tenant. Another tenant's rows are never visible: they are "not found".
var ErrNotFound = errors.New("store: not found")

// ErrVersionConflict is returned when an order's version is no longer the one
// the caller read (a compare-and-set that matched no row). Nothing was
// written; the caller re-reads the order and decides again.
var ErrVersionConflict = errors.New("store: version conflict")

// ErrLeaseLost is returned by a write fenced by a lease whose fencing token
// is no longer the key's: another worker took the key over. Nothing was
// written; the stale worker must stop.
var ErrLeaseLost = errors.New("store: lease lost")

// ErrAttemptInFlight is returned when another provider attempt on the same
// order is still open (pending or unknown): two provider calls on one order
// (a shipment and a refund, a charge and a cancel) must never overlap.
// Nothing was written; the caller answers "order busy" and the client
// retries.
var ErrAttemptInFlight = errors.New("store: another provider attempt on the order is in flight")

// Lease identifies the holder of an in-progress key: writes fenced by it
// succeed only while the key's fencing token is still Token.
type Lease struct {
	TenantID string
	KeyHash  string
	Token    int64
}

// LeaseOf returns the lease a record in progress grants.
func LeaseOf(r idempotency.Record) Lease {
	return Lease{TenantID: r.TenantID, KeyHash: r.KeyHash, Token: r.FencingToken}
}

// AttemptKind is what a provider attempt does.
type AttemptKind string

// Attempt kinds.
const (
	AttemptCharge   AttemptKind = "charge"
	AttemptShipment AttemptKind = "shipment"
	AttemptRefund   AttemptKind = "refund"
)

// AttemptStatus is where a provider attempt stands.
type AttemptStatus string

// Attempt statuses. Pending and Unknown are open; the rest are settled.
const (
	// AttemptPending: recorded; the call may or may not have been sent.
	AttemptPending AttemptStatus = "pending"
	// AttemptSucceeded: the provider captured, shipped or refunded.
	AttemptSucceeded AttemptStatus = "succeeded"
	// AttemptDeclined: the provider declined the charge (final).
	AttemptDeclined AttemptStatus = "declined"
	// AttemptRejected: the provider refused for good (out of stock, invalid).
	AttemptRejected AttemptStatus = "rejected"
	// AttemptFailed: the provider answered with a retryable failure; nothing
	// happened there.
	AttemptFailed AttemptStatus = "failed"
	// AttemptUnknown: the call was sent and no answer came back.
	AttemptUnknown AttemptStatus = "unknown"
)

// Attempt is one logical provider call, identified by the idempotency key
// sent to the provider (ProviderKey): a charge of one order version, a
// shipment, a refund. Amount is in minor units of Currency.
type Attempt struct {
	ProviderKey   string
	TenantID      string
	OrderID       string
	Kind          AttemptKind
	Status        AttemptStatus
	Amount        int64
	Currency      string
	PaymentMethod string
	ProviderRef   string
	ErrorCode     string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// AttemptUpdate settles (or re-opens) an attempt.
type AttemptUpdate struct {
	ProviderKey string
	Status      AttemptStatus
	ProviderRef string
	ErrorCode   string
	At          time.Time
}

// Completion is the post-call phase of a leased request, written in one
// transaction fenced by the lease: the key becomes completed with Outcome's
// StatusCode, ResourceID, ErrorCode and ErrorDetail; Next, if set, is written
// as a compare-and-set from version Next.Version-1; Attempt, if set, is
// settled.
type Completion struct {
	Outcome idempotency.Record
	Next    *order.Order
	Attempt *AttemptUpdate
}

// SweepResult counts what one Sweep did.
type SweepResult struct {
	// Tombstoned: completed client keys past retention whose outcome was
	// dropped, leaving a tombstone.
	Tombstoned int
	// Deleted: tombstones past their window, expired derived keys, and
	// expired keys that never completed, removed.
	Deleted int
}

// Store persists orders, idempotency keys and provider attempts.
//
// A create claims its key as completed in the same transaction as the
// insert. A request that calls a provider holds its key under a lease
// instead, in three phases (AcquireLease + RecordAttempt; the call with no
// transaction open; Complete or Release), every write fenced by the lease.
//
// Errors: ErrNotFound, ErrVersionConflict, ErrLeaseLost, an *apperr.Error
// with code EUnavailable when the database is unreachable or asks for a
// retry (serialization failure, deadlock, shutdown), or another error
// (internal).
type Store interface {
	// CreateOrder claims key (if non-nil, as completed) and inserts o,
	// atomically. If the key is already held it writes nothing and returns
	// the record that holds it. An expired derived key is taken over.
	CreateOrder(ctx context.Context, key *idempotency.Record, o order.Order) (held *idempotency.Record, err error)

	// AcquireLease claims claim's key in progress, leased until
	// claim.LockedUntil, with fencing token 1 and recovery point started.
	// If the key exists it is taken over — the token grows by one, the
	// lease is renewed and the recovery point kept — when it is in
	// progress with an expired lease, a retryable failure, or an unknown
	// outcome, and its fingerprint equals claim's; an expired derived key
	// is replaced. The time that decides expiry is claim.CreatedAt. It
	// returns the record and true when the caller now holds the key, or
	// the holding record and false otherwise.
	AcquireLease(ctx context.Context, claim idempotency.Record) (idempotency.Record, bool, error)

	// RecordAttempt inserts a (pending) unless an attempt with its
	// ProviderKey exists — a failed one (the provider did nothing) is
	// re-opened as pending with a's payment method, any other is kept as it
	// is — sets the key's recovery point to attempt_recorded with
	// AttemptKey a.ProviderKey, and returns the attempt as stored, all in
	// one transaction holding the order's row. Errors: ErrLeaseLost (stale
	// token), ErrVersionConflict (the order is no longer at orderVersion),
	// ErrAttemptInFlight (another attempt on the order is open, or this
	// provider key is open with another payment method: joining it would
	// give this request another request's outcome).
	RecordAttempt(ctx context.Context, lease Lease, a Attempt, orderVersion int64) (Attempt, error)

	// Complete writes c in one transaction fenced by lease. A
	// compare-and-set (c.Next) is refused while an attempt on the order
	// other than c.Attempt is open. Errors: ErrLeaseLost,
	// ErrVersionConflict, ErrAttemptInFlight (then nothing is written).
	Complete(ctx context.Context, lease Lease, c Completion) error

	// Release ends the lease without an outcome: the key becomes to
	// (retryable_failure or unknown_outcome) and u, if set, is applied.
	// Fenced: ErrLeaseLost.
	Release(ctx context.Context, lease Lease, to idempotency.State, u *AttemptUpdate) error

	// TakeOverAbandoned leases to the caller, until leaseUntil, at most
	// limit keys that were abandoned at now: in progress with an expired
	// lease, or with an unknown outcome. Each returned record carries its
	// new fencing token. Safe with several instances (FOR UPDATE SKIP
	// LOCKED on PostgreSQL).
	TakeOverAbandoned(ctx context.Context, now, leaseUntil time.Time, limit int) ([]idempotency.Record, error)

	// GetAttempt returns the attempt with providerKey, or ErrNotFound.
	GetAttempt(ctx context.Context, providerKey string) (Attempt, error)

	// Sweep applies the key lifecycle at now, touching at most limit rows
	// per step: completed client keys past ExpiresAt become tombstones kept
	// until ExpiresAt+tombstoneFor; tombstones past that, expired derived
	// keys and expired keys that never completed are deleted.
	Sweep(ctx context.Context, now time.Time, tombstoneFor time.Duration, limit int) (SweepResult, error)

	// LookupKey returns the record of (tenantID, keyHash) in any state, or
	// ErrNotFound. keyHash is idempotency.HashKey of the key.
	LookupKey(ctx context.Context, tenantID, keyHash string) (idempotency.Record, error)

	// GetOrder returns the tenant's order id, or ErrNotFound.
	GetOrder(ctx context.Context, tenantID, id string) (order.Order, error)

	// ListOrders returns the tenant's orders matching f, newest first, at
	// most f.Limit of them, starting after the order id f.After.
	ListOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error)

	// Ping checks that the store can serve requests.
	Ping(ctx context.Context) error

	// Close releases the store's resources.
	Close() error
}
