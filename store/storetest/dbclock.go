package storetest

import (
	"testing"
	"time"

	"github.com/orderly/orderly/store"
)

// testDatabaseClock checks what a store reports of its own clock, so
// callers judge keys on it rather than on theirs: Now, the times a create's
// claim was stored with (CreateOrder, CreateOrders), the clock with a held
// key's holder, and the clock a backlog was counted at. The caller's claim
// carries instants a day off; none of them may come back.
func testDatabaseClock(t *testing.T, open func(t *testing.T) *subject) {
	s, ctx := open(t), t.Context()
	at := base.Add(time.Minute)
	s.at(at)
	if now, err := s.Now(ctx); err != nil || !now.Equal(at) {
		t.Fatalf("Now = %s, %v; want %s", now, err, at)
	}
	dayOff := func(c store.Claim) *store.Claim {
		c.CreatedAt, c.ExpiresAt = at.Add(24*time.Hour), at.Add(48*time.Hour)
		return &c
	}

	o := newOrder(t, "tenant-a", "cust-1", at)
	claim := dayOff(claimOf(newRecord("tenant-a", "create-1", o.ID, at)))
	if held, err := s.Store.CreateOrder(ctx, claim, o); err != nil || held != nil {
		t.Fatalf("CreateOrder = %v, %v", held, err)
	}
	if !claim.CreatedAt.Equal(at) || !claim.ExpiresAt.Equal(at.Add(claim.TTL)) {
		t.Errorf("CreateOrder set the claim's CreatedAt, ExpiresAt = %s, %s; want %s, %s (as stored)",
			claim.CreatedAt, claim.ExpiresAt, at, at.Add(claim.TTL))
	}
	later := at.Add(time.Second)
	s.at(later)
	again := dayOff(claimOf(newRecord("tenant-a", "create-1", o.ID, at)))
	held, err := s.Store.CreateOrder(ctx, again, newOrder(t, "tenant-a", "cust-1", later))
	if err != nil || held == nil || !held.Now.Equal(later) || !held.ExpiresAt.Equal(at.Add(claim.TTL)) {
		t.Fatalf("CreateOrder of a held key = %+v, %v; want the holder expiring %s, read at %s", held, err, at.Add(claim.TTL), later)
	}

	// The same through a group: one new key, one held.
	g := newOrder(t, "tenant-a", "cust-2", later)
	fresh := dayOff(claimOf(newRecord("tenant-a", "create-2", g.ID, later)))
	out, err := s.Store.CreateOrders(ctx, []store.NewOrder{{Key: fresh, Order: g},
		{Key: dayOff(claimOf(newRecord("tenant-a", "create-1", o.ID, at))), Order: newOrder(t, "tenant-a", "cust-1", later)}})
	if err != nil || len(out) != 2 || out[0] != nil || out[1] == nil {
		t.Fatalf("CreateOrders = %v, %v; want created, held", out, err)
	}
	if !fresh.CreatedAt.Equal(later) || !fresh.ExpiresAt.Equal(later.Add(fresh.TTL)) {
		t.Errorf("CreateOrders set the claim's CreatedAt, ExpiresAt = %s, %s; want %s, %s", fresh.CreatedAt, fresh.ExpiresAt,
			later, later.Add(fresh.TTL))
	}
	if !out[1].Now.Equal(later) {
		t.Errorf("CreateOrders' holder read at %s, want %s", out[1].Now, later)
	}

	if bc, ok := s.Store.(store.BacklogCounter); ok {
		s.at(base.Add(time.Hour))
		if b, err := bc.Backlog(ctx); err != nil || !b.Now.Equal(base.Add(time.Hour)) {
			t.Errorf("Backlog = %+v, %v; want counted at %s", b, err, base.Add(time.Hour))
		}
	}
}
