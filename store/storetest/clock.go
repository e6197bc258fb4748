package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// subject is the store under test with the database clock the suite moves.
// The suite states each case as "at instant T, the caller does X": subject's
// methods of that shape set the database's clock to T, then call the store
// with what a caller passes — durations, never instants. The claim it
// passes carries no CreatedAt, ExpiresAt or LockedUntil at all, so a store
// that read the caller's clock instead of its own would store zeros and fail
// the suite's record comparisons.
type subject struct {
	store.Store
	clk *testclock.Clock
}

// at sets the database's clock to t.
func (s *subject) at(t time.Time) { s.clk.Set(t) }

// claimOf returns the store.Claim of the record r a caller wants stored:
// r's identity, kept ExpiresAt−CreatedAt and, when in progress, leased
// LockedUntil−CreatedAt, with r's instants removed.
func claimOf(r idempotency.Record) store.Claim {
	c := store.Claim{Record: r, TTL: r.ExpiresAt.Sub(r.CreatedAt)}
	if !r.LockedUntil.IsZero() {
		c.Lease = r.LockedUntil.Sub(r.CreatedAt)
	}
	c.CreatedAt, c.ExpiresAt, c.LockedUntil = time.Time{}, time.Time{}, time.Time{}
	return c
}

// CreateOrder is store.Executor.CreateOrder at key.CreatedAt.
func (s *subject) CreateOrder(ctx context.Context, key *idempotency.Record, o order.Order) (*store.Holder, error) {
	if key == nil {
		return s.Store.CreateOrder(ctx, nil, o)
	}
	s.at(key.CreatedAt)
	c := claimOf(*key)
	return s.Store.CreateOrder(ctx, &c, o)
}

// CreateOrders is *subject.CreateOrders at at.
func (s *subject) CreateOrders(ctx context.Context, at time.Time, batch []newOrderOf) ([]*store.Holder, error) {
	s.at(at)
	b := make([]store.NewOrder, len(batch))
	for i, n := range batch {
		b[i].Order = n.Order
		if n.Key != nil {
			c := claimOf(*n.Key)
			b[i].Key = &c
		}
	}
	return s.Store.CreateOrders(ctx, b)
}

// newOrderOf is a store.NewOrder in the suite's terms.
type newOrderOf struct {
	Key   *idempotency.Record
	Order order.Order
}

// AcquireLease is store.Executor.AcquireLease at claim.CreatedAt.
func (s *subject) AcquireLease(ctx context.Context, claim idempotency.Record) (idempotency.Record, bool, error) {
	s.at(claim.CreatedAt)
	return s.Store.AcquireLease(ctx, claimOf(claim))
}

// StartLeased is *subject.StartLeased at claim.CreatedAt.
func (s *subject) StartLeased(ctx context.Context, claim idempotency.Record, in store.Intent) (store.Started, error) {
	s.at(claim.CreatedAt)
	return s.Store.StartLeased(ctx, claimOf(claim), in)
}

// takeOver is a store.TakeOver at an instant: Now, leasing until
// LeaseUntil.
type takeOver struct {
	Now, LeaseUntil     time.Time
	Limit               int
	Backoff, MaxBackoff time.Duration
}

// TakeOverAbandoned is store.Executor.TakeOverAbandoned at to.Now.
func (s *subject) TakeOverAbandoned(ctx context.Context, to takeOver) ([]idempotency.Record, error) {
	s.at(to.Now)
	return s.Store.TakeOverAbandoned(ctx, store.TakeOver{Lease: to.LeaseUntil.Sub(to.Now), Limit: to.Limit,
		Backoff: to.Backoff, MaxBackoff: to.MaxBackoff})
}

// AbandonedBacklog is store.Executor.AbandonedBacklog at now.
func (s *subject) AbandonedBacklog(ctx context.Context, now time.Time) (store.Backlog, error) {
	s.at(now)
	return s.Store.AbandonedBacklog(ctx)
}

// Sweep is store.Executor.Sweep at now.
func (s *subject) Sweep(ctx context.Context, now time.Time, tombstoneFor time.Duration, limit int) (store.SweepResult, error) {
	s.at(now)
	return s.Store.Sweep(ctx, tombstoneFor, limit)
}

// inTxAt is store.Store.InTx at now.
func (s *subject) inTxAt(ctx context.Context, now time.Time, fn func(tx store.Executor) error) error {
	s.at(now)
	return s.InTx(ctx, fn)
}

// wrap returns the subject of a store whose database follows clk.
func wrap(t *testing.T, openAt func(t *testing.T, clk *testclock.Clock) store.Store) *subject {
	t.Helper()
	clk := testclock.New(base)
	return &subject{Store: openAt(t, clk), clk: clk}
}
