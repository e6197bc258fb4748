package service

import (
	"context"
	"errors"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// Observer is told what the service does, so metrics and traces can be
// kept without the service importing a metrics or tracing library (package
// observe implements it with Prometheus and OpenTelemetry). Every method
// must be safe for concurrent use and cheap: it runs on the request path.
// The labels it is given come from small closed sets (operations, events,
// states, outcomes), never ids or keys.
type Observer interface {
	// StartOperation begins use case op and returns the context to run it
	// on (carrying a span, say) and the function that ends it with the
	// use case's error (nil on success).
	StartOperation(ctx context.Context, op idempotency.Operation) (context.Context, func(error))
	// StartProviderCall begins one call to a provider and returns the
	// context to make it on (its trace context travels to the provider as
	// a W3C traceparent) and the function that ends it with its outcome.
	StartProviderCall(ctx context.Context, op ProviderOp) (context.Context, func(ProviderOutcome))
	// KeyEvent counts an event of the idempotency protocol for a request
	// of operation op.
	KeyEvent(ev KeyEvent, op idempotency.Operation)
	// Transition counts an order moving from one state to another by ev;
	// from is "" for a create. NoOp counts an event whose effect already
	// held (from == to).
	Transition(ev order.Event, from, to order.State)
	// CompleterPass reports one pass of the completer: how long it took
	// and how many keys it took over; backlog is what the store counted
	// after it, when ok (a store that cannot count reports !ok).
	CompleterPass(d time.Duration, takenOver int, backlog store.WorkBacklog, ok bool)
	// SweepPass reports one batch of the sweeper: the keys it tombstoned
	// and deleted.
	SweepPass(res store.SweepResult)
}

// StageObserver is an Observer that also times the stages a create waits
// in, to explain latency tails (issue 19). The service calls it when its
// Observer implements it (package observe's does); it must be cheap and
// safe for concurrent use.
type StageObserver interface {
	// GroupCommit reports one group of the group commit: size creates,
	// wait from the arrival of its oldest create until its write began
	// (gathering, and waiting for a worker while another group was
	// written), and write, the group's one transaction (CreateOrders;
	// with a store that refused the group, the one-by-one fallback too).
	GroupCommit(size int, wait, write time.Duration)
}

// ProviderOp names a call to a provider.
type ProviderOp string

// Provider calls.
const (
	ProviderCharge       ProviderOp = "charge"
	ProviderChargeLookup ProviderOp = "charge_lookup"
	ProviderPrepare      ProviderOp = "prepare"
	ProviderRefund       ProviderOp = "refund"
	ProviderShip         ProviderOp = "ship"
	ProviderShipmentFind ProviderOp = "shipment_find"
	// ProviderCancel cancels a pending payment's intent (an order
	// cancelled while its payment waits, or the payment expired).
	ProviderCancel ProviderOp = "cancel"
	// ProviderCapture captures an authorization after its order shipped;
	// ProviderVoid voids one (capture at fulfilment, issue 16).
	ProviderCapture ProviderOp = "capture"
	ProviderVoid    ProviderOp = "void"
)

// ProviderOutcome classes the answer of a provider call, as the three
// phases treat it: final (approved, declined, rejected), retryable (nothing
// happened at the provider), unknown (sent, no answer), or conflict (the
// provider-side key is in use with other details).
type ProviderOutcome string

// Provider outcomes.
const (
	OutcomeApproved  ProviderOutcome = "approved"
	OutcomeDeclined  ProviderOutcome = "declined"
	OutcomeRejected  ProviderOutcome = "rejected"
	OutcomeRetryable ProviderOutcome = "retryable"
	OutcomeUnknown   ProviderOutcome = "unknown"
	OutcomeConflict  ProviderOutcome = "conflict"
	// OutcomePending: the payment waits for the customer (3-D Secure) or
	// the provider (a bank debit); the pay answered 202.
	OutcomePending ProviderOutcome = "pending"
)

// KeyEvent is an event of the idempotency protocol.
type KeyEvent string

// Idempotency protocol events.
const (
	// KeyClaimed: a fresh client-sent key was claimed.
	KeyClaimed KeyEvent = "claimed"
	// KeyDerivedClaimed: a fresh key derived from the fingerprint (no
	// Idempotency-Key sent, policy derive) was claimed.
	KeyDerivedClaimed KeyEvent = "derived_claimed"
	// KeyReplayed: a stored outcome was replayed.
	KeyReplayed KeyEvent = "replayed"
	// KeyFingerprintMismatch: the key was used with another request (422
	// idempotency_key_reused).
	KeyFingerprintMismatch KeyEvent = "fingerprint_mismatch"
	// KeyInProgressConflict: the key is held by a request in progress (409
	// idempotency_key_in_progress).
	KeyInProgressConflict KeyEvent = "in_progress_conflict"
	// KeyWaited: a duplicate waited for the holder (Prefer: wait, RFC 7240
	// §4.3).
	KeyWaited KeyEvent = "waited"
	// KeyLeaseTakeover: a key whose holder let go or vanished was taken
	// over (its fencing token grew), by a retry or by the completer.
	KeyLeaseTakeover KeyEvent = "lease_takeover"
	// KeyFencingRejection: a write fenced by a stale token was refused.
	KeyFencingRejection KeyEvent = "fencing_rejection"
	// KeyExpiredHit: a key came back after its retention (422
	// idempotency_key_expired).
	KeyExpiredHit KeyEvent = "expired_hit"
)

// nopObserver is the Observer of a Service configured without one.
type nopObserver struct{}

func (nopObserver) StartOperation(ctx context.Context, _ idempotency.Operation) (context.Context, func(error)) {
	return ctx, func(error) {}
}

func (nopObserver) StartProviderCall(ctx context.Context, _ ProviderOp) (context.Context, func(ProviderOutcome)) {
	return ctx, func(ProviderOutcome) {}
}

func (nopObserver) KeyEvent(KeyEvent, idempotency.Operation)                  {}
func (nopObserver) Transition(order.Event, order.State, order.State)          {}
func (nopObserver) CompleterPass(time.Duration, int, store.WorkBacklog, bool) {}
func (nopObserver) SweepPass(store.SweepResult)                               {}

// outcomes maps a provider call's class to its outcome.
var outcomes = map[class]ProviderOutcome{
	succeeded: OutcomeApproved, declined: OutcomeDeclined, rejected: OutcomeRejected,
	retryable: OutcomeRetryable, unknown: OutcomeUnknown, contended: OutcomeConflict,
	awaiting: OutcomePending,
}

// provider makes one provider call op through call, observed.
func (s *Service) provider(ctx context.Context, op ProviderOp, call func(context.Context) callResult) callResult {
	ctx, end := s.obs.StartProviderCall(ctx, op)
	r := call(ctx)
	end(outcomes[r.class])
	return r
}

// observeHeld counts what answering a held key came to: a replay, a
// fingerprint mismatch, an expired key, or a conflict with its holder.
func (s *Service) observeHeld(op idempotency.Operation, res Result, err error) {
	switch {
	case res.Replayed:
		s.obs.KeyEvent(KeyReplayed, op)
	case apperr.ErrorCode(err) == apperr.EKeyReused:
		s.obs.KeyEvent(KeyFingerprintMismatch, op)
	case apperr.ErrorCode(err) == apperr.EKeyExpired:
		s.obs.KeyEvent(KeyExpiredHit, op)
	case apperr.ErrorCode(err) == apperr.EKeyInProgress:
		s.obs.KeyEvent(KeyInProgressConflict, op)
	}
}

// observeClaim counts a key a request acquired: a fresh claim (fencing
// token 1), or a takeover of a key another request let go.
func (s *Service) observeClaim(op idempotency.Operation, rec idempotency.Record) {
	switch {
	case rec.FencingToken > 1:
		s.obs.KeyEvent(KeyLeaseTakeover, op)
	case rec.Derived:
		s.obs.KeyEvent(KeyDerivedClaimed, op)
	default:
		s.obs.KeyEvent(KeyClaimed, op)
	}
}

// observeFencing counts a write refused because the lease was taken over.
func (s *Service) observeFencing(op idempotency.Operation, err error) {
	if errors.Is(err, store.ErrLeaseLost) {
		s.obs.KeyEvent(KeyFencingRejection, op)
	}
}

// Backlog counts, at the service's current time, the work the completer
// and the sweeper have before them (see store.WorkBacklog). ok is false when
// the store cannot count it.
func (s *Service) Backlog(ctx context.Context) (b store.WorkBacklog, ok bool, err error) {
	bc, ok := s.store.(store.BacklogCounter)
	if !ok {
		return store.WorkBacklog{}, false, nil
	}
	if b, err = bc.Backlog(ctx); err != nil {
		return b, false, err
	}
	q, err := s.store.AbandonedBacklog(ctx)
	if err != nil {
		return b, false, err
	}
	b.NeedsAttention = q.NeedsAttention
	return b, true, nil
}

// eventCreate is the event Observer.Transition is given for a create,
// which moves an order from nothing ("") to RCVD.
const eventCreate order.Event = "create"

// observeTransition counts a transition (or, when from == to, a no-op)
// whose write succeeded.
func (s *Service) observeTransition(ev order.Event, from, to order.State, err error) {
	if err == nil {
		s.obs.Transition(ev, from, to)
	}
}
