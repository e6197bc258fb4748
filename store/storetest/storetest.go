// Package storetest is the conformance suite every store.Store must pass.
//
// A store's own test calls Run with a function that opens a fresh, empty,
// migrated store; the suite then checks the contract documented in package
// store: orders round-trip every field, tenants never see each other's rows,
// an idempotency key exists exactly when its effect does, transitions are
// compare-and-sets, and all of it holds with many goroutines racing. The
// same suite runs against store/postgres and store/sqlite, so the two behave
// the same.
package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
)

// base is the suite's fixed clock: a UTC instant with microsecond digits,
// the precision both stores keep.
var base = time.Date(2025, time.March, 14, 15, 9, 26, 535_897_000, time.UTC)

// racers is how many goroutines each concurrency test starts.
const racers = 50

// Run runs the conformance suite. open must return a fresh, empty, migrated
// store for the test it is given and close it when that test ends (with
// t.Cleanup). Every subtest opens its own store, so subtests run in
// parallel.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		if err := open(t).Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("CreateOrder", func(t *testing.T) {
		t.Parallel()
		testCreateOrder(t, open)
	})
	t.Run("GetOrder", func(t *testing.T) {
		t.Parallel()
		testGetOrder(t, open)
	})
	t.Run("KeyTakeover", func(t *testing.T) {
		t.Parallel()
		testKeyTakeover(t, open)
	})
	t.Run("Transition", func(t *testing.T) {
		t.Parallel()
		testTransition(t, open)
	})
	t.Run("SaveRecord", func(t *testing.T) {
		t.Parallel()
		testSaveRecord(t, open)
	})
	t.Run("LookupKey", func(t *testing.T) {
		t.Parallel()
		testLookupKey(t, open)
	})
	t.Run("ListOrders", func(t *testing.T) {
		t.Parallel()
		testListOrders(t, open)
	})
	t.Run("Concurrency", func(t *testing.T) {
		t.Parallel()
		testConcurrency(t, open)
	})
}

func testCreateOrder(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("WithoutKeyRoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Items keep their order; a free item and a price above 2^53 (lost by
		// any float64 detour through JSON) survive.
		o, err := order.New("tenant-a", order.NewOrderInput{
			CustomerID: "cust-ü-1",
			Currency:   "JPY",
			Items: []order.Item{
				{SKU: "SKU-ZED", Quantity: 3, UnitPrice: 1250},
				{SKU: "SKU-FREE", Quantity: 1, UnitPrice: 0},
				{SKU: "SKU-BIG", Quantity: 1, UnitPrice: 1<<53 + 1},
			},
		}, base)
		if err != nil {
			t.Fatalf("order.New: %v", err)
		}
		if o.Amount != 3*1250+1<<53+1 {
			t.Fatalf("fixture: Amount = %d", o.Amount)
		}
		mustCreate(t, s, nil, o)

		got := mustGet(t, s, "tenant-a", o.ID)
		assertOrder(t, got, o)
		if got.Version != 1 || got.State != order.Received {
			t.Errorf("Version, State = %d, %s; want 1, %s", got.Version, got.State, order.Received)
		}
		if got.PaidAt != nil || got.FulfilledAt != nil || got.CancelledAt != nil {
			t.Errorf("timestamps of a new order = %v, %v, %v; want all nil", got.PaidAt, got.FulfilledAt, got.CancelledAt)
		}
	})

	t.Run("WithKeyClaimsKeyAndInsertsOrder", func(t *testing.T) {
		t.Parallel()
		for _, derived := range []bool{false, true} {
			t.Run(fmt.Sprintf("derived=%t", derived), func(t *testing.T) {
				t.Parallel()
				s, ctx := open(t), t.Context()
				o := newOrder(t, "tenant-a", "cust-1", base)
				rec := newRecord("tenant-a", "create-1", o.ID, base)
				if derived {
					rec = asDerived(rec)
				}
				mustCreate(t, s, &rec, o)

				assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
				got, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("create-1"))
				if err != nil {
					t.Fatalf("LookupKey: %v", err)
				}
				assertRecord(t, got, rec)
				if got.ErrorCode != "" || got.ErrorDetail != "" {
					t.Errorf("ErrorCode, ErrorDetail = %q, %q; want empty", got.ErrorCode, got.ErrorDetail)
				}
			})
		}
	})

	t.Run("WithHeldKeyReturnsHeldAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		first := newOrder(t, "tenant-a", "cust-1", base)
		firstRec := newRecord("tenant-a", "create-1", first.ID, base)
		mustCreate(t, s, &firstRec, first)

		second := newOrder(t, "tenant-a", "cust-2", base.Add(time.Second))
		secondRec := newRecord("tenant-a", "create-1", second.ID, base.Add(time.Second))
		held, err := s.CreateOrder(ctx, &secondRec, second)
		if err != nil {
			t.Fatalf("second CreateOrder: %v", err)
		}
		if held == nil {
			t.Fatal("second CreateOrder with the same key claimed it; want the first record held")
		}
		assertRecord(t, *held, firstRec)

		assertNotFound(t, "GetOrder of the second order", getErr(s.GetOrder(ctx, "tenant-a", second.ID)))
		assertOrder(t, mustGet(t, s, "tenant-a", first.ID), first)
		got, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("create-1"))
		if err != nil {
			t.Fatalf("LookupKey: %v", err)
		}
		assertRecord(t, got, firstRec)
	})

	t.Run("SameKeyUnderAnotherTenantIsClaimedIndependently", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		a := newOrder(t, "tenant-a", "cust-1", base)
		aRec := newRecord("tenant-a", "shared-key", a.ID, base)
		mustCreate(t, s, &aRec, a)

		b := newOrder(t, "tenant-b", "cust-1", base.Add(time.Second))
		bRec := newRecord("tenant-b", "shared-key", b.ID, base.Add(time.Second))
		mustCreate(t, s, &bRec, b)

		assertOrder(t, mustGet(t, s, "tenant-a", a.ID), a)
		assertOrder(t, mustGet(t, s, "tenant-b", b.ID), b)
		for _, want := range []idempotency.Record{aRec, bRec} {
			got, err := s.LookupKey(ctx, want.TenantID, want.KeyHash)
			if err != nil {
				t.Fatalf("LookupKey(%s): %v", want.TenantID, err)
			}
			assertRecord(t, got, want)
		}
	})
}

