package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// concurrentCreatesWhileKeyForgottenNeverAnswerNotFound checks: creates
// racing a leased request on the same Idempotency-Key that acquires the key
// and forgets it (ForgetKey: its order did not exist) never answer
// ErrNotFound. Each create claims the key, finds it held, or at worst
// answers ErrUnavailable (retryable); at most one claims it per key, and
// that create's order and completed key are stored. A create whose claim
// lost to the leased request's key and which read the holder after the
// ForgetKey used to answer ErrNotFound (an HTTP 500).
func concurrentCreatesWhileKeyForgottenNeverAnswerNotFound(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	const rounds, creates = 30, 4
	const tenant = "tenant-forgotten"
	unavailable := 0
	for round := range rounds {
		key := fmt.Sprintf("forgotten-%d", round)
		hash := idempotency.HashKey(key)
		lease := newClaim(tenant, key, "ord_missing", base)
		orders := make([]order.Order, creates)
		recs := make([]idempotency.Record, creates)
		for i := range creates {
			orders[i] = newOrder(t, tenant, fmt.Sprintf("cust-%d", i), base)
			recs[i] = newRecord(tenant, key, orders[i].ID, base)
		}
		out := race(creates+1, func(i int) (*store.Holder, error) {
			if i < creates {
				return s.CreateOrder(ctx, &recs[i], orders[i])
			}
			r, ok, err := s.AcquireLease(ctx, lease)
			if err != nil || !ok {
				return nil, err
			}
			return nil, s.ForgetKey(ctx, store.LeaseOf(r))
		})
		if err := out[creates].err; err != nil && !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("round %d: the leased request: %v", round, err)
		}
		winner := -1
		for i, o := range out[:creates] {
			switch {
			case errors.Is(o.err, store.ErrNotFound):
				t.Fatalf("round %d: create %d answered ErrNotFound (%v): a key claimed by nobody and held by nobody must be claimed again", round, i, o.err)
			case errors.Is(o.err, store.ErrUnavailable):
				unavailable++
			case o.err != nil:
				t.Fatalf("round %d: create %d: %v", round, i, o.err)
			case o.held == nil:
				if winner >= 0 {
					t.Fatalf("round %d: creates %d and %d both claimed the key", round, winner, i)
				}
				winner = i
			case o.held.KeyHash != hash:
				t.Fatalf("round %d: create %d: holder of another key %+v", round, i, o.held.Record)
			}
		}
		if winner < 0 {
			continue
		}
		got, err := s.LookupKey(ctx, tenant, hash)
		if err != nil || got.ResourceID != orders[winner].ID || got.State != idempotency.StateCompleted {
			t.Fatalf("round %d: LookupKey = (%+v, %v), want the winner's completed key", round, got, err)
		}
		if o, err := s.GetOrder(ctx, tenant, orders[winner].ID); err != nil || o.ID != orders[winner].ID {
			t.Fatalf("round %d: GetOrder(winner) = (%v, %v)", round, o.ID, err)
		}
		for i, o := range out[:creates] {
			if i != winner && o.err == nil && o.held.State == idempotency.StateCompleted && o.held.ResourceID != orders[winner].ID {
				t.Errorf("round %d: create %d replayed %s, want the winner's %s", round, i, o.held.ResourceID, orders[winner].ID)
			}
		}
	}
	t.Logf("%d rounds, %d creates each: %d answered ErrUnavailable", rounds, creates, unavailable)
}
