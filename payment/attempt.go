package payment

import "time"

// The provider attempt: one logical call to a provider (a charge of one
// order version, a shipment, a refund) as the service records it before the
// call and settles it after. It belongs to the payment domain (issue 15);
// the store persists it (store.Executor's attempt methods) and the service
// moves it.

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
	// AttemptNeedsAttention: the outcome stayed unknown past the age a
	// provider keeps its idempotency keys, so neither asking nor calling
	// again can be trusted. It stays open — no other provider call on its
	// order runs — until a person settles it.
	AttemptNeedsAttention AttemptStatus = "needs_attention"
)

// Open reports whether an attempt with status s may still take effect or is
// waiting for a person: pending, unknown or needs_attention. Another
// provider call on the same order must not overlap it.
func (s AttemptStatus) Open() bool {
	return s == AttemptPending || s == AttemptUnknown || s == AttemptNeedsAttention
}

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
	// IntentID is the provider object the attempt created (a
	// payment.Intent's ID), recorded between Prepare and Confirm; "" until
	// then. Written once (RecordAttemptProgress).
	IntentID string
	// KeySentAt is when the attempt's provider key was first sent (zero if
	// never): a key older than the provider's retention margin is never
	// resent, the attempt is resolved by reading the object instead.
	KeySentAt time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
}
