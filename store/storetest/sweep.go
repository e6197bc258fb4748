package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// tombstoneFor is how long the suite's sweeps keep a tombstone.
const tombstoneFor = 7 * 24 * time.Hour

func testSweep(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("TombstonesCompletedClientKeysPastRetention", func(t *testing.T) { sweepTombstonesCompletedClientKeysPastRetention(t, open) })

	t.Run("DeletesTombstonesPastTheirWindow", func(t *testing.T) { sweepDeletesTombstonesPastTheirWindow(t, open) })

	t.Run("DeletesExpiredDerivedKeys", func(t *testing.T) { sweepDeletesExpiredDerivedKeys(t, open) })

	t.Run("DeletesExpiredRetryableFailures", func(t *testing.T) { sweepDeletesExpiredRetryableFailures(t, open) })

	t.Run("NeverSweepsLeasesOrUnknownOutcomes", func(t *testing.T) { sweepNeverSweepsLeasesOrUnknownOutcomes(t, open) })

	t.Run("LimitBoundsEachStep", func(t *testing.T) { sweepLimitBoundsEachStep(t, open) })
}

// mustCreateKeyed creates an order of tenant at with a (derived or client)
// key and returns the key's record.
func mustCreateKeyed(t *testing.T, s *subject, tenant, key string, at time.Time, derived bool) idempotency.Record {
	t.Helper()
	o := newOrder(t, tenant, "cust-1", at)
	r := newRecord(tenant, key, o.ID, at)
	if derived {
		r = asDerived(r)
	}
	mustCreate(t, s, &r, o)
	return r
}

// tombstoneOf returns the completed record r as a Sweep with tombstoneFor
// leaves it: expired, its outcome dropped, kept until ExpiresAt+tombstoneFor.
func tombstoneOf(r idempotency.Record) idempotency.Record {
	r.State, r.TombstoneUntil = idempotency.StateExpired, r.ExpiresAt.Add(tombstoneFor)
	r.ErrorCode, r.ErrorDetail = "", ""
	return r
}

// assertSweep sweeps at now with tombstoneFor and limit and checks what it
// did.
func assertSweep(t *testing.T, s *subject, now time.Time, limit int, want store.SweepResult) {
	t.Helper()
	got, err := s.Sweep(t.Context(), now, tombstoneFor, limit)
	if err != nil {
		t.Fatalf("Sweep(%s): %v", now, err)
	}
	if got != want {
		t.Errorf("Sweep(%s, limit %d) = %+v, want %+v", now, limit, got, want)
	}
}

// sweepTombstonesCompletedClientKeysPastRetention checks: tombstones completed client keys past retention.
func sweepTombstonesCompletedClientKeysPastRetention(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	now := base.Add(idempotency.DefaultKeyTTL + time.Hour)
	old := mustCreateKeyed(t, s, "tenant-a", "old", base, false)
	atNow := mustCreateKeyed(t, s, "tenant-b", "at-now", now.Add(-idempotency.DefaultKeyTTL), false)
	live := mustCreateKeyed(t, s, "tenant-a", "live", now.Add(-idempotency.DefaultKeyTTL+time.Microsecond), false)
	leased := mustAcquire(t, s, newClaim("tenant-a", "declined", order.NewID(), base))
	declined := idempotency.Record{ResourceID: leased.ResourceID, ErrorCode: apperr.EDeclined, ErrorDetail: "card declined"}
	mustComplete(t, s, leased, completion{Outcome: declined})

	assertSweep(t, s, now, 100, store.SweepResult{Tombstoned: 3})
	for _, r := range []idempotency.Record{old, atNow, completedAs(leased, declined)} {
		got := mustLookup(t, s, r.TenantID, r.KeyHash)
		// The outcome is dropped; the fingerprint and resource stay, so a
		// late retry gets a clear "expired" answer.
		assertRecord(t, got, tombstoneOf(r))
	}
	assertRecord(t, mustLookup(t, s, "tenant-a", live.KeyHash), live)
	// The orders are not the sweeper's business.
	mustGet(t, s, "tenant-a", old.ResourceID)
}

// sweepDeletesTombstonesPastTheirWindow checks: deletes tombstones past their window.
func sweepDeletesTombstonesPastTheirWindow(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	r := mustCreateKeyed(t, s, "tenant-a", "key-1", base, false)
	const window = 2 * time.Hour
	sweep := func(now time.Time, want store.SweepResult) {
		t.Helper()
		got, err := s.Sweep(ctx, now, window, 10)
		if err != nil {
			t.Fatalf("Sweep(%s): %v", now, err)
		}
		if got != want {
			t.Errorf("Sweep(%s) = %+v, want %+v", now, got, want)
		}
	}
	sweep(r.ExpiresAt, store.SweepResult{Tombstoned: 1})
	tomb := tombstoneOf(r)
	tomb.TombstoneUntil = r.ExpiresAt.Add(window)
	assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), tomb)

	sweep(tomb.TombstoneUntil.Add(-time.Microsecond), store.SweepResult{})
	assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), tomb)

	sweep(tomb.TombstoneUntil, store.SweepResult{Deleted: 1})
	assertNotFound(t, "LookupKey of a swept tombstone", getErr(s.LookupKey(ctx, "tenant-a", r.KeyHash)))
	mustGet(t, s, "tenant-a", r.ResourceID)
}