func testGetOrder(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("AnotherTenantsOrderIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)

		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
		assertNotFound(t, "GetOrder by another tenant", getErr(s.GetOrder(ctx, "tenant-b", o.ID)))
	})

	t.Run("UnknownIDIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		mustCreate(t, s, nil, newOrder(t, "tenant-a", "cust-1", base))
		assertNotFound(t, "GetOrder of an unknown id", getErr(s.GetOrder(ctx, "tenant-a", order.NewID())))
	})
}

// testKeyTakeover checks, for every method that claims a key, which held
// keys a claim takes over: only an expired derived one, expiry judged at the
// claim's CreatedAt (expired at ExpiresAt itself, as Record.Expired says).
func testKeyTakeover(t *testing.T, open func(t *testing.T) store.Store) {
	cases := []struct {
		name     string
		derived  bool
		claimAt  time.Duration // after the held record's CreatedAt
		takeover bool
	}{
		{"ExpiredDerivedKeyIsTakenOver", true, time.Hour, true},
		{"DerivedKeyIsTakenOverAtExpiresAt", true, idempotency.DefaultDerivedKeyTTL, true},
		{"DerivedKeyIsNotTakenOverJustBeforeExpiresAt", true, idempotency.DefaultDerivedKeyTTL - time.Microsecond, false},
		{"LiveDerivedKeyIsNotTakenOver", true, time.Second, false},
		{"ExpiredClientKeyIsNotTakenOver", false, idempotency.DefaultKeyTTL + time.Hour, false},
		{"LiveClientKeyIsNotTakenOver", false, time.Second, false},
	}
	// Each method claims newRec and reports whether its effect is visible.
	methods := []struct {
		name  string
		claim func(t *testing.T, s store.Store, old order.Order, newRec idempotency.Record) (effect func() bool, held *idempotency.Record, err error)
	}{
		{"CreateOrder", func(t *testing.T, s store.Store, _ order.Order, newRec idempotency.Record) (func() bool, *idempotency.Record, error) {
			o := newOrder(t, "tenant-a", "cust-2", newRec.CreatedAt)
			newRec.ResourceID = o.ID
			held, err := s.CreateOrder(t.Context(), &newRec, o)
			return func() bool {
				_, err := s.GetOrder(t.Context(), "tenant-a", o.ID)
				return err == nil
			}, held, err
		}},
		{"Transition", func(t *testing.T, s store.Store, old order.Order, newRec idempotency.Record) (func() bool, *idempotency.Record, error) {
			newRec.StatusCode = 200
			held, err := s.Transition(t.Context(), &newRec, old.Apply(order.Paid, newRec.CreatedAt))
			return func() bool { return mustGet(t, s, "tenant-a", old.ID).Version == 2 }, held, err
		}},
		{"SaveRecord", func(t *testing.T, s store.Store, _ order.Order, newRec idempotency.Record) (func() bool, *idempotency.Record, error) {
			held, err := s.SaveRecord(t.Context(), newRec)
			return func() bool {
				r, err := s.LookupKey(t.Context(), newRec.TenantID, newRec.KeyHash)
				return err == nil && r.Fingerprint == newRec.Fingerprint
			}, held, err
		}},
	}
	for _, m := range methods {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					s, ctx := open(t), t.Context()
					old := newOrder(t, "tenant-a", "cust-1", base)
					oldRec := newRecord("tenant-a", "key-1", old.ID, base)
					if tc.derived {
						oldRec = asDerived(oldRec)
					}
					mustCreate(t, s, &oldRec, old)

					newRec := newRecord("tenant-a", "key-1", old.ID, base.Add(tc.claimAt))
					if tc.derived {
						newRec = asDerived(newRec)
					}
					effect, held, err := m.claim(t, s, old, newRec)
					if err != nil {
						t.Fatalf("%s: %v", m.name, err)
					}
					got, lerr := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("key-1"))
					if lerr != nil {
						t.Fatalf("LookupKey: %v", lerr)
					}
					if tc.takeover {
						if held != nil {
							t.Fatalf("%s returned held %+v; want the expired derived key taken over", m.name, *held)
						}
						if got.Fingerprint != newRec.Fingerprint || !sameTime(got.CreatedAt, newRec.CreatedAt) ||
							!sameTime(got.ExpiresAt, newRec.ExpiresAt) {
							t.Errorf("after takeover LookupKey = %+v; want the new claim %+v", got, newRec)
						}
						if !effect() {
							t.Errorf("%s took the key over but its write is not visible", m.name)
						}
						// The order the old key pointed to is untouched.
						if m.name == "CreateOrder" {
							assertOrder(t, mustGet(t, s, "tenant-a", old.ID), old)
						}
						return
					}
					if held == nil {
						t.Fatalf("%s claimed a key that must stay held", m.name)
					}
					assertRecord(t, *held, oldRec)
					assertRecord(t, got, oldRec)
					if effect() {
						t.Errorf("%s returned held but wrote its effect", m.name)
					}
				})
			}
		})
	}
}

