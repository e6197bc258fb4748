package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// This file checks the leased requests: AcquireLease, RecordAttempt,
// Complete and Release fenced by the lease's token, TakeOverAbandoned, and
// GetAttempt.

func testAcquireLease(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("FreshKeyIsAcquired", func(t *testing.T) { acquireFreshKeyIsAcquired(t, open) })

	t.Run("LiveLeaseIsNotAcquired", func(t *testing.T) { acquireLiveLeaseIsNotAcquired(t, open) })

	t.Run("ExpiredLeaseIsTakenOverBySameRequest", func(t *testing.T) { acquireExpiredLeaseIsTakenOverBySameRequest(t, open) })

	t.Run("ExpiredLeaseIsNotTakenOverByAnotherRequest", func(t *testing.T) { acquireExpiredLeaseIsNotTakenOverByAnotherRequest(t, open) })

	t.Run("ReleasedKeyIsTakenOverAtOnceBySameRequest", func(t *testing.T) { acquireReleasedKeyIsTakenOverAtOnceBySameRequest(t, open) })

	t.Run("CompletedKeyIsNotAcquired", func(t *testing.T) { acquireCompletedKeyIsNotAcquired(t, open) })

	t.Run("ExpiredDerivedKeyIsReplaced", func(t *testing.T) { acquireExpiredDerivedKeyIsReplaced(t, open) })

	t.Run("ExpiredClientKeyIsNotAcquired", func(t *testing.T) { acquireExpiredClientKeyIsNotAcquired(t, open) })

	t.Run("SameKeyUnderAnotherTenantIsIndependent", func(t *testing.T) { acquireSameKeyUnderAnotherTenantIsIndependent(t, open) })

	// Instances whose clocks disagree agree on leases: only the database's
	// clock decides.
	t.Run("CallersClockDecidesNothing", func(t *testing.T) { acquireCallersClockDecidesNothing(t, open) })
}

func testRecordAttempt(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("InsertsPendingAttemptAndMovesRecoveryPoint", func(t *testing.T) { recordInsertsPendingAttemptAndMovesRecoveryPoint(t, open) })

	// The same logical call recorded again, by another request with other
	// values, gets the attempt as stored: it is never overwritten, only a
	// failed one (the provider did nothing) is re-opened.
	t.Run("ExistingProviderKeyReturnsStoredAttempt", func(t *testing.T) { recordExistingProviderKeyReturnsStoredAttempt(t, open) })

	t.Run("FailedAttemptIsReopened", func(t *testing.T) { recordFailedAttemptIsReopened(t, open) })

	t.Run("StaleOrderVersionConflictsAndWritesNothing", func(t *testing.T) { recordStaleOrderVersionConflictsAndWritesNothing(t, open) })

	t.Run("AnotherTenantsOrderIsNotFound", func(t *testing.T) { recordAnotherTenantsOrderIsNotFound(t, open) })

	t.Run("OpenAttemptOnTheOrderIsInFlight", func(t *testing.T) { recordOpenAttemptOnTheOrderIsInFlight(t, open) })

	t.Run("SettledAttemptOnTheOrderDoesNotBlock", func(t *testing.T) { recordSettledAttemptOnTheOrderDoesNotBlock(t, open) })

	t.Run("StaleLeaseIsLostAndWritesNothing", func(t *testing.T) { recordStaleLeaseIsLostAndWritesNothing(t, open) })
}

func testComplete(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("CompletesKeyFencedByLease", func(t *testing.T) { completeCompletesKeyFencedByLease(t, open) })

	t.Run("FinalErrorRoundTrips", func(t *testing.T) { completeFinalErrorRoundTrips(t, open) })

	t.Run("NextIsWrittenAsACompareAndSet", func(t *testing.T) { completeNextIsWrittenAsACompareAndSet(t, open) })

	t.Run("CancelRoundTripsCancelledAt", func(t *testing.T) { completeCancelRoundTripsCancelledAt(t, open) })

	t.Run("SettlesAttempt", func(t *testing.T) { completeSettlesAttempt(t, open) })

	t.Run("SettledAttemptIsNotReopened", func(t *testing.T) { completeSettledAttemptIsNotReopened(t, open) })

	// Two provider calls on one order never overlap: a transition waits for
	// another request's open attempt to settle.
	t.Run("NextIsRefusedWhileAnotherAttemptIsOpen", func(t *testing.T) { completeNextIsRefusedWhileAnotherAttemptIsOpen(t, open) })

	t.Run("WithoutNextOpenAttemptsDoNotMatter", func(t *testing.T) { completeWithoutNextOpenAttemptsDoNotMatter(t, open) })

	t.Run("StaleLeaseIsLostAndWritesNothing", func(t *testing.T) { completeStaleLeaseIsLostAndWritesNothing(t, open) })

	t.Run("CompletedLeaseIsLost", func(t *testing.T) { completeCompletedLeaseIsLost(t, open) })

	// A version conflict rolls the whole completion back: the key is still
	// leased to the same token, the attempt still open, the order untouched.
	t.Run("WrongVersionConflictsAndWritesNothing", func(t *testing.T) { completeWrongVersionConflictsAndWritesNothing(t, open) })
}

func testRelease(t *testing.T, open func(t *testing.T) *subject) {
	cases := []struct {
		to     idempotency.State
		status payment.AttemptStatus
		code   string
	}{
		{idempotency.StateRetryableFailure, payment.AttemptFailed, "rate_limited"},
		{idempotency.StateUnknownOutcome, payment.AttemptUnknown, "timeout"},
	}
	for _, tc := range cases {
		t.Run("To_"+string(tc.to), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, r, a)
			r = mustLookup(t, s, "tenant-a", r.KeyHash)

			u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: tc.status, ErrorCode: tc.code, At: base.Add(time.Second)}
			mustRelease(t, s, r, tc.to, &u)
			got := mustLookup(t, s, "tenant-a", r.KeyHash)
			// The token, recovery point and attempt stay for the next holder.
			assertRecord(t, got, releasedAs(r, tc.to))
			if got.RecoveryPoint != idempotency.RecoveryAttemptRecorded || got.AttemptKey != a.ProviderKey {
				t.Errorf("RecoveryPoint, AttemptKey = %s, %s; want kept", got.RecoveryPoint, got.AttemptKey)
			}
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), settledAs(a, u))
			assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
		})
	}

	t.Run("WithoutAttemptUpdate", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
		mustRelease(t, s, r, idempotency.StateRetryableFailure, nil)
		assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), releasedAs(r, idempotency.StateRetryableFailure))
	})

	t.Run("StaleLeaseIsLostAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		stale := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
		a := newAttempt(o, "charge-1", base)
		mustRecordAttempt(t, s, stale, a)
		current := mustAcquire(t, s, retryAt(stale, stale.LockedUntil.Add(time.Second)))

		for _, to := range []idempotency.State{idempotency.StateRetryableFailure, idempotency.StateUnknownOutcome} {
			u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptUnknown, ErrorCode: "timeout", At: base.Add(time.Minute)}
			if err := release(ctx, s, store.LeaseOf(stale), to, &u); !errors.Is(err, store.ErrLeaseLost) {
				t.Errorf("Release to %s err = %v, want ErrLeaseLost", to, err)
			}
		}
		assertRecord(t, mustLookup(t, s, "tenant-a", current.KeyHash), current)
		assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
	})
}

