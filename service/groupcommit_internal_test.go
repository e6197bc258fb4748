package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
	"github.com/orderly/orderly/store/sqlite"
)

// These tests drive groupCommit.write with hand-made groups, so what the
// scheduler would put in one group is put there for certain.

// openStore opens a fresh store of kind ("sqlite" or "postgres"), closed
// when t ends. (internal/testenv imports this package, so it cannot help.)
func openStore(t *testing.T, kind string) store.Store {
	t.Helper()
	var st store.Store
	var err error
	if kind == "postgres" {
		st, err = postgres.Open(t.Context(), pgtest.NewDatabase(t))
	} else {
		st, err = sqlite.Open(t.Context(), t.TempDir())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var storeKinds = []string{"sqlite", "postgres"}

func groupFixture(t *testing.T, kind string) (*Service, store.Store) {
	t.Helper()
	st := openStore(t, kind)
	return New(st, nil, nil, Config{}), st
}

// call makes the create a request would send: its own order, its key's
// record (nil without a key).
func (s *Service) call(t *testing.T, key idempotency.Key, customer string) *createCall {
	t.Helper()
	now := time.Now()
	o, err := order.New("t1", order.NewOrderInput{CustomerID: customer, Currency: "EUR",
		Items: []order.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}}, now)
	if err != nil {
		t.Fatal(err)
	}
	return &createCall{ctx: t.Context(), req: store.NewOrder{Key: s.record("t1", key, now, o.ID), Order: o},
		done: make(chan createResult, 1)}
}

func TestGroupCommitDuplicatesInOneGroup(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			svc, st := groupFixture(t, kind)
			g := &groupCommit{store: st, max: 64}
			k := idempotency.Key{Value: "K", Fingerprint: "fp-1"}
			first, same, other := svc.call(t, k, "c1"), svc.call(t, k, "c2"), svc.call(t, idempotency.Key{Value: "K", Fingerprint: "fp-2"}, "c3")
			lone := svc.call(t, idempotency.Key{}, "c4")
			g.write([]*createCall{first, same, lone, other})

			r := <-first.done
			if r.err != nil || r.held != nil {
				t.Fatalf("first = %+v, %v; want created", r.held, r.err)
			}
			// The duplicates answer as a later request with the key would.
			for name, c := range map[string]*createCall{"same body": same, "other body": other} {
				res, err := svc.answer(t.Context(), c, <-c.done)
				switch name {
				case "same body":
					if err != nil || !res.Replayed || res.Order.ID != first.req.Order.ID {
						t.Errorf("%s: %+v, %v; want a replay of %s", name, res, err, first.req.Order.ID)
					}
				case "other body":
					if apperr.ErrorCode(err) != apperr.EKeyReused {
						t.Errorf("%s: %v; want idempotency_key_reused", name, err)
					}
				}
			}
			if r := <-lone.done; r.err != nil || r.held != nil {
				t.Fatalf("keyless create = %+v, %v; want created", r.held, r.err)
			}
			for _, c := range []*createCall{same, other} {
				if _, err := st.GetOrder(t.Context(), "t1", c.req.Order.ID); !errors.Is(err, store.ErrNotFound) {
					t.Errorf("a duplicate's own order %s exists (%v); want only the winner's", c.req.Order.ID, err)
				}
			}
			if _, err := st.GetOrder(t.Context(), "t1", lone.req.Order.ID); err != nil {
				t.Errorf("keyless order: %v", err)
			}
		})
	}
}

// A group the store refuses as a whole (one order breaks a constraint) is
// written one create at a time: the others are created, the bad one alone
// fails.
func TestGroupCommitFallsBackOneByOne(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			svc, st := groupFixture(t, kind)
			g := &groupCommit{store: st, max: 64}
			good1 := svc.call(t, idempotency.Key{Value: "A", Fingerprint: "a"}, "c1")
			bad := svc.call(t, idempotency.Key{Value: "B", Fingerprint: "b"}, "c2")
			bad.req.Order.Currency = "eur" // the schema's CHECK refuses it
			good2 := svc.call(t, idempotency.Key{}, "c3")
			g.write([]*createCall{good1, bad, good2})
			for name, c := range map[string]*createCall{"first": good1, "keyless": good2} {
				if r := <-c.done; r.err != nil || r.held != nil {
					t.Errorf("%s = %+v, %v; want created", name, r.held, r.err)
				}
				if _, err := st.GetOrder(t.Context(), "t1", c.req.Order.ID); err != nil {
					t.Errorf("%s: order not created: %v", name, err)
				}
			}
			if r := <-bad.done; r.err == nil {
				t.Errorf("bad create succeeded")
			}
			if _, err := st.LookupKey(t.Context(), "t1", idempotency.HashKey("B")); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the failed create's key was stored (%v)", err)
			}
		})
	}
}

