package storetest

import (
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// testBacklog checks store.BacklogCounter: what the completer and the
// sweeper have before them, counted at a given time.
func testBacklog(t *testing.T, open func(t *testing.T) *subject) {
	s := open(t)
	bc, ok := s.Store.(store.BacklogCounter)
	if !ok {
		t.Fatalf("%T does not implement store.BacklogCounter", s)
	}
	backlog := func(at time.Time) store.WorkBacklog {
		t.Helper()
		s.at(at)
		b, err := bc.Backlog(t.Context())
		if err != nil {
			t.Fatalf("Backlog(%s): %v", at, err)
		}
		if !b.Now.Equal(at) {
			t.Errorf("Backlog(%s) counted at %s, want %s", at, b.Now, at)
		}
		b.Now = time.Time{}
		return b
	}
	if got := backlog(base); got != (store.WorkBacklog{}) {
		t.Fatalf("Backlog of an empty store = %+v, want zero", got)
	}

	client := mustCreateKeyed(t, s, "tenant-a", "client", base, false)
	mustCreateKeyed(t, s, "tenant-a", "derived", base.Add(-time.Hour), true) // never tombstoned
	mustAcquire(t, s, newClaim("tenant-a", "held", order.NewID(), base))     // leased until base+leaseFor
	lost := mustAcquire(t, s, newClaim("tenant-b", "lost", order.NewID(), base))
	mustRelease(t, s, lost, idempotency.StateUnknownOutcome, nil)
	retryable := mustAcquire(t, s, newClaim("tenant-b", "retryable", order.NewID(), base))
	mustRelease(t, s, retryable, idempotency.StateRetryableFailure, nil) // a retry's to take, not the completer's

	t.Run("WhileTheLeaseHolds", func(t *testing.T) {
		want := store.WorkBacklog{UnknownOutcomes: 1, Abandoned: 1}
		if got := backlog(base.Add(leaseFor - time.Microsecond)); got != want {
			t.Errorf("Backlog = %+v, want %+v", got, want)
		}
	})
	t.Run("PastTheLease", func(t *testing.T) {
		want := store.WorkBacklog{UnknownOutcomes: 1, Abandoned: 2}
		if got := backlog(base.Add(leaseFor)); got != want {
			t.Errorf("Backlog = %+v, want %+v", got, want)
		}
	})
	t.Run("PastRetentionTheOldestUnsweptClientKey", func(t *testing.T) {
		got := backlog(client.ExpiresAt.Add(time.Hour))
		if !got.OldestUnswept.Equal(client.ExpiresAt) {
			t.Errorf("OldestUnswept = %s, want the client key's expiry %s", got.OldestUnswept, client.ExpiresAt)
		}
		// The sweep tombstones the client key and deletes the derived one
		// and the retryable one, which never completed.
		assertSweep(t, s, client.ExpiresAt.Add(time.Hour), 100, store.SweepResult{Tombstoned: 1, Deleted: 2})
		if got := backlog(client.ExpiresAt.Add(time.Hour)); !got.OldestUnswept.IsZero() {
			t.Errorf("after a sweep OldestUnswept = %s, want zero", got.OldestUnswept)
		}
	})
}