// testFencing plays a stale worker against the worker that took its key
// over: only the current token's writes land.
func testFencing(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("StaleWorkerIsFencedOut", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)

		// Worker A acquires and records its attempt, then stalls past its lease.
		a := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
		att := newAttempt(o, "charge-1", base)
		mustRecordAttempt(t, s, a, att)

		// Worker B takes the key over.
		b := mustAcquire(t, s, retryAt(a, a.LockedUntil.Add(time.Second)))
		if b.FencingToken != 2 || b.AttemptKey != att.ProviderKey {
			t.Fatalf("B's record = %+v; want token 2 and A's attempt", b)
		}

		// A wakes up: every write it tries is refused.
		aPaid := o.Apply(order.Paid, base.Add(time.Minute))
		aU := store.AttemptUpdate{ProviderKey: att.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_A", At: base.Add(time.Minute)}
		if err := complete(ctx, s, store.LeaseOf(a), completion{Outcome: outcome(o.ID), Next: &aPaid, Attempt: &aU}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("A's Complete err = %v, want ErrLeaseLost", err)
		}
		if err := release(ctx, s, store.LeaseOf(a), idempotency.StateUnknownOutcome, &aU); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("A's Release err = %v, want ErrLeaseLost", err)
		}
		if _, err := s.RecordAttempt(ctx, store.LeaseOf(a), newAttempt(o, "charge-A", base.Add(time.Minute)), 1); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("A's RecordAttempt err = %v, want ErrLeaseLost", err)
		}
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
		assertAttempt(t, mustGetAttempt(t, s, att.ProviderKey), att)
		assertRecord(t, mustLookup(t, s, "tenant-a", b.KeyHash), b)

		// B completes: the final record is B's outcome.
		bPaid := o.Apply(order.Paid, base.Add(2*time.Minute))
		bU := store.AttemptUpdate{ProviderKey: att.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_B", At: base.Add(2 * time.Minute)}
		bOut := outcome(o.ID)
		mustComplete(t, s, b, completion{Outcome: bOut, Next: &bPaid, Attempt: &bU})
		assertRecord(t, mustLookup(t, s, "tenant-a", b.KeyHash), completedAs(b, bOut))
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), bPaid)
		assertAttempt(t, mustGetAttempt(t, s, att.ProviderKey), settledAs(att, bU))
	})
}

func testTakeOverAbandoned(t *testing.T, open func(t *testing.T) *subject) {
	now := base.Add(time.Hour)
	until := now.Add(leaseFor)

	t.Run("TakesOverExpiredLeasesAndUnknownOutcomesOnly", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)

		expired := mustAcquire(t, s, newClaim("tenant-a", "expired", o.ID, base))
		mustRecordAttempt(t, s, expired, newAttempt(o, "charge-1", base))
		expired = mustLookup(t, s, "tenant-a", expired.KeyHash)
		atNow := mustAcquire(t, s, newClaim("tenant-b", "expires-at-now", o.ID, now.Add(-leaseFor)))
		unknown := mustAcquire(t, s, newClaim("tenant-a", "unknown", o.ID, now.Add(-time.Second)))
		mustRelease(t, s, unknown, idempotency.StateUnknownOutcome, nil)
		unknown = releasedAs(unknown, idempotency.StateUnknownOutcome)

		live := mustAcquire(t, s, newClaim("tenant-a", "live", o.ID, now.Add(-leaseFor+time.Microsecond)))
		retryable := mustAcquire(t, s, newClaim("tenant-a", "retryable", o.ID, base))
		mustRelease(t, s, retryable, idempotency.StateRetryableFailure, nil)
		retryable = releasedAs(retryable, idempotency.StateRetryableFailure)
		done := mustAcquire(t, s, newClaim("tenant-a", "completed", o.ID, base))
		mustComplete(t, s, done, completion{Outcome: outcome(o.ID)})
		done = completedAs(done, outcome(o.ID))
		created := newRecord("tenant-a", "created", o.ID, base)
		mustCreate(t, s, &created, newOrder(t, "tenant-a", "cust-1", base))

		got, err := s.TakeOverAbandoned(ctx, takeOver{Now: now, LeaseUntil: until, Limit: 100})
		if err != nil {
			t.Fatalf("TakeOverAbandoned: %v", err)
		}
		want := []idempotency.Record{takenOver(expired, until), takenOver(atNow, until), takenOver(unknown, until)}
		assertRecordSet(t, got, want)
		for _, r := range want {
			assertRecord(t, mustLookup(t, s, r.TenantID, r.KeyHash), r)
		}
		for _, r := range []idempotency.Record{live, retryable, done, created} {
			assertRecord(t, mustLookup(t, s, r.TenantID, r.KeyHash), r)
		}

		// They are leased now: a second pass at the same instant finds none,
		// and the holders before the takeover are fenced out.
		again, err := s.TakeOverAbandoned(ctx, takeOver{Now: now, LeaseUntil: until, Limit: 100})
		if err != nil || len(again) != 0 {
			t.Errorf("second TakeOverAbandoned = %d records, %v; want none", len(again), err)
		}
		if err := complete(ctx, s, store.LeaseOf(expired), completion{Outcome: outcome(o.ID)}); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("Complete by the holder before the takeover: err = %v, want ErrLeaseLost", err)
		}
	})

	t.Run("RespectsLimit", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		const keys, limit = 5, 2
		abandoned := map[string]idempotency.Record{}
		for i := range keys {
			r := mustAcquire(t, s, newClaim("tenant-a", fmt.Sprintf("key-%d", i), order.NewID(), base))
			if i%2 == 0 {
				mustRelease(t, s, r, idempotency.StateUnknownOutcome, nil)
				r = releasedAs(r, idempotency.StateUnknownOutcome)
			}
			abandoned[r.KeyHash] = r
		}
		seen := map[string]bool{}
		for pass, wantN := range []int{2, 2, 1, 0} {
			got, err := s.TakeOverAbandoned(ctx, takeOver{Now: now, LeaseUntil: until, Limit: limit})
			if err != nil {
				t.Fatalf("pass %d: TakeOverAbandoned: %v", pass, err)
			}
			if len(got) != wantN {
				t.Errorf("pass %d: %d records, want %d", pass, len(got), wantN)
			}
			for _, r := range got {
				if seen[r.KeyHash] {
					t.Errorf("pass %d: key %s taken over twice", pass, r.KeyHash)
				}
				seen[r.KeyHash] = true
				assertRecord(t, r, takenOver(abandoned[r.KeyHash], until))
			}
		}
		if len(seen) != keys {
			t.Errorf("took over %d keys, want %d", len(seen), keys)
		}
	})

	t.Run("TakenOverKeyResumesToCompletion", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
		a := newAttempt(o, "charge-1", base)
		mustRecordAttempt(t, s, r, a)
		lost := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptUnknown, ErrorCode: "timeout", At: base.Add(time.Second)}
		mustRelease(t, s, r, idempotency.StateUnknownOutcome, &lost)

		got, err := s.TakeOverAbandoned(t.Context(), takeOver{Now: now, LeaseUntil: until, Limit: 10})
		if err != nil || len(got) != 1 {
			t.Fatalf("TakeOverAbandoned = %d records, %v; want 1", len(got), err)
		}
		c := got[0]
		if c.FencingToken != 2 || c.AttemptKey != a.ProviderKey || c.RecoveryPoint != idempotency.RecoveryAttemptRecorded {
			t.Fatalf("taken over = %+v; want token 2 and the attempt to resume", c)
		}
		// The completer asked the provider: the charge went through.
		found := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_1", At: now}
		paid := o.Apply(order.Paid, now)
		mustComplete(t, s, c, completion{Outcome: outcome(o.ID), Next: &paid, Attempt: &found})
		assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), settledAs(settledAs(a, lost), found))
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)
		assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), completedAs(c, outcome(o.ID)))
	})
}

