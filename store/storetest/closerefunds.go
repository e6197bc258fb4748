package storetest

import (
	"testing"

	"github.com/orderly/orderly/store"
)

// testCloseRefunds checks store.RefundCloser (issue 16): a cancel from PAID
// of an order with no refund totals creates them with captured = the
// order's amount and closes them (reserved = refunded = captured),
// answering the whole amount; closing again answers 0 and changes nothing.
func testCloseRefunds(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("ClosesOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		ctx := t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		closeIn := func() (int64, store.RefundTotals, error) {
			var amount int64
			var tot store.RefundTotals
			err := s.InTx(ctx, func(tx store.Executor) error {
				rc, ok := tx.(store.RefundCloser)
				if !ok {
					t.Fatal("the tx is not a store.RefundCloser")
				}
				var err error
				amount, tot, err = rc.CloseRefunds(ctx, "tenant-a", o.ID, o.ID+"/refund", nil)
				return err
			})
			return amount, tot, err
		}
		want := store.RefundTotals{Captured: o.Amount, Reserved: o.Amount, Refunded: o.Amount}
		if amount, tot, err := closeIn(); err != nil || amount != o.Amount || tot != want {
			t.Fatalf("CloseRefunds = %d, %+v, %v; want %d, %+v", amount, tot, err, o.Amount, want)
		}
		if amount, tot, err := closeIn(); err != nil || amount != 0 || tot != want {
			t.Fatalf("CloseRefunds again = %d, %+v, %v; want 0, %+v", amount, tot, err, want)
		}
		if tot, err := s.Store.(store.RefundStore).RefundTotals(ctx, "tenant-a", o.ID); err != nil || tot != want {
			t.Fatalf("RefundTotals = %+v, %v; want %+v", tot, err, want)
		}
	})
}