func testTransition(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("CompareAndSetSucceedsAndClaimsKey", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)

		paid := o.Apply(order.Paid, base.Add(time.Minute))
		payRec := newRecord("tenant-a", "pay-1", o.ID, base.Add(time.Minute))
		payRec.StatusCode = 200
		mustTransition(t, s, &payRec, paid)
		got := mustGet(t, s, "tenant-a", o.ID)
		assertOrder(t, got, paid)
		if got.Version != 2 || got.State != order.Paid || got.PaidAt == nil {
			t.Errorf("after pay: Version, State, PaidAt = %d, %s, %v; want 2, PAID, set", got.Version, got.State, got.PaidAt)
		}
		rec, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("pay-1"))
		if err != nil {
			t.Fatalf("LookupKey: %v", err)
		}
		assertRecord(t, rec, payRec)

		// A second transition round-trips the next timestamp and keeps PaidAt.
		fulfilled := paid.Apply(order.Fulfilled, base.Add(time.Hour))
		fulRec := newRecord("tenant-a", "fulfill-1", o.ID, base.Add(time.Hour))
		fulRec.StatusCode = 200
		mustTransition(t, s, &fulRec, fulfilled)
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), fulfilled)
	})

	t.Run("CancelRoundTripsCancelledAt", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		cancelled := o.Apply(order.Cancelled, base.Add(time.Minute))
		mustTransition(t, s, nil, cancelled)
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), cancelled)
	})

	t.Run("WithoutKeyIsACompareAndSet", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		paid := o.Apply(order.Paid, base.Add(time.Minute))
		mustTransition(t, s, nil, paid)
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)

		// The same write again read version 1, which is gone.
		held, err := s.Transition(ctx, nil, paid)
		if !errors.Is(err, store.ErrVersionConflict) || held != nil {
			t.Fatalf("repeated Transition = %v, %v; want nil, ErrVersionConflict", held, err)
		}
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)
	})

	t.Run("WrongVersionConflictsAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name string
			next func(o order.Order) order.Order
		}{
			{"Stale", func(o order.Order) order.Order { return o.Apply(order.Cancelled, base.Add(time.Hour)) }},
			{"Ahead", func(o order.Order) order.Order {
				n := o.Apply(order.Paid, base.Add(time.Hour))
				n.Version = 7
				return n
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, ctx := open(t), t.Context()
				o := newOrder(t, "tenant-a", "cust-1", base)
				mustCreate(t, s, nil, o)
				paid := o.Apply(order.Paid, base.Add(time.Minute))
				mustTransition(t, s, nil, paid)

				rec := newRecord("tenant-a", "late-1", o.ID, base.Add(time.Hour))
				rec.StatusCode = 200
				held, err := s.Transition(ctx, &rec, tc.next(o))
				if !errors.Is(err, store.ErrVersionConflict) {
					t.Fatalf("Transition err = %v, want ErrVersionConflict", err)
				}
				if held != nil {
					t.Errorf("Transition held = %+v, want nil", *held)
				}
				assertNotFound(t, "LookupKey of a conflicted transition's key", getErr(s.LookupKey(ctx, "tenant-a", idempotency.HashKey("late-1"))))
				assertOrder(t, mustGet(t, s, "tenant-a", o.ID), paid)
			})
		}
	})

	t.Run("HeldKeyReturnsHeldAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		first := newRecord("tenant-a", "pay-1", o.ID, base)
		first.StatusCode, first.ErrorCode, first.ErrorDetail = 402, order.EDeclined, "card declined"
		if held, err := s.SaveRecord(ctx, first); err != nil || held != nil {
			t.Fatalf("SaveRecord = %v, %v; want nil, nil", held, err)
		}

		// The compare-and-set alone would succeed: version 1 is current.
		again := newRecord("tenant-a", "pay-1", o.ID, base.Add(time.Minute))
		again.StatusCode = 200
		held, err := s.Transition(ctx, &again, o.Apply(order.Paid, base.Add(time.Minute)))
		if err != nil {
			t.Fatalf("Transition: %v", err)
		}
		if held == nil {
			t.Fatal("Transition claimed a held key")
		}
		assertRecord(t, *held, first)
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
	})

	t.Run("AnotherTenantsOrderConflicts", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)

		next := o.Apply(order.Paid, base.Add(time.Minute))
		next.TenantID = "tenant-b"
		rec := newRecord("tenant-b", "pay-1", o.ID, base.Add(time.Minute))
		rec.StatusCode = 200
		if held, err := s.Transition(ctx, &rec, next); !errors.Is(err, store.ErrVersionConflict) || held != nil {
			t.Errorf("Transition with key = %v, %v; want nil, ErrVersionConflict", held, err)
		}
		if held, err := s.Transition(ctx, nil, next); !errors.Is(err, store.ErrVersionConflict) || held != nil {
			t.Errorf("Transition without key = %v, %v; want nil, ErrVersionConflict", held, err)
		}
		assertNotFound(t, "LookupKey of the conflicted key", getErr(s.LookupKey(ctx, "tenant-b", idempotency.HashKey("pay-1"))))
		assertNotFound(t, "GetOrder by the other tenant", getErr(s.GetOrder(ctx, "tenant-b", o.ID)))
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), o)
	})

	t.Run("UnknownOrderConflicts", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base) // never stored
		rec := newRecord("tenant-a", "pay-1", o.ID, base)
		rec.StatusCode = 200
		if held, err := s.Transition(ctx, &rec, o.Apply(order.Paid, base)); !errors.Is(err, store.ErrVersionConflict) || held != nil {
			t.Errorf("Transition = %v, %v; want nil, ErrVersionConflict", held, err)
		}
		assertNotFound(t, "LookupKey", getErr(s.LookupKey(ctx, "tenant-a", idempotency.HashKey("pay-1"))))
		assertNotFound(t, "GetOrder", getErr(s.GetOrder(ctx, "tenant-a", o.ID)))
	})
}