func testGetAttempt(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("RoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		for i, kind := range []payment.AttemptKind{payment.AttemptCharge, payment.AttemptShipment, payment.AttemptRefund} {
			// One order each: two open attempts on one order are refused.
			o := newOrder(t, "tenant-a", "cust-ü", base)
			mustCreate(t, s, nil, o)
			r := mustAcquire(t, s, newClaim("tenant-a", "key-"+string(kind), o.ID, base))
			a := payment.Attempt{
				ProviderKey:   fmt.Sprintf("%s:%s:v1", kind, o.ID),
				TenantID:      "tenant-a",
				OrderID:       o.ID,
				Kind:          kind,
				Status:        payment.AttemptPending,
				Amount:        1<<53 + 1 + int64(i),
				Currency:      "JPY",
				PaymentMethod: "pm_card_ü",
				ProviderRef:   "ref-" + string(kind),
				ErrorCode:     "code-" + string(kind),
				CreatedAt:     base.Add(time.Duration(i) * time.Second),
				UpdatedAt:     base.Add(time.Duration(i)*time.Second + time.Microsecond),
			}
			assertAttempt(t, mustRecordAttempt(t, s, r, a), a)
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
		}
	})

	t.Run("UnknownIsNotFound", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		assertNotFound(t, "GetAttempt", getErr(s.GetAttempt(t.Context(), "charge:nope")))
	})
}

// assertRecordSet checks that got holds exactly the records of want, in any
// order.
func assertRecordSet(t *testing.T, got, want []idempotency.Record) {
	t.Helper()
	byKey := func(a, b idempotency.Record) int {
		return strings.Compare(a.TenantID+"/"+a.KeyHash, b.TenantID+"/"+b.KeyHash)
	}
	got, want = slices.SortedFunc(slices.Values(got), byKey), slices.SortedFunc(slices.Values(want), byKey)
	if len(got) != len(want) {
		t.Errorf("%d records, want %d:\n  got  %+v\n  want %+v", len(got), len(want), got, want)
		return
	}
	for i := range got {
		assertRecord(t, got[i], want[i])
	}
}

// completeCompletesKeyFencedByLease checks: completes key fenced by lease.
func completeCompletesKeyFencedByLease(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	r := mustAcquire(t, s, newClaim("tenant-a", "noop-1", order.NewID(), base))
	mustComplete(t, s, r, completion{Outcome: outcome(r.ResourceID)})
	got := mustLookup(t, s, "tenant-a", r.KeyHash)
	assertRecord(t, got, completedAs(r, outcome(r.ResourceID)))
	if !got.LockedUntil.IsZero() {
		t.Errorf("LockedUntil = %s, want zero", got.LockedUntil)
	}
}

// completeFinalErrorRoundTrips checks: final error round trips.
func completeFinalErrorRoundTrips(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	cases := []struct {
		name     string
		code     apperr.Code
		detail   string
		resource string
	}{
		{"InvalidTransition", apperr.EInvalidTransition, "cannot pay an order in state CANCELLED", order.NewID()},
		{"Declined", apperr.EDeclined, "the card was declined — insufficient funds", order.NewID()},
		{"InvalidWithoutResource", apperr.EInvalid, "customer_id is required", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			r := mustAcquire(t, s, newClaim("tenant-a", "err-1", order.NewID(), base))
			out := idempotency.Record{ResourceID: tc.resource, ErrorCode: tc.code, ErrorDetail: tc.detail}
			mustComplete(t, s, r, completion{Outcome: out})
			got := mustLookup(t, s, "tenant-a", r.KeyHash)
			assertRecord(t, got, completedAs(r, out))
			if apperr.ErrorCode(got.Err()) != tc.code {
				t.Errorf("Err() code = %q, want %q", apperr.ErrorCode(got.Err()), tc.code)
			}
		})
	}
}

