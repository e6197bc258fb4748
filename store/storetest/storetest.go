// Package storetest is the conformance suite every store.Store must pass.
//
// A store's own test calls Run with a function that opens a fresh, empty,
// migrated store; the suite then checks the contract documented in package
// store: orders round-trip every field, tenants never see each other's rows,
// an idempotency key exists exactly when its effect does, a leased key's
// writes are fenced by its token, order updates are compare-and-sets,
// abandoned keys are taken over once, the sweeper applies the key lifecycle,
// and all of it holds with many goroutines racing. The same suite runs
// against store/postgres and store/sqlite, so the two behave the same.
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
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/store"
)

// base is where each store's database clock starts (the suite moves it;
// see subject): a UTC instant with microsecond digits, the precision both
// stores keep.
var base = time.Date(2025, time.March, 14, 15, 9, 26, 535_897_000, time.UTC)

// racers is how many goroutines each concurrency test starts.
const racers = 50

// leaseFor is how long the suite's claims lease their key.
const leaseFor = 30 * time.Second

// Run runs the conformance suite. openAt must return a fresh, empty,
// migrated store for the test it is given, whose database clock is clk
// (sqlite.WithClock, pgtest.FollowClock), and close it when that test ends
// (with t.Cleanup). Every subtest opens its own store, so subtests run in
// parallel.
func Run(t *testing.T, openAt func(t *testing.T, clk *testclock.Clock) store.Store) {
	open := func(t *testing.T) *subject { return wrap(t, openAt) }
	t.Run("Captures", func(t *testing.T) { testCaptures(t, open) })
	t.Run("CloseRefunds", func(t *testing.T) { testCloseRefunds(t, open) })
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
	t.Run("AcquireLease", func(t *testing.T) {
		t.Parallel()
		testAcquireLease(t, open)
	})
	t.Run("RecordAttempt", func(t *testing.T) {
		t.Parallel()
		testRecordAttempt(t, open)
	})
	t.Run("Complete", func(t *testing.T) {
		t.Parallel()
		testComplete(t, open)
	})
	t.Run("Release", func(t *testing.T) {
		t.Parallel()
		testRelease(t, open)
	})
	t.Run("Fencing", func(t *testing.T) {
		t.Parallel()
		testFencing(t, open)
	})
	t.Run("TakeOverAbandoned", func(t *testing.T) {
		t.Parallel()
		testTakeOverAbandoned(t, open)
	})
	t.Run("Recovery", func(t *testing.T) {
		t.Parallel()
		testRecovery(t, open)
	})
	t.Run("GetAttempt", func(t *testing.T) {
		t.Parallel()
		testGetAttempt(t, open)
	})
	t.Run("Sweep", func(t *testing.T) {
		t.Parallel()
		testSweep(t, open)
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
	t.Run("InTx", func(t *testing.T) {
		t.Parallel()
		testInTx(t, open)
	})
	t.Run("StartLeased", func(t *testing.T) {
		t.Parallel()
		testStartLeased(t, open)
	})
	t.Run("CreateOrders", func(t *testing.T) {
		t.Parallel()
		testCreateOrders(t, open)
	})
	t.Run("Events", func(t *testing.T) {
		t.Parallel()
		testEvents(t, open)
	})
	t.Run("Inbox", func(t *testing.T) {
		t.Parallel()
		testInbox(t, open)
	})
	t.Run("AttemptProgress", func(t *testing.T) {
		t.Parallel()
		testAttemptProgress(t, open)
	})
	t.Run("Backlog", func(t *testing.T) {
		t.Parallel()
		testBacklog(t, open)
	})
	t.Run("DatabaseClock", func(t *testing.T) {
		t.Parallel()
		testDatabaseClock(t, open)
	})
	t.Run("Operator", func(t *testing.T) {
		t.Parallel()
		testOperator(t, open)
	})
	t.Run("OperatorLists", func(t *testing.T) {
		t.Parallel()
		testOperatorLists(t, open)
	})
}

func testCreateOrder(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("WithoutKeyRoundTripsEveryField", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Items keep their order; a free item and the largest amount an order
		// may have (order.MaxAmount, 2^53-1) survive.
		o, err := order.New("tenant-a", order.NewOrderInput{
			CustomerID: "cust-ü-1",
			Currency:   "JPY",
			Items: []order.Item{
				{SKU: "SKU-ZED", Quantity: 3, UnitPrice: 1250},
				{SKU: "SKU-FREE", Quantity: 1, UnitPrice: 0},
				{SKU: "SKU-BIG", Quantity: 1, UnitPrice: order.MaxAmount - 3*1250},
			},
		}, base)
		if err != nil {
			t.Fatalf("order.New: %v", err)
		}
		if o.Amount != order.MaxAmount {
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
		assertRecord(t, held.Record, firstRec)
		if held.Order == nil {
			t.Fatal("held.Order = nil; want the holder's order, read with the claim")
		}
		assertOrder(t, *held.Order, first)

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

func testGetOrder(t *testing.T, open func(t *testing.T) *subject) {
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
// completed keys a claim takes over: only an expired derived one, expiry
// judged on the database's clock, set to the claim's CreatedAt (expired at
// ExpiresAt itself, as Record.Expired says).
func testKeyTakeover(t *testing.T, open func(t *testing.T) *subject) {
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
		claim func(t *testing.T, s *subject, old order.Order, newRec idempotency.Record) (effect func() bool, held *idempotency.Record, err error)
	}{
		{"CreateOrder", func(t *testing.T, s *subject, _ order.Order, newRec idempotency.Record) (func() bool, *idempotency.Record, error) {
			o := newOrder(t, "tenant-a", "cust-2", newRec.CreatedAt)
			newRec.ResourceID = o.ID
			held, err := s.CreateOrder(t.Context(), &newRec, o)
			effect := func() bool {
				_, err := s.GetOrder(t.Context(), "tenant-a", o.ID)
				return err == nil
			}
			if held == nil {
				return effect, nil, err
			}
			return effect, &held.Record, err
		}},
		{"AcquireLease", func(t *testing.T, s *subject, _ order.Order, newRec idempotency.Record) (func() bool, *idempotency.Record, error) {
			newRec.State, newRec.LockedUntil = idempotency.StateInProgress, newRec.CreatedAt.Add(leaseFor)
			r, acquired, err := s.AcquireLease(t.Context(), newRec)
			effect := func() bool {
				r, err := s.LookupKey(t.Context(), newRec.TenantID, newRec.KeyHash)
				return err == nil && r.State == idempotency.StateInProgress && r.Fingerprint == newRec.Fingerprint
			}
			if err != nil || acquired {
				return effect, nil, err
			}
			return effect, &r, nil
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

func testLookupKey(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("UnknownKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		assertNotFound(t, "LookupKey", getErr(s.LookupKey(ctx, "tenant-a", idempotency.HashKey("nope"))))
	})

	t.Run("AnotherTenantsKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, ctx := open(t), t.Context()
		o := newOrder(t, "tenant-a", "cust-1", base)
		rec := newRecord("tenant-a", "key-1", o.ID, base)
		mustCreate(t, s, &rec, o)
		claim := newClaim("tenant-a", "lease-1", o.ID, base)
		mustAcquire(t, s, claim)
		assertRecord(t, mustLookup(t, s, "tenant-a", idempotency.HashKey("key-1")), rec)
		assertRecord(t, mustLookup(t, s, "tenant-a", idempotency.HashKey("lease-1")), claim)
		assertNotFound(t, "LookupKey by another tenant", getErr(s.LookupKey(ctx, "tenant-b", idempotency.HashKey("key-1"))))
		assertNotFound(t, "LookupKey of a lease by another tenant", getErr(s.LookupKey(ctx, "tenant-b", idempotency.HashKey("lease-1"))))
	})
}

func testListOrders(t *testing.T, open func(t *testing.T) *subject) {
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
			mustTransition(t, s, o)
		case 5:
			o = o.Apply(order.Cancelled, base.Add(time.Hour))
			mustTransition(t, s, o)
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

func testConcurrency(t *testing.T, open func(t *testing.T) *subject) {
	t.Run("CreatesWithSameKeyHaveOneWinner", func(t *testing.T) { concurrentCreatesWithSameKeyHaveOneWinner(t, open) })

	t.Run("CreatesWithDistinctKeysAllSucceed", func(t *testing.T) { concurrentCreatesWithDistinctKeysAllSucceed(t, open) })

	t.Run("TakeoversOfExpiredDerivedKeyHaveOneWinner", func(t *testing.T) { concurrentTakeoversOfExpiredDerivedKeyHaveOneWinner(t, open) })

	t.Run("AcquiresOfFreshKeyHaveOneHolder", func(t *testing.T) { concurrentAcquiresOfFreshKeyHaveOneHolder(t, open) })

	t.Run("TakeoversOfExpiredLeaseHaveOneHolder", func(t *testing.T) { concurrentTakeoversOfExpiredLeaseHaveOneHolder(t, open) })

	t.Run("CompletesWithStaleTokensHaveOneWinner", func(t *testing.T) { concurrentCompletesWithStaleTokensHaveOneWinner(t, open) })

	t.Run("CompletesWithNextFromSameVersionHaveOneWinner", func(t *testing.T) { concurrentCompletesWithNextFromSameVersionHaveOneWinner(t, open) })

	t.Run("AttemptsOnOneOrderNeverOverlap", func(t *testing.T) { concurrentAttemptsOnOneOrderNeverOverlap(t, open) })

	// An attempt checks the order's version and a transition checks for open
	// attempts; racing, exactly one of the two wins on every order.
	t.Run("AttemptAndTransitionOnOneOrderNeverBothWin", func(t *testing.T) { concurrentAttemptAndTransitionOnOneOrderNeverBothWin(t, open) })

	t.Run("TakeOversOfAbandonedKeysNeverOverlap", func(t *testing.T) { concurrentTakeOversOfAbandonedKeysNeverOverlap(t, open) })

	t.Run("CreatesWhileKeyForgottenNeverAnswerNotFound", func(t *testing.T) {
		concurrentCreatesWhileKeyForgottenNeverAnswerNotFound(t, open)
	})
}

// createResult is what one racing CreateOrder got back.
type createResult struct {
	held *store.Holder
	err  error
}

// race runs fn(0..n-1) on n goroutines released at once and returns their
// outcomes, indexed like the goroutines.
func race(n int, fn func(i int) (*store.Holder, error)) []createResult {
	return raceAll(n, func(i int) createResult {
		held, err := fn(i)
		return createResult{held, err}
	})
}

// raceAll runs fn(0..n-1) on n goroutines released at once and returns
// what each returned, indexed like the goroutines.
func raceAll[T any](n int, fn func(i int) T) []T {
	out := make([]T, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			out[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// acquired is what one racing AcquireLease got back.
type acquired struct {
	rec idempotency.Record
	ok  bool
	err error
}

// takenBack is what one racing TakeOverAbandoned got back.
type takenBack struct {
	recs []idempotency.Record
	err  error
}

// oneHolder checks that exactly one AcquireLease acquired the key and every
// other one got the holding record and no error; it returns the winner.
func oneHolder(t *testing.T, out []acquired) int {
	t.Helper()
	w, ok := -1, true
	for i, o := range out {
		switch {
		case o.err != nil:
			t.Errorf("goroutine %d: %v", i, o.err)
			ok = false
		case !o.ok:
		case w >= 0:
			t.Errorf("goroutines %d and %d both acquired the key", w, i)
			ok = false
		default:
			w = i
		}
	}
	if w < 0 {
		t.Errorf("no goroutine acquired the key")
		ok = false
	}
	if !ok {
		t.FailNow()
	}
	return w
}

// oneWinner checks that exactly one CreateOrder claimed its key (nil, nil) and
// every other one got a held record and no error; it returns the winner.
func oneWinner(t *testing.T, out []createResult) int {
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
// client-sent key at created for resourceID, as CreateOrder stores it:
// completed, never leased. Its fingerprint differs for every (key,
// resource, created), so a held record is told from a new one.
func newRecord(tenant, key, resourceID string, created time.Time) idempotency.Record {
	return idempotency.Record{
		TenantID:    tenant,
		KeyHash:     idempotency.HashKey(key),
		Fingerprint: fmt.Sprintf("sha256:%s/%s/%d", key, resourceID, created.UnixMicro()),
		Operation:   idempotency.OpCreate,
		ResourceID:  resourceID,
		CreatedAt:   created,
		ExpiresAt:   created.Add(idempotency.DefaultKeyTTL),
		State:       idempotency.StateCompleted,
	}
}

// newClaim returns the claim of a leased request with a client-sent key at
// for resourceID, which is also the record AcquireLease stores for a fresh
// key: in progress, leased until at+leaseFor, token 1, recovery point
// started. Its fingerprint depends on key and resourceID only, so the same
// request sent again later (retryAt) carries the same one.
func newClaim(tenant, key, resourceID string, at time.Time) idempotency.Record {
	return idempotency.Record{
		TenantID:      tenant,
		KeyHash:       idempotency.HashKey(key),
		Fingerprint:   fmt.Sprintf("sha256:%s/%s", key, resourceID),
		Operation:     idempotency.OpPay,
		ResourceID:    resourceID,
		CreatedAt:     at,
		ExpiresAt:     at.Add(idempotency.DefaultKeyTTL),
		State:         idempotency.StateInProgress,
		LockedUntil:   at.Add(leaseFor),
		FencingToken:  1,
		RecoveryPoint: idempotency.RecoveryStarted,
	}
}

// retryAt returns the claim of the request of r sent again at: the same
// key, fingerprint and resource, a lease from at.
func retryAt(r idempotency.Record, at time.Time) idempotency.Record {
	c := idempotency.Record{
		TenantID:      r.TenantID,
		KeyHash:       r.KeyHash,
		Fingerprint:   r.Fingerprint,
		Operation:     r.Operation,
		ResourceID:    r.ResourceID,
		CreatedAt:     at,
		ExpiresAt:     at.Add(idempotency.DefaultKeyTTL),
		State:         idempotency.StateInProgress,
		LockedUntil:   at.Add(leaseFor),
		FencingToken:  1,
		RecoveryPoint: idempotency.RecoveryStarted,
	}
	if r.Derived {
		c = asDerived(c)
	}
	return c
}

// outcome returns the successful outcome of a completion for resourceID.
func outcome(resourceID string) idempotency.Record {
	return idempotency.Record{ResourceID: resourceID}
}

// completedAs returns the leased record r as Complete with outcome o leaves
// it: completed with o's status, resource and error, no lease.
func completedAs(r, o idempotency.Record) idempotency.Record {
	r.State, r.LockedUntil = idempotency.StateCompleted, time.Time{}
	r.ResourceID, r.ErrorCode, r.ErrorDetail = o.ResourceID, o.ErrorCode, o.ErrorDetail
	return r
}

// releasedAs returns the leased record r as Release to state leaves it.
func releasedAs(r idempotency.Record, to idempotency.State) idempotency.Record {
	r.State, r.LockedUntil = to, time.Time{}
	return r
}

// takenOver returns r as a takeover leasing it until leaseUntil leaves it:
// in progress, the next token, the recovery point and attempt kept.
func takenOver(r idempotency.Record, leaseUntil time.Time) idempotency.Record {
	r.State, r.LockedUntil, r.FencingToken = idempotency.StateInProgress, leaseUntil, r.FencingToken+1
	return r
}

// newAttempt returns a pending charge of o with providerKey, recorded at.
func newAttempt(o order.Order, providerKey string, at time.Time) payment.Attempt {
	return payment.Attempt{
		ProviderKey:   providerKey,
		TenantID:      o.TenantID,
		OrderID:       o.ID,
		Kind:          payment.AttemptCharge,
		Status:        payment.AttemptPending,
		Amount:        o.Amount,
		Currency:      o.Currency,
		PaymentMethod: "pm_card_visa",
		CreatedAt:     at,
		UpdatedAt:     at,
	}
}

// settledAs returns a as the update u leaves it.
func settledAs(a payment.Attempt, u store.AttemptUpdate) payment.Attempt {
	a.Status, a.ErrorCode, a.UpdatedAt = u.Status, u.ErrorCode, u.At
	if u.ProviderRef != "" {
		a.ProviderRef = u.ProviderRef
	}
	return a
}

// asDerived turns r into a derived key's record, with its shorter window.
func asDerived(r idempotency.Record) idempotency.Record {
	r.Derived = true
	r.ExpiresAt = r.CreatedAt.Add(idempotency.DefaultDerivedKeyTTL)
	return r
}

func mustCreate(t *testing.T, s *subject, key *idempotency.Record, o order.Order) {
	t.Helper()
	held, err := s.CreateOrder(t.Context(), key, o)
	if err != nil {
		t.Fatalf("CreateOrder(%s): %v", o.ID, err)
	}
	if held != nil {
		t.Fatalf("CreateOrder(%s): key held by %+v", o.ID, held.Record)
	}
}

// mustAcquire acquires claim's key and returns the record stored.
func mustAcquire(t *testing.T, s *subject, claim idempotency.Record) idempotency.Record {
	t.Helper()
	r, ok, err := s.AcquireLease(t.Context(), claim)
	if err != nil {
		t.Fatalf("AcquireLease(%s at %s): %v", claim.KeyHash, claim.CreatedAt, err)
	}
	if !ok {
		t.Fatalf("AcquireLease(%s at %s): not acquired, held by %+v", claim.KeyHash, claim.CreatedAt, r)
	}
	return r
}

// mustRecordAttempt records a under r's lease on its order at version 1.
func mustRecordAttempt(t *testing.T, s *subject, r idempotency.Record, a payment.Attempt) payment.Attempt {
	t.Helper()
	return mustRecordAttemptAt(t, s, r, a, 1)
}

func mustRecordAttemptAt(t *testing.T, s *subject, r idempotency.Record, a payment.Attempt, version int64) payment.Attempt {
	t.Helper()
	got, err := s.RecordAttempt(t.Context(), store.LeaseOf(r), a, version)
	if err != nil {
		t.Fatalf("RecordAttempt(%s): %v", a.ProviderKey, err)
	}
	return got
}

func mustComplete(t *testing.T, s *subject, r idempotency.Record, c completion) {
	t.Helper()
	if err := complete(t.Context(), s, store.LeaseOf(r), c); err != nil {
		t.Fatalf("Complete(%s, token %d): %v", r.KeyHash, r.FencingToken, err)
	}
}

func mustRelease(t *testing.T, s *subject, r idempotency.Record, to idempotency.State, u *store.AttemptUpdate) {
	t.Helper()
	if err := release(t.Context(), s, store.LeaseOf(r), to, u); err != nil {
		t.Fatalf("Release(%s, token %d, %s): %v", r.KeyHash, r.FencingToken, to, err)
	}
}

// mustTransition writes next as a leased request does: it acquires a key
// of its own and completes it with next as the compare-and-set.
func mustTransition(t *testing.T, s *subject, next order.Order) {
	t.Helper()
	key := fmt.Sprintf("transition-%s-v%d", next.ID, next.Version)
	r := mustAcquire(t, s, newClaim(next.TenantID, key, next.ID, base))
	mustComplete(t, s, r, completion{Outcome: outcome(next.ID), Next: &next})
}

func mustLookup(t *testing.T, s *subject, tenant, keyHash string) idempotency.Record {
	t.Helper()
	r, err := s.LookupKey(t.Context(), tenant, keyHash)
	if err != nil {
		t.Fatalf("LookupKey(%s, %s): %v", tenant, keyHash, err)
	}
	return r
}

func mustGetAttempt(t *testing.T, s *subject, providerKey string) payment.Attempt {
	t.Helper()
	a, err := s.GetAttempt(t.Context(), providerKey)
	if err != nil {
		t.Fatalf("GetAttempt(%s): %v", providerKey, err)
	}
	return a
}

func mustGet(t *testing.T, s *subject, tenant, id string) order.Order {
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
	d.check("Operation", got.Operation == want.Operation, got.Operation, want.Operation)
	d.check("ResourceID", got.ResourceID == want.ResourceID, got.ResourceID, want.ResourceID)
	d.check("ErrorCode", got.ErrorCode == want.ErrorCode, got.ErrorCode, want.ErrorCode)
	d.check("ErrorDetail", got.ErrorDetail == want.ErrorDetail, got.ErrorDetail, want.ErrorDetail)
	d.check("CreatedAt", sameTime(got.CreatedAt, want.CreatedAt), got.CreatedAt, want.CreatedAt)
	d.check("ExpiresAt", sameTime(got.ExpiresAt, want.ExpiresAt), got.ExpiresAt, want.ExpiresAt)
	d.check("State", got.State == want.State, got.State, want.State)
	d.check("LockedUntil", sameTime(got.LockedUntil, want.LockedUntil), got.LockedUntil, want.LockedUntil)
	d.check("FencingToken", got.FencingToken == want.FencingToken, got.FencingToken, want.FencingToken)
	d.check("RecoveryPoint", got.RecoveryPoint == want.RecoveryPoint, got.RecoveryPoint, want.RecoveryPoint)
	d.check("AttemptKey", got.AttemptKey == want.AttemptKey, got.AttemptKey, want.AttemptKey)
	d.check("TombstoneUntil", sameTime(got.TombstoneUntil, want.TombstoneUntil), got.TombstoneUntil, want.TombstoneUntil)
	if len(d) > 0 {
		t.Errorf("record (%s, %s) differs:\n  %s", want.TenantID, want.KeyHash, strings.Join(d, "\n  "))
	}
}

// assertAttempt checks every field of got against want.
func assertAttempt(t *testing.T, got, want payment.Attempt) {
	t.Helper()
	var d diff
	d.check("ProviderKey", got.ProviderKey == want.ProviderKey, got.ProviderKey, want.ProviderKey)
	d.check("TenantID", got.TenantID == want.TenantID, got.TenantID, want.TenantID)
	d.check("OrderID", got.OrderID == want.OrderID, got.OrderID, want.OrderID)
	d.check("Kind", got.Kind == want.Kind, got.Kind, want.Kind)
	d.check("Status", got.Status == want.Status, got.Status, want.Status)
	d.check("Amount", got.Amount == want.Amount, got.Amount, want.Amount)
	d.check("Currency", got.Currency == want.Currency, got.Currency, want.Currency)
	d.check("PaymentMethod", got.PaymentMethod == want.PaymentMethod, got.PaymentMethod, want.PaymentMethod)
	d.check("ProviderRef", got.ProviderRef == want.ProviderRef, got.ProviderRef, want.ProviderRef)
	d.check("ErrorCode", got.ErrorCode == want.ErrorCode, got.ErrorCode, want.ErrorCode)
	d.check("IntentID", got.IntentID == want.IntentID, got.IntentID, want.IntentID)
	d.check("KeySentAt", got.KeySentAt.Equal(want.KeySentAt), got.KeySentAt, want.KeySentAt)
	d.check("CreatedAt", sameTime(got.CreatedAt, want.CreatedAt), got.CreatedAt, want.CreatedAt)
	d.check("UpdatedAt", sameTime(got.UpdatedAt, want.UpdatedAt), got.UpdatedAt, want.UpdatedAt)
	if len(d) > 0 {
		t.Errorf("attempt %s differs:\n  %s", want.ProviderKey, strings.Join(d, "\n  "))
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

// concurrentCreatesWithSameKeyHaveOneWinner checks: creates with same key have one winner.
func concurrentCreatesWithSameKeyHaveOneWinner(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	orders := make([]order.Order, racers)
	recs := make([]idempotency.Record, racers)
	for i := range racers {
		orders[i] = newOrder(t, "tenant-a", fmt.Sprintf("cust-%d", i), base)
		recs[i] = newRecord("tenant-a", "same-key", orders[i].ID, base)
	}
	out := race(racers, func(i int) (*store.Holder, error) {
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
}

// concurrentCreatesWithDistinctKeysAllSucceed checks: creates with distinct keys all succeed.
func concurrentCreatesWithDistinctKeysAllSucceed(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	orders := make([]order.Order, racers)
	recs := make([]idempotency.Record, racers)
	for i := range racers {
		orders[i] = newOrder(t, "tenant-a", "cust-1", base)
		recs[i] = newRecord("tenant-a", fmt.Sprintf("key-%d", i), orders[i].ID, base)
	}
	out := race(racers, func(i int) (*store.Holder, error) {
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
}

// concurrentTakeoversOfExpiredDerivedKeyHaveOneWinner checks: takeovers of expired derived key have one winner.
func concurrentTakeoversOfExpiredDerivedKeyHaveOneWinner(t *testing.T, open func(t *testing.T) *subject) {
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
	out := race(racers, func(i int) (*store.Holder, error) {
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
}

// concurrentAcquiresOfFreshKeyHaveOneHolder checks: acquires of fresh key have one holder.
func concurrentAcquiresOfFreshKeyHaveOneHolder(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	claims := make([]idempotency.Record, racers)
	for i := range racers {
		claims[i] = newClaim("tenant-a", "same-key", order.NewID(), base)
		claims[i].Fingerprint = "sha256:same-request"
	}
	out := raceAll(racers, func(i int) acquired {
		r, ok, err := s.AcquireLease(ctx, claims[i])
		return acquired{r, ok, err}
	})
	w := oneHolder(t, out)
	assertRecord(t, out[w].rec, claims[w])
	for i, o := range out {
		if i != w {
			assertRecord(t, o.rec, claims[w])
		}
	}
	assertRecord(t, mustLookup(t, s, "tenant-a", idempotency.HashKey("same-key")), claims[w])
}

// concurrentTakeoversOfExpiredLeaseHaveOneHolder checks: takeovers of expired lease have one holder.
func concurrentTakeoversOfExpiredLeaseHaveOneHolder(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	first := mustAcquire(t, s, newClaim("tenant-a", "same-key", order.NewID(), base))
	retry := retryAt(first, base.Add(time.Minute))
	out := raceAll(racers, func(int) acquired {
		r, ok, err := s.AcquireLease(ctx, retry)
		return acquired{r, ok, err}
	})
	w := oneHolder(t, out)
	want := first
	want.FencingToken, want.LockedUntil = 2, retry.LockedUntil
	// The winner holds token 2; every other goroutine gets the winner's
	// record back. (The retention window of a taken-over key is not this
	// test's concern.)
	for _, o := range out {
		o.rec.CreatedAt, o.rec.ExpiresAt = want.CreatedAt, want.ExpiresAt
		assertRecord(t, o.rec, want)
	}
	if out[w].rec.FencingToken != 2 {
		t.Errorf("winner's FencingToken = %d, want 2", out[w].rec.FencingToken)
	}
}

// concurrentCompletesWithStaleTokensHaveOneWinner checks: completes with stale tokens have one winner.
func concurrentCompletesWithStaleTokensHaveOneWinner(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	const workers = 20
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	// Worker i acquired the key with token i+1; each lease expired before
	// the next worker took the key over, so only the last one holds it.
	claim := newClaim("tenant-a", "pay", o.ID, base)
	r := mustAcquire(t, s, claim)
	for i := 2; i <= workers; i++ {
		r = mustAcquire(t, s, retryAt(claim, base.Add(time.Duration(i)*time.Minute)))
		if r.FencingToken != int64(i) {
			t.Fatalf("takeover %d: FencingToken = %d, want %d", i, r.FencingToken, i)
		}
	}
	nexts := make([]order.Order, workers)
	for i := range workers {
		nexts[i] = o.Apply(order.Paid, base.Add(time.Hour+time.Duration(i)*time.Second))
	}
	out := raceAll(workers, func(i int) error {
		l := store.LeaseOf(r)
		l.Token = int64(i + 1)
		return complete(ctx, s, l, completion{Outcome: outcome(o.ID), Next: &nexts[i]})
	})
	for i, err := range out {
		switch {
		case i == workers-1 && err != nil:
			t.Errorf("current holder (token %d): Complete: %v", i+1, err)
		case i < workers-1 && !errors.Is(err, store.ErrLeaseLost):
			t.Errorf("stale worker (token %d): Complete err = %v, want ErrLeaseLost", i+1, err)
		}
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), nexts[workers-1])
	assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), completedAs(r, outcome(o.ID)))
}

// concurrentCompletesWithNextFromSameVersionHaveOneWinner checks: completes with next from same version have one winner.
func concurrentCompletesWithNextFromSameVersionHaveOneWinner(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	nexts := make([]order.Order, racers)
	leased := make([]idempotency.Record, racers)
	for i := range racers {
		at := base.Add(time.Duration(i+1) * time.Second)
		nexts[i] = o.Apply(order.Paid, at)
		leased[i] = mustAcquire(t, s, newClaim("tenant-a", fmt.Sprintf("pay-%d", i), o.ID, at))
	}
	out := raceAll(racers, func(i int) error {
		return complete(ctx, s, store.LeaseOf(leased[i]), completion{Outcome: outcome(o.ID), Next: &nexts[i]})
	})
	w := -1
	for i, err := range out {
		switch {
		case err == nil:
			if w >= 0 {
				t.Fatalf("goroutines %d and %d both won the compare-and-set", w, i)
			}
			w = i
		case errors.Is(err, store.ErrVersionConflict):
		default:
			t.Errorf("goroutine %d: Complete = %v; want success or ErrVersionConflict", i, err)
		}
	}
	if w < 0 {
		t.Fatal("no goroutine won the compare-and-set")
	}
	assertOrder(t, mustGet(t, s, "tenant-a", o.ID), nexts[w])
	for i, r := range leased {
		want := r // a conflicted completion wrote nothing: still leased
		if i == w {
			want = completedAs(r, outcome(o.ID))
		}
		assertRecord(t, mustLookup(t, s, "tenant-a", r.KeyHash), want)
	}
}

// concurrentAttemptsOnOneOrderNeverOverlap checks: attempts on one order never overlap.
func concurrentAttemptsOnOneOrderNeverOverlap(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	const workers = 20
	o := newOrder(t, "tenant-a", "cust-1", base)
	mustCreate(t, s, nil, o)
	leased := make([]idempotency.Record, workers)
	attempts := make([]payment.Attempt, workers)
	for i := range workers {
		leased[i] = mustAcquire(t, s, newClaim("tenant-a", fmt.Sprintf("key-%d", i), o.ID, base))
		attempts[i] = newAttempt(o, fmt.Sprintf("attempt-%d", i), base)
	}
	out := raceAll(workers, func(i int) error {
		_, err := s.RecordAttempt(ctx, store.LeaseOf(leased[i]), attempts[i], 1)
		return err
	})
	w := -1
	for i, err := range out {
		switch {
		case err == nil && w >= 0:
			t.Errorf("goroutines %d and %d both recorded an attempt on the order", w, i)
		case err == nil:
			w = i
		case !errors.Is(err, store.ErrAttemptInFlight):
			t.Errorf("goroutine %d: RecordAttempt err = %v, want ErrAttemptInFlight", i, err)
		}
	}
	if w < 0 {
		t.Fatal("no goroutine recorded its attempt")
	}
	for i, a := range attempts {
		if i == w {
			assertAttempt(t, mustGetAttempt(t, s, a.ProviderKey), a)
			continue
		}
		assertNotFound(t, fmt.Sprintf("loser %d's attempt", i), getErr(s.GetAttempt(ctx, a.ProviderKey)))
		assertRecord(t, mustLookup(t, s, "tenant-a", leased[i].KeyHash), leased[i])
	}
}

// concurrentAttemptAndTransitionOnOneOrderNeverBothWin checks: attempt and transition on one order never both win.
func concurrentAttemptAndTransitionOnOneOrderNeverBothWin(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	const orders = 20
	type pair struct {
		o              order.Order
		charge, cancel idempotency.Record
		attempt        payment.Attempt
		cancelled      order.Order
	}
	pairs := make([]pair, orders)
	for i := range pairs {
		o := newOrder(t, "tenant-a", "cust-1", base)
		mustCreate(t, s, nil, o)
		pairs[i] = pair{
			o:         o,
			charge:    mustAcquire(t, s, newClaim("tenant-a", fmt.Sprintf("pay-%d", i), o.ID, base)),
			cancel:    mustAcquire(t, s, newClaim("tenant-a", fmt.Sprintf("cancel-%d", i), o.ID, base)),
			attempt:   newAttempt(o, fmt.Sprintf("charge-%d", i), base),
			cancelled: o.Apply(order.Cancelled, base.Add(time.Second)),
		}
	}
	out := raceAll(2*orders, func(i int) error {
		p := pairs[i/2]
		if i%2 == 0 {
			_, err := s.RecordAttempt(ctx, store.LeaseOf(p.charge), p.attempt, 1)
			return err
		}
		return complete(ctx, s, store.LeaseOf(p.cancel), completion{Outcome: outcome(p.o.ID), Next: &p.cancelled})
	})
	for i, p := range pairs {
		attemptErr, cancelErr := out[2*i], out[2*i+1]
		switch {
		case attemptErr == nil && errors.Is(cancelErr, store.ErrAttemptInFlight):
			assertOrder(t, mustGet(t, s, "tenant-a", p.o.ID), p.o)
			assertAttempt(t, mustGetAttempt(t, s, p.attempt.ProviderKey), p.attempt)
			assertRecord(t, mustLookup(t, s, "tenant-a", p.cancel.KeyHash), p.cancel)
		case cancelErr == nil && errors.Is(attemptErr, store.ErrVersionConflict):
			assertOrder(t, mustGet(t, s, "tenant-a", p.o.ID), p.cancelled)
			assertNotFound(t, "GetAttempt", getErr(s.GetAttempt(ctx, p.attempt.ProviderKey)))
			assertRecord(t, mustLookup(t, s, "tenant-a", p.charge.KeyHash), p.charge)
		default:
			t.Errorf("order %d: RecordAttempt = %v, Complete = %v; want exactly one to win", i, attemptErr, cancelErr)
		}
	}
}

// concurrentTakeOversOfAbandonedKeysNeverOverlap checks: take overs of abandoned keys never overlap.
func concurrentTakeOversOfAbandonedKeysNeverOverlap(t *testing.T, open func(t *testing.T) *subject) {
	t.Parallel()
	s, ctx := open(t), t.Context()
	const keys, takers = 20, 4
	abandoned := make(map[string]idempotency.Record, keys)
	for i := range keys {
		r := mustAcquire(t, s, newClaim("tenant-a", fmt.Sprintf("key-%d", i), order.NewID(), base))
		if i%2 == 1 {
			mustRelease(t, s, r, idempotency.StateUnknownOutcome, nil)
		}
		abandoned[r.KeyHash] = r
	}
	now, until := base.Add(time.Minute), base.Add(time.Minute+leaseFor)
	out := raceAll(takers, func(int) takenBack {
		rs, err := s.TakeOverAbandoned(ctx, takeOver{Now: now, LeaseUntil: until, Limit: keys})
		return takenBack{rs, err}
	})
	seen := map[string]int{}
	for i, o := range out {
		if o.err != nil {
			t.Errorf("taker %d: TakeOverAbandoned: %v", i, o.err)
			continue
		}
		for _, r := range o.recs {
			if j, dup := seen[r.KeyHash]; dup {
				t.Errorf("key %s taken over by takers %d and %d", r.KeyHash, j, i)
			}
			seen[r.KeyHash] = i
			before, ok := abandoned[r.KeyHash]
			if !ok {
				t.Errorf("taker %d got unknown key %s", i, r.KeyHash)
				continue
			}
			assertRecord(t, r, takenOver(before, until))
		}
	}
	if len(seen) != keys {
		t.Errorf("takers took over %d keys, want all %d", len(seen), keys)
	}
}
