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
	"strconv"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
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

// ErrLimitReached is returned when a create would take a tenant past a cap
// (EventStore.CreateEndpoint: its endpoints). Nothing was written.
var ErrLimitReached = errors.New("store: limit reached")

// ErrUnavailable is the one error a store returns when the database is
// unreachable or asks for a retry (a broken connection, a serialization
// failure or deadlock, a statement or lock timeout, a busy SQLite file, a
// shutdown). Stores wrap it with the cause (errors.Is finds it); as an
// *apperr.Error with code apperr.EUnavailable it reaches the client as a
// retryable problem. Nothing final was recorded, or a retry with the same
// idempotency key finds out what was.
var ErrUnavailable = &apperr.Error{Code: apperr.EUnavailable,
	Message: "the database is unavailable; retry with the same Idempotency-Key"}

// Unavailable wraps cause (logged, never shown to clients) as an
// ErrUnavailable.
func Unavailable(cause error) error {
	return &unavailableError{cause: cause}
}

// UnavailableBecause is Unavailable with a reason a client may read (such
// as the SQLSTATE of a lock timeout), which replaces ErrUnavailable's
// generic message in the *apperr.Error that errors.As finds.
func UnavailableBecause(reason string, cause error) error {
	return &unavailableError{reason: reason, cause: cause}
}

type unavailableError struct {
	reason string
	cause  error
}

func (e *unavailableError) Error() string { return "store unavailable: " + e.cause.Error() }

// Is reports whether target is ErrUnavailable.
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }

// As sets target, an **apperr.Error, to an EUnavailable error with the
// reason.
func (e *unavailableError) As(target any) bool {
	p, ok := target.(**apperr.Error)
	if !ok {
		return false
	}
	if e.reason == "" {
		*p = ErrUnavailable
	} else {
		*p = &apperr.Error{Code: apperr.EUnavailable, Message: e.reason + "; retry with the same Idempotency-Key"}
	}
	return true
}

func (e *unavailableError) Unwrap() error { return e.cause }

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

// Claim is an idempotency key a request claims: the embedded Record's
// identity and request members (TenantID, KeyHash, Fingerprint, Derived,
// Operation, ResourceID, and for a create's completed claim ErrorCode and
// ErrorDetail), and how long the key lives, counted on the database's clock
// from the transaction that writes it: it is kept TTL (its ExpiresAt) and,
// when claimed in progress, leased for Lease (its LockedUntil). The
// Record's CreatedAt, ExpiresAt and LockedUntil are not read: the store sets
// them from its own clock, so instances whose clocks disagree still agree on
// which lease has run out and which key has expired.
type Claim struct {
	idempotency.Record
	// TTL is the key's retention window (> 0).
	TTL time.Duration
	// Lease is how long a claim in progress holds the key (> 0 for
	// AcquireLease and StartLeased; unused by creates).
	Lease time.Duration
}

// TakeOver says how TakeOverAbandoned leases the keys it takes. Which
// leases have expired and which deferred keys are due is decided on the
// database's clock.
type TakeOver struct {
	// Lease is the new lease of every key taken over, from the database's
	// clock.
	Lease time.Duration
	// Limit bounds how many keys one call takes.
	Limit int
	// Backoff is the per-key backoff of unknown outcomes: the n-th takeover
	// (n from 0) of an unknown outcome defers the key's next one to
	// min(Backoff·2^n, MaxBackoff) after the database's now. Zero takes it
	// again at once.
	Backoff, MaxBackoff time.Duration
}

// Backlog is the completer's queue at an instant: how many keys wait for it
// and how old the oldest is. A store's Backlog counts what TakeOverAbandoned
// would take (Due) and what it will take later (Deferred), plus the
// attempts parked for a person (NeedsAttention).
type Backlog struct {
	// ExpiredLeases: keys in progress whose lease expired (a crash).
	ExpiredLeases int
	// UnknownDue: unknown outcomes due for another question.
	UnknownDue int
	// UnknownDeferred: unknown outcomes backing off (not yet due).
	UnknownDeferred int
	// NeedsAttention: provider attempts parked for a person.
	NeedsAttention int
	// OldestDue is when the oldest due key became due (zero if none).
	OldestDue time.Time
}