// completeNextIsWrittenAsACompareAndSet checks: next is written as acompare and set.
func completeNextIsWrittenAsACompareAndSet(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)

	paid := o.Apply(order.Paid, base.Add(time.Minute))
	pay := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base.Add(time.Minute)))
	mustComplete(t, s, pay, completion{Outcome: outcome(o.ID), Next: &paid})
	got := mustGet(t, s, "tenant-a", o.ID)
	assertOrder(t, got, paid)
	if got.Version != 2 || got.State != order.Paid || got.PaidAt == nil {
		t.Errorf("after pay: Version, State, PaidAt = %d, %s, %v; want 2, PAID, set", got.Version, got.State, got.PaidAt)
	}
	assertRecord(t, mustLookup(t, s, "tenant-a", pay.KeyHash), completedAs(pay, outcome(o.ID)))

	// A second transition round-trips the next timestamp and keeps PaidAt.
	fulfilled := paid.Apply(order.Fulfilled, base.Add(time.Hour))
	mustTransition(t, s, fulfilled)
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), fulfilled)
}

// completeCancelRoundTripsCancelledAt checks: cancel round trips cancelled at.
func completeCancelRoundTripsCancelledAt(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	cancelled := o.Apply(order.Cancelled, base.Add(time.Minute))
	mustTransition(t, s, cancelled)
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), cancelled)
}

// completeSettlesAttempt checks: settles attempt.
func completeSettlesAttempt(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, st := range []payment.AttemptStatus{payment.AttemptSucceeded, payment.AttemptDeclined, payment.AttemptRejected} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, r, a)
			u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: st, ProviderRef: "ref-1", At: base.Add(time.Second)}
			if st != payment.AttemptSucceeded {
				u.ErrorCode = "card_declined"
			}
			mustComplete(t, s, r, completion{Outcome: outcome(o.ID), Attempt: &u})
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), settledAs(a, u))
		})
	}
}

// completeSettledAttemptIsNotReopened checks: settled attempt is not reopened.
func completeSettledAttemptIsNotReopened(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, st := range []payment.AttemptStatus{payment.AttemptSucceeded, payment.AttemptDeclined, payment.AttemptRejected} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, first, a)
			u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: st, ProviderRef: "ref-1", At: base.Add(time.Second)}
			mustComplete(t, s, first, completion{Outcome: outcome(o.ID), Attempt: &u})
			settled := settledAs(a, u)

			// Late, stale answers through other requests' leases.
			second := mustAcquire(t, s, newClaim("tenant-a", "pay-2", o.ID, base.Add(time.Minute)))
			mustComplete(t, s, second, completion{Outcome: outcome(o.ID), Attempt: &store.AttemptUpdate{
				ProviderKey: a.ProviderKey, Status: payment.AttemptFailed, ProviderRef: "ref-2", ErrorCode: "timeout", At: base.Add(time.Minute),
			}})
			third := mustAcquire(t, s, newClaim("tenant-a", "pay-3", o.ID, base.Add(time.Minute)))
			mustRelease(t, s, third, idempotency.StateUnknownOutcome, &store.AttemptUpdate{
				ProviderKey: a.ProviderKey, Status: payment.AttemptUnknown, At: base.Add(time.Hour),
			})
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), settled)
		})
	}
}

// completeNextIsRefusedWhileAnotherAttemptIsOpen checks: next is refused while another attempt is open.
func completeNextIsRefusedWhileAnotherAttemptIsOpen(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, st := range []payment.AttemptStatus{payment.AttemptPending, payment.AttemptUnknown,
		payment.AttemptRequiresAction, payment.AttemptProcessing} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), t.Context()
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			charge := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, charge, a)
			if st != payment.AttemptPending {
				// Unknown, or a payment waiting for the customer or the
				// bank (issue 16): the key is released as an unknown outcome.
				mustRelease(t, s, charge, idempotency.StateUnknownOutcome, &store.AttemptUpdate{
					ProviderKey: a.ProviderKey, Status: st, At: base.Add(time.Second),
				})
			}
			before := mustGetAttempt(t, s, a.ProviderKey)

			cancel := mustAcquire(t, s, newClaim("tenant-a", "cancel-1", o.ID, base.Add(time.Minute)))
			cancelled := o.Apply(order.Cancelled, base.Add(time.Minute))
			other := store.AttemptUpdate{ProviderKey: "refund-x", Status: payment.AttemptSucceeded, At: base.Add(time.Minute)}
			for name, c := range map[string]completion{
				"WithoutAttempt":     {Outcome: outcome(o.ID), Next: &cancelled},
				"WithAnotherAttempt": {Outcome: outcome(o.ID), Next: &cancelled, Attempt: &other},
			} {
				if err := complete(ctx, s, store.LeaseOf(cancel), c); !errors.Is(err, store.ErrAttemptInFlight) {
					t.Errorf("%s: Complete err = %v, want ErrAttemptInFlight", name, err)
				}
			}
			// Nothing written: the order, the key and the attempt are as before.
			assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
			assertRecord(t, mustLookup(t, s, "tenant-a", cancel.KeyHash), cancel)
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), before)

			// Once the attempt is settled, the transition goes through.
			settler := charge
			if st != payment.AttemptPending {
				got, err := s.TakeOverAbandoned(ctx, takeOver{Now: base.Add(time.Minute), LeaseUntil: base.Add(time.Minute + leaseFor), Limit: 10})
				if err != nil || len(got) != 1 {
					t.Fatalf("TakeOverAbandoned = %d records, %v; want the charge's key", len(got), err)
				}
				settler = got[0]
			}
			mustComplete(t, s, settler, completion{Outcome: idempotency.Record{
				ResourceID: o.ID, ErrorCode: apperr.EDeclined, ErrorDetail: "declined",
			}, Attempt: &store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptDeclined, At: base.Add(time.Minute)}})
			mustComplete(t, s, cancel, completion{Outcome: outcome(o.ID), Next: &cancelled})
			assertOrder(t, mustGet(t, s, "tenant-a", o.ID), cancelled)
		})
	}
}

// completeWithoutNextOpenAttemptsDoNotMatter checks: without next open attempts do not matter.
func completeWithoutNextOpenAttemptsDoNotMatter(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	charge := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	mustRecordAttempt(t, s, charge, newAttempt(o, "charge-1", base))
	other := mustAcquire(t, s, newClaim("tenant-a", "cancel-1", o.ID, base.Add(time.Minute)))
	out := idempotency.Record{ResourceID: o.ID, ErrorCode: apperr.EInvalidTransition, ErrorDetail: "busy"}
	mustComplete(t, s, other, completion{Outcome: out})
	assertRecord(t, mustLookup(t, s, "tenant-a", other.KeyHash), completedAs(other, out))
}