// Many concurrent creates through the running workers: every one is
// answered, and duplicates of one key make one order.
func TestGroupCommitConcurrentCreates(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			st := openStore(t, kind)
			svc := New(st, nil, nil, Config{GroupCommit: true, GroupCommitMaxBatch: 8, GroupCommitWorkers: 2})
			defer svc.Close()
			in := order.NewOrderInput{CustomerID: "c", Currency: "EUR", Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 1}}}
			const n = 64
			ids := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					key := idempotency.Key{Value: "dup-" + string(rune('a'+i%4)), Fingerprint: "same"}
					if i%2 == 0 {
						key = idempotency.Key{Value: "own-" + time.Now().String() + string(rune('a'+i)), Fingerprint: "x"}
					}
					res, err := svc.Create(context.Background(), "t1", key, in)
					if err != nil {
						t.Errorf("create %d: %v", i, err)
						return
					}
					ids[i] = res.Order.ID
				})
			}
			wg.Wait()
			perKey := map[int]string{}
			for i := 1; i < n; i += 2 {
				if prev, ok := perKey[i%4]; ok && prev != ids[i] {
					t.Errorf("key dup-%c: orders %s and %s", 'a'+i%4, prev, ids[i])
				}
				perKey[i%4] = ids[i]
			}
			os, err := st.ListOrders(context.Background(), "t1", order.Filter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if want := n/2 + 2; len(os) != want {
				t.Errorf("%d orders, want %d (32 own keys + 2 distinct duplicated keys among odd goroutines)", len(os), want)
			}
		})
	}
}

// answer is what Create answers for c given the group's result r.
func (s *Service) answer(ctx context.Context, c *createCall, r createResult) (Result, error) {
	if r.err != nil {
		return Result{}, r.err
	}
	if r.held == nil {
		return Result{Order: c.req.Order}, nil
	}
	k := c.req.Key
	return s.held(ctx, idempotency.Key{Value: "K", Fingerprint: k.Fingerprint, Derived: k.Derived}, *r.held, dbNow(r.held.Now, s.cfg.Now()))
}

// TestGroupDuplicateIsJudgedOnTheDatabasesClock: a duplicate within one
// group (a double click without a key, a derived key kept 10 minutes), on
// an instance whose clock runs an hour ahead, replays: its holder carries
// the database's clock (the winner's stored CreatedAt), not the
// instance's, which says the key expired 50 minutes ago. (From a review.)
func TestGroupDuplicateIsJudgedOnTheDatabasesClock(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			st := openStore(t, kind)
			svc := New(st, nil, nil, Config{DerivedKeyTTL: 10 * time.Minute,
				Now: func() time.Time { return time.Now().Add(time.Hour) }})
			t.Cleanup(svc.Close)
			g := &groupCommit{store: st, max: 64}
			k := idempotency.Key{Value: "K", Fingerprint: "fp-1", Derived: true}
			first, same := svc.call(t, k, "c1"), svc.call(t, k, "c2")
			g.write([]*createCall{first, same})
			if r := <-first.done; r.err != nil || r.held != nil {
				t.Fatalf("first = %+v, %v; want created", r.held, r.err)
			}
			r := <-same.done
			if r.err != nil || r.held == nil || r.held.Now.IsZero() {
				t.Fatalf("duplicate = %+v, %v; want the winner as holder, with the database's clock", r.held, r.err)
			}
			res, err := svc.answer(t.Context(), same, r)
			if err != nil || !res.Replayed || res.Order.ID != first.req.Order.ID {
				t.Errorf("duplicate = %+v, %v; want a replay of %s", res, err, first.req.Order.ID)
			}
		})
	}
}

// batchSizes is a store that records the size of every group written
// (CreateOrders) and how many of them the store refused as a whole.
type batchSizes struct {
	store.Store
	mu      sync.Mutex
	sizes   []int
	refused int
}

func (b *batchSizes) CreateOrders(ctx context.Context, batch []store.NewOrder) ([]*store.Holder, error) {
	out, err := b.Store.CreateOrders(ctx, batch)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sizes = append(b.sizes, len(batch))
	if err != nil {
		b.refused++
	}
	return out, err
}

