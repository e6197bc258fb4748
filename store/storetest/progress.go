package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// testAttemptProgress checks RecordAttemptProgress (issue 15): the provider
// object id and the time the provider key was first sent are recorded on
// the attempt once each, only by the lease whose key holds the attempt with
// its current fencing token.
func testAttemptProgress(t *testing.T, open func(t *testing.T) *subject) {
	setup := func(t *testing.T, s *subject) (store.Lease, payment.Attempt) {
		t.Helper()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		r := mustAcquire(t, s, newClaim("tenant-a", "pay-"+o.ID, o.ID, base))
		a := mustRecordAttempt(t, s, r, newAttempt(o, o.ID+"/pay/1", base))
		return store.LeaseOf(r), a
	}

	t.Run("RecordsEachOnce", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		lease, a := setup(t, s)
		sent := base.Add(time.Second)
		got, err := s.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, SentAt: sent})
		if err != nil || got.IntentID != "" || !got.KeySentAt.Equal(sent) {
			t.Fatalf("RecordAttemptProgress(sent) = %+v, %v; want KeySentAt %s, no intent", got, err, sent)
		}
		got, err = s.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_1",
			SentAt: sent.Add(time.Hour)})
		if err != nil || got.IntentID != "pi_1" || !got.KeySentAt.Equal(sent) {
			t.Fatalf("RecordAttemptProgress(pi_1) = %+v, %v; want pi_1 and the first KeySentAt %s", got, err, sent)
		}
		if _, err := s.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_1"}); err != nil {
			t.Fatalf("recording the same intent again: %v", err)
		}
		if _, err := s.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_2"}); !errors.Is(err, store.ErrIntentConflict) {
			t.Fatalf("recording another intent: %v, want ErrIntentConflict", err)
		}
		want := a
		want.IntentID, want.KeySentAt = "pi_1", sent
		assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), want)
	})

	t.Run("FencedByTheLease", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		stale, a := setup(t, s)
		// The lease runs out and the completer takes the key over: the
		// token grows, the attempt stays the key's.
		now := base.Add(time.Hour)
		taken, err := s.TakeOverAbandoned(ctx, takeOver{Now: now, LeaseUntil: now.Add(leaseFor), Limit: 10})
		if err != nil || len(taken) != 1 {
			t.Fatalf("TakeOverAbandoned = %v, %v; want the key", taken, err)
		}
		if _, err := s.RecordAttemptProgress(ctx, stale, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_stale"}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("stale lease: %v, want ErrLeaseLost", err)
		}
		got, err := s.RecordAttemptProgress(ctx, store.LeaseOf(taken[0]), store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_new"})
		if err != nil || got.IntentID != "pi_new" {
			t.Fatalf("new lease: %+v, %v; want pi_new", got, err)
		}
		// A lease whose key holds another (or no) attempt cannot write it.
		o := newOrder(t, "tenant-a", "cust-2", base)
		mustCreate(t, s, nil, o)
		other := mustAcquire(t, s, newClaim("tenant-a", "other-"+o.ID, o.ID, now))
		if _, err := s.RecordAttemptProgress(ctx, store.LeaseOf(other), store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_x"}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("a lease of another key: %v, want ErrLeaseLost", err)
		}
		if _, err := s.RecordAttemptProgress(ctx, store.LeaseOf(other), store.AttemptProgress{ProviderKey: order.NewID(), IntentID: "pi_x"}); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("an unknown attempt: %v, want ErrLeaseLost", err)
		}
		if got := mustGetAttempt(t, s, a.ProviderKey); got.IntentID != "pi_new" {
			t.Fatalf("attempt intent = %q, want pi_new", got.IntentID)
		}
	})
	t.Run("ByIntent", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		lease, a := setup(t, s)
		if _, err := s.GetAttemptByIntent(ctx, "pi_by_intent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetAttemptByIntent before the intent is recorded: %v, want ErrNotFound", err)
		}
		if _, err := s.GetAttemptByIntent(ctx, ""); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetAttemptByIntent(\"\"): %v, want ErrNotFound", err)
		}
		if _, err := s.RecordAttemptProgress(ctx, lease, store.AttemptProgress{ProviderKey: a.ProviderKey, IntentID: "pi_by_intent"}); err != nil {
			t.Fatalf("RecordAttemptProgress: %v", err)
		}
		want := a
		want.IntentID = "pi_by_intent"
		got, err := s.GetAttemptByIntent(ctx, "pi_by_intent")
		if err != nil {
			t.Fatalf("GetAttemptByIntent: %v", err)
		}
		assertAttempt(t, got, want)
		// Inside a transaction, as the inbox reads it.
		err = s.InTx(ctx, func(tx store.Executor) error {
			got, err := tx.GetAttemptByIntent(ctx, "pi_by_intent")
			if err == nil && got.ProviderKey != a.ProviderKey {
				t.Errorf("GetAttemptByIntent in a transaction = %q, want %q", got.ProviderKey, a.ProviderKey)
			}
			return err
		})
		if err != nil {
			t.Fatalf("InTx: %v", err)
		}
		if _, err := s.GetAttemptByIntent(ctx, "pi_other"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetAttemptByIntent(another intent): %v, want ErrNotFound", err)
		}
	})
}
