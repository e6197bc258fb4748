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

// testInTx checks the transaction seam: InTx commits everything fn did when
// it returns nil, nothing when it returns an error, and nothing when a
// guarded write fails — however the store sends the writes (PostgreSQL
// pipelines them with the next read or the COMMIT).
func testInTx(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("CommitsOnNil", func(t *testing.T) { inTxCommitsOnNil(t, open) })

	t.Run("RollsBackOnError", func(t *testing.T) { inTxRollsBackOnError(t, open) })

	// Phase 3 as the service writes it: complete the key, compare-and-set
	// the order, settle the attempt. Each way one guard fails, nothing of
	// the three is written.
	for _, tc := range []struct {
		name  string
		stale bool // the lease was taken over
		vBump bool // the order moved on
		read  bool // a read inside the transaction (PostgreSQL: BEGIN … COMMIT)
		want  error
	}{
		{"LeaseLostWritesNothing", true, false, false, store.ErrLeaseLost},
		{"VersionConflictWritesNothing", false, true, false, store.ErrVersionConflict},
		{"VersionConflictAfterReadWritesNothing", false, true, true, store.ErrVersionConflict},
		{"AllGuardsHoldWritesAll", false, false, false, nil},
		{"AllGuardsHoldAfterReadWritesAll", false, false, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, ctx := open(t), t.Context()
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			version := int64(1)
			if tc.vBump {
				// Another key moves the order on (a re-version, as a
				// decline does) before this request records its attempt.
				mustTransition(t, s, o.Apply(order.Received, base.Add(time.Second)))
				version = 2
			}
			r := mustAcquire(t, s, newClaim("tenant-a", "pay-1", o.ID, base))
			a := mustRecordAttemptAt(t, s, r, newAttempt(o, "charge-1", base), version)
			lease := store.LeaseOf(r)
			if tc.stale {
				r2, ok, err := s.AcquireLease(ctx, retryAt(r, r.LockedUntil))
				if err != nil || !ok {
					t.Fatalf("takeover = %v, %v", ok, err)
				}
				r = r2
			}
			before := mustGet(t, s, "tenant-a", o.ID)
			paid := o.Apply(order.Paid, base.Add(time.Second))
			upd := store.AttemptUpdate{ProviderKey: a.ProviderKey, Status: payment.AttemptSucceeded, ProviderRef: "ch_1", At: base.Add(time.Second)}
			err := s.InTx(ctx, func(tx store.Executor) error {
				if tc.read {
					if _, err := tx.GetAttempt(ctx, a.ProviderKey); err != nil {
						return err
					}
				}
				if err := tx.CompleteKey(ctx, lease, outcome(o.ID)); err != nil {
					return err
				}
				if err := tx.CompareAndSetOrder(ctx, paid, a.ProviderKey); err != nil {
					return err
				}
				return tx.SettleAttempt(ctx, upd)
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("InTx = %v, want %v", err, tc.want)
			}
			key := mustLookup(t, s, "tenant-a", r.KeyHash)
			if tc.want != nil {
				if key.State != idempotency.StateInProgress || key.FencingToken != r.FencingToken {
					t.Errorf("key = %s token %d; want untouched (in progress, token %d)", key.State, key.FencingToken, r.FencingToken)
				}
				assertOrder(t, mustGet(t, s, "tenant-a", o.ID), before)
				assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
				return
			}
			if key.State != idempotency.StateCompleted {
				t.Errorf("key = %s, want completed", key.State)
			}
			assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), settledAs(a, upd))
		})
	}

	t.Run("GuardErrorSurfacesByCommit", func(t *testing.T) { inTxGuardErrorSurfacesByCommit(t, open) })

	t.Run("CompareAndSetOrder", func(t *testing.T) { inTxCompareAndSetOrder(t, open) })
}

// inTxCommitsOnNil checks: commits on nil.
func inTxCommitsOnNil(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	rec := newRecord("tenant-a", "tx-create", o.ID, base)
	claim := claimOf(rec)
	err := s.inTxAt(ctx, rec.CreatedAt, func(tx store.Executor) error {
		held, err := tx.CreateOrder(ctx, &claim, o)
		if err != nil || held != nil {
			t.Errorf("CreateOrder in tx = %v, %v; want nil, nil", held, err)
		}
		got, err := tx.GetOrder(ctx, "tenant-a", o.ID)
		if err != nil {
			return err
		}
		assertOrder(t, got, o) // the transaction reads its own write
		return nil
	})
	if err != nil {
		t.Fatalf("InTx: %v", err)
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
	assertRecord(t, mustLookup(t, s, "tenant-a", rec.KeyHash), rec)
}

// inTxRollsBackOnError checks: rolls back on error.
func inTxRollsBackOnError(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	rec := newRecord("tenant-a", "tx-create", o.ID, base)
	boom := errors.New("boom")
	claim := claimOf(rec)
	err := s.inTxAt(ctx, rec.CreatedAt, func(tx store.Executor) error {
		if _, err := tx.CreateOrder(ctx, &claim, o); err != nil {
			return err
		}
		if _, err := tx.GetOrder(ctx, "tenant-a", o.ID); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	assertNotFound(t, "GetOrder after rollback", getErr(s.GetOrder(ctx, "tenant-a", o.ID)))
	assertNotFound(t, "LookupKey after rollback", getErr(s.LookupKey(ctx, "tenant-a", rec.KeyHash)))
}

// inTxGuardErrorSurfacesByCommit checks: guard error surfaces by commit.
func inTxGuardErrorSurfacesByCommit(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	stale := o.Apply(order.Paid, base) // version 2 …
	stale.Version = 7                  // … claimed from version 6: no such version
	var fnErr error
	err := s.InTx(ctx, func(tx store.Executor) error {
		fnErr = tx.CompareAndSetOrder(ctx, stale, "")
		return fnErr
	})
	if !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("InTx = %v (fn saw %v), want ErrVersionConflict from the call or the commit", err, fnErr)
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
}

// inTxCompareAndSetOrder checks: compare and set order.
func inTxCompareAndSetOrder(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	r := mustAcquire(t, s, newClaim("tenant-a", "ship-1", o.ID, base))
	mustRecordAttempt(t, s, r, newAttempt(o, "open-1", base))
	cancelled := o.Apply(order.Cancelled, base.Add(time.Second))
	if err := s.CompareAndSetOrder(ctx, cancelled, ""); !errors.Is(err, store.ErrAttemptInFlight) {
		t.Fatalf("CAS beside an open attempt = %v, want ErrAttemptInFlight", err)
	}
	if err := s.CompareAndSetOrder(ctx, cancelled, "open-1"); err != nil {
		t.Fatalf("CAS owning the open attempt = %v", err)
	}
	if err := s.CompareAndSetOrder(ctx, cancelled, "open-1"); !errors.Is(err, store.ErrVersionConflict) {
		t.Fatalf("the same CAS again = %v, want ErrVersionConflict", err)
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), cancelled)
}