// completeStaleLeaseIsLostAndWritesNothing checks: stale lease is lost and writes nothing.
func completeStaleLeaseIsLostAndWritesNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	stale := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	a := newAttempt(o, "charge-1", base)
	mustRecordAttempt(t, s, stale, a)
	current := mustAcquire(t, s, retryAt(stale, stale.LockedUntil.Add(time.Second)))

	paid := o.Apply(order.Paid, base.Add(time.Minute))
	u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_1", At: base.Add(time.Minute)}
	c := completion{Outcome: outcome(o.ID), Next: &paid, Attempt: &u}
	otherTenant := store.LeaseOf(current)
	otherTenant.TenantID = "tenant-b"
	for name, l := range map[string]store.Lease{
		"OlderToken":    store.LeaseOf(stale),
		"NewerToken":    {TenantID: "tenant-a", KeyHash: current.KeyHash, Token: current.FencingToken + 1},
		"AnotherTenant": otherTenant,
		"UnknownKey":    {TenantID: "tenant-a", KeyHash: idempotency.HashKey("nope"), Token: 1},
	} {
		if err := complete(ctx, s, l, c); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: Complete err = %v, want ErrLeaseLost", name, err)
		}
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
	assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
	assertRecord(t, mustLookup(t, s, "tenant-a", current.KeyHash), current)
}

// completeCompletedLeaseIsLost checks: completed lease is lost.
func completeCompletedLeaseIsLost(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	paid := o.Apply(order.Paid, base.Add(time.Minute))
	mustComplete(t, s, r, completion{Outcome: outcome(o.ID), Next: &paid})

	// The same token again, as a duplicate delivery would.
	fulfilled := paid.Apply(order.Fulfilled, base.Add(time.Hour))
	err := complete(ctx, s, store.LeaseOf(r), completion{Outcome: outcome(o.ID), Next: &fulfilled})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("second Complete err = %v, want ErrLeaseLost", err)
	}
	if err := release(ctx, s, store.LeaseOf(r), idempotency.StateRetryableFailure, nil); !errors.Is(err, store.ErrLeaseLost) {
		t.Errorf("Release after Complete err = %v, want ErrLeaseLost", err)
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)
	assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), completedAs(r, outcome(o.ID)))
}

// completeWrongVersionConflictsAndWritesNothing checks: wrong version conflicts and writes nothing.
func completeWrongVersionConflictsAndWritesNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	cases := []struct {
		name string
		next func(o order.Order) order.Order
	}{
		{"Stale", func(o order.Order) order.Order { return o.Apply(order.Cancelled, base.Add(time.Hour)) }},
		{"Repeated", func(o order.Order) order.Order { return o.Apply(order.Paid, base.Add(time.Minute)) }},
		{"Ahead", func(o order.Order) order.Order {
			n := o.Apply(order.Paid, base.Add(time.Hour))
			n.Version = 7
			return n
		}},
		{"AnotherTenantsOrder", func(o order.Order) order.Order {
			n := o.Apply(order.Paid, base.Add(time.Hour))
			n.TenantID = "tenant-b"
			return n
		}},
		{"UnknownOrder", func(o order.Order) order.Order {
			n := o.Apply(order.Paid, base.Add(time.Hour))
			n.ID = order.NewID()
			return n
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), t.Context()
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			paid := o.Apply(order.Paid, base.Add(time.Minute))
			mustTransition(t, s, paid)

			next := tc.next(o)
			r := mustAcquire(t, s, newClaim(next.TenantID, "late-1", o.ID, base.Add(time.Hour)))
			a := newAttempt(o, "charge-1", base.Add(time.Hour))
			mustRecordAttemptAt(t, s, r, a, paid.Version)
			r = mustLookup(t, s, next.TenantID, r.KeyHash)
			u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_1", At: base.Add(2 * time.Hour)}
			err := complete(ctx, s, store.LeaseOf(r), completion{Outcome: outcome(o.ID), Next: &next, Attempt: &u})
			if !errors.Is(err, store.ErrVersionConflict) {
				t.Fatalf("Complete err = %v, want ErrVersionConflict", err)
			}
			assertRecord(t, mustLookup(t, s, next.TenantID, r.KeyHash), r)
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
			assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)
			assertNotFound(t, "GetOrder by the other tenant", getErr(s.GetOrder(ctx, "tenant-b", o.ID)))
			if next.ID != o.ID {
				assertNotFound(t, "GetOrder of the unknown order", getErr(s.GetOrder(ctx, next.TenantID, next.ID)))
			}
		})
	}
}

// acquireFreshKeyIsAcquired checks: fresh key is acquired.
func acquireFreshKeyIsAcquired(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, derived := range []bool{false, true} {
		t.Run(fmt.Sprintf("derived=%t", derived), func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), t.Context()
			claim := newClaim("tenant-a", "pay-1", order.NewID(), base)
			if derived {
				claim = asDerived(claim)
			}
			got, ok, err := s.AcquireLease(ctx, claim)
			if err != nil || !ok {
				t.Fatalf("AcquireLease = %+v, %t, %v; want acquired", got, ok, err)
			}
			// In progress, token 1, recovery point started, the lease and
			// the resource as claimed.
			assertRecord(t, got, claim)
			assertRecord(t, mustLookup(t, s, "tenant-a", claim.KeyHash), claim)
		})
	}
}

// acquireLiveLeaseIsNotAcquired checks: live lease is not acquired.
func acquireLiveLeaseIsNotAcquired(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
	same := retryAt(first, first.LockedUntil.Add(-time.Microsecond))
	other := same
	other.Fingerprint = "sha256:another-request"
	for name, claim := range map[string]idempotency.Record{"SameRequest": same, "AnotherRequest": other} {
		held, ok, err := s.AcquireLease(ctx, claim)
		if err != nil || ok {
			t.Fatalf("%s: AcquireLease = %t, %v; want not acquired", name, ok, err)
		}
		assertRecord(t, held, first) // the holder, token 1
	}
	assertRecord(t, mustLookup(t, s, "tenant-a", first.KeyHash), first)
}