func testSaveRecord(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("ClaimsThenReturnsHeld", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		first := newRecord("tenant-a", "noop-1", order.NewID(), base)
		first.StatusCode = 200
		if held, err := s.SaveRecord(ctx, first); err != nil || held != nil {
			t.Fatalf("first SaveRecord = %v, %v; want nil, nil", held, err)
		}
		second := newRecord("tenant-a", "noop-1", order.NewID(), base.Add(time.Second))
		second.StatusCode = 200
		held, err := s.SaveRecord(ctx, second)
		if err != nil {
			t.Fatalf("second SaveRecord: %v", err)
		}
		if held == nil {
			t.Fatal("second SaveRecord claimed a held key")
		}
		assertRecord(t, *held, first)
		got, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("noop-1"))
		if err != nil {
			t.Fatalf("LookupKey: %v", err)
		}
		assertRecord(t, got, first)
	})

	t.Run("FinalErrorRoundTrips", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name     string
			status   int
			code     order.Code
			detail   string
			resource string
		}{
			{"InvalidTransition", 409, order.EInvalidTransition, "cannot pay an order in state CANCELLED", order.NewID()},
			{"Declined", 402, order.EDeclined, "the card was declined — insufficient funds", order.NewID()},
			{"InvalidWithoutResource", 400, order.EInvalid, "customer_id is required", ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, ctx := open(t), t.Context()
				rec := newRecord("tenant-a", "err-1", tc.resource, base)
				rec.StatusCode, rec.ErrorCode, rec.ErrorDetail = tc.status, tc.code, tc.detail
				if held, err := s.SaveRecord(ctx, rec); err != nil || held != nil {
					t.Fatalf("SaveRecord = %v, %v; want nil, nil", held, err)
				}
				got, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("err-1"))
				if err != nil {
					t.Fatalf("LookupKey: %v", err)
				}
				assertRecord(t, got, rec)
				if order.ErrorCode(got.Err()) != tc.code {
					t.Errorf("Err() code = %q, want %q", order.ErrorCode(got.Err()), tc.code)
				}
			})
		}
	})
}

func testLookupKey(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("UnknownKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		assertNotFound(t, "LookupKey", getErr(s.LookupKey(ctx, "tenant-a", idempotency.HashKey("nope"))))
	})

	t.Run("AnotherTenantsKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		rec := newRecord("tenant-a", "key-1", order.NewID(), base)
		if held, err := s.SaveRecord(ctx, rec); err != nil || held != nil {
			t.Fatalf("SaveRecord = %v, %v; want nil, nil", held, err)
		}
		if _, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("key-1")); err != nil {
			t.Fatalf("LookupKey by its tenant: %v", err)
		}
		assertNotFound(t, "LookupKey by another tenant", getErr(s.LookupKey(ctx, "tenant-b", idempotency.HashKey("key-1"))))
	})
}

