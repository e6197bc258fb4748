package event

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/orderly/orderly/order"
)

// Type is the kind of an event. The set is closed: Types lists it and both
// stores constrain the column to it.
type Type string

// Event types.
const (
	// OrderCreated: an order was created (sequence 1, state RCVD).
	OrderCreated Type = "order.created"
	// OrderPaid: the charge was captured and the order is PAID.
	OrderPaid Type = "order.paid"
	// OrderPaymentFailed: the payment provider declined the charge for good;
	// the order stays RCVD with its version moved on, so another payment
	// method may be tried.
	OrderPaymentFailed Type = "order.payment_failed"
	// OrderFulfilled: the warehouse shipped the order (FULFILLED).
	OrderFulfilled Type = "order.fulfilled"
	// OrderCancelled: the order was cancelled; Refunded says whether its
	// charge was refunded first (a cancel from PAID).
	OrderCancelled Type = "order.cancelled"
	// OrderRefunded: a partial refund of the order succeeded at the
	// provider (issue 16); Refund says how much, and the order's totals
	// after it. The order's state does not change; its version does.
	OrderRefunded Type = "order.refunded"
	// OrderCaptured: the authorization of an order paid with capture at
	// fulfilment (ORDERD_CAPTURE=at_fulfilment, issue 16) was captured
	// after the order shipped; Capture says how much. The order stays
	// FULFILLED; its version moves on.
	OrderCaptured Type = "order.captured"
	// OrderRefundFailed: a partial refund that succeeded at the provider
	// failed there later (issue 16; Stripe: a refund's status moves from
	// succeeded to failed, refund.failed, when the card it returns to was
	// closed, and the money goes back to the merchant's balance). Refund
	// says which and how much, and the order's totals after: its amount
	// is no longer counted as refunded (nor reserved, so the PAID or
	// FULFILLED order can refund it again), and the customer has not
	// received it. The order's state does not change; its version does.
	OrderRefundFailed Type = "order.refund_failed"
	// OperatorAction: an operator acted through the operator API (package
	// operator): Action says who did what, why, when and to what. It is
	// the audit event, written in the transaction of the action's effect.
	OperatorAction Type = "operator.action"
)

// Types lists every event type, the order's in lifecycle order, then the
// audit event.
var Types = []Type{OrderCreated, OrderPaid, OrderPaymentFailed, OrderFulfilled, OrderCancelled, OrderRefunded, OrderCaptured, OrderRefundFailed, OperatorAction}

// Valid reports whether t is one of Types.
func (t Type) Valid() bool { return slices.Contains(Types, t) }

// IDPrefix starts every event id.
const IDPrefix = "evt_"

