package storetest

import (
	"context"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// completion is phase 3 of a leased request as the service composes it in
// one transaction: complete the key with Outcome, compare-and-set the order
// to Next (if set) and append its event, settle Attempt (if set).
type completion struct {
	Outcome idempotency.Record
	Next    *order.Order
	Attempt *store.AttemptUpdate
}

// complete runs c in one transaction through s.InTx, as the service does.
func complete(ctx context.Context, s *subject, l store.Lease, c completion) error {
	return s.InTx(ctx, func(tx store.Executor) error {
		if err := tx.CompleteKey(ctx, l, c.Outcome); err != nil {
			return err
		}
		if c.Next != nil {
			own := ""
			if c.Attempt != nil {
				own = c.Attempt.ProviderKey
			}
			if err := tx.CompareAndSetOrder(ctx, *c.Next, own); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, event.For(*c.Next, c.Next.CreatedAt)); err != nil {
				return err
			}
		}
		if c.Attempt != nil {
			return tx.SettleAttempt(ctx, *c.Attempt)
		}
		return nil
	})
}

// release ends the lease without an outcome and applies u (if set), in one
// transaction, as the service does.
func release(ctx context.Context, s *subject, l store.Lease, to idempotency.State, u *store.AttemptUpdate) error {
	return s.InTx(ctx, func(tx store.Executor) error {
		if err := tx.ReleaseKey(ctx, l, to); err != nil {
			return err
		}
		if u != nil {
			return tx.SettleAttempt(ctx, *u)
		}
		return nil
	})
}
