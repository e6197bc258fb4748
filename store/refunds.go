package store

import (
	"context"
	"errors"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// ErrRefundExceedsCaptured is returned by ReserveRefund when the refund's
// amount, added to what the order's refunds have reserved already (settled
// or in flight), would exceed what was captured. Nothing was written.
var ErrRefundExceedsCaptured = errors.New("store: refund exceeds the captured amount")

// ErrRefundState is returned by ReserveRefund when the order is in a state
// that takes no refund (only PAID and FULFILLED do). Nothing was written.
var ErrRefundState = errors.New("store: the order's state takes no refund")

// Refund is one partial refund of an order (issue 16): what the client
// asked (Amount in minor units of Currency, Reason) and the provider
// attempt that makes it (ProviderKey, kind payment.AttemptRefund), whose
// Status and ProviderRef (the provider's refund id) it reports.
type Refund struct {
	ProviderKey string
	TenantID    string
	OrderID     string
	Amount      int64
	Currency    string
	Reason      string
	Status      payment.AttemptStatus
	ProviderRef string
	// ErrorCode is the attempt's error code ("" for none), as
	// payment.Attempt.ErrorCode.
	ErrorCode string
	// ChargeKey and IntentID name the order's succeeded charge attempt
	// and the provider object it captured: what is refunded.
	ChargeKey string
	IntentID  string
	// KeySentAt is when the refund's provider key was first sent (zero:
	// never), as payment.Attempt.KeySentAt.
	KeySentAt time.Time
	CreatedAt time.Time
	// RefundedAfter is the order's refunded total right after this refund
	// succeeded (0 until it has): what its answer and every replay show.
	RefundedAfter int64
}

// RefundTotals are an order's refund totals in minor units of its
// currency: Captured (the charge), Reserved (refunds settled or in
// flight), Refunded (refunds that succeeded). 0 ≤ Refunded ≤ Reserved ≤
// Captured always holds (a CHECK in both databases).
type RefundTotals struct {
	Captured int64
	Reserved int64
	Refunded int64
}

// RefundFinish is phase 3 of a partial refund: the key held by the lease
// is completed with Outcome (when set) or released to ReleaseTo, and the
// refund's attempt settled with Update. When Update moves the attempt
// from open to succeeded, the order's refunded total grows by the
// refund's amount, its version moves on by one (a compare-and-set; the
// state stays) and Event, given the order and totals after the change, is
// appended to the outbox; when it moves it from open to declined,
// rejected or failed, the reservation is released.
//
// When Outcome is a success but the attempt was settled rejected first
// (a provider's refund.failed event, taken in while the lease held it)
// and Rejected is set, the key is completed with Rejected instead: the
// refund never reached the customer, so its key never answers it.
// FinishRefund then returns ErrRefundSettledRejected (committed).
type RefundFinish struct {
	Outcome   *idempotency.Record
	Rejected  *idempotency.Record
	ReleaseTo idempotency.State
	Update    AttemptUpdate
	Event     func(o order.Order, t RefundTotals) event.Event
}

// ErrRefundSettledRejected is returned by FinishRefund when it completed
// the key with RefundFinish.Rejected instead of its Outcome (the attempt
// was settled rejected first). Its transaction committed: the caller
// answers the rejection, as the key's replays do.
var ErrRefundSettledRejected = errors.New("store: the refund was settled rejected first; its key holds the rejection")

// RefundStore is the capability of a store that keeps partial refunds
// (both stores have it). Each method is one transaction.
type RefundStore interface {
	// ReserveRefund records refund r for the key held by lease, in one
	// transaction fenced by the lease: it locks the order, and unless
	// r.ProviderKey names an attempt already that has not failed (then
	// returned as stored), it checks the order is PAID or FULFILLED
	// (ErrRefundState), that no other provider attempt on the order than
	// its refunds is open (ErrAttemptInFlight), and reserves r.Amount (a
	// failed attempt is then re-opened as pending) with a compare-and-set on
	// the order's reserved total (ErrRefundExceedsCaptured), then records
	// the attempt (pending) and sets the key's recovery point to it.
	// Errors also: ErrLeaseLost, ErrNotFound (no such order). It returns
	// the refund and the totals after the reservation (on
	// ErrRefundExceedsCaptured and ErrRefundState, the totals as they are
	// and the order's state in the Refund's Status-free fields).
	ReserveRefund(ctx context.Context, lease Lease, r Refund) (Refund, RefundTotals, order.State, error)
	// FinishRefund is phase 3 (see RefundFinish), fenced by the lease
	// (ErrLeaseLost).
	FinishRefund(ctx context.Context, lease Lease, f RefundFinish) (RefundTotals, error)
	// GetRefund returns the refund whose attempt has providerKey with
	// its order's totals, or ErrNotFound.
	GetRefund(ctx context.Context, providerKey string) (Refund, RefundTotals, error)
	// RefundTotals returns the tenant's order's totals (zero when no
	// refund was ever reserved; Captured is then zero too).
	RefundTotals(ctx context.Context, tenantID, orderID string) (RefundTotals, error)
}

// RefundCloser is the capability of an Executor whose store keeps partial
// refunds (both stores' executors have it): the writes a cancel from PAID
// makes in the transaction that moves the order to CANCELLED (issue 16).
type RefundCloser interface {
	// CloseRefunds records that the cancel's refund attempt providerKey
	// refunded what the order's partial refunds left, in minor units:
	// amount = *refunded, what the provider's refund returned, when the
	// caller knows it (it exceeds captured − refunded when a partial
	// refund failed at the provider before the cancel asked, its
	// refund.failed not taken in yet), else captured − refunded (the
	// order's whole amount when no partial refund was ever reserved, its
	// totals row then created with captured = the order's amount). The
	// totals become reserved = refunded = captured, so no later partial
	// refund fits, and the attempt's amount becomes amount. It returns
	// amount and the totals after. Errors: ErrAttemptInFlight (a partial
	// refund is reserved and not settled: reserved ≠ refunded; nothing
	// written), ErrNotFound (no such order).
	CloseRefunds(ctx context.Context, tenantID, orderID, providerKey string, refunded *int64) (amount int64, t RefundTotals, err error)
}

// OpenRefundSettler is the capability of an Executor whose store keeps
// partial refunds (both stores' executors have it): a provider event's
// settlement of a partial refund, in the inbox's transaction (issue 16).
type OpenRefundSettler interface {
	// SettleOpenRefund applies u to the partial refund's attempt only
	// while it is open with its amount reserved (pending, unknown or
	// needs_attention; ErrVersionConflict otherwise: settled first by its
	// request, the completer or an operator; nothing written), with the
	// effects of FinishRefund: to succeeded, the order's refunded total
	// grows by the refund's amount, its version moves on by one and ev's
	// event (given the order and totals after) is appended. It returns the
	// totals after. The refund's idempotency keys are the caller's: one
	// held by a lease finishes as settled already (FinishRefund changes
	// nothing), one released to unknown_outcome answers the refund on its
	// retry or the completer's pass, parked ones are resolved with
	// OperatorExecutor.ResolveParkedKeys.
	SettleOpenRefund(ctx context.Context, u AttemptUpdate, ev func(o order.Order, t RefundTotals) event.Event) (RefundTotals, error)
}

// RefundReverser is the capability of an Executor whose store keeps
// partial refunds (both stores' executors have it): recording, in the
// inbox's transaction, that a partial refund which succeeded failed at the
// provider later (issue 16; Stripe: a refund's status moves from
// succeeded to failed, docs.stripe.com/refunds "Failed refunds").
type RefundReverser interface {
	// ReverseRefund applies u (Status payment.AttemptRejected, an
	// ErrorCode saying why) to the partial refund's attempt only while it
	// is succeeded (ErrVersionConflict otherwise: never succeeded, or
	// reversed already; nothing written). The refund's amount is taken off
	// the order's refunded and reserved totals (the money is the
	// merchant's again: a PAID or FULFILLED order may refund it again;
	// the caller never reverses a refund of a CANCELLED order), the order's version
	// moves on by one and ev's event (given the order and totals after) is
	// appended. The refund's idempotency keys keep their outcome: a replay
	// answers the refund's first answer (draft-ietf-httpapi-idempotency-
	// key-header §2.6). It returns the totals after.
	ReverseRefund(ctx context.Context, u AttemptUpdate, ev func(o order.Order, t RefundTotals) event.Event) (RefundTotals, error)
}

// ParkedRefunds is the capability of a RefundStore that finds an order's
// parked partial refund (both stores have it).
type ParkedRefunds interface {
	// ParkedRefund returns a partial refund attempt of the tenant's order
	// that is needs_attention (its outcome stayed unknown past
	// service.Config.UnresolvedAfter), the oldest when there are several,
	// or ErrNotFound.
	ParkedRefund(ctx context.Context, tenantID, orderID string) (payment.Attempt, error)
}

// ParkedRefundSettler is the capability of an OperatorExecutor whose store
// keeps partial refunds (both stores' have it): an operator's settlement of
// a parked partial refund, in the action's transaction.
type ParkedRefundSettler interface {
	// SettleParkedRefund applies u to the partial refund's attempt only
	// while it is needs_attention (ErrVersionConflict otherwise: someone
	// settled it first; nothing written), with the effects of FinishRefund:
	// to succeeded, the order's refunded total grows by the refund's
	// amount, its version moves on by one and ev's event (given the order
	// and totals after) is appended; to rejected, the reservation is
	// released. It returns the totals after. The parked keys are the
	// caller's (OperatorExecutor.ResolveParkedKeys).
	SettleParkedRefund(ctx context.Context, u AttemptUpdate, ev func(o order.Order, t RefundTotals) event.Event) (RefundTotals, error)
}
