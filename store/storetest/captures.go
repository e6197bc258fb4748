package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/store"
)

// testCaptures checks the authorizations of capture at fulfilment (issue
// 16): recorded once with nothing captured, moved authorized → captured
// or voided by a compare-and-set (never back, never twice), the capture
// setting the refund totals' captured amount, inside InTx as well, and the
// near-expiry flag set once, soonest first, bounded by its limit.
func testCaptures(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("AuthorizedThenCaptured", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		cs, ok := s.Store.(store.CaptureStore)
		if !ok {
			t.Fatal("the store is not a store.CaptureStore")
		}
		ctx := t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		if _, err := cs.GetAuthorization(ctx, "tenant-a", o.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("GetAuthorization before any: err = %v, want ErrNotFound", err)
		}
		if err := cs.SetAuthorization(ctx, "tenant-a", o.ID, store.AuthCaptured, base); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("SetAuthorization without one: err = %v, want ErrNotFound", err)
		}
		before := base.Add(7 * 24 * time.Hour)
		a := store.Authorization{TenantID: "tenant-a", OrderID: o.ID, ChargeKey: o.ID + "/pay/1", IntentID: "pi_1",
			Amount: o.Amount, Currency: o.Currency, CaptureBefore: before, CreatedAt: base}
		err := s.InTx(ctx, func(tx store.Executor) error {
			ce, ok := tx.(store.CaptureExecutor)
			if !ok {
				t.Fatal("the tx is not a store.CaptureExecutor")
			}
			return ce.PutAuthorization(ctx, a)
		})
		if err != nil {
			t.Fatalf("PutAuthorization: %v", err)
		}
		// A second put keeps the first.
		b := a
		b.IntentID = "pi_2"
		if err := cs.PutAuthorization(ctx, b); err != nil {
			t.Fatalf("PutAuthorization again: %v", err)
		}
		got, err := cs.GetAuthorization(ctx, "tenant-a", o.ID)
		if err != nil {
			t.Fatalf("GetAuthorization: %v", err)
		}
		if got.Status != store.AuthAuthorized || got.IntentID != "pi_1" || got.Amount != o.Amount || !got.CaptureBefore.Equal(before) ||
			got.ChargeKey != a.ChargeKey || !got.FlaggedAt.IsZero() {
			t.Fatalf("GetAuthorization = %+v", got)
		}
		if _, err := cs.GetAuthorization(ctx, "tenant-b", o.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's GetAuthorization: err = %v, want ErrNotFound", err)
		}
		rs := s.Store.(store.RefundStore)
		if tot, err := rs.RefundTotals(ctx, "tenant-a", o.ID); err != nil || tot.Captured != 0 {
			t.Fatalf("totals while authorized = %+v, %v; want nothing captured", tot, err)
		}
		err = s.InTx(ctx, func(tx store.Executor) error {
			return tx.(store.CaptureExecutor).SetAuthorization(ctx, "tenant-a", o.ID, store.AuthCaptured, base.Add(time.Hour))
		})
		if err != nil {
			t.Fatalf("SetAuthorization captured: %v", err)
		}
		if tot, err := rs.RefundTotals(ctx, "tenant-a", o.ID); err != nil || tot.Captured != o.Amount {
			t.Fatalf("totals after capture = %+v, %v; want %d captured", tot, err, o.Amount)
		}
		for _, to := range []store.AuthorizationStatus{store.AuthCaptured, store.AuthVoided} {
			if err := cs.SetAuthorization(ctx, "tenant-a", o.ID, to, base); !errors.Is(err, store.ErrVersionConflict) {
				t.Fatalf("SetAuthorization %s after capture: err = %v, want ErrVersionConflict", to, err)
			}
		}
		if got, _ := cs.GetAuthorization(ctx, "tenant-a", o.ID); got.Status != store.AuthCaptured {
			t.Fatalf("status = %s, want captured", got.Status)
		}
	})
	t.Run("VoidedCapturesNothing", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		cs := s.Store.(store.CaptureStore)
		ctx := t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		if err := cs.PutAuthorization(ctx, store.Authorization{TenantID: "tenant-a", OrderID: o.ID, ChargeKey: o.ID + "/pay/1",
			IntentID: "pi_1", Amount: o.Amount, Currency: o.Currency, CreatedAt: base}); err != nil {
			t.Fatalf("PutAuthorization: %v", err)
		}
		if err := cs.SetAuthorization(ctx, "tenant-a", o.ID, store.AuthVoided, base); err != nil {
			t.Fatalf("SetAuthorization voided: %v", err)
		}
		if err := cs.SetAuthorization(ctx, "tenant-a", o.ID, store.AuthCaptured, base); !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("capture after void: err = %v, want ErrVersionConflict", err)
		}
		if tot, _ := s.Store.(store.RefundStore).RefundTotals(ctx, "tenant-a", o.ID); tot.Captured != 0 {
			t.Fatalf("captured after void = %d, want 0", tot.Captured)
		}
		if got, _ := cs.GetAuthorization(ctx, "tenant-a", o.ID); got.Status != store.AuthVoided || !got.CaptureBefore.IsZero() {
			t.Fatalf("GetAuthorization = %+v, want voided without capture_before", got)
		}
	})
	t.Run("FlagExpiring", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		cs := s.Store.(store.CaptureStore)
		ctx := t.Context()
		var ids []string
		for i := range 4 {
			o := newOrder(t, "tenant-a", "cust-1", base)
			mustCreate(t, s, nil, o)
			ids = append(ids, o.ID)
			// Holds ending in 4, 3, 2 and 1 hours.
			if err := cs.PutAuthorization(ctx, store.Authorization{TenantID: "tenant-a", OrderID: o.ID, ChargeKey: o.ID + "/pay/1",
				IntentID: "pi_x", Amount: o.Amount, Currency: o.Currency, CaptureBefore: base.Add(time.Duration(4-i) * time.Hour),
				CreatedAt: base}); err != nil {
				t.Fatalf("PutAuthorization: %v", err)
			}
		}
		if err := cs.SetAuthorization(ctx, "tenant-a", ids[3], store.AuthCaptured, base); err != nil {
			t.Fatalf("SetAuthorization: %v", err)
		}
		// Within 3.5 h: ids[1] (3 h) and ids[2] (2 h); ids[3] is captured.
		got, err := cs.FlagExpiringAuthorizations(ctx, base.Add(3*time.Hour+30*time.Minute), base, 1)
		if err != nil || len(got) != 1 || got[0].OrderID != ids[2] || !got[0].FlaggedAt.Equal(base) {
			t.Fatalf("first flag = %+v, %v; want %s alone (soonest, limit 1)", got, err, ids[2])
		}
		got, err = cs.FlagExpiringAuthorizations(ctx, base.Add(3*time.Hour+30*time.Minute), base, 10)
		if err != nil || len(got) != 1 || got[0].OrderID != ids[1] {
			t.Fatalf("second flag = %+v, %v; want %s alone", got, err, ids[1])
		}
		if got, err = cs.FlagExpiringAuthorizations(ctx, base.Add(3*time.Hour+30*time.Minute), base, 10); err != nil || len(got) != 0 {
			t.Fatalf("third flag = %+v, %v; want none (flagged once)", got, err)
		}
	})
}