// NewID returns a fresh event id: IDPrefix followed by the 32 hex digits of
// a UUIDv7 (RFC 9562 §5.7), so ids sort by creation time.
func NewID() string {
	return IDPrefix + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// ValidID reports whether id has the shape NewID gives.
func ValidID(id string) bool {
	if len(id) != len(IDPrefix)+32 || !strings.HasPrefix(id, IDPrefix) {
		return false
	}
	for _, c := range id[len(IDPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Event is one state change of an order, as stored in the outbox, served
// by the feed, delivered to webhooks and published to NATS JetStream. Its
// JSON is the body of a webhook delivery.
type Event struct {
	// ID is IDPrefix plus a UUIDv7: unique, sortable by creation time. A
	// consumer deduplicates on it.
	ID string `json:"id"`
	// Type is what happened.
	Type Type `json:"type"`
	// TenantID is the tenant the order belongs to.
	TenantID string `json:"tenant"`
	// OrderID is the order that changed.
	OrderID string `json:"order_id"`
	// OrderVersion is the order's version after the change.
	OrderVersion int64 `json:"order_version"`
	// Sequence numbers the order's events 1, 2, 3 … without gaps (it equals
	// OrderVersion): a consumer that has seen sequence n of an order can
	// ignore anything at or below n.
	Sequence int64 `json:"sequence"`
	// CreatedAt is when the change was made (UTC, microseconds).
	CreatedAt time.Time `json:"created_at"`
	// Refunded is set on OrderCancelled only: whether the order's charge was
	// refunded before it was cancelled.
	Refunded *bool `json:"refunded,omitempty"`
	// Voided is set on OrderCancelled only when the order's payment was an
	// authorization (capture at fulfilment): true when it was voided at the
	// provider (nothing was captured, nothing refunded).
	Voided *bool `json:"voided,omitempty"`
	// Order is the order as it was right after the change (absent from an
	// OperatorAction event).
	Order order.Order `json:"order,omitzero"`
	// Action is set on OperatorAction only: the audit record.
	Action *Action `json:"action,omitempty"`
	// Refund is set on OrderRefunded, and on OrderCancelled from PAID: the
	// cancel's refund (provider key "<order id>/refund"), of what partial
	// refunds left, with the order's totals after it (refunded = captured).
	Refund *Refund `json:"refund,omitempty"`
	// Capture is set on OrderCaptured only.
	Capture *Capture `json:"capture,omitempty"`
}

// Capture is what an OrderCaptured event reports: the capture's attempt
// (ID, its provider key "<order id>/capture/1"), the provider's intent
// (IntentID) and the amount captured, in minor units of Currency.
type Capture struct {
	ID       string `json:"id"`
	IntentID string `json:"intent_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// ForCapture is the OrderCaptured event of capture c of o, o as it is after
// the capture (its version moved on by one: the event's sequence).
func ForCapture(o order.Order, c Capture, now time.Time) Event {
	return Event{ID: NewID(), Type: OrderCaptured, TenantID: o.TenantID, OrderID: o.ID, OrderVersion: o.Version,
		Sequence: o.Version, CreatedAt: now.UTC().Truncate(time.Microsecond), Order: o, Capture: &c}
}

// ForVoid is the OrderCancelled event of o, cancelled from PAID after its
// authorization was voided (capture at fulfilment): Refunded false, Voided
// true.
func ForVoid(o order.Order, now time.Time) Event {
	e := For(o, now)
	f, t := false, true
	e.Refunded, e.Voided = &f, &t
	return e
}

// Refund is what an OrderRefunded or OrderRefundFailed event reports: the refund (ID, the
// provider's refund id ProviderRef; Amount in minor units of Currency) and
// the order's totals after it (AmountCaptured, AmountRefunded, minor
// units).
type Refund struct {
	ID             string `json:"id"`
	ProviderRef    string `json:"provider_ref,omitempty"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	AmountCaptured int64  `json:"amount_captured"`
	AmountRefunded int64  `json:"amount_refunded"`
}

// ForRefund is the OrderRefunded event of refund r of o, o as it is after
// the refund (its version moved on by one: the event's sequence).
func ForRefund(o order.Order, r Refund, now time.Time) Event {
	return Event{ID: NewID(), Type: OrderRefunded, TenantID: o.TenantID, OrderID: o.ID, OrderVersion: o.Version,
		Sequence: o.Version, CreatedAt: now.UTC().Truncate(time.Microsecond), Order: o, Refund: &r}
}

// ForRefundFailed is the OrderRefundFailed event of refund r of o, o as it
// is after the refund's failure was recorded (its version moved on by one:
// the event's sequence); r's totals are the order's after it.
func ForRefundFailed(o order.Order, r Refund, now time.Time) Event {
	e := ForRefund(o, r, now)
	e.Type = OrderRefundFailed
	return e
}

// ActionIDPrefix starts every operator action id.
const ActionIDPrefix = "act_"

// NewActionID returns a fresh operator action id: ActionIDPrefix and the
// 32 hex digits of a UUIDv7.
func NewActionID() string {
	return ActionIDPrefix + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
}

// Action is the audit record of one operator action: who (Actor, the
// operator credential's name, and its Role), what (Name, such as
// "attempt.resolve", and Outcome), why (Reason, required), when (At, UTC)
// and on what (TenantID and Target: a provider key, an order id, an
// endpoint id, "<endpoint id>/<event id>" for a delivery). Note is the
// operator's finding, when the action records one.
type Action struct {
	ID       string    `json:"id"`
	Actor    string    `json:"actor"`
	Role     string    `json:"role"`
	Name     string    `json:"name"`
	TenantID string    `json:"tenant"`
	Target   string    `json:"target"`
	OrderID  string    `json:"order_id,omitempty"`
	Reason   string    `json:"reason"`
	Note     string    `json:"note,omitempty"`
	Outcome  string    `json:"outcome"`
	At       time.Time `json:"at"`
}

// ForAction returns the audit event of a: type OperatorAction, in a's
// tenant, with the action's id as its stream (OrderID) and Sequence 1, so
// it never takes the sequence of an order's change.
func ForAction(a Action) Event {
	a.At = a.At.UTC().Truncate(time.Microsecond)
	return Event{ID: NewID(), Type: OperatorAction, TenantID: a.TenantID, OrderID: a.ID, Sequence: 1,
		CreatedAt: a.At, Action: &a}
}

// For returns the event of the change that produced o (the order after the
// change), with a new id, created at now. The type follows from o alone:
// version 1 is a create; RCVD at a later version is a declined payment
// (a decline moves the version on); PAID, FULFILLED and CANCELLED name
// their transitions, and a CANCELLED order with PaidAt set was refunded.
func For(o order.Order, now time.Time) Event {
	e := Event{ID: NewID(), TenantID: o.TenantID, OrderID: o.ID, OrderVersion: o.Version, Sequence: o.Version,
		CreatedAt: now.UTC().Truncate(time.Microsecond), Order: o}
	switch {
	case o.Version == 1:
		e.Type = OrderCreated
	case o.State == order.Paid:
		e.Type = OrderPaid
	case o.State == order.Fulfilled:
		e.Type = OrderFulfilled
	case o.State == order.Cancelled:
		e.Type = OrderCancelled
		refunded := o.PaidAt != nil
		e.Refunded = &refunded
	default:
		e.Type = OrderPaymentFailed
	}
	return e
}

// Marshal returns e's JSON: the bytes stored, served and signed.
func (e Event) Marshal() ([]byte, error) { return json.Marshal(e) }

// Filter selects events of a tenant in the feed. Zero values select
// everything. Limit is clamped to [1, 100] with 20 as the default; After is
// the cursor of the last event already seen ("" for the start).
type Filter struct {
	Type    Type
	OrderID string
	After   string
	Limit   int
}

// Limits of a feed page.
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

// Clamp returns f with Limit in [1, MaxLimit] (DefaultLimit when zero).
func (f Filter) Clamp() Filter {
	switch {
	case f.Limit <= 0:
		f.Limit = DefaultLimit
	case f.Limit > MaxLimit:
		f.Limit = MaxLimit
	}
	return f
}

// Stored is an event as the outbox keeps it: its JSON body, exactly as
// signed and delivered, and its Cursor, the position in the tenant's feed
// a consumer resumes after.
type Stored struct {
	ID       string
	TenantID string
	OrderID  string
	Sequence int64
	Type     Type
	Body     json.RawMessage
	Cursor   string
}
