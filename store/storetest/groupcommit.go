package storetest

import (
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// testCreateOrders checks group commit: many creates in one transaction,
// each with the outcome CreateOrder would give it alone.
func testCreateOrders(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("EachCreateKeepsItsOwnOutcome", func(t *testing.T) { createOrdersEachCreateKeepsItsOwnOutcome(t, open) })

	t.Run("RacingGroupsHaveOneWinnerPerKey", func(t *testing.T) { createOrdersRacingGroupsHaveOneWinnerPerKey(t, open) })
}

// createOrdersEachCreateKeepsItsOwnOutcome checks: each create keeps its own outcome.
func createOrdersEachCreateKeepsItsOwnOutcome(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	// Already there: a held client key, a held derived key, and an
	// expired derived key (which a new create takes over).
	heldO := newOrder(t, "tenant-a", "cust-0", base)
	heldRec := newRecord("tenant-a", "held", heldO.ID, base)
	mustCreate(t, s, &heldRec, heldO)
	heldDO := newOrder(t, "tenant-a", "cust-0", base)
	heldDRec := asDerived(newRecord("tenant-a", "held-derived", heldDO.ID, base))
	mustCreate(t, s, &heldDRec, heldDO)
	oldO := newOrder(t, "tenant-a", "cust-0", base.Add(-time.Hour))
	oldRec := asDerived(newRecord("tenant-a", "expired-derived", oldO.ID, base.Add(-time.Hour)))
	mustCreate(t, s, &oldRec, oldO)

	at := base.Add(time.Second)
	type row struct {
		name string
		key  *idempotency.Record
		o    order.Order
		held *store.Holder // nil: created
	}
	rows := []row{}
	add := func(name string, key func(o order.Order) *idempotency.Record, held *store.Holder) {
		tenant := "tenant-a"
		if name == "other-tenant" {
			tenant = "tenant-b"
		}
		o := newOrder(t, tenant, "cust-"+name, at)
		rows = append(rows, row{name, key(o), o, held})
	}
	rec := func(key string, derived bool) func(o order.Order) *idempotency.Record {
		return func(o order.Order) *idempotency.Record {
			r := newRecord("tenant-a", key, o.ID, at)
			if derived {
				r = asDerived(r)
			}
			return &r
		}
	}
	add("new-client", rec("new-1", false), nil)
	add("no-key", func(order.Order) *idempotency.Record { return nil }, nil)
	add("held-client", rec("held", false), &store.Holder{Record: heldRec, Order: &heldO})
	add("new-derived", rec("new-2", true), nil)
	add("held-derived", rec("held-derived", true), &store.Holder{Record: heldDRec, Order: &heldDO})
	add("expired-derived", rec("expired-derived", true), nil)
	add("other-tenant", func(o order.Order) *idempotency.Record {
		r := newRecord("tenant-b", "held", o.ID, at)
		return &r
	}, nil)

	batch := make([]newOrderOf, len(rows))
	for i, r := range rows {
		batch[i] = newOrderOf{Key: r.key, Order: r.o}
	}
	got, err := s.CreateOrders(ctx, at, batch)
	if err != nil {
		t.Fatalf("CreateOrders: %v", err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d results for %d creates", len(got), len(rows))
	}
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			if r.held == nil {
				if got[i] != nil {
					t.Fatalf("held by %+v; want created", got[i].Record)
				}
				tenant := r.o.TenantID
				assertOrder(t, mustGet(t, s, tenant, r.o.ID), r.o)
				if r.key != nil {
					stored := mustLookup(t, s, r.key.TenantID, r.key.KeyHash)
					want := *r.key
					want.FencingToken = stored.FencingToken // a takeover bumps it
					assertRecord(t, stored, want)
				}
				return
			}
			if got[i] == nil {
				t.Fatal("created; want the key held")
			}
			assertRecord(t, got[i].Record, r.held.Record)
			if got[i].Order == nil {
				t.Fatal("holder without its order")
			}
			assertOrder(t, *got[i].Order, *r.held.Order)
			assertNotFound(t, "the losing order", getErr(s.GetOrder(ctx, "tenant-a", r.o.ID)))
		})
	}
}

// createOrdersRacingGroupsHaveOneWinnerPerKey checks: racing groups have one winner per key.
func createOrdersRacingGroupsHaveOneWinnerPerKey(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	const groups, keys = 10, 8
	orders := make([][]order.Order, groups)
	out := raceAll(groups, func(g int) []*store.Holder {
		batch := make([]newOrderOf, keys)
		orders[g] = make([]order.Order, keys)
		for k := range keys {
			o := newOrder(t, "tenant-a", "cust", base)
			orders[g][k] = o
			r := newRecord("tenant-a", "race-"+itoa(int64(k)), o.ID, base)
			if k%2 == 1 {
				r = asDerived(r)
			}
			r.Fingerprint = "same-request-" + itoa(int64(k))
			batch[k] = newOrderOf{Key: &r, Order: o}
		}
		held, err := s.CreateOrders(ctx, base, batch)
		if err != nil {
			t.Errorf("group %d: %v", g, err)
			return nil
		}
		return held
	})
	for k := range keys {
		winner := -1
		for g := range groups {
			if out[g] != nil && out[g][k] == nil {
				if winner >= 0 {
					t.Fatalf("key %d: groups %d and %d both created", k, winner, g)
				}
				winner = g
			}
		}
		if winner < 0 {
			t.Fatalf("key %d: no group created it", k)
		}
		for g := range groups {
			if g == winner || out[g] == nil {
				continue
			}
			h := out[g][k]
			if h.ResourceID != orders[winner][k].ID || h.Order == nil || h.Order.ID != orders[winner][k].ID {
				t.Errorf("key %d, group %d: held %s; want the winner's order %s", k, g, h.ResourceID, orders[winner][k].ID)
			}
			assertNotFound(t, "a losing order", getErr(s.GetOrder(ctx, "tenant-a", orders[g][k].ID)))
		}
	}
}
