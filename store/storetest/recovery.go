package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// testRecovery checks what the completer relies on beyond TakeOverAbandoned's
// basic contract: fairness across kinds, per-key backoff, the backlog, the
// attempts parked for a person, and ForgetKey.
func testRecovery(t *testing.T, open func(t *testing.T) *subject) {
	now := base.Add(time.Hour)
	take := func(t *testing.T, s *subject, at time.Time, limit int, backoff, maxBackoff time.Duration) []idempotency.Record {
		t.Helper()
		got, err := s.TakeOverAbandoned(t.Context(), takeOver{Now: at, LeaseUntil: at.Add(leaseFor), Limit: limit,
			Backoff: backoff, MaxBackoff: maxBackoff})
		if err != nil {
			t.Fatalf("TakeOverAbandoned at %s: %v", at, err)
		}
		return got
	}

	t.Run("OldestDueFirstAcrossKinds", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// The crashed request has been due since base+30s; the unknown
		// outcome, never asked about, since its creation at base+1m.
		crashed := mustAcquire(t, s, newClaim("tenant-a", "crashed", order.NewID(), base))
		unknown := mustAcquire(t, s, newClaim("tenant-a", "unknown", order.NewID(), base.Add(time.Minute)))
		mustRelease(t, s, unknown, idempotency.StateUnknownOutcome, nil)
		got := take(t, s, now, 1, 0, 0)
		if len(got) != 1 || got[0].KeyHash != crashed.KeyHash {
			t.Fatalf("took %v, want the crashed request first (due longest)", got)
		}
		if got = take(t, s, now, 1, 0, 0); len(got) != 1 || got[0].KeyHash != unknown.KeyHash {
			t.Fatalf("took %v, want the unknown outcome next", got)
		}
	})

	t.Run("UnknownOutcomeBacksOffPerKey", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		const backoff, maxBackoff = 10 * time.Second, 15 * time.Second
		r := mustAcquire(t, s, newClaim("tenant-a", "unknown", order.NewID(), base))
		mustRelease(t, s, r, idempotency.StateUnknownOutcome, nil)

		at := now
		for i, wait := range []time.Duration{backoff, 2 * backoff, maxBackoff} {
			got := take(t, s, at, 1, backoff, maxBackoff)
			if len(got) != 1 || got[0].KeyHash != r.KeyHash {
				t.Fatalf("takeover %d at %s: took %v, want the key", i, at, got)
			}
			mustRelease(t, s, got[0], idempotency.StateUnknownOutcome, nil)
			if wait > maxBackoff {
				wait = maxBackoff
			}
			b, err := s.AbandonedBacklog(t.Context(), at)
			if err != nil || b.UnknownDeferred != 1 || b.UnknownDue != 0 {
				t.Fatalf("backlog after takeover %d = %+v, %v; want 1 deferred", i, b, err)
			}
			// Still backing off just before; due again at the end.
			if got := take(t, s, at.Add(wait-time.Microsecond), 10, backoff, maxBackoff); len(got) != 0 {
				t.Fatalf("takeover %d: the key was taken again %s after, before its backoff of %s", i, wait-time.Microsecond, wait)
			}
			at = at.Add(wait)
		}
	})

	t.Run("BacklogCountsExpiredLeasesAndParkedAttempts", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		live := mustAcquire(t, s, newClaim("tenant-a", "live", o.ID, now))
		crashed := mustAcquire(t, s, newClaim("tenant-a", "crashed", o.ID, base))
		a := mustRecordAttempt(t, s, crashed, newAttempt(o, "charge-1", base))
		b, err := s.AbandonedBacklog(ctx, now)
		if err != nil || b.ExpiredLeases != 1 || b.UnknownDue+b.UnknownDeferred+b.NeedsAttention != 0 ||
			!sameTime(b.OldestDue, crashed.LockedUntil) {
			t.Fatalf("backlog = %+v, %v; want 1 expired lease due since %s", b, err, crashed.LockedUntil)
		}
		_ = live
		parked := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptNeedsAttention, At: now}
		mustRelease(t, s, crashed, idempotency.StateNeedsAttention, &parked)
		if b, err = s.AbandonedBacklog(ctx, now); err != nil || b.ExpiredLeases != 0 || b.NeedsAttention != 1 || !b.OldestDue.IsZero() {
			t.Fatalf("backlog = %+v, %v; want 1 attempt needing attention and nothing due", b, err)
		}
		if got := take(t, s, now.Add(time.Hour), 10, 0, 0); len(got) != 1 || got[0].KeyHash != live.KeyHash {
			t.Fatalf("took %v, want only the (now expired) live key: a parked key is never taken over", got)
		}
		list, err := s.AttemptsNeedingAttention(ctx, "tenant-a", 10)
		if err != nil || len(list) != 1 {
			t.Fatalf("AttemptsNeedingAttention = %v, %v; want the parked attempt", list, err)
		}
		assertAttempt(t, list[0], settledAs(a, parked))
		if list, err = s.AttemptsNeedingAttention(ctx, "tenant-b", 10); err != nil || len(list) != 0 {
			t.Fatalf("another tenant's AttemptsNeedingAttention = %v, %v; want none", list, err)
		}
		// A parked attempt is open: no other attempt on its order, and no
		// transition, may overlap it.
		next := o.Apply(order.Cancelled, now)
		if err := s.CompareAndSetOrder(ctx, next, ""); !errors.Is(err, store.ErrAttemptInFlight) {
			t.Fatalf("CompareAndSetOrder beside a parked attempt: %v, want ErrAttemptInFlight", err)
		}
	})

	t.Run("ForgetKey", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		r := mustAcquire(t, s, newClaim("tenant-a", "missing-order", order.NewID(), base))
		stale := store.LeaseOf(r)
		stale.Token++
		if err := s.ForgetKey(ctx, stale); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("ForgetKey with a stale token: %v, want ErrLeaseLost", err)
		}
		if err := s.ForgetKey(ctx, store.LeaseOf(r)); err != nil {
			t.Fatalf("ForgetKey: %v", err)
		}
		assertNotFound(t, "forgotten key", getErr(s.LookupKey(ctx, "tenant-a", r.KeyHash)))
		// The key is free again, for any request.
		mustAcquire(t, s, newClaim("tenant-a", "missing-order", o.ID, base))

		// A key that recorded an attempt is never forgotten.
		withAttempt := mustAcquire(t, s, newClaim("tenant-a", "charged", o.ID, base))
		mustRecordAttempt(t, s, withAttempt, newAttempt(o, "charge-x", base))
		if err := s.ForgetKey(ctx, store.LeaseOf(withAttempt)); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("ForgetKey of a key with an attempt: %v, want ErrLeaseLost", err)
		}
		mustLookup(t, s, "tenant-a", withAttempt.KeyHash)
	})
}
