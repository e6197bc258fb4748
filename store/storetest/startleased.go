package storetest

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// payIntent is the intent of paying o with method at: a charge of the
// order's version, if it is RCVD and amount and currency match.
func payIntent(o order.Order, amount int64, currency, method string, at time.Time) store.Intent {
	return store.Intent{From: order.Received, Kind: payment.AttemptCharge, ProviderKeyPrefix: o.ID + "/pay/",
		Versioned: true, Amount: &amount, Currency: currency, PaymentMethod: method, At: at}
}

// paidIntent is an intent of kind from a PAID order, keyed by the order.
func paidIntent(o order.Order, kind payment.AttemptKind, suffix string, at time.Time) store.Intent {
	return store.Intent{From: order.Paid, Kind: kind, ProviderKeyPrefix: o.ID + suffix, At: at}
}

func mustStart(t *testing.T, s *subject, claim idempotency.Record, in store.Intent) store.Started {
	t.Helper()
	st, err := s.StartLeased(t.Context(), claim, in)
	if err != nil {
		t.Fatalf("StartLeased: %v", err)
	}
	return st
}

// testStartLeased checks phase 1 of a leased request: acquire, lock the
// order, record the intent's attempt if the guard allows, and return what
// the caller decides from.
func testStartLeased(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("FreshKeyRecordsTheAttempt", func(t *testing.T) { startLeasedFreshKeyRecordsTheAttempt(t, open) })

	// Where the guard refuses, the lease is still taken and nothing is
	// recorded: the caller decides from the order.
	for _, tc := range []struct {
		name   string
		intent func(o order.Order) store.Intent
		paid   bool
	}{
		{"AmountMismatchRecordsNothing", func(o order.Order) store.Intent { return payIntent(o, o.Amount+1, o.Currency, "pm", base) }, false},
		{"CurrencyMismatchRecordsNothing", func(o order.Order) store.Intent { return payIntent(o, o.Amount, "USD", "pm", base) }, false},
		{"OtherStateRecordsNothing", func(o order.Order) store.Intent { return payIntent(o, o.Amount, o.Currency, "pm", base) }, true},
		{"NoIntentRecordsNothing", func(order.Order) store.Intent { return store.Intent{} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			if tc.paid {
				o = o.Apply(order.Paid, base)
				mustTransition(t, s, o)
			}
			claim := newClaim("tenant-a", "pay-1", o.ID, base)
			st := mustStart(t, s, claim, tc.intent(o))
			if !st.Acquired || st.Key.AttemptKey != "" || st.Attempt != nil {
				t.Fatalf("StartLeased = acquired %t, attempt key %q, attempt %+v; want acquired, nothing recorded", st.Acquired, st.Key.AttemptKey, st.Attempt)
			}
			assertRecord(t, mustLookup(t, s, "tenant-a", claim.KeyHash), claim)
			assertOrder(t, *st.Order, o)
			assertNotFound(t, "the charge", getErr(s.GetAttempt(t.Context(), o.ID+"/pay/"+itoa(o.Version))))
		})
	}

	t.Run("MissingOrderIsNil", func(t *testing.T) { startLeasedMissingOrderIsNil(t, open) })

	t.Run("HeldKeyReturnsTheHolderWithTheCurrentOrder", func(t *testing.T) { startLeasedHeldKeyReturnsTheHolderWithTheCurrentOrder(t, open) })

	t.Run("AnotherOpenAttemptRecordsNothing", func(t *testing.T) { startLeasedAnotherOpenAttemptRecordsNothing(t, open) })

	t.Run("OpenChargeWithAnotherMethodRecordsNothing", func(t *testing.T) { startLeasedOpenChargeWithAnotherMethodRecordsNothing(t, open) })

	t.Run("FailedAttemptIsReopened", func(t *testing.T) { startLeasedFailedAttemptIsReopened(t, open) })

	t.Run("ResumedKeyContinuesOnlyItsOwnAttempt", func(t *testing.T) { startLeasedResumedKeyContinuesOnlyItsOwnAttempt(t, open) })

	t.Run("RacingStartsOnOneKeyHaveOneHolder", func(t *testing.T) { startLeasedRacingStartsOnOneKeyHaveOneHolder(t, open) })

	// The overlap the store exists to prevent: a shipment and a refund of
	// one order, started at once by different keys. At most one attempt is
	// ever open.
	t.Run("RacingShipmentsAndRefundsNeverBothOpen", func(t *testing.T) { startLeasedRacingShipmentsAndRefundsNeverBothOpen(t, open) })
}