// sweepDeletesExpiredDerivedKeys checks: deletes expired derived keys.
func sweepDeletesExpiredDerivedKeys(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	now := base.Add(idempotency.DefaultDerivedKeyTTL)
	created := mustCreateKeyed(t, s, "tenant-a", "created", base, true)
	leased := mustAcquire(t, s, asDerived(newClaim("tenant-a", "leased", order.NewID(), base)))
	mustComplete(t, s, leased, completion{Outcome: outcome(leased.ResourceID)})
	live := mustCreateKeyed(t, s, "tenant-a", "live", base.Add(time.Minute), true)

	// Deleted, not tombstoned: a derived key has no client to tell.
	assertSweep(t, s, now, 100, store.SweepResult{Deleted: 2})
	for _, r := range []idempotency.Record{created, leased} {
		assertNotFound(t, "LookupKey of an expired derived key", getErr(s.LookupKey(ctx, "tenant-a", r.KeyHash)))
	}
	assertRecord(t, mustLookup(t, s, "tenant-a", live.KeyHash), live)
}

// sweepDeletesExpiredRetryableFailures checks: deletes expired retryable failures.
func sweepDeletesExpiredRetryableFailures(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	now := base.Add(idempotency.DefaultKeyTTL + time.Hour)
	old := mustAcquire(t, s, newClaim("tenant-a", "old", order.NewID(), base))
	mustRelease(t, s, old, idempotency.StateRetryableFailure, nil)
	live := mustAcquire(t, s, newClaim("tenant-a", "live", order.NewID(), base.Add(2*time.Hour)))
	mustRelease(t, s, live, idempotency.StateRetryableFailure, nil)

	assertSweep(t, s, now, 100, store.SweepResult{Deleted: 1})
	assertNotFound(t, "LookupKey of an expired retryable failure", getErr(s.LookupKey(ctx, "tenant-a", old.KeyHash)))
	assertRecord(t, mustLookup(t, s, "tenant-a", live.KeyHash), releasedAs(live, idempotency.StateRetryableFailure))
}

// sweepNeverSweepsLeasesOrUnknownOutcomes checks: never sweeps leases or unknown outcomes.
func sweepNeverSweepsLeasesOrUnknownOutcomes(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	inProgress := mustAcquire(t, s, newClaim("tenant-a", "in-progress", order.NewID(), base))
	derived := mustAcquire(t, s, asDerived(newClaim("tenant-a", "derived", order.NewID(), base)))
	unknown := mustAcquire(t, s, newClaim("tenant-a", "unknown", order.NewID(), base))
	mustRelease(t, s, unknown, idempotency.StateUnknownOutcome, nil)
	unknownDerived := mustAcquire(t, s, asDerived(newClaim("tenant-a", "unknown-derived", order.NewID(), base)))
	mustRelease(t, s, unknownDerived, idempotency.StateUnknownOutcome, nil)

	assertSweep(t, s, base.Add(10*idempotency.DefaultKeyTTL), 100, store.SweepResult{})
	for _, r := range []idempotency.Record{
		inProgress, derived,
		releasedAs(unknown, idempotency.StateUnknownOutcome),
		releasedAs(unknownDerived, idempotency.StateUnknownOutcome),
	} {
		assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), r)
	}
}

// sweepLimitBoundsEachStep checks: limit bounds each step.
func sweepLimitBoundsEachStep(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s := open(t)
	var client, derived []idempotency.Record
	for i := range 5 {
		client = append(client, mustCreateKeyed(t, s, "tenant-a", fmt.Sprintf("client-%d", i), base, false))
	}
	for i := range 3 {
		derived = append(derived, mustCreateKeyed(t, s, "tenant-a", fmt.Sprintf("derived-%d", i), base, true))
	}
	now := base.Add(idempotency.DefaultKeyTTL + time.Hour)
	for _, want := range []store.SweepResult{{Tombstoned: 2, Deleted: 2}, {Tombstoned: 2, Deleted: 1}, {Tombstoned: 1}, {}} {
		assertSweep(t, s, now, 2, want)
	}
	for _, r := range client {
		assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), tombstoneOf(r))
	}
	for _, r := range derived {
		assertNotFound(t, "LookupKey of an expired derived key", getErr(s.LookupKey(t.Context(), "tenant-a", r.KeyHash)))
	}
}