// acquireExpiredLeaseIsTakenOverBySameRequest checks: expired lease is taken over by same request.
func acquireExpiredLeaseIsTakenOverBySameRequest(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	a := newAttempt(o, "charge-1", base)
	mustRecordAttempt(t, s, first, a)
	first = mustLookup(t, s, "tenant-a", first.KeyHash)

	// Expired at LockedUntil itself, judged on the database's clock (the suite sets it to the claim's CreatedAt).
	retry := retryAt(first, first.LockedUntil)
	got, ok, err := s.AcquireLease(ctx, retry)
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %+v, %t, %v; want acquired", got, ok, err)
	}
	want := takenOver(first, retry.LockedUntil)
	if want.FencingToken != 2 || want.RecoveryPoint != idempotency.RecoveryAttemptRecorded || want.AttemptKey != a.ProviderKey {
		t.Fatalf("fixture: %+v", want)
	}
	// Retention is not part of a takeover's contract.
	got.CreatedAt, got.ExpiresAt = want.CreatedAt, want.ExpiresAt
	assertRecord(t, got, want)
	stored := mustLookup(t, s, "tenant-a", first.KeyHash)
	stored.CreatedAt, stored.ExpiresAt = want.CreatedAt, want.ExpiresAt
	assertRecord(t, stored, want)
	assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
}

// acquireExpiredLeaseIsNotTakenOverByAnotherRequest checks: expired lease is not taken over by another request.
func acquireExpiredLeaseIsNotTakenOverByAnotherRequest(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
	other := retryAt(first, base.Add(time.Hour))
	other.Fingerprint = "sha256:another-request"
	held, ok, err := s.AcquireLease(ctx, other)
	if err != nil || ok {
		t.Fatalf("AcquireLease = %t, %v; want not acquired", ok, err)
	}
	assertRecord(t, held, first)
	assertRecord(t, mustLookup(t, s, "tenant-a", first.KeyHash), first)
}

// acquireReleasedKeyIsTakenOverAtOnceBySameRequest checks: released key is taken over at once by same request.
func acquireReleasedKeyIsTakenOverAtOnceBySameRequest(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, to := range []idempotency.State{idempotency.StateRetryableFailure, idempotency.StateUnknownOutcome} {
		t.Run(string(to), func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), t.Context()
			first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
			mustRelease(t, s, first, to, nil)
			released := releasedAs(first, to)

			// Another request is refused even though nobody holds the key.
			at := base.Add(time.Second) // the released lease would still be live
			other := retryAt(first, at)
			other.Fingerprint = "sha256:another-request"
			held, ok, err := s.AcquireLease(ctx, other)
			if err != nil || ok {
				t.Fatalf("another request: AcquireLease = %t, %v; want not acquired", ok, err)
			}
			assertRecord(t, held, released)

			retry := retryAt(first, at)
			got, ok, err := s.AcquireLease(ctx, retry)
			if err != nil || !ok {
				t.Fatalf("AcquireLease = %+v, %t, %v; want acquired", got, ok, err)
			}
			want := takenOver(released, retry.LockedUntil)
			got.CreatedAt, got.ExpiresAt = want.CreatedAt, want.ExpiresAt
			assertRecord(t, got, want)
			if got.FencingToken != 2 {
				t.Errorf("FencingToken = %d, want 2", got.FencingToken)
			}
		})
	}
}

// acquireCompletedKeyIsNotAcquired checks: completed key is not acquired.
func acquireCompletedKeyIsNotAcquired(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	leased := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
	mustComplete(t, s, leased, completion{Outcome: outcome(leased.ResourceID)})
	done := completedAs(leased, outcome(leased.ResourceID))

	o := newOrder(t, "tenant-a", "cust-1", base)
	created := newRecord("tenant-a", "create-1", o.ID, base)
	mustCreate(t, s, &created, o)

	for _, held := range []idempotency.Record{done, created} {
		retry := retryAt(held, base.Add(time.Hour))
		got, ok, err := s.AcquireLease(ctx, retry)
		if err != nil || ok {
			t.Fatalf("AcquireLease of a completed key = %t, %v; want not acquired", ok, err)
		}
		assertRecord(t, got, held)
		assertRecord(t, mustLookup(t, s, "tenant-a", held.KeyHash), held)
	}
}

// acquireExpiredDerivedKeyIsReplaced checks: expired derived key is replaced.
func acquireExpiredDerivedKeyIsReplaced(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	old := mustAcquire(t, s, asDerived(newClaim("tenant-a", "derived-1", o.ID, base)))
	mustRecordAttempt(t, s, old, newAttempt(o, "charge-1", base))
	mustComplete(t, s, old, completion{Outcome: outcome(o.ID)})
	old = mustLookup(t, s, "tenant-a", old.KeyHash)

	at := old.ExpiresAt.Add(time.Minute)
	claim := asDerived(newClaim("tenant-a", "derived-1", order.NewID(), at))
	claim.Fingerprint = "sha256:a-new-request"
	got, ok, err := s.AcquireLease(ctx, claim)
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %+v, %t, %v; want the expired derived key replaced", got, ok, err)
	}
	// A fresh claim: new fingerprint, resource and window, recovery point
	// started, no attempt, no outcome; a token past the old one's.
	if got.FencingToken <= old.FencingToken {
		t.Errorf("FencingToken = %d, want more than the replaced key's %d", got.FencingToken, old.FencingToken)
	}
	want := claim
	want.FencingToken = got.FencingToken
	assertRecord(t, got, want)
	assertRecord(t, mustLookup(t, s, "tenant-a", claim.KeyHash), want)
}

// acquireExpiredClientKeyIsNotAcquired checks: expired client key is not acquired.
func acquireExpiredClientKeyIsNotAcquired(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
	mustComplete(t, s, first, completion{Outcome: outcome(first.ResourceID)})
	done := completedAs(first, outcome(first.ResourceID))

	at := first.ExpiresAt.Add(time.Hour)
	same := retryAt(first, at)
	other := same
	other.Fingerprint = "sha256:another-request"
	for name, claim := range map[string]idempotency.Record{"SameRequest": same, "AnotherRequest": other} {
		held, ok, err := s.AcquireLease(ctx, claim)
		if err != nil || ok {
			t.Fatalf("%s: AcquireLease = %t, %v; want not acquired", name, ok, err)
		}
		assertRecord(t, held, done)
	}

	// Nor once it is a tombstone.
	if _, err := s.Sweep(ctx, at, 7*24*time.Hour, 10); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	held, ok, err := s.AcquireLease(ctx, same)
	if err != nil || ok {
		t.Fatalf("tombstone: AcquireLease = %t, %v; want not acquired", ok, err)
	}
	if held.State != idempotency.StateExpired {
		t.Errorf("tombstone: held State = %s, want %s", held.State, idempotency.StateExpired)
	}
}