func testListOrders(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	// Tenant A has seven orders, created in sequence (so ids ascend) and
	// interleaved with tenant B's; a[i] is the i-th oldest, as stored.
	var a, b []order.Order
	for i := range 7 {
		o := newOrder(t, "tenant-a", fmt.Sprintf("cust-%d", i%2+1), base.Add(time.Duration(i)*time.Second))
		mustCreate(t, s, nil, o)
		switch i {
		case 1, 4:
			o = o.Apply(order.Paid, base.Add(time.Hour))
			mustTransition(t, s, nil, o)
		case 5:
			o = o.Apply(order.Cancelled, base.Add(time.Hour))
			mustTransition(t, s, nil, o)
		}
		a = append(a, o)
		if i%3 == 0 {
			o := newOrder(t, "tenant-b", "cust-1", base.Add(time.Duration(i)*time.Second))
			mustCreate(t, s, nil, o)
			b = append(b, o)
		}
	}
	for i := 1; i < len(a); i++ {
		if a[i-1].ID >= a[i].ID {
			t.Fatalf("fixture: order ids do not ascend: %s then %s", a[i-1].ID, a[i].ID)
		}
	}

	cases := []struct {
		name   string
		tenant string
		filter order.Filter
		want   []order.Order // newest first
	}{
		{"NewestFirst", "tenant-a", order.Filter{Limit: 100}, pick(a, 6, 5, 4, 3, 2, 1, 0)},
		{"ByState", "tenant-a", order.Filter{State: order.Paid, Limit: 100}, pick(a, 4, 1)},
		{"ByReceivedState", "tenant-a", order.Filter{State: order.Received, Limit: 100}, pick(a, 6, 3, 2, 0)},
		{"ByCustomer", "tenant-a", order.Filter{CustomerID: "cust-1", Limit: 100}, pick(a, 6, 4, 2, 0)},
		{"ByStateAndCustomer", "tenant-a", order.Filter{State: order.Paid, CustomerID: "cust-1", Limit: 100}, pick(a, 4)},
		{"NoMatch", "tenant-a", order.Filter{State: order.Fulfilled, Limit: 100}, nil},
		{"UnknownCustomer", "tenant-a", order.Filter{CustomerID: "cust-9", Limit: 100}, nil},
		{"Limit", "tenant-a", order.Filter{Limit: 3}, pick(a, 6, 5, 4)},
		{"After", "tenant-a", order.Filter{After: a[4].ID, Limit: 100}, pick(a, 3, 2, 1, 0)},
		{"AfterWithLimit", "tenant-a", order.Filter{After: a[4].ID, Limit: 2}, pick(a, 3, 2)},
		{"AfterWithCustomer", "tenant-a", order.Filter{After: a[4].ID, CustomerID: "cust-2", Limit: 100}, pick(a, 3, 1)},
		{"AfterOldest", "tenant-a", order.Filter{After: a[0].ID, Limit: 100}, nil},
		{"OtherTenantSeesOnlyItsOwn", "tenant-b", order.Filter{Limit: 100}, pick(b, 2, 1, 0)},
		{"OtherTenantByCustomer", "tenant-b", order.Filter{CustomerID: "cust-1", Limit: 100}, pick(b, 2, 1, 0)},
		{"UnknownTenantSeesNothing", "tenant-c", order.Filter{Limit: 100}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := s.ListOrders(t.Context(), tc.tenant, tc.filter)
			if err != nil {
				t.Fatalf("ListOrders: %v", err)
			}
			if !slices.Equal(ids(got), ids(tc.want)) {
				t.Fatalf("ListOrders(%s, %+v) ids =\n  %v\nwant\n  %v", tc.tenant, tc.filter, ids(got), ids(tc.want))
			}
			for i := range got {
				assertOrder(t, got[i], tc.want[i])
			}
		})
	}

	t.Run("CursorPagesWithoutOverlapOrGap", func(t *testing.T) {
		t.Parallel()
		pages := []struct {
			name   string
			filter order.Filter
			want   []order.Order
		}{
			{"All", order.Filter{Limit: 3}, pick(a, 6, 5, 4, 3, 2, 1, 0)},
			{"ByCustomer", order.Filter{CustomerID: "cust-1", Limit: 1}, pick(a, 6, 4, 2, 0)},
			{"ExactMultiple", order.Filter{CustomerID: "cust-1", Limit: 2}, pick(a, 6, 4, 2, 0)},
		}
		for _, tc := range pages {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				var seen []string
				f := tc.filter
				for range len(tc.want) + 2 {
					page, err := s.ListOrders(t.Context(), "tenant-a", f)
					if err != nil {
						t.Fatalf("ListOrders(%+v): %v", f, err)
					}
					if len(page) > f.Limit {
						t.Fatalf("page of %d orders, Limit %d", len(page), f.Limit)
					}
					if len(page) == 0 {
						break
					}
					seen = append(seen, ids(page)...)
					f.After = page[len(page)-1].ID
				}
				if !slices.Equal(seen, ids(tc.want)) {
					t.Errorf("paged ids =\n  %v\nwant\n  %v", seen, ids(tc.want))
				}
			})
		}
	})
}