// AttemptProgress is what a leased request records on its open attempt
// between provider calls (issue 15): the time its provider key is first
// sent, and the provider object the first call created.
type AttemptProgress struct {
	// ProviderKey names the attempt; it must be the attempt of the key the
	// lease holds.
	ProviderKey string
	// IntentID is the provider object id (payment.Intent.ID) to record; ""
	// records none.
	IntentID string
	// SentAt is when the provider key is first sent; zero records none. An
	// attempt that has a KeySentAt keeps it.
	SentAt time.Time
}

// ErrIntentConflict is returned by RecordAttemptProgress when the attempt
// records another provider object than the one given: two objects for one
// attempt would be a bug in the caller's key derivation. Nothing was
// written.
var ErrIntentConflict = errors.New("store: the attempt records another provider object")

// AttemptUpdate settles (or re-opens) an attempt.
type AttemptUpdate struct {
	ProviderKey string
	Status      payment.AttemptStatus
	ProviderRef string
	ErrorCode   string
	At          time.Time
	// Refunded, on a cancel's refund attempt that succeeded, is what the
	// provider's refund returned (minor units), when known; nil otherwise.
	// SettleAttempt ignores it; the cancel's transaction records it
	// (RefundCloser.CloseRefunds).
	Refunded *int64
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

// Holder is the record of a key that another request claimed, with the
// current state of the order it names (nil when there is none, such as a
// stored 404-free error on a deleted order), so a replay needs no second
// read. Now is the database's clock as the claim that found the holder
// read it, so the caller judges the key's expiry on that clock (zero in the
// rare case the store could not say; the caller then uses its own).
type Holder struct {
	idempotency.Record
	Order *order.Order
	Now   time.Time
}

// NewOrder is one create of a group commit: the key to claim as completed
// (nil for none; its TenantID is the order's) and the order to insert if the
// claim wins.
type NewOrder struct {
	Key   *Claim
	Order order.Order
}

// Intent is the provider attempt a leased request records in phase 1 when the
// order allows it: the order is in From and, where set, its amount equals
// *Amount and its currency Currency. The attempt's provider key is
// ProviderKeyPrefix, followed by the order's version when Versioned (a
// charge belongs to one order version; a shipment or a refund to the order).
// A zero Intent (From empty) records nothing.
type Intent struct {
	From              order.State
	Kind              payment.AttemptKind
	ProviderKeyPrefix string
	Versioned         bool
	Amount            *int64
	Currency          string
	PaymentMethod     string
	At                time.Time
}

// ProviderKey returns the intent's provider key for an order at version.
func (in Intent) ProviderKey(version int64) string {
	if in.Versioned {
		return in.ProviderKeyPrefix + strconv.FormatInt(version, 10)
	}
	return in.ProviderKeyPrefix
}

// Allows reports whether o satisfies the intent's guard.
func (in Intent) Allows(o order.Order) bool {
	return in.From != "" && o.State == in.From &&
		(in.Amount == nil || *in.Amount == o.Amount) && (in.Currency == "" || in.Currency == o.Currency)
}

// Started is the outcome of phase 1 (StartLeased). Acquired says whether the
// caller now holds Key's lease; if not, Key is the holder's record. Order is
// the order the key names as of the end of phase 1 (nil if it does not
// exist for the tenant). Attempt is the attempt Key.AttemptKey names, if any:
// the one phase 1 recorded, or the one a resumed key recorded before.
type Started struct {
	Acquired bool
	Key      idempotency.Record
	Order    *order.Order
	Attempt  *payment.Attempt
	// IntentAt is the intent's At: an Attempt this call opened (inserted,
	// or re-opened from failed) has UpdatedAt equal to it, to the
	// microsecond; one it found open keeps its own.
	IntentAt time.Time
	// Now is the database's clock as phase 1 read it: how long a holder's
	// lease has left is Key.LockedUntil − Now, whatever the caller's clock
	// says.
	Now time.Time
}

// Executor is the set of store operations that run the same on the store
// itself (each its own transaction) or inside a transaction (Store.InTx).
//
// Guarded writes — CompleteKey, ReleaseKey, CompareAndSetOrder — check their
// guard in the database. Inside a transaction a store may pipeline them
// (PostgreSQL sends them with the next read or with the COMMIT, in one
// round trip), so a guard's error may surface from a later call or from
// InTx itself; either way nothing of the transaction is committed.
//
// Errors: ErrNotFound, ErrVersionConflict, ErrLeaseLost,
// ErrAttemptInFlight, an error wrapping ErrUnavailable, or another error
// (internal).
type Executor interface {
	// CreateOrder claims key (if non-nil, as completed, kept key.TTL) and
	// inserts o, atomically, in one round trip; it then sets key.CreatedAt
	// and key.ExpiresAt to what it stored (the database's clock; inside a
	// transaction, what is stored if it commits). If the
	// key is already held it writes nothing and returns the holder with
	// its order's current state. An expired derived key is taken over.
	CreateOrder(ctx context.Context, key *Claim, o order.Order) (held *Holder, err error)

	// AcquireLease claims claim's key in progress, leased for claim.Lease,
	// with fencing token 1 and recovery point started. If the key exists
	// it is taken over — the token grows by one, the lease is renewed and
	// the recovery point kept — when it is in progress with an expired
	// lease, a retryable failure, or an unknown outcome, and its
	// fingerprint equals claim's; an expired derived key is replaced.
	// Expiry is judged on the database's clock, which also starts the new
	// lease. It returns the record and true when the caller now holds the
	// key, or the holding record and false otherwise.
	AcquireLease(ctx context.Context, claim Claim) (idempotency.Record, bool, error)

	// RecordAttempt inserts a (pending) unless an attempt with its
	// ProviderKey exists — a failed one (the provider did nothing) is
	// re-opened as pending with a's payment method, any other is kept as it
	// is — sets the key's recovery point to attempt_recorded with
	// AttemptKey a.ProviderKey, and returns the attempt as stored, holding
	// the order's row. Errors: ErrLeaseLost (stale token),
	// ErrVersionConflict (the order is no longer at orderVersion),
	// ErrAttemptInFlight (another attempt on the order is open, or this
	// provider key is open with another payment method: joining it would
	// give this request another request's outcome).
	RecordAttempt(ctx context.Context, lease Lease, a payment.Attempt, orderVersion int64) (payment.Attempt, error)

	// CompleteKey records outcome (Operation is kept from the claim;
	// ResourceID, ErrorCode and ErrorDetail are written) on the key held
	// by lease and ends the lease. Guarded: ErrLeaseLost.
	CompleteKey(ctx context.Context, lease Lease, outcome idempotency.Record) error

	// ReleaseKey ends the lease without an outcome: the key becomes to
	// (retryable_failure, unknown_outcome, or needs_attention, which no
	// takeover resumes). Guarded: ErrLeaseLost.
	ReleaseKey(ctx context.Context, lease Lease, to idempotency.State) error

	// CompareAndSetOrder writes next if the order is still at version
	// next.Version-1 (ErrVersionConflict otherwise) and no attempt on it
	// other than ownAttempt ("" for none) is open (ErrAttemptInFlight).
	// Guarded.
	CompareAndSetOrder(ctx context.Context, next order.Order, ownAttempt string) error

	// RecordAttemptProgress records p on attempt p.ProviderKey — its
	// IntentID and KeySentAt, each written once — fenced by lease: the
	// lease's key must still be in progress with lease.Token and hold the
	// attempt (its attempt key), else ErrLeaseLost. Recording an IntentID
	// the attempt holds already is a no-op; another is ErrIntentConflict.
	// It returns the attempt as stored.
	RecordAttemptProgress(ctx context.Context, lease Lease, p AttemptProgress) (payment.Attempt, error)

	// SettleAttempt applies u to its attempt unless the attempt is already
	// settled for good (succeeded, declined, rejected): a late, stale
	// answer never re-opens it.
	SettleAttempt(ctx context.Context, u AttemptUpdate) error

	// TakeOverAbandoned leases to the caller, for to.Lease, at most
	// to.Limit keys abandoned as of the database's clock: in progress with
	// an expired lease, or with an unknown outcome whose backoff has run
	// out.
	// The oldest are taken first across both kinds (an expired lease is due
	// since its locked_until, an unknown outcome since its retry_at, or its
	// creation when never deferred), so unresolvable unknown outcomes can
	// never starve a crashed request. Taking an unknown outcome defers its
	// next takeover (TakeOver.Backoff). Each returned record carries its new
	// fencing token. Safe with several instances (FOR UPDATE SKIP LOCKED on
	// PostgreSQL).
	TakeOverAbandoned(ctx context.Context, to TakeOver) ([]idempotency.Record, error)

	// AbandonedBacklog counts the completer's queue as of the database's
	// clock (see Backlog).
	AbandonedBacklog(ctx context.Context) (Backlog, error)

	// ForgetKey deletes the key held by lease when it recorded no attempt:
	// its request named no order of the tenant, so it did not happen and a
	// corrected request may use the key. Guarded: ErrLeaseLost.
	ForgetKey(ctx context.Context, lease Lease) error

	// AttemptsNeedingAttention returns at most limit of the tenant's
	// attempts in status needs_attention, oldest first.
	AttemptsNeedingAttention(ctx context.Context, tenantID string, limit int) ([]payment.Attempt, error)

	// GetAttempt returns the attempt with providerKey, or ErrNotFound.
	GetAttempt(ctx context.Context, providerKey string) (payment.Attempt, error)

	// GetAttemptByIntent returns the attempt that recorded the provider
	// object intentID (payment.Attempt.IntentID, written by
	// RecordAttemptProgress), or ErrNotFound; the oldest if, against the
	// service's rules, several did. A provider event is matched to its
	// attempt by it (issue 15).
	GetAttemptByIntent(ctx context.Context, intentID string) (payment.Attempt, error)

	// Sweep applies the key lifecycle as of the database's clock, touching
	// at most limit rows per step: completed client keys past ExpiresAt
	// become tombstones kept until ExpiresAt+tombstoneFor; tombstones past
	// that, expired derived keys and expired keys that never completed are
	// deleted.
	Sweep(ctx context.Context, tombstoneFor time.Duration, limit int) (SweepResult, error)

	// Now reads the database's clock: the one every lease, expiry and
	// schedule is decided on. Inside a transaction it is the clock the
	// transaction's statements decide on (on PostgreSQL the transaction's
	// start).
	Now(ctx context.Context) (time.Time, error)

	// LookupKey returns the record of (tenantID, keyHash) in any state, or
	// ErrNotFound. keyHash is idempotency.HashKey of the key.
	LookupKey(ctx context.Context, tenantID, keyHash string) (idempotency.Record, error)

	// GetOrder returns the tenant's order id, or ErrNotFound.
	GetOrder(ctx context.Context, tenantID, id string) (order.Order, error)

	// ListOrders returns the tenant's orders matching f, newest first, at
	// most f.Limit of them, starting after the order id f.After.
	ListOrders(ctx context.Context, tenantID string, f order.Filter) ([]order.Order, error)

	// AppendEvent writes e to the outbox and fans it out to a pending
	// webhook delivery per enabled endpoint of e's tenant that subscribes
	// to e.Type. Called in the transaction of the change e reports (on
	// PostgreSQL it is pipelined with the change's writes: no round trip of
	// its own), so the event exists exactly when the change does. A second
	// event for one (order, sequence) is refused.
	AppendEvent(ctx context.Context, e event.Event) error
	// RecordInboxEvent records ev in the provider inbox (see inbox.go for
	// what is kept) unless an event with
	// its (Source, EventID) is there already, and reports whether it
	// recorded it (false: a duplicate delivery; nothing was written). Run it
	// in the transaction (InTx) that applies the event's effect, so the
	// event is recorded exactly when its effect is: a concurrent delivery of
	// the same event waits for this transaction and then finds it.
	RecordInboxEvent(ctx context.Context, ev payment.ProviderEvent) (recorded bool, err error)
}

// Store persists orders, idempotency keys and provider attempts.
//
// A create claims its key as completed in the same transaction as the
// insert. A request that calls a provider holds its key under a lease
// instead, in three phases — StartLeased; the call with no transaction
// open; an InTx that completes or releases the key, compare-and-sets the
// order and settles the attempt — every write fenced by the lease.
type Store interface {
	Executor

	// InTx runs fn in one transaction: it commits when fn returns nil and
	// rolls back when fn returns an error (which InTx returns). A COMMIT
	// error is returned, never lost. fn must use only tx, and must not keep
	// it after returning. Writes are not visible to other transactions
	// until InTx returns nil.
	InTx(ctx context.Context, fn func(tx Executor) error) error

	// StartLeased is phase 1 of a leased request, in one transaction (one
	// round trip on PostgreSQL): it acquires claim's key as AcquireLease
	// does; if it did, it locks the order claim.ResourceID and, when intent
	// allows the order, records intent's attempt as RecordAttempt does
	// (a resumed key records nothing unless its own attempt is intent's, a
	// provider key in use with another payment method or another open
	// attempt on the order records nothing). It returns the key (the
	// holder's when not acquired), the order and the key's attempt, so the
	// caller decides without reading again. When the guard did not let it
	// record, the caller decides from what it got and may use
	// RecordAttempt for the precise reason.
	StartLeased(ctx context.Context, claim Claim, intent Intent) (Started, error)

	// CreateOrders is CreateOrder for a group of creates in one transaction
	// (group commit): result i is nil when batch[i] was created (its key's
	// CreatedAt and ExpiresAt then set to what was stored), or the holder
	// of its key. Keys must be distinct within batch (the caller
	// resolves duplicates); a create without a key always inserts. An
	// error means nothing of the batch was committed.
	CreateOrders(ctx context.Context, batch []NewOrder) ([]*Holder, error)

	// Ping checks that the store can serve requests.
	Ping(ctx context.Context) error

	// Close releases the store's resources.
	Close() error
}

// SerialWriter is implemented by a Store that runs one write transaction
// at a time in this process (the embedded SQLite store: SQLite has one
// writer per file). A second group of creates in flight there only waits
// for the first, so the service's group commit runs one worker by default,
// which gathers every create that arrived during the previous group's
// write into the next.
type SerialWriter interface {
	Store
	// SerialWrites marks the store; it does nothing.
	SerialWrites()
}

// ReadHolder reads, through e, the record that holds the key (tenantID,
// keyHash) and the current state of the order it names (nil when it names
// none, or the order is gone). Stores use it when a claim lost to a row
// their claim statement could not see.
func ReadHolder(ctx context.Context, e Executor, tenantID, keyHash string) (*Holder, error) {
	r, err := e.LookupKey(ctx, tenantID, keyHash)
	if err != nil {
		return nil, err
	}
	h := &Holder{Record: r}
	if r.ResourceID != "" {
		o, err := e.GetOrder(ctx, r.TenantID, r.ResourceID)
		switch {
		case err == nil:
			h.Order = &o
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return h, nil
}
