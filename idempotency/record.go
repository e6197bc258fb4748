package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/orderly/orderly/apperr"
)

// Default retention windows.
const (
	// DefaultKeyTTL is how long a client-sent key is kept and replayed.
	DefaultKeyTTL = 24 * time.Hour
	// DefaultDerivedKeyTTL is how long a key derived from the request
	// fingerprint (no Idempotency-Key sent) is kept: long enough to absorb a
	// double click or an automatic retry, short enough that the same order
	// placed again later is a new order.
	DefaultDerivedKeyTTL = 10 * time.Minute
)

// Policy says what the server does with a side-effecting request that carries
// no Idempotency-Key.
type Policy string

// Policies.
const (
	// PolicyDerive derives a short-lived key from the request fingerprint.
	PolicyDerive Policy = "derive"
	// PolicyRequire rejects the request with 400 (draft §2.7).
	PolicyRequire Policy = "require"
	// PolicyOff runs the request without idempotency protection.
	PolicyOff Policy = "off"
)

// Valid reports whether p is one of the policies above.
func (p Policy) Valid() bool {
	return p == PolicyDerive || p == PolicyRequire || p == PolicyOff
}

// Key is the idempotency key of one request as the service sees it: the key
// (client-sent, or derived), whether it was derived, and the request's
// fingerprint. The zero Key means "no idempotency protection".
type Key struct {
	Value       string
	Derived     bool
	Fingerprint string
}

// IsZero reports whether k carries no key.
func (k Key) IsZero() bool { return k.Value == "" }

// State is the lifecycle state of a stored key.
type State string

// Key states. The set is closed: the database constrains the column to it.
const (
	// StateInProgress: a request or the completer holds the key's lease.
	StateInProgress State = "in_progress"
	// StateCompleted: the outcome is recorded and replays.
	StateCompleted State = "completed"
	// StateRetryableFailure: the request failed before anything final
	// happened; a retry with the same key takes it over.
	StateRetryableFailure State = "retryable_failure"
	// StateUnknownOutcome: a provider call's outcome is unknown (timeout,
	// dropped reply); the next holder asks the provider first.
	StateUnknownOutcome State = "unknown_outcome"
	// StateExpired: a tombstone past the retention window; the outcome is
	// gone and a retry gets an "expired" error.
	StateExpired State = "expired"
	// StateNeedsAttention: a provider call's outcome stayed unknown past
	// the age a provider keeps its idempotency keys; nothing retries it (a
	// retry could move money twice) until a person settles it. Retries of
	// the key get a 409 "needs_attention" problem.
	StateNeedsAttention State = "needs_attention"
)

// RecoveryPoint records how far a leased request got, so whoever takes the
// key over next knows where to resume (Stripe's "atomic phases").
type RecoveryPoint string

// Recovery points.
const (
	// RecoveryStarted: the key is claimed; nothing outside the database
	// happened yet.
	RecoveryStarted RecoveryPoint = "started"
	// RecoveryAttemptRecorded: a provider attempt (Record.AttemptKey) is
	// recorded and may have reached the provider.
	RecoveryAttemptRecorded RecoveryPoint = "attempt_recorded"
)

// Operation is what a key was claimed for. The api derives a stored
// outcome's HTTP status from it and the error code (201 for a successful
// create, 200 for a successful transition), so no status is stored.
type Operation string

// Operations. The set is closed: the database constrains the column to it.
const (
	OpCreate  Operation = "create"
	OpPay     Operation = "pay"
	OpFulfill Operation = "fulfill"
	OpCancel  Operation = "cancel"
	// OpRefund: a partial refund, POST /v1/orders/{id}/refunds (issue 16).
	OpRefund Operation = "refund"
)

// Record is the stored outcome of the first request that claimed a key,
// scoped by (TenantID, KeyHash). Stores keep only the key's hash (HashKey),
// never the key itself. Operation is what the key was claimed for (empty
// only for keys stored before it was recorded, which were transitions);
// ResourceID is the order it concerns. A completed record without ErrorCode
// is a success; with one, ErrorCode and ErrorDetail let a replay return the
// same problem. ExpiresAt is CreatedAt plus the key's retention window.
//
// While State is StateInProgress the key is leased until LockedUntil by the
// holder of FencingToken; the token grows on every takeover, and a write
// fenced by an older token is refused. TombstoneUntil is when an expired
// key's tombstone is deleted.
type Record struct {
	TenantID    string
	KeyHash     string
	Fingerprint string
	Derived     bool
	Operation   Operation
	ResourceID  string
	ErrorCode   apperr.Code
	ErrorDetail string
	CreatedAt   time.Time
	ExpiresAt   time.Time

	State          State
	LockedUntil    time.Time
	FencingToken   int64
	RecoveryPoint  RecoveryPoint
	AttemptKey     string
	TombstoneUntil time.Time
}

// HashKey returns the lowercase hex SHA-256 of key: what stores keep and
// look keys up by, so a database dump or a tombstone reveals no client key.
func HashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// Expired reports whether r is past its retention window at now.
func (r Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// Err returns the stored final error of r as an *apperr.Error, or nil when r
// records a success.
func (r Record) Err() error {
	if r.ErrorCode == "" {
		return nil
	}
	return &apperr.Error{Code: r.ErrorCode, Message: r.ErrorDetail}
}