func testConcurrency(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("CreatesWithSameKeyHaveOneWinner", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		orders := make([]order.Order, racers)
		recs := make([]idempotency.Record, racers)
		for i := range racers {
			orders[i] = newOrder(t, "tenant-a", fmt.Sprintf("cust-%d", i), base)
			recs[i] = newRecord("tenant-a", "same-key", orders[i].ID, base)
		}
		out := race(racers, func(i int) (*idempotency.Record, error) {
			return s.CreateOrder(ctx, &recs[i], orders[i])
		})
		w := oneWinner(t, out)
		for i, o := range out {
			if i != w && o.held.ResourceID != orders[w].ID {
				t.Errorf("goroutine %d: held ResourceID = %s, want the winner's %s", i, o.held.ResourceID, orders[w].ID)
			}
		}
		list, err := s.ListOrders(ctx, "tenant-a", order.Filter{Limit: 100})
		if err != nil {
			t.Fatalf("ListOrders: %v", err)
		}
		if !slices.Equal(ids(list), []string{orders[w].ID}) {
			t.Errorf("orders stored = %v, want only the winner's %s", ids(list), orders[w].ID)
		}
		got, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("same-key"))
		if err != nil {
			t.Fatalf("LookupKey: %v", err)
		}
		assertRecord(t, got, recs[w])
	})

	t.Run("CreatesWithDistinctKeysAllSucceed", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		orders := make([]order.Order, racers)
		recs := make([]idempotency.Record, racers)
		for i := range racers {
			orders[i] = newOrder(t, "tenant-a", "cust-1", base)
			recs[i] = newRecord("tenant-a", fmt.Sprintf("key-%d", i), orders[i].ID, base)
		}
		out := race(racers, func(i int) (*idempotency.Record, error) {
			return s.CreateOrder(ctx, &recs[i], orders[i])
		})
		for i, o := range out {
			if o.err != nil || o.held != nil {
				t.Errorf("goroutine %d: CreateOrder = %v, %v; want nil, nil", i, o.held, o.err)
			}
		}
		list, err := s.ListOrders(ctx, "tenant-a", order.Filter{Limit: 100})
		if err != nil {
			t.Fatalf("ListOrders: %v", err)
		}
		if len(list) != racers {
			t.Errorf("orders stored = %d, want %d", len(list), racers)
		}
	})

	t.Run("TakeoversOfExpiredDerivedKeyHaveOneWinner", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		old := newOrder(t, "tenant-a", "cust-1", base)
		oldRec := asDerived(newRecord("tenant-a", "derived-key", old.ID, base))
		mustCreate(t, s, &oldRec, old)

		later := base.Add(time.Hour)
		orders := make([]order.Order, racers)
		recs := make([]idempotency.Record, racers)
		for i := range racers {
			orders[i] = newOrder(t, "tenant-a", "cust-1", later)
			recs[i] = asDerived(newRecord("tenant-a", "derived-key", orders[i].ID, later))
		}
		out := race(racers, func(i int) (*idempotency.Record, error) {
			return s.CreateOrder(ctx, &recs[i], orders[i])
		})
		w := oneWinner(t, out)
		for i, o := range out {
			if i != w && o.held.ResourceID != orders[w].ID {
				t.Errorf("goroutine %d: held ResourceID = %s, want the winner's %s", i, o.held.ResourceID, orders[w].ID)
			}
		}
		list, err := s.ListOrders(ctx, "tenant-a", order.Filter{Limit: 100})
		if err != nil {
			t.Fatalf("ListOrders: %v", err)
		}
		if !slices.Equal(ids(list), []string{orders[w].ID, old.ID}) {
			t.Errorf("orders stored = %v, want the winner's %s and the old %s", ids(list), orders[w].ID, old.ID)
		}
	})

	t.Run("TransitionsFromSameVersionHaveOneWinner", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		nexts := make([]order.Order, racers)
		recs := make([]idempotency.Record, racers)
		for i := range racers {
			at := base.Add(time.Duration(i+1) * time.Second)
			nexts[i] = o.Apply(order.Paid, at)
			recs[i] = newRecord("tenant-a", fmt.Sprintf("pay-%d", i), o.ID, at)
			recs[i].StatusCode = 200
		}
		out := race(racers, func(i int) (*idempotency.Record, error) {
			return s.Transition(ctx, &recs[i], nexts[i])
		})
		w := -1
		for i, r := range out {
			switch {
			case r.err == nil && r.held == nil:
				if w >= 0 {
					t.Fatalf("goroutines %d and %d both won the compare-and-set", w, i)
				}
				w = i
			case errors.Is(r.err, store.ErrVersionConflict) && r.held == nil:
			default:
				t.Errorf("goroutine %d: Transition = %v, %v; want success or ErrVersionConflict", i, r.held, r.err)
			}
		}
		if w < 0 {
			t.Fatal("no goroutine won the compare-and-set")
		}
		assertOrder(t, mustGet(t, s, "tenant-a", o.ID), nexts[w])
		for i, rec := range recs {
			got, err := s.LookupKey(ctx, "tenant-a", rec.KeyHash)
			switch {
			case i == w && err != nil:
				t.Errorf("winner's key: LookupKey: %v", err)
			case i == w:
				assertRecord(t, got, rec)
			case !errors.Is(err, store.ErrNotFound):
				t.Errorf("loser %d's key: LookupKey err = %v, want ErrNotFound", i, err)
			}
		}
	})

	t.Run("TransitionsWithSameKeyHaveOneWinner", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		nexts := make([]order.Order, racers)
		recs := make([]idempotency.Record, racers)
		for i := range racers {
			at := base.Add(time.Duration(i+1) * time.Second)
			nexts[i] = o.Apply(order.Paid, at)
			recs[i] = newRecord("tenant-a", "pay", o.ID, at)
			recs[i].StatusCode = 200
		}
		out := race(racers, func(i int) (*idempotency.Record, error) {
			return s.Transition(ctx, &recs[i], nexts[i])
		})
		w := -1
		for i, r := range out {
			if r.err == nil && r.held == nil {
				if w >= 0 {
					t.Fatalf("goroutines %d and %d both claimed the key", w, i)
				}
				w = i
			}
		}
		if w < 0 {
			t.Fatal("no goroutine claimed the key")
		}
		for i, r := range out {
			switch {
			case i == w:
			case r.err == nil && r.held != nil:
				assertRecord(t, *r.held, recs[w])
			case errors.Is(r.err, store.ErrVersionConflict) && r.held == nil:
			default:
				t.Errorf("goroutine %d: Transition = %v, %v; want held or ErrVersionConflict", i, r.held, r.err)
			}
		}
		got := mustGet(t, s, "tenant-a", o.ID)
		if got.Version != 2 {
			t.Errorf("final Version = %d, want 2", got.Version)
		}
		assertOrder(t, got, nexts[w])
		rec, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("pay"))
		if err != nil {
			t.Fatalf("LookupKey: %v", err)
		}
		assertRecord(t, rec, recs[w])
	})

	t.Run("SaveRecordsWithSameKeyHaveOneWinner", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		resource := order.NewID()
		recs := make([]idempotency.Record, racers)
		for i := range racers {
			recs[i] = newRecord("tenant-a", "final", resource, base.Add(time.Duration(i)*time.Microsecond))
			recs[i].StatusCode, recs[i].ErrorCode, recs[i].ErrorDetail = 409, order.EInvalidTransition, fmt.Sprintf("attempt %d", i)
		}
		out := race(racers, func(i int) (*idempotency.Record, error) {
			return s.SaveRecord(ctx, recs[i])
		})
		w := oneWinner(t, out)
		for i, o := range out {
			if i != w {
				assertRecord(t, *o.held, recs[w])
			}
		}
	})
}