// Concurrent creates through the running workers, a quarter of them
// refused by the store (a CHECK constraint: the whole group fails and is
// written again one create at a time), a quarter sharing four keys: every
// create gets its own answer, no good create is lost or written twice
// because a member of its group failed, and a refused create leaves
// neither its key nor its order. Both stores, real goroutines.
func TestGroupCommitFailedMemberUnderConcurrency(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			st := &batchSizes{Store: openStore(t, kind)}
			svc := New(st, nil, nil, Config{GroupCommit: true})
			defer svc.Close()
			in := order.NewOrderInput{CustomerID: "c", Currency: "EUR", Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 1}}}
			const n = 96
			ids := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					switch i % 4 {
					case 0: // refused by the store
						c := svc.call(t, idempotency.Key{Value: fmt.Sprintf("bad-%d", i), Fingerprint: "b"}, "c")
						c.req.Order.Currency = "eur"
						if held, err := svc.creates.do(t.Context(), c.req); err == nil {
							t.Errorf("create %d with a refused order = %+v, nil; want an error", i, held)
						}
					case 1: // one of four shared keys
						res, err := svc.Create(t.Context(), "t1", idempotency.Key{Value: fmt.Sprintf("dup-%d", i%16), Fingerprint: "same"}, in)
						if err != nil {
							t.Errorf("create %d: %v", i, err)
							return
						}
						ids[i] = res.Order.ID
					default: // its own key
						res, err := svc.Create(t.Context(), "t1", idempotency.Key{Value: fmt.Sprintf("own-%d", i), Fingerprint: "x"}, in)
						if err != nil || res.Replayed {
							t.Errorf("create %d: %+v, %v; want created", i, res, err)
							return
						}
						ids[i] = res.Order.ID
					}
				})
			}
			wg.Wait()
			perKey := map[int]string{}
			seen := map[string]bool{}
			for i := range n {
				switch i % 4 {
				case 0:
					if _, err := st.LookupKey(t.Context(), "t1", idempotency.HashKey(fmt.Sprintf("bad-%d", i))); !errors.Is(err, store.ErrNotFound) {
						t.Errorf("refused create %d: its key was stored (%v)", i, err)
					}
				case 1:
					if prev, ok := perKey[i%16]; ok && prev != ids[i] {
						t.Errorf("key dup-%d answered orders %s and %s", i%16, prev, ids[i])
					}
					perKey[i%16] = ids[i]
				default:
					if seen[ids[i]] {
						t.Errorf("create %d answered order %s, another create's", i, ids[i])
					}
					seen[ids[i]] = true
				}
			}
			os, err := st.ListOrders(t.Context(), "t1", order.Filter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if want := n/2 + len(perKey); len(os) != want {
				t.Errorf("%d orders stored, want %d (%d own keys, %d shared keys)", len(os), want, n/2, len(perKey))
			}
			for _, o := range os {
				if o.Currency != "EUR" {
					t.Errorf("a refused order was stored: %+v", o)
				}
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			t.Logf("%d groups (%d refused as a whole), sizes %v", len(st.sizes), st.refused, st.sizes)
		})
	}
}

// stageCount is an Observer that sums what GroupCommit reports.
type stageCount struct {
	nopObserver
	mu            sync.Mutex
	groups, sizes int
	negative      bool
}

func (s *stageCount) GroupCommit(size int, wait, write time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups++
	s.sizes += size
	s.negative = s.negative || wait < 0 || write < 0
}

// A StageObserver is told every group: its sizes add up to the creates
// sent, each group at least one.
func TestGroupCommitReportsStages(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			obs := &stageCount{}
			svc := New(openStore(t, kind), nil, nil, Config{GroupCommit: true, Observer: obs})
			in := order.NewOrderInput{CustomerID: "c", Currency: "EUR", Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 1}}}
			const n = 40
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					if _, err := svc.Create(t.Context(), "t1", idempotency.Key{Value: fmt.Sprintf("k-%d", i), Fingerprint: "x"}, in); err != nil {
						t.Errorf("create %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			svc.Close()
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.sizes != n || obs.groups < 1 || obs.groups > n || obs.negative {
				t.Errorf("GroupCommit reported %d groups of %d creates in all (a negative duration: %v); want %d creates", obs.groups, obs.sizes, obs.negative, n)
			}
		})
	}
}

// A store whose writes run one at a time (store.SerialWriter: SQLite) gets
// one group-commit worker by default; another store two; a configured
// count is kept.
func TestGroupCommitWorkersFollowTheStore(t *testing.T) {
	st := openStore(t, "sqlite")
	hidden := struct{ store.Store }{st} // not a SerialWriter
	for _, c := range []struct {
		name    string
		st      store.Store
		workers int
		want    int
	}{
		{"serial store, default", st, 0, DefaultSerialGroupCommitWorkers},
		{"other store, default", hidden, 0, DefaultGroupCommitWorkers},
		{"serial store, configured", st, 3, 3},
	} {
		g := newGroupCommit(c.st, 0, c.workers)
		if g.n != c.want {
			t.Errorf("%s: %d workers, want %d", c.name, g.n, c.want)
		}
		g.close()
	}
	if DefaultSerialGroupCommitWorkers != 1 {
		t.Errorf("DefaultSerialGroupCommitWorkers = %d, want 1", DefaultSerialGroupCommitWorkers)
	}
}
