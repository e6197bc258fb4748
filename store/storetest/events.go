package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// eventStore returns s as a store.EventStore, or fails the test.
func eventStore(t *testing.T, s *subject) store.EventStore {
	t.Helper()
	es, ok := s.Store.(store.EventStore)
	if !ok {
		t.Fatalf("%T does not implement store.EventStore", s)
	}
	return es
}

// allEvents reads the tenant's whole feed, a page of two at a time.
func allEvents(t *testing.T, es store.EventStore, tenant string, f event.Filter) []event.Stored {
	t.Helper()
	var out []event.Stored
	f.Limit = 2
	for {
		page, err := es.ListEvents(t.Context(), tenant, f)
		if err != nil {
			t.Fatalf("ListEvents(%+v): %v", f, err)
		}
		out = append(out, page...)
		if len(page) < f.Limit {
			return out
		}
		f.After = page[len(page)-1].Cursor
	}
}

// waitEvents is allEvents once it holds at least want events. The
// PostgreSQL feed shows an event only once every transaction that started
// before it committed has ended (other tests' included), so a just
// committed event may take a moment to appear; the wait is bounded by
// settleWithin, far beyond any transaction of the suite.
func waitEvents(t *testing.T, es store.EventStore, tenant string, f event.Filter, want int) []event.Stored {
	t.Helper()
	deadline := time.Now().Add(settleWithin)
	for {
		got := allEvents(t, es, tenant, f)
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// settleWithin bounds how long waitEvents waits for the feed.
const settleWithin = 30 * time.Second

func decodeEvent(t *testing.T, s event.Stored) event.Event {
	t.Helper()
	var e event.Event
	if err := json.Unmarshal(s.Body, &e); err != nil {
		t.Fatalf("event %s: body %s: %v", s.ID, s.Body, err)
	}
	if e.ID != s.ID || e.Type != s.Type || e.OrderID != s.OrderID || e.Sequence != s.Sequence || e.TenantID != s.TenantID {
		t.Fatalf("event %s: body %+v disagrees with its columns %+v", s.ID, e, s)
	}
	return e
}

func mustEndpoint(t *testing.T, es store.EventStore, tenant string, types ...event.Type) event.Endpoint {
	t.Helper()
	ep := newEndpoint(tenant)
	ep.Types = types
	if err := es.CreateEndpoint(t.Context(), ep, 0); err != nil {
		t.Fatalf("CreateEndpoint: %v", err)
	}
	return ep
}

// endpointSeq makes endpoint ids unique within a test binary.
var endpointSeq atomic.Int64

// newEndpoint returns an endpoint of tenant (not stored) with a fresh id.
func newEndpoint(tenant string) event.Endpoint {
	return event.Endpoint{ID: fmt.Sprintf("%s%d_%d", event.EndpointIDPrefix, time.Now().UnixNano(), endpointSeq.Add(1)), TenantID: tenant,
		URL: "http://127.0.0.1:9/hook", Types: event.Types, Secret: "whsec_x", Enabled: true, CreatedAt: base}
}

// countBy counts ds by key.
func countBy(ds []event.Delivery, key func(event.Delivery) string) map[string]int {
	out := map[string]int{}
	for _, d := range ds {
		out[key(d)]++
	}
	return out
}

func testEvents(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("CreateWritesOneEventAndReplayNone", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		o := newOrder(t, "tenant-a", "cust-1", base)
		rec := newRecord("tenant-a", "create-1", o.ID, base)
		mustCreate(t, s, &rec, o)
		// The replay: same key, another order id; it must write nothing.
		again := newOrder(t, "tenant-a", "cust-1", base.Add(time.Second))
		if held, err := s.CreateOrder(t.Context(), &rec, again); err != nil || held == nil {
			t.Fatalf("replay CreateOrder = %v, %v; want the holder", held, err)
		}
		bare := newOrder(t, "tenant-a", "cust-2", base)
		mustCreate(t, s, nil, bare)
		// A group: one new create, one replay of create-1, one without key.
		g1, g2, g3 := newOrder(t, "tenant-a", "cust-3", base), newOrder(t, "tenant-a", "cust-1", base), newOrder(t, "tenant-a", "cust-4", base)
		r1 := newRecord("tenant-a", "create-g1", g1.ID, base)
		out, err := s.CreateOrders(t.Context(), base, []newOrderOf{{Key: &r1, Order: g1}, {Key: &rec, Order: g2}, {Order: g3}})
		if err != nil || out[0] != nil || out[1] == nil || out[2] != nil {
			t.Fatalf("CreateOrders = %v, %v", out, err)
		}
		want := map[string]bool{o.ID: true, bare.ID: true, g1.ID: true, g3.ID: true}
		evs := waitEvents(t, es, "tenant-a", event.Filter{}, len(want))
		if len(evs) != len(want) {
			t.Fatalf("events = %d, want %d (one per created order): %+v", len(evs), len(want), evs)
		}
		for _, sev := range evs {
			e := decodeEvent(t, sev)
			if !want[e.OrderID] || e.Type != event.OrderCreated || e.Sequence != 1 || e.Order.ID != e.OrderID || e.Order.State != order.Received {
				t.Errorf("event %+v", e)
			}
			delete(want, e.OrderID)
		}
	})

	t.Run("EventCommitsWithItsChangeOnly", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		paid := o.Apply(order.Paid, base.Add(time.Second))
		// A compare-and-set that fails takes its event with it.
		stale := paid
		stale.Version = 7
		err := s.InTx(t.Context(), func(tx store.Executor) error {
			if err := tx.CompareAndSetOrder(t.Context(), stale, ""); err != nil {
				return err
			}
			return tx.AppendEvent(t.Context(), event.For(stale, base))
		})
		if !errors.Is(err, store.ErrVersionConflict) {
			t.Fatalf("stale transition = %v, want ErrVersionConflict", err)
		}
		// An event whose insert fails (a second event for one sequence)
		// takes the change with it.
		first := event.For(o, base) // sequence 1 is the create's
		err = s.InTx(t.Context(), func(tx store.Executor) error {
			if err := tx.CompareAndSetOrder(t.Context(), paid, ""); err != nil {
				return err
			}
			return tx.AppendEvent(t.Context(), first)
		})
		if err == nil {
			t.Fatal("a second event for sequence 1 was accepted")
		}
		if got := mustGet(t, s, "tenant-a", o.ID); got.Version != 1 {
			t.Fatalf("order moved to version %d though its event failed", got.Version)
		}
		mustTransition(t, s, paid)
		evs := waitEvents(t, es, "tenant-a", event.Filter{OrderID: o.ID}, 2)
		if len(evs) != 2 || evs[1].Type != event.OrderPaid || evs[1].Sequence != 2 {
			t.Fatalf("events = %+v, want created then paid", evs)
		}
		if e := decodeEvent(t, evs[1]); e.Order.State != order.Paid || e.Order.Version != 2 || e.OrderVersion != 2 {
			t.Fatalf("paid event carries %+v", e)
		}
	})

	t.Run("FeedIsTenantScopedFilteredAndResumable", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		var orders []order.Order
		for i := range 3 {
			o := newOrder(t, "tenant-a", fmt.Sprint("cust-", i), base)
			mustCreate(t, s, nil, o)
			orders = append(orders, o)
		}
		other := newOrder(t, "tenant-b", "cust-b", base)
		mustCreate(t, s, nil, other)
		mustTransition(t, s, orders[1].Apply(order.Paid, base))

		if got := waitEvents(t, es, "", event.Filter{}, 5); len(got) != 5 {
			t.Fatalf("all tenants = %d events, want 5", len(got))
		}
		all := allEvents(t, es, "tenant-a", event.Filter{})
		if len(all) != 4 {
			t.Fatalf("tenant-a sees %d events, want 4", len(all))
		}
		for i, e := range all {
			if e.TenantID != "tenant-a" {
				t.Fatalf("tenant-a sees %+v", e)
			}
			if i > 0 && all[i-1].OrderID == e.OrderID && all[i-1].Sequence > e.Sequence {
				t.Fatalf("feed out of order: %+v before %+v", all[i-1], e)
			}
		}
		if got := allEvents(t, es, "tenant-a", event.Filter{Type: event.OrderPaid}); len(got) != 1 || got[0].OrderID != orders[1].ID {
			t.Fatalf("type filter = %+v", got)
		}
		if got := allEvents(t, es, "tenant-a", event.Filter{OrderID: orders[1].ID}); len(got) != 2 {
			t.Fatalf("order filter = %+v", got)
		}
		// Resuming after the last cursor finds nothing, then exactly what
		// came since.
		last := all[len(all)-1].Cursor
		if got, err := es.ListEvents(t.Context(), "tenant-a", event.Filter{After: last}); err != nil || len(got) != 0 {
			t.Fatalf("after the last cursor = %v, %v", got, err)
		}
		mustTransition(t, s, orders[0].Apply(order.Cancelled, base))
		got := waitEvents(t, es, "tenant-a", event.Filter{After: last}, 1)
		if len(got) != 1 || got[0].Type != event.OrderCancelled {
			t.Fatalf("after the last cursor, once more = %+v", got)
		}
		if e := decodeEvent(t, got[0]); e.Refunded == nil || *e.Refunded {
			t.Fatalf("cancel from RCVD: refunded = %v, want false", e.Refunded)
		}
		var ae *apperr.Error
		if _, err := es.ListEvents(t.Context(), "tenant-a", event.Filter{After: "not-a-cursor"}); !errors.As(err, &ae) || ae.Code != apperr.EInvalid {
			t.Fatalf("bad cursor = %v, want EInvalid", err)
		}
		if _, err := es.GetEvent(t.Context(), "tenant-a", all[0].ID); err != nil {
			t.Fatalf("GetEvent: %v", err)
		}
		if _, err := es.GetEvent(t.Context(), "tenant-b", all[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's GetEvent = %v, want ErrNotFound", err)
		}
	})

	t.Run("DeliveriesInSequenceLeasedAndFenced", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		ctx := t.Context()
		ep := mustEndpoint(t, es, "tenant-a", event.OrderCreated, event.OrderPaid)
		mustEndpoint(t, es, "tenant-a", event.OrderFulfilled) // subscribed to nothing that happens
		mustEndpoint(t, es, "tenant-b", event.OrderCreated)   // another tenant
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		mustTransition(t, s, o.Apply(order.Paid, base))
		ds, err := es.ListDeliveries(ctx, "tenant-a", ep.ID, 10)
		if err != nil || len(ds) != 2 {
			t.Fatalf("ListDeliveries = %+v, %v; want 2", ds, err)
		}
		if _, err := es.ListDeliveries(ctx, "tenant-b", ep.ID, 10); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's deliveries = %v", err)
		}
		now := base.Add(time.Minute)
		lease := 30 * time.Second
		claim := func(at time.Time) []event.Delivery {
			t.Helper()
			s.at(at)
			ds, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: lease, Limit: 10})
			if err != nil {
				t.Fatalf("ClaimDeliveries: %v", err)
			}
			return ds
		}
		got := claim(now)
		if len(got) != 1 || got[0].Sequence != 1 || got[0].Attempts != 1 || got[0].URL != ep.URL || got[0].Secret != ep.Secret || len(got[0].Body) == 0 {
			t.Fatalf("first claim = %+v; want the created event only (the paid one waits for it)", got)
		}
		if again := claim(now.Add(time.Second)); len(again) != 0 {
			t.Fatalf("claimed again while leased: %+v", again)
		}
		// The holder crashed: past its lease another instance takes it over.
		taken := claim(now.Add(lease + time.Second))
		if len(taken) != 1 || taken[0].EventID != got[0].EventID || taken[0].Attempts != 2 {
			t.Fatalf("takeover = %+v", taken)
		}
		stale := store.DeliveryOutcome{EndpointID: ep.ID, EventID: got[0].EventID, Attempts: 1,
			Status: event.DeliverySucceeded, LastStatus: 200}
		if err := es.FinishDelivery(ctx, stale); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("stale FinishDelivery = %v, want ErrLeaseLost", err)
		}
		later := now.Add(lease + 2*time.Second)
		ok := stale
		ok.Attempts = 2
		s.at(later)
		if err := es.FinishDelivery(ctx, ok); err != nil {
			t.Fatalf("FinishDelivery: %v", err)
		}
		second := claim(later)
		if len(second) != 1 || second[0].Sequence != 2 || second[0].Type != event.OrderPaid {
			t.Fatalf("after the first succeeded = %+v; want the paid event", second)
		}
		retry := store.DeliveryOutcome{EndpointID: ep.ID, EventID: second[0].EventID, Attempts: 1,
			Status: event.DeliveryPending, RetryIn: time.Hour, LastStatus: 500, LastError: "HTTP 500"}
		s.at(later)
		if err := es.FinishDelivery(ctx, retry); err != nil {
			t.Fatalf("FinishDelivery(retry): %v", err)
		}
		if early := claim(later.Add(59 * time.Minute)); len(early) != 0 {
			t.Fatalf("claimed before its next attempt: %+v", early)
		}
		third := claim(later.Add(time.Hour))
		if len(third) != 1 || third[0].Attempts != 2 {
			t.Fatalf("retry claim = %+v", third)
		}
		gone := store.DeliveryOutcome{EndpointID: ep.ID, EventID: third[0].EventID, Attempts: 2,
			Status: event.DeliveryFailed, LastStatus: 410, DisableEndpoint: "410 Gone"}
		if err := es.FinishDelivery(ctx, gone); err != nil {
			t.Fatalf("FinishDelivery(gone): %v", err)
		}
		if e, err := es.GetEndpoint(ctx, "tenant-a", ep.ID); err != nil || e.Enabled || e.DisabledReason != "410 Gone" || e.Secret != "" {
			t.Fatalf("endpoint after 410 = %+v, %v", e, err)
		}
		// A disabled endpoint gets no new deliveries claimed.
		mustTransition(t, s, o.Apply(order.Paid, base).Apply(order.Cancelled, base))
		if ds := claim(later.Add(2 * time.Hour)); len(ds) != 0 {
			t.Fatalf("claimed for a disabled endpoint: %+v", ds)
		}
		ds, _ = es.ListDeliveries(ctx, "tenant-a", ep.ID, 10)
		if len(ds) != 2 || ds[0].Status != event.DeliveryFailed || ds[0].LastStatus != 410 || ds[1].Status != event.DeliverySucceeded {
			t.Fatalf("deliveries = %+v", ds)
		}
		if err := es.DeleteEndpoint(ctx, "tenant-b", ep.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("another tenant's DeleteEndpoint = %v", err)
		}
		if err := es.DeleteEndpoint(ctx, "tenant-a", ep.ID); err != nil {
			t.Fatalf("DeleteEndpoint: %v", err)
		}
		if _, err := es.GetEndpoint(ctx, "tenant-a", ep.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("deleted endpoint = %v", err)
		}
	})

	t.Run("RacingClaimsTakeEachDeliveryOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		mustEndpoint(t, es, "tenant-a", event.Types...)
		const n = 30
		for i := range n {
			mustCreate(t, s, nil, newOrder(t, "tenant-a", fmt.Sprint("cust-", i), base))
		}
		var mu sync.Mutex
		seen := map[string]int{}
		s.at(base.Add(time.Minute))
		raceAll(10, func(int) error {
			for {
				ds, err := es.ClaimDeliveries(t.Context(), store.DeliveryClaim{Lease: time.Hour, Limit: 3})
				if err != nil && !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("ClaimDeliveries: %v", err)
					return err
				}
				if len(ds) == 0 && err == nil {
					return nil
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.EventID]++
				}
				mu.Unlock()
			}
		})
		if len(seen) != n {
			t.Fatalf("claimed %d deliveries, want %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Errorf("delivery of %s claimed %d times", id, c)
			}
		}
	})

	t.Run("EndpointsPerTenantCapped", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		ctx := t.Context()
		const limit = 5
		var created atomic.Int32
		raceAll(12, func(int) error {
			err := es.CreateEndpoint(ctx, newEndpoint("tenant-a"), limit)
			switch {
			case err == nil:
				created.Add(1)
			case errors.Is(err, store.ErrUnavailable):
				return err
			case !errors.Is(err, store.ErrLimitReached):
				t.Errorf("CreateEndpoint = %v, want nil or ErrLimitReached", err)
			}
			return nil
		})
		eps, err := es.ListEndpoints(ctx, "tenant-a")
		if err != nil || len(eps) != limit || int(created.Load()) != limit {
			t.Fatalf("12 racing creates under a cap of %d: %d succeeded, %d stored (%v)", limit, created.Load(), len(eps), err)
		}
		if err := es.CreateEndpoint(ctx, newEndpoint("tenant-a"), limit); !errors.Is(err, store.ErrLimitReached) {
			t.Fatalf("one more = %v, want ErrLimitReached", err)
		}
		// Another tenant's count is its own; no cap is no cap.
		if err := es.CreateEndpoint(ctx, newEndpoint("tenant-b"), limit); err != nil {
			t.Fatalf("another tenant's create = %v", err)
		}
		if err := es.CreateEndpoint(ctx, newEndpoint("tenant-a"), 0); err != nil {
			t.Fatalf("create without a cap = %v", err)
		}
		// A deleted endpoint frees its place.
		if err := es.DeleteEndpoint(ctx, "tenant-b", eps[0].ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete of another tenant's = %v", err)
		}
		for _, ep := range eps[:2] {
			if err := es.DeleteEndpoint(ctx, "tenant-a", ep.ID); err != nil {
				t.Fatal(err)
			}
		}
		if err := es.CreateEndpoint(ctx, newEndpoint("tenant-a"), limit); err != nil {
			t.Fatalf("create after deletes = %v", err)
		}
	})

	t.Run("ClaimsInterleaveTenantsWithinCaps", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		ctx := t.Context()
		// Tenant a: three endpoints, 10 orders each fanned out to all three
		// (30 due deliveries, the oldest). Tenant b: one endpoint, two
		// orders created a second later.
		for range 3 {
			mustEndpoint(t, es, "tenant-a", event.OrderCreated)
		}
		epB := mustEndpoint(t, es, "tenant-b", event.OrderCreated)
		for i := range 10 {
			mustCreate(t, s, nil, newOrder(t, "tenant-a", fmt.Sprint("cust-a", i), base))
		}
		for i := range 2 {
			mustCreate(t, s, nil, newOrder(t, "tenant-b", fmt.Sprint("cust-b", i), base.Add(time.Second)))
		}
		now := base.Add(time.Minute)
		claim := func(c store.DeliveryClaim) []event.Delivery {
			t.Helper()
			s.at(now)
			c.Lease = time.Hour
			ds, err := es.ClaimDeliveries(ctx, c)
			if err != nil {
				t.Fatalf("ClaimDeliveries(%+v): %v", c, err)
			}
			return ds
		}
		// Interleaving: a claim of two takes each tenant's first, although
		// all of a's are older (regression: first-in first-out across
		// tenants gave a both).
		first := claim(store.DeliveryClaim{Limit: 2})
		if by := countBy(first, func(d event.Delivery) string { return d.TenantID }); by["tenant-a"] != 1 || by["tenant-b"] != 1 {
			t.Fatalf("claim of 2 took %v, want one of each tenant", by)
		}
		// Caps count what is in flight already: a holds 1 of its 3, its
		// endpoints one each at most; b's endpoint is at its cap of 1.
		caps := store.DeliveryClaim{Limit: 100, PerTenant: 3, PerEndpoint: 1}
		second := claim(caps)
		byTenant := countBy(second, func(d event.Delivery) string { return d.TenantID })
		if byTenant["tenant-a"] != 2 || byTenant["tenant-b"] != 0 {
			t.Fatalf("capped claim took %v, want 2 of tenant-a (3 in flight) and none of tenant-b (its endpoint at its cap)", byTenant)
		}
		inFlight := append(first, second...)
		for ep, n := range countBy(inFlight, func(d event.Delivery) string { return d.EndpointID }) {
			if n > 1 {
				t.Fatalf("endpoint %s has %d deliveries in flight, cap 1", ep, n)
			}
		}
		if more := claim(caps); len(more) != 0 {
			t.Fatalf("claimed %+v past the caps", more)
		}
		// One of b's finishes: its endpoint has room for one more, and only
		// for that one.
		for _, d := range inFlight {
			if d.EndpointID == epB.ID {
				s.at(now)
				if err := es.FinishDelivery(ctx, store.DeliveryOutcome{EndpointID: d.EndpointID, EventID: d.EventID,
					Attempts: d.Attempts, Status: event.DeliverySucceeded, LastStatus: 200}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if next := claim(caps); len(next) != 1 || next[0].EndpointID != epB.ID {
			t.Fatalf("after b's delivery finished: claimed %+v, want b's second only", next)
		}
		// A lease that expired is not in flight: a's three come due again
		// and are taken over within its cap.
		now = now.Add(2 * time.Hour)
		if again := claim(caps); len(countBy(again, func(d event.Delivery) string { return d.EndpointID })) != len(again) ||
			countBy(again, func(d event.Delivery) string { return d.TenantID })["tenant-a"] != 3 {
			t.Fatalf("after the leases expired: claimed %+v, want 3 of tenant-a on 3 endpoints", again)
		}
	})

	t.Run("RacingClaimsKeepTheCaps", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		for range 4 {
			mustEndpoint(t, es, "tenant-a", event.OrderCreated)
		}
		for i := range 10 {
			mustCreate(t, s, nil, newOrder(t, "tenant-a", fmt.Sprint("cust-", i), base))
		}
		s.at(base.Add(time.Minute))
		var mu sync.Mutex
		var claimed []event.Delivery
		raceAll(10, func(int) error {
			for range 3 {
				ds, err := es.ClaimDeliveries(t.Context(), store.DeliveryClaim{Lease: time.Hour, Limit: 2, PerTenant: 5, PerEndpoint: 2})
				if err != nil {
					if !errors.Is(err, store.ErrUnavailable) {
						t.Errorf("ClaimDeliveries: %v", err)
					}
					return err
				}
				mu.Lock()
				claimed = append(claimed, ds...)
				mu.Unlock()
			}
			return nil
		})
		// A claimer refused as busy (SQLite) took nothing; one more claim
		// tops up to the cap, never past it.
		ds, err := es.ClaimDeliveries(t.Context(), store.DeliveryClaim{Lease: time.Hour, Limit: 10, PerTenant: 5, PerEndpoint: 2})
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, ds...)
		if len(claimed) != 5 {
			t.Fatalf("10 racing claimers took %d deliveries of one tenant, want its cap of 5", len(claimed))
		}
		for ep, n := range countBy(claimed, func(d event.Delivery) string { return d.EndpointID }) {
			if n > 2 {
				t.Fatalf("endpoint %s: %d in flight, cap 2", ep, n)
			}
		}
	})

	t.Run("CursorLease", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		es := eventStore(t, s)
		ctx := t.Context()
		s.at(base)
		if c, held, err := es.LeaseCursor(ctx, "pub", "a", time.Minute); err != nil || !held || c != "" {
			t.Fatalf("first lease = %q, %v, %v", c, held, err)
		}
		s.at(base.Add(time.Second))
		if _, held, err := es.LeaseCursor(ctx, "pub", "b", time.Minute); err != nil || held {
			t.Fatalf("b took a held cursor: %v, %v", held, err)
		}
		if err := es.AdvanceCursor(ctx, "pub", "a", "c1"); err != nil {
			t.Fatalf("AdvanceCursor: %v", err)
		}
		// a's lease ran out at base+1m on the database's clock.
		s.at(base.Add(time.Minute))
		c, held, err := es.LeaseCursor(ctx, "pub", "b", time.Minute)
		if err != nil || !held || c != "c1" {
			t.Fatalf("takeover after expiry = %q, %v, %v", c, held, err)
		}
		if err := es.AdvanceCursor(ctx, "pub", "a", "c2"); !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("stale AdvanceCursor = %v, want ErrLeaseLost", err)
		}
	})
}
