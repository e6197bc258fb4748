package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// testInbox checks the provider inbox: an event id is recorded once, in the
// transaction of its effect — a rolled-back effect leaves no record, and of
// many concurrent deliveries exactly one records it.
func testInbox(t *testing.T, open func(t *testing.T) *subject) {
	ev := payment.ProviderEvent{Source: "paysim", EventID: "evt_1", Type: payment.EventPaymentSucceeded,
		ProviderType: "charge.succeeded", ObjectID: "ch_1", IntentID: "ch_1",
		Reference: payment.Reference{OrderID: "ord_x", Key: "ord_x/pay/1"}, Amount: 4200, Currency: "USD", ReceivedAt: base}

	t.Run("RecordsOnceThenReportsDuplicate", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		for i, want := range []bool{true, false, false} {
			got, err := s.RecordInboxEvent(ctx, ev)
			if err != nil || got != want {
				t.Fatalf("delivery %d: RecordInboxEvent = %v, %v; want %v, nil", i+1, got, err, want)
			}
		}
		other := ev
		other.Source = "another-provider" // event ids are unique per source
		if got, err := s.RecordInboxEvent(ctx, other); err != nil || !got {
			t.Fatalf("same id from another source: RecordInboxEvent = %v, %v; want true, nil", got, err)
		}
	})

	t.Run("RolledBackWithItsEffect", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		stale := o.Apply(o.State, base) // version 2 ...
		stale.Version = 7               // ... but not o's next: a compare-and-set that fails
		err := s.InTx(ctx, func(tx store.Executor) error {
			if got, err := tx.RecordInboxEvent(ctx, ev); err != nil || !got {
				t.Errorf("RecordInboxEvent in tx = %v, %v; want true, nil", got, err)
			}
			return tx.CompareAndSetOrder(ctx, stale, "")
		})
		if !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("InTx = %v, want ErrVersionConflict", err)
		}
		if got, err := s.RecordInboxEvent(ctx, ev); err != nil || !got {
			t.Fatalf("after the rollback: RecordInboxEvent = %v, %v; want true (the event was not taken in)", got, err)
		}
	})

	t.Run("ConcurrentDeliveriesRecordOnce", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		var recorded atomic.Int32
		var wg sync.WaitGroup
		for range racers {
			wg.Go(func() {
				err := s.InTx(ctx, func(tx store.Executor) error {
					got, err := tx.RecordInboxEvent(ctx, ev)
					if got {
						recorded.Add(1)
					}
					return err
				})
				if err != nil && !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("InTx: %v", err)
				}
			})
		}
		wg.Wait()
		if n := recorded.Load(); n != 1 {
			t.Fatalf("%d of %d concurrent deliveries recorded the event, want exactly 1", n, racers)
		}
	})

	t.Run("KeepsAnEventWithoutTheNewMembers", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		bare := payment.ProviderEvent{Source: "paysim", EventID: "evt_bare", Type: payment.EventRefundSucceeded,
			Reference: payment.Reference{Key: "ord_x/refund"}, ReceivedAt: base}
		if got, err := s.RecordInboxEvent(ctx, bare); err != nil || !got {
			t.Fatalf("RecordInboxEvent(bare) = %v, %v; want true, nil", got, err)
		}
	})

	t.Run("RejectsAnUnknownType", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		bad := ev
		bad.Type = "charge.exploded"
		if got, err := s.RecordInboxEvent(ctx, bad); err == nil || got {
			t.Fatalf("RecordInboxEvent(unknown type) = %v, %v; want an error", got, err)
		}
	})
}