// errNotAcquired marks a racer that got the holder instead of the key.
var errNotAcquired = errors.New("not acquired")

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// startLeasedFreshKeyRecordsTheAttempt checks: fresh key records the attempt.
func startLeasedFreshKeyRecordsTheAttempt(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	claim := newClaim("tenant-a", "pay-1", o.ID, base)
	st := mustStart(t, s, claim, payIntent(o, o.Amount, o.Currency, "pm_card_visa", base))
	if !st.Acquired {
		t.Fatal("Acquired = false, want a fresh key acquired")
	}
	want := claim
	want.RecoveryPoint, want.AttemptKey = idempotency.RecoveryAttemptRecorded, o.ID+"/pay/1"
	assertRecord(t, st.Key, want)
	assertRecord(t, mustLookup(t, s, "tenant-a", claim.KeyHash), want)
	if st.Order == nil {
		t.Fatal("Order = nil, want the order")
	}
	assertOrder(t, *st.Order, o)
	wantA := newAttempt(o, o.ID+"/pay/1", base)
	if st.Attempt == nil {
		t.Fatal("Attempt = nil, want the recorded charge")
	}
	assertAttempt(t, *st.Attempt, wantA)
	assertAttempt(t, mustGetAttempt(t, s, wantA.ProviderKey), wantA)
}

// startLeasedMissingOrderIsNil checks: missing order is nil.
func startLeasedMissingOrderIsNil(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	claim := newClaim("tenant-a", "pay-1", order.NewID(), base)
	st := mustStart(t, s, claim, store.Intent{From: order.Received, Kind: payment.AttemptCharge, ProviderKeyPrefix: claim.ResourceID + "/pay/", Versioned: true, At: base})
	if !st.Acquired || st.Order != nil || st.Attempt != nil {
		t.Fatalf("StartLeased = %+v; want acquired, no order, no attempt", st)
	}
}

// startLeasedHeldKeyReturnsTheHolderWithTheCurrentOrder checks: held key returns the holder with the current order.
func startLeasedHeldKeyReturnsTheHolderWithTheCurrentOrder(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	claim := newClaim("tenant-a", "pay-1", o.ID, base)
	in := payIntent(o, o.Amount, o.Currency, "pm_card_visa", base)
	first := mustStart(t, s, claim, in)
	paid := o.Apply(order.Paid, base.Add(time.Second))
	u := store.AttemptUpdate{ProviderKey: first.Key.AttemptKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_1", At: base.Add(time.Second)}
	mustComplete(t, s, first.Key, completion{Outcome: outcome(o.ID), Next: &paid, Attempt: &u})

	again := mustStart(t, s, retryAt(claim, base.Add(2*time.Second)), in)
	if again.Acquired {
		t.Fatal("a completed key was acquired again")
	}
	assertRecord(t, again.Key, completedAs(first.Key, outcome(o.ID)))
	if again.Order == nil {
		t.Fatal("Order = nil; want the current order with the holder")
	}
	assertOrder(t, *again.Order, paid)
	// And it wrote nothing: no new charge at the new version.
	assertNotFound(t, "a charge at version 2", getErr(s.GetAttempt(t.Context(), o.ID+"/pay/2")))
}

// startLeasedAnotherOpenAttemptRecordsNothing checks: another open attempt records nothing.
func startLeasedAnotherOpenAttemptRecordsNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	paid := o.Apply(order.Paid, base)
	mustTransition(t, s, paid)
	ship := mustStart(t, s, newClaim("tenant-a", "ship-1", o.ID, base), paidIntent(paid, payment.AttemptShipment, "/fulfill", base))
	if ship.Attempt == nil {
		t.Fatal("the shipment was not recorded")
	}
	refund := mustStart(t, s, newClaim("tenant-a", "cancel-1", o.ID, base), paidIntent(paid, payment.AttemptRefund, "/refund", base))
	if !refund.Acquired || refund.Key.AttemptKey != "" || refund.Attempt != nil {
		t.Fatalf("refund beside an open shipment = %+v; want acquired, nothing recorded", refund)
	}
	assertNotFound(t, "the refund", getErr(s.GetAttempt(t.Context(), o.ID+"/refund")))
}

// startLeasedOpenChargeWithAnotherMethodRecordsNothing checks: open charge with another method records nothing.
func startLeasedOpenChargeWithAnotherMethodRecordsNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	a := mustStart(t, s, newClaim("tenant-a", "pay-a", o.ID, base), payIntent(o, o.Amount, o.Currency, "pm_a", base))
	b := mustStart(t, s, newClaim("tenant-a", "pay-b", o.ID, base), payIntent(o, o.Amount, o.Currency, "pm_b", base))
	if b.Key.AttemptKey != "" || b.Attempt != nil {
		t.Fatalf("pay with another method joined the open charge: %+v", b)
	}
	same := mustStart(t, s, newClaim("tenant-a", "pay-c", o.ID, base), payIntent(o, o.Amount, o.Currency, "pm_a", base))
	if same.Key.AttemptKey != a.Key.AttemptKey || same.Attempt == nil || same.Attempt.PaymentMethod != "pm_a" {
		t.Fatalf("pay with the same method = %+v; want it to join charge %s", same, a.Key.AttemptKey)
	}
}

