package store

import "time"

// ProviderEventType is the kind of a provider event (a webhook a payment
// provider sends). The set is closed, and constrained in the database.
type ProviderEventType string

// Provider event types.
const (
	// ChargeSucceeded: the provider captured the charge whose idempotency
	// key is the event's ProviderKey.
	ChargeSucceeded ProviderEventType = "charge.succeeded"
	// ChargeFailed: the provider declined that charge (final).
	ChargeFailed ProviderEventType = "charge.failed"
	// RefundSucceeded: the provider refunded; ProviderKey is the refund's
	// idempotency key.
	RefundSucceeded ProviderEventType = "refund.succeeded"
)

// Valid reports whether t is one of the provider event types.
func (t ProviderEventType) Valid() bool {
	return t == ChargeSucceeded || t == ChargeFailed || t == RefundSucceeded
}

// InboxEvent is one provider event in the inbox: Source names the provider
// ("paysim"), EventID is the provider's event id (unique per Source),
// ProviderKey the idempotency key Orderly sent with the call the event is
// about (an attempt's provider key), ReceivedAt when orderd took it in.
type InboxEvent struct {
	Source      string
	EventID     string
	Type        ProviderEventType
	ProviderKey string
	ReceivedAt  time.Time
}
