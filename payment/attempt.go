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
	// AttemptCapture captures an order's authorization after it shipped
	// (capture at fulfilment, issue 16); provider key "<order id>/capture/1".
	AttemptCapture AttemptKind = "capture"
	// AttemptVoid voids an order's authorization (Gateway.Cancel of its
	// intent) when it is cancelled or its shipment is refused for good;
	// provider key "<order id>/void/1".
	AttemptVoid AttemptKind = "void"
)

// AttemptStatus is where a provider attempt stands.
type AttemptStatus string

// Attempt statuses. Pending, Unknown, NeedsAttention, RequiresAction and
// Processing are open; the rest are settled.
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
	// AttemptRequiresAction: a charge whose intent waits for the customer
	// (3-D Secure, payment.IntentRequiresAction); no money moved. It stays
	// open — the order's one open attempt — until the intent succeeds, is
	// declined or canceled, or the attempt expires (issue 16).
	AttemptRequiresAction AttemptStatus = "requires_action"
	// AttemptProcessing: a charge whose intent the provider is collecting
	// (a bank debit, payment.IntentProcessing); it stays open until the
	// provider settles it (issue 16).
	AttemptProcessing AttemptStatus = "processing"
)

// Open reports whether an attempt with status s may still take effect or is
// waiting for a person or a customer: pending, unknown, needs_attention,
// requires_action or processing. Another provider call on the same order
// must not overlap it.
func (s AttemptStatus) Open() bool {
	switch s {
	case AttemptPending, AttemptUnknown, AttemptNeedsAttention, AttemptRequiresAction, AttemptProcessing:
		return true
	}
	return false
}

// Awaiting reports whether s is a charge waiting asynchronously on the
// customer or the provider (requires_action or processing): the pay was
// accepted (202) and its intent is read, not confirmed again, until it
// settles.
func (s AttemptStatus) Awaiting() bool {
	return s == AttemptRequiresAction || s == AttemptProcessing
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