// acquireSameKeyUnderAnotherTenantIsIndependent checks: same key under another tenant is independent.
func acquireSameKeyUnderAnotherTenantIsIndependent(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	a := mustAcquire(t, s, newClaim("tenant-a", "pay-1", order.NewID(), base))
	b := newClaim("tenant-b", "pay-1", order.NewID(), base)
	assertRecord(t, mustAcquire(t, s, b), b)
	assertRecord(t, mustLookup(t, s, "tenant-a", a.KeyHash), a)
}

// recordInsertsPendingAttemptAndMovesRecoveryPoint checks: inserts pending attempt and moves recovery point.
func recordInsertsPendingAttemptAndMovesRecoveryPoint(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	a := newAttempt(o, "charge-1", base.Add(time.Second))

	assertAttempt(t, mustRecordAttempt(t, s, r, a), a)
	assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
	want := r
	want.RecoveryPoint, want.AttemptKey = idempotency.RecoveryAttemptRecorded, a.ProviderKey
	assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), want)
}

// recordExistingProviderKeyReturnsStoredAttempt checks: existing provider key returns stored attempt.
func recordExistingProviderKeyReturnsStoredAttempt(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, st := range []payment.AttemptStatus{
		payment.AttemptPending, payment.AttemptUnknown, payment.AttemptSucceeded, payment.AttemptDeclined, payment.AttemptRejected,
		payment.AttemptRequiresAction, payment.AttemptProcessing,
	} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, first, a)
			stored := a
			if st != payment.AttemptPending {
				u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: st, ProviderRef: "ch_1", ErrorCode: "e", At: base.Add(time.Second)}
				if st == payment.AttemptUnknown || st.Awaiting() {
					mustRelease(t, s, first, idempotency.StateUnknownOutcome, &u)
				} else {
					mustComplete(t, s, first, completion{Outcome: outcome(o.ID), Attempt: &u})
				}
				stored = settledAs(a, u)
			}

			second := mustAcquire(t, s, newClaim("tenant-a", "pay-2", o.ID, base.Add(time.Minute)))
			again := newAttempt(o, a.ProviderKey, base.Add(time.Minute))
			again.Amount = 1
			if st.Open() {
				// An open attempt made with another payment method is
				// refused: joining it would give this request another
				// request's outcome. Nothing is written.
				other := again
				other.PaymentMethod = "pm_other"
				if _, err := s.RecordAttempt(t.Context(), store.LeaseOf(second), other, o.Version); !errors.Is(err, store.ErrAttemptInFlight) {
					t.Fatalf("RecordAttempt with another method on an open attempt: %v, want ErrAttemptInFlight", err)
				}
				assertRecord(t, mustLookup(t, s, "tenant-a", second.KeyHash), second)
			} else {
				again.PaymentMethod = "pm_other"
			}
			assertAttempt(t, mustRecordAttempt(t, s, second, again), stored)
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), stored)
			want := second
			want.RecoveryPoint, want.AttemptKey = idempotency.RecoveryAttemptRecorded, a.ProviderKey
			assertRecord(t, mustLookup(t, s, "tenant-a", second.KeyHash), want)
		})
	}
}

// recordFailedAttemptIsReopened checks: failed attempt is reopened.
func recordFailedAttemptIsReopened(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	first := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	a := newAttempt(o, "charge-1", base)
	mustRecordAttempt(t, s, first, a)
	failed := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptFailed, ErrorCode: "rate_limited", At: base.Add(time.Second)}
	mustRelease(t, s, first, idempotency.StateRetryableFailure, &failed)

	// The retry takes the key over and tries again with another card.
	retry := mustAcquire(t, s, retryAt(first, base.Add(time.Minute)))
	again := newAttempt(o, a.ProviderKey, base.Add(time.Minute))
	again.PaymentMethod = "pm_card_mastercard"
	want := a
	want.Status, want.PaymentMethod, want.ErrorCode, want.UpdatedAt = payment.AttemptPending, again.PaymentMethod, "", again.UpdatedAt
	assertAttempt(t, mustRecordAttempt(t, s, retry, again), want)
	assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), want)
}

// recordStaleOrderVersionConflictsAndWritesNothing checks: stale order version conflicts and writes nothing.
func recordStaleOrderVersionConflictsAndWritesNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	paid := o.Apply(order.Paid, base.Add(time.Minute))
	mustTransition(t, s, paid)
	r := mustAcquire(t, s, newClaim("tenant-a", "ship-1", o.ID, base.Add(time.Hour)))
	for _, v := range []int64{1, 3} {
		a := newAttempt(paid, fmt.Sprintf("ship-v%d", v), base.Add(time.Hour))
		a.Kind = payment.AttemptShipment
		if _, err := s.RecordAttempt(ctx, store.LeaseOf(r), a, v); !errors.Is(err, store.ErrVersionConflict) {
			t.Errorf("version %d: RecordAttempt err = %v, want ErrVersionConflict", v, err)
		}
		assertNotFound(t, "GetAttempt", getErr(s.GetAttempt(ctx, a.ProviderKey)))
	}
	// The recovery point did not move: the transaction rolled back.
	assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), r)

	a := newAttempt(paid, "ship-v2", base.Add(time.Hour))
	a.Kind = payment.AttemptShipment
	assertAttempt(t, mustRecordAttemptAt(t, s, r, a, paid.Version), a)
}

// recordAnotherTenantsOrderIsNotFound checks: another tenants order is not found.
func recordAnotherTenantsOrderIsNotFound(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	r := mustAcquire(t, s, newClaim("tenant-b", "pay-1", o.ID, base))
	a := newAttempt(o, "charge-1", base)
	a.TenantID = "tenant-b"
	if _, err := s.RecordAttempt(ctx, store.LeaseOf(r), a, 1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RecordAttempt err = %v, want ErrNotFound", err)
	}
	assertNotFound(t, "GetAttempt", getErr(s.GetAttempt(ctx, a.ProviderKey)))
	assertRecord(t, mustLookup(t, s, "tenant-b", r.KeyHash), r)
}