// startLeasedFailedAttemptIsReopened checks: failed attempt is reopened.
func startLeasedFailedAttemptIsReopened(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	first := mustStart(t, s, newClaim("tenant-a", "pay-1", o.ID, base), payIntent(o, o.Amount, o.Currency, "pm_a", base))
	failed := store.AttemptUpdate{ProviderKey: first.Key.AttemptKey, Status: payment.AttemptFailed, At: base}
	mustRelease(t, s, first.Key, idempotency.StateRetryableFailure, &failed)
	second := mustStart(t, s, newClaim("tenant-a", "pay-2", o.ID, base), payIntent(o, o.Amount, o.Currency, "pm_b", base.Add(time.Second)))
	if second.Attempt == nil || second.Attempt.Status != payment.AttemptPending || second.Attempt.PaymentMethod != "pm_b" {
		t.Fatalf("attempt = %+v; want the failed charge re-opened as pending with pm_b", second.Attempt)
	}
}

// startLeasedResumedKeyContinuesOnlyItsOwnAttempt checks: resumed key continues only its own attempt.
func startLeasedResumedKeyContinuesOnlyItsOwnAttempt(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	claim := newClaim("tenant-a", "pay-1", o.ID, base)
	in := payIntent(o, o.Amount, o.Currency, "pm_a", base)
	first := mustStart(t, s, claim, in)
	unknown := store.AttemptUpdate{ProviderKey: first.Key.AttemptKey, Status: payment.AttemptUnknown, At: base}
	mustRelease(t, s, first.Key, idempotency.StateUnknownOutcome, &unknown)

	resumed := mustStart(t, s, retryAt(claim, base.Add(time.Second)), in)
	if !resumed.Acquired || resumed.Key.FencingToken != 2 || resumed.Key.AttemptKey != first.Key.AttemptKey {
		t.Fatalf("resumed = %+v; want the key taken over (token 2) at its own attempt", resumed.Key)
	}
	if resumed.Attempt == nil || resumed.Attempt.Status != payment.AttemptUnknown {
		t.Fatalf("attempt = %+v; want its unknown charge, untouched", resumed.Attempt)
	}

	// Its charge was declined meanwhile and the order moved on: a
	// resumed request never starts a charge at the new version.
	declined := store.AttemptUpdate{ProviderKey: first.Key.AttemptKey, Status: payment.AttemptDeclined, ErrorCode: "card_declined", At: base}
	mustRelease(t, s, resumed.Key, idempotency.StateRetryableFailure, &declined)
	mustTransition(t, s, o.Apply(order.Received, base.Add(2*time.Second)))
	last := mustStart(t, s, retryAt(claim, base.Add(3*time.Second)), in)
	if !last.Acquired || last.Key.AttemptKey != first.Key.AttemptKey || last.Attempt == nil || last.Attempt.Status != payment.AttemptDeclined {
		t.Fatalf("resumed after a decline = %+v, attempt %+v; want its own declined charge", last.Key, last.Attempt)
	}
	assertNotFound(t, "a charge at version 2", getErr(s.GetAttempt(t.Context(), o.ID+"/pay/2")))
}

// startLeasedRacingStartsOnOneKeyHaveOneHolder checks: racing starts on one key have one holder.
func startLeasedRacingStartsOnOneKeyHaveOneHolder(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	claim := newClaim("tenant-a", "pay-1", o.ID, base)
	in := payIntent(o, o.Amount, o.Currency, "pm_a", base)
	out := raceAll(racers, func(int) error {
		st, err := s.StartLeased(t.Context(), claim, in)
		if err == nil && !st.Acquired && (st.Order == nil || st.Key.Fingerprint != claim.Fingerprint) {
			t.Errorf("a loser got %+v; want the holder with the order", st)
		}
		if err == nil && st.Acquired {
			return nil
		}
		if err == nil {
			return errNotAcquired
		}
		return err
	})
	won := 0
	for i, err := range out {
		switch err {
		case nil:
			won++
		case errNotAcquired:
		default:
			t.Errorf("goroutine %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d holders, want exactly 1", won)
	}
}

// startLeasedRacingShipmentsAndRefundsNeverBothOpen checks: racing shipments and refunds never both open.
func startLeasedRacingShipmentsAndRefundsNeverBothOpen(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	for round := range 3 {
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		paid := o.Apply(order.Paid, base)
		mustTransition(t, s, paid)
		raceAll(racers, func(i int) error {
			kind, suffix := payment.AttemptShipment, "/fulfill"
			if i%2 == 1 {
				kind, suffix = payment.AttemptRefund, "/refund"
			}
			_, err := s.StartLeased(t.Context(), newClaim("tenant-a", itoa(int64(round*1000+i)), o.ID, base), paidIntent(paid, kind, suffix, base))
			if err != nil {
				t.Errorf("StartLeased: %v", err)
			}
			return err
		})
		_, shipErr := s.GetAttempt(t.Context(), o.ID+"/fulfill")
		_, refundErr := s.GetAttempt(t.Context(), o.ID+"/refund")
		if (shipErr == nil) == (refundErr == nil) {
			t.Fatalf("round %d: shipment recorded %t, refund recorded %t; want exactly one", round, shipErr == nil, refundErr == nil)
		}
	}
}
