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

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
)

// ErrNotFound is returned when an order or idempotency key does not exist for
// the tenant. Another tenant's rows are never visible: they are "not found".
var ErrNotFound = errors.New("store: not found")

// ErrVersionConflict is returned by Transition when the order's version is no
// longer the one the caller read (a compare-and-set that matched no row).
// Nothing was written; the caller re-reads the order and decides again.
var ErrVersionConflict = errors.New("store: version conflict")

// Store persists orders and idempotency records. Methods that take a key
// record claim it: they insert it under the unique (TenantID, KeyHash) constraint
// in the same transaction as their business write. If the key is already
// held they write nothing and return the record that holds it ("held"); the
// caller compares fingerprints and replays. A held record may be expired
// (the caller decides what that means), except that an expired *derived* key
// is taken over by the new claim, since a derived key only absorbs
// duplicates within its short window. Expiry is judged at the claim's
// CreatedAt, the caller's clock.
//
// Errors: ErrNotFound, ErrVersionConflict, an *order.Error with code
// EUnavailable when the database is unreachable or asks for a retry
// (serialization failure, deadlock, shutdown), or another error (internal).
type Store interface {
	// CreateOrder claims key (if non-nil) and inserts o, atomically. It
	// returns the held record, and writes nothing, when the key is taken.
	CreateOrder(ctx context.Context, key *idempotency.Record, o order.Order) (held *idempotency.Record, err error)

	// Transition claims key (if non-nil) and writes next with a
	// compare-and-set: the row (next.ID, next.TenantID) is updated only if
	// its version is still next.Version-1. It returns the held record when
	// the key is taken, and ErrVersionConflict when the compare-and-set
	// matched no row; in both cases nothing is written.
	Transition(ctx context.Context, key *idempotency.Record, next order.Order) (held *idempotency.Record, err error)

	// SaveRecord claims rec for an outcome that needs no business write (a
	// no-op event, a final error). It returns the held record when the key
	// is taken.
	SaveRecord(ctx context.Context, rec idempotency.Record) (held *idempotency.Record, err error)

	// LookupKey returns the record of (tenantID, keyHash), expired or not,
	// or ErrNotFound. keyHash is idempotency.HashKey of the key.
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