// recordOpenAttemptOnTheOrderIsInFlight checks: open attempt on the order is in flight.
func recordOpenAttemptOnTheOrderIsInFlight(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, st := range []payment.AttemptStatus{payment.AttemptPending, payment.AttemptUnknown} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), t.Context()
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			charge := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, charge, a)
			if st == payment.AttemptUnknown {
				mustRelease(t, s, charge, idempotency.StateUnknownOutcome, &store.AttemptUpdate{
					ProviderKey: a.ProviderKey, Status: payment.AttemptUnknown, ErrorCode: "timeout", At: base.Add(time.Second),
				})
			}

			refund := mustAcquire(t, s, newClaim("tenant-a", "refund-1", o.ID, base.Add(time.Minute)))
			ra := newAttempt(o, "refund-1", base.Add(time.Minute))
			ra.Kind = payment.AttemptRefund
			if _, err := s.RecordAttempt(ctx, store.LeaseOf(refund), ra, 1); !errors.Is(err, store.ErrAttemptInFlight) {
				t.Fatalf("RecordAttempt err = %v, want ErrAttemptInFlight", err)
			}
			assertNotFound(t, "GetAttempt of the refused attempt", getErr(s.GetAttempt(ctx, ra.ProviderKey)))
			assertRecord(t, mustLookup(t, s, "tenant-a", refund.KeyHash), refund)
			if got := mustGetAttempt(t, s, a.ProviderKey); got.Status != st {
				t.Errorf("open attempt Status = %s, want %s", got.Status, st)
			}
		})
	}
}

// recordSettledAttemptOnTheOrderDoesNotBlock checks: settled attempt on the order does not block.
func recordSettledAttemptOnTheOrderDoesNotBlock(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	for _, st := range []payment.AttemptStatus{payment.AttemptSucceeded, payment.AttemptDeclined, payment.AttemptRejected, payment.AttemptFailed} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			s := open(t)
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			charge := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := newAttempt(o, "charge-1", base)
			mustRecordAttempt(t, s, charge, a)
			u := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: st, At: base.Add(time.Second)}
			mustComplete(t, s, charge, completion{Outcome: outcome(o.ID), Attempt: &u})

			refund := mustAcquire(t, s, newClaim("tenant-a", "refund-1", o.ID, base.Add(time.Minute)))
			ra := newAttempt(o, "refund-1", base.Add(time.Minute))
			ra.Kind = payment.AttemptRefund
			assertAttempt(t, mustRecordAttempt(t, s, refund, ra), ra)
		})
	}
}

// recordStaleLeaseIsLostAndWritesNothing checks: stale lease is lost and writes nothing.
func recordStaleLeaseIsLostAndWritesNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	stale := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
	current := mustAcquire(t, s, retryAt(stale, stale.LockedUntil.Add(time.Second)))
	released := mustAcquire(t, s, newClaim("tenant-a", "pay-2", o.ID, base))
	mustRelease(t, s, released, idempotency.StateRetryableFailure, nil)
	done := mustAcquire(t, s, newClaim("tenant-a", "pay-3", o.ID, base))
	mustComplete(t, s, done, completion{Outcome: outcome(o.ID)})

	otherTenant := store.LeaseOf(current)
	otherTenant.TenantID = "tenant-b"
	cases := []struct {
		name string
		l    store.Lease
	}{
		{"OlderToken", store.LeaseOf(stale)},
		{"NewerToken", store.Lease{TenantID: "tenant-a", KeyHash: current.KeyHash, Token: current.FencingToken + 1}},
		{"AnotherTenant", otherTenant},
		{"UnknownKey", store.Lease{TenantID: "tenant-a", KeyHash: idempotency.HashKey("nope"), Token: 1}},
		{"ReleasedKey", store.LeaseOf(released)},
		{"CompletedKey", store.LeaseOf(done)},
	}
	for i, tc := range cases {
		a := newAttempt(o, fmt.Sprintf("charge-%d", i), base)
		if _, err := s.RecordAttempt(t.Context(), tc.l, a, 1); !errors.Is(err, store.ErrLeaseLost) {
			t.Errorf("%s: RecordAttempt err = %v, want ErrLeaseLost", tc.name, err)
		}
		assertNotFound(t, tc.name+": GetAttempt", getErr(s.GetAttempt(t.Context(), a.ProviderKey)))
	}
	assertRecord(t, mustLookup(t, s, "tenant-a", current.KeyHash), current)
	assertRecord(t, mustLookup(t, s, "tenant-a", released.KeyHash), releasedAs(released, idempotency.StateRetryableFailure))
	assertRecord(t, mustLookup(t, s, "tenant-a", done.KeyHash), completedAs(done, outcome(o.ID)))
}

// acquireCallersClockDecidesNothing checks that a claim's own instants —
// what an instance whose clock runs an hour ahead, or a day behind, would
// put there — decide nothing: a live lease (on the database's clock) is not
// taken over by a claim that says it is past it, the lease and retention a
// claim gets count from the database's clock, and a lease expired on the
// database's clock is taken over by a claim that says it is not.
func acquireCallersClockDecidesNothing(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	skewed := func(r idempotency.Record, by time.Duration) store.Claim {
		c := claimOf(r)
		c.CreatedAt, c.ExpiresAt, c.LockedUntil = r.CreatedAt.Add(by), r.ExpiresAt.Add(by), r.LockedUntil.Add(by)
		return c
	}
	claim := newClaim("tenant-a", "pay-1", order.NewID(), base)
	s.at(base)
	first, ok, err := s.Store.AcquireLease(ctx, skewed(claim, -24*time.Hour))
	if err != nil || !ok {
		t.Fatalf("AcquireLease by an instance a day behind = %t, %v; want acquired", ok, err)
	}
	assertRecord(t, first, claim) // created, expiring and leased on the database's clock

	// An instance an hour ahead retries the same request one second into
	// the lease: its claim says the lease ran out long ago.
	s.at(base.Add(time.Second))
	held, ok, err := s.Store.AcquireLease(ctx, skewed(retryAt(first, base.Add(time.Second)), time.Hour))
	if err != nil || ok {
		t.Fatalf("AcquireLease by an instance an hour ahead = %t, %v; want not acquired (the lease is live)", ok, err)
	}
	assertRecord(t, held, first)
	assertRecord(t, mustLookup(t, s, "tenant-a", first.KeyHash), first)

	// Past the lease on the database's clock, an instance a day behind
	// (whose claim says the lease has a day to run) takes it over.
	at := first.LockedUntil
	s.at(at)
	got, ok, err := s.Store.AcquireLease(ctx, skewed(retryAt(first, at), -24*time.Hour))
	if err != nil || !ok {
		t.Fatalf("AcquireLease after the lease, by an instance a day behind = %t, %v; want acquired", ok, err)
	}
	assertRecord(t, got, takenOver(first, at.Add(leaseFor)))
}