// outcome is what one racing goroutine got back.
type outcome struct {
	held *idempotency.Record
	err  error
}

// race runs fn(0..n-1) on n goroutines released at once and returns their
// outcomes, indexed like the goroutines.
func race(n int, fn func(i int) (*idempotency.Record, error)) []outcome {
	out := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i].held, out[i].err = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// oneWinner checks that exactly one outcome claimed its key (nil, nil) and
// every other one got a held record and no error; it returns the winner.
func oneWinner(t *testing.T, out []outcome) int {
	t.Helper()
	w, ok := -1, true
	for i, o := range out {
		switch {
		case o.err != nil:
			t.Errorf("goroutine %d: %v", i, o.err)
			ok = false
		case o.held != nil:
		case w >= 0:
			t.Errorf("goroutines %d and %d both claimed the key", w, i)
			ok = false
		default:
			w = i
		}
	}
	if w < 0 {
		t.Errorf("no goroutine claimed the key")
		ok = false
	}
	if !ok {
		t.FailNow()
	}
	return w
}

// newOrder returns a valid order of tenant for customer, created at.
func newOrder(t *testing.T, tenant, customer string, at time.Time) order.Order {
	t.Helper()
	o, err := order.New(tenant, order.NewOrderInput{
		CustomerID: customer,
		Currency:   "EUR",
		Items: []order.Item{
			{SKU: "SKU-RED", Quantity: 2, UnitPrice: 1250},
			{SKU: "SKU-BLUE", Quantity: 1, UnitPrice: 999},
		},
	}, at)
	if err != nil {
		t.Fatalf("order.New: %v", err)
	}
	return o
}

// newRecord returns the record of a successful create (201) that claimed a
// client-sent key at created for resourceID. Its fingerprint differs for
// every (key, resource, created), so a held record is told from a new one.
func newRecord(tenant, key, resourceID string, created time.Time) idempotency.Record {
	return idempotency.Record{
		TenantID:    tenant,
		KeyHash:     idempotency.HashKey(key),
		Fingerprint: fmt.Sprintf("sha256:%s/%s/%d", key, resourceID, created.UnixMicro()),
		StatusCode:  201,
		ResourceID:  resourceID,
		CreatedAt:   created,
		ExpiresAt:   created.Add(idempotency.DefaultKeyTTL),
	}
}

// asDerived turns r into a derived key's record, with its shorter window.
func asDerived(r idempotency.Record) idempotency.Record {
	r.Derived = true
	r.ExpiresAt = r.CreatedAt.Add(idempotency.DefaultDerivedKeyTTL)
	return r
}

func mustCreate(t *testing.T, s store.Store, key *idempotency.Record, o order.Order) {
	t.Helper()
	held, err := s.CreateOrder(t.Context(), key, o)
	if err != nil {
		t.Fatalf("CreateOrder(%s): %v", o.ID, err)
	}
	if held != nil {
		t.Fatalf("CreateOrder(%s): key held by %+v", o.ID, *held)
	}
}

func mustTransition(t *testing.T, s store.Store, key *idempotency.Record, next order.Order) {
	t.Helper()
	held, err := s.Transition(t.Context(), key, next)
	if err != nil {
		t.Fatalf("Transition(%s to %s v%d): %v", next.ID, next.State, next.Version, err)
	}
	if held != nil {
		t.Fatalf("Transition(%s): key held by %+v", next.ID, *held)
	}
}

func mustGet(t *testing.T, s store.Store, tenant, id string) order.Order {
	t.Helper()
	o, err := s.GetOrder(t.Context(), tenant, id)
	if err != nil {
		t.Fatalf("GetOrder(%s, %s): %v", tenant, id, err)
	}
	return o
}

// getErr drops a value to keep the error, for assertNotFound.
func getErr[T any](_ T, err error) error { return err }

func assertNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s: err = %v, want store.ErrNotFound", what, err)
	}
}

// assertOrder checks every field of got against want; times must be equal
// instants in UTC.
func assertOrder(t *testing.T, got, want order.Order) {
	t.Helper()
	var d diff
	d.check("ID", got.ID == want.ID, got.ID, want.ID)
	d.check("TenantID", got.TenantID == want.TenantID, got.TenantID, want.TenantID)
	d.check("CustomerID", got.CustomerID == want.CustomerID, got.CustomerID, want.CustomerID)
	d.check("Currency", got.Currency == want.Currency, got.Currency, want.Currency)
	d.check("Items", slices.Equal(got.Items, want.Items), got.Items, want.Items)
	d.check("Amount", got.Amount == want.Amount, got.Amount, want.Amount)
	d.check("State", got.State == want.State, got.State, want.State)
	d.check("Version", got.Version == want.Version, got.Version, want.Version)
	d.check("CreatedAt", sameTime(got.CreatedAt, want.CreatedAt), got.CreatedAt, want.CreatedAt)
	d.check("PaidAt", sameTimePtr(got.PaidAt, want.PaidAt), fmtPtr(got.PaidAt), fmtPtr(want.PaidAt))
	d.check("FulfilledAt", sameTimePtr(got.FulfilledAt, want.FulfilledAt), fmtPtr(got.FulfilledAt), fmtPtr(want.FulfilledAt))
	d.check("CancelledAt", sameTimePtr(got.CancelledAt, want.CancelledAt), fmtPtr(got.CancelledAt), fmtPtr(want.CancelledAt))
	if len(d) > 0 {
		t.Errorf("order %s differs:\n  %s", want.ID, strings.Join(d, "\n  "))
	}
}

// assertRecord checks every field of got against want.
func assertRecord(t *testing.T, got, want idempotency.Record) {
	t.Helper()
	var d diff
	d.check("TenantID", got.TenantID == want.TenantID, got.TenantID, want.TenantID)
	d.check("KeyHash", got.KeyHash == want.KeyHash, got.KeyHash, want.KeyHash)
	d.check("Fingerprint", got.Fingerprint == want.Fingerprint, got.Fingerprint, want.Fingerprint)
	d.check("Derived", got.Derived == want.Derived, got.Derived, want.Derived)
	d.check("StatusCode", got.StatusCode == want.StatusCode, got.StatusCode, want.StatusCode)
	d.check("ResourceID", got.ResourceID == want.ResourceID, got.ResourceID, want.ResourceID)
	d.check("ErrorCode", got.ErrorCode == want.ErrorCode, got.ErrorCode, want.ErrorCode)
	d.check("ErrorDetail", got.ErrorDetail == want.ErrorDetail, got.ErrorDetail, want.ErrorDetail)
	d.check("CreatedAt", sameTime(got.CreatedAt, want.CreatedAt), got.CreatedAt, want.CreatedAt)
	d.check("ExpiresAt", sameTime(got.ExpiresAt, want.ExpiresAt), got.ExpiresAt, want.ExpiresAt)
	if len(d) > 0 {
		t.Errorf("record (%s, %s) differs:\n  %s", want.TenantID, want.KeyHash, strings.Join(d, "\n  "))
	}
}

// diff collects the fields that differ.
type diff []string

func (d *diff) check(field string, ok bool, got, want any) {
	if !ok {
		*d = append(*d, fmt.Sprintf("%s = %v, want %v", field, got, want))
	}
}

// sameTime reports whether got is the instant want, in UTC.
func sameTime(got, want time.Time) bool {
	return got.Equal(want) && got.Location() == time.UTC
}

func sameTimePtr(got, want *time.Time) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	return sameTime(*got, *want)
}

func fmtPtr(t *time.Time) string {
	if t == nil {
		return "<nil>"
	}
	return t.String()
}

func pick(os []order.Order, idx ...int) []order.Order {
	out := make([]order.Order, len(idx))
	for i, j := range idx {
		out[i] = os[j]
	}
	return out
}

func ids(os []order.Order) []string {
	out := make([]string, len(os))
	for i, o := range os {
		out[i] = o.ID
	}
	return out
}
