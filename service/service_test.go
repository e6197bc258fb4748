package service_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
)

// newClock returns the clock of a fixture: the service's and, through
// testenv, its store's database clock (leases are decided there).
func newClock() *testclock.Clock { return testclock.New(testclock.Start) }

// gateway wraps the in-process intent simulator: it can hold the next
// confirm until released (a slow provider), or confirm and then lose the
// reply (a dropped connection: the outcome is unknown to the caller).
type gateway struct {
	*simulator.IntentGateway
	hold     chan struct{} // non-nil: the next Confirm waits for it to close
	entered  chan struct{} // closed when a held Confirm has started
	dropNext atomic.Bool
	// lostBeforeProvider: every Confirm times out before reaching the
	// provider (an unknown outcome that nothing captured).
	lostBeforeProvider atomic.Bool
	// failAfterCapture: every Confirm captures and then answers a
	// retryable 5xx.
	failAfterCapture atomic.Bool
	// lookupDown: every Retrieve and Find fails (the outcome cannot be
	// learned), but for the attempts (reference keys) in lookupUp.
	lookupDown atomic.Bool
	lookupUp   sync.Map
	calls      atomic.Int64 // Confirm calls
	// saved500: every Confirm takes effect and answers a 500 that the
	// provider saved under its key (replayed to every repeat of the key).
	saved500 atomic.Bool
	savedMu  sync.Mutex
	saved    map[string]bool
	// prepareLost: every Prepare times out before reaching the provider.
	prepareLost atomic.Bool
	prepares    sync.Map // Prepare idempotency key → times sent (*atomic.Int64)
	// readDown: the next Retrieve fails too (set with a dropped answer,
	// so the outcome stays unknown past the call).
	readDown atomic.Bool
	// prepareGate, when set, holds the next Prepare before it reaches the
	// provider: entered is closed, then it waits for release.
	prepareGate atomic.Pointer[gate]
}

// gate holds one provider call: entered is closed when the call arrives,
// and the call goes on once release is closed.
type gate struct{ entered, release chan struct{} }

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gateway) down(key string) error {
	if _, up := g.lookupUp.Load(key); g.lookupDown.Load() && !up {
		return &payment.ProviderError{Retryable: true, Err: errors.New("lookup unavailable")}
	}
	return nil
}

func (g *gateway) Retrieve(ctx context.Context, id string) (payment.Intent, error) {
	if g.readDown.CompareAndSwap(true, false) {
		return payment.Intent{}, &payment.ProviderError{Retryable: true, Err: errors.New("read unavailable")}
	}
	in, err := g.IntentGateway.Retrieve(ctx, id)
	if derr := g.down(in.Reference.Key); derr != nil {
		return payment.Intent{}, derr
	}
	return in, err
}

func (g *gateway) Find(ctx context.Context, ref payment.Reference) (payment.Intent, error) {
	if err := g.down(ref.Key); err != nil {
		return payment.Intent{}, err
	}
	return g.IntentGateway.Find(ctx, ref)
}

// Calls returns how many confirms the service sent.
func (g *gateway) Calls() int { return int(g.calls.Load()) }

func (g *gateway) Prepare(ctx context.Context, req payment.PrepareRequest) (payment.Intent, error) {
	n, _ := g.prepares.LoadOrStore(req.IdempotencyKey, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	if gt := g.prepareGate.Swap(nil); gt != nil {
		close(gt.entered)
		<-gt.release
	}
	if g.prepareLost.Load() {
		return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	return g.IntentGateway.Prepare(ctx, req)
}

func (g *gateway) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	g.calls.Add(1)
	g.savedMu.Lock()
	replay := g.saved[req.IdempotencyKey]
	if g.saved500.Load() {
		if g.saved == nil {
			g.saved = map[string]bool{}
		}
		g.saved[req.IdempotencyKey] = true
	}
	g.savedMu.Unlock()
	if replay {
		return payment.Intent{}, &payment.ProviderError{Err: fmt.Errorf("%w: 500 (replayed)", payment.ErrUnknownOutcome)}
	}
	if g.saved500.Load() {
		if _, err := g.IntentGateway.Confirm(ctx, req); err != nil {
			return payment.Intent{}, err
		}
		return payment.Intent{}, &payment.ProviderError{Err: fmt.Errorf("%w: 500 after the payment", payment.ErrUnknownOutcome)}
	}
	if h := g.hold; h != nil {
		g.hold = nil
		close(g.entered)
		<-h
	}
	if g.lostBeforeProvider.Load() {
		return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	in, err := g.IntentGateway.Confirm(ctx, req)
	if err == nil && g.failAfterCapture.Load() {
		return payment.Intent{}, &payment.ProviderError{Retryable: true, Err: errors.New("502 after capture")}
	}
	if g.dropNext.CompareAndSwap(true, false) {
		// The provider decided (captured or declined); the answer is lost.
		return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
	}
	return in, err
}

type fixture struct {
	st  store.Store
	gw  *gateway
	clk *testclock.Clock
	svc *service.Service
	// feedURL is the PostgreSQL store's URL ("" for SQLite), whose feed
	// awaitFeed waits on.
	feedURL string
}

// awaitFeed waits until the store's event feed shows every event committed
// so far (see pgtest.AwaitFeed; SQLite's feed shows them at once).
func (f *fixture) awaitFeed(t *testing.T) {
	t.Helper()
	if f.feedURL != "" {
		pgtest.AwaitFeed(t, f.feedURL)
	}
}

// newFixture runs a service on a fresh store of kind with a controllable
// clock, a 10s lease, 1h key retention and a 2h tombstone window.
func newFixture(t *testing.T, kind string) *fixture {
	t.Helper()
	return newFixtureWith(t, kind, nil)
}

// newFixtureWith is newFixture with the service's configuration changed by
// configure (if non-nil).
func newFixtureWith(t *testing.T, kind string, configure func(*service.Config)) *fixture {
	t.Helper()
	clk := newClock()
	env := testenv.New(t, kind, testenv.Options{Clock: clk})
	f := &fixture{st: env.Store, gw: &gateway{IntentGateway: simulator.NewIntentGateway()}, clk: clk, feedURL: feedURL(env)}
	cfg := service.Config{
		KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 2 * time.Hour,
		LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second,
		Now: f.clk.Now,
	}
	if configure != nil {
		configure(&cfg)
	}
	f.svc = service.New(f.st, f.gw, simulator.NewWarehouse(), cfg)
	return f
}

var input = order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR", Items: []order.Item{{SKU: "sku", Quantity: 2, UnitPrice: 750}}}

var payIn = service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: testmode.MethodApproved}

func key(v string) idempotency.Key { return idempotency.Key{Value: v, Fingerprint: "fp-" + v} }

func (f *fixture) order(t *testing.T) order.Order {
	t.Helper()
	res, err := f.svc.Create(context.Background(), "t1", idempotency.Key{}, input)
	if err != nil {
		t.Fatal(err)
	}
	return res.Order
}

// feedURL is env's PostgreSQL URL, "" for another store.
func feedURL(env *testenv.Env) string {
	if env.Kind == testenv.Postgres {
		return env.Location
	}
	return ""
}

func eachStore(t *testing.T, fn func(t *testing.T, f *fixture)) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			fn(t, newFixture(t, kind))
		})
	}
}

// TestStaleWorkerIsFenced: a worker whose provider call outlives its lease is
// taken over by a retry; the retry finishes the payment, and the stale
// worker's post-call write is refused by the fencing token.
func TestStaleWorkerIsFenced(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		release := make(chan struct{})
		f.gw.hold, f.gw.entered = release, make(chan struct{})
		entered := f.gw.entered

		type outcome struct {
			res service.Result
			err error
		}
		slow := make(chan outcome, 1)
		go func() {
			res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}, payIn)
			slow <- outcome{res, err}
		}()
		<-entered // worker A holds the lease (token 1) and is inside the provider call

		// While A's lease is live, a retry is told the request is in progress.
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}, payIn); apperr.ErrorCode(err) != apperr.EKeyInProgress {
			t.Fatalf("retry during a live lease: err = %v, want EKeyInProgress", err)
		}

		f.clk.Advance(11 * time.Second) // A's lease lapses
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}, payIn)
		if err != nil || res.Order.State != order.Paid || res.Replayed {
			t.Fatalf("takeover = %+v, %v; want a fresh 200 PAID", res, err)
		}
		rec, err := f.st.LookupKey(ctx, "t1", idempotency.HashKey("K"))
		if err != nil || rec.State != idempotency.StateCompleted || rec.FencingToken < 2 {
			t.Fatalf("key after takeover = %+v, %v; want completed with token ≥ 2", rec, err)
		}

		close(release) // A's provider call returns; its write must be refused
		a := <-slow
		if apperr.ErrorCode(a.err) != apperr.EKeyInProgress {
			t.Fatalf("stale worker: %+v, %v; want its write refused (EKeyInProgress)", a.res, a.err)
		}
		got, err := f.st.GetOrder(ctx, "t1", o.ID)
		if err != nil || got.State != order.Paid || got.Version != 2 {
			t.Fatalf("order = %s v%d (%v), want PAID v2", got.State, got.Version, err)
		}
		after, _ := f.st.LookupKey(ctx, "t1", idempotency.HashKey("K"))
		if after.FencingToken != rec.FencingToken || after.State != idempotency.StateCompleted || after.ErrorCode != "" {
			t.Fatalf("the stale worker changed the key: %+v", after)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
	})
}

// TestPreferWaitReplaysTheWinner: a duplicate that asks to wait gets the
// first request's outcome as a replay instead of a 409.
func TestPreferWaitReplaysTheWinner(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		release := make(chan struct{})
		f.gw.hold, f.gw.entered = release, make(chan struct{})
		entered := f.gw.entered
		first := make(chan error, 1)
		go func() {
			_, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("W")}, payIn)
			first <- err
		}()
		<-entered
		time.AfterFunc(200*time.Millisecond, func() { close(release) })
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("W"), Wait: 3 * time.Second}, payIn)
		if err != nil || !res.Replayed || res.Order.State != order.Paid {
			t.Fatalf("waiting duplicate = %+v, %v; want a 200 replay of PAID", res, err)
		}
		if err := <-first; err != nil {
			t.Fatalf("first request: %v", err)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
	})
}

// TestUnknownOutcomeIsAskedNotRepeated: the provider captured but the reply
// was lost. The request answers 503 and the key says "unknown outcome"; the
// retry asks the provider first and finishes without a second capture.
func TestUnknownOutcomeIsAskedNotRepeated(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		f.gw.dropNext.Store(true)
		_, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("U")}, payIn)
		if apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("pay with a lost reply: %v, want EUnavailable", err)
		}
		info, err := f.svc.KeyStatus(ctx, "t1", "U")
		if err != nil || info.State != service.KeyUnknownOutcome {
			t.Fatalf("key status = %+v, %v; want unknown_outcome", info, err)
		}
		calls := f.gw.Calls()
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("U")}, payIn)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("retry = %+v, %v; want PAID", res, err)
		}
		if f.gw.Calls() != calls {
			t.Fatalf("the retry charged again (%d charge calls, want %d): it must look the charge up", f.gw.Calls(), calls)
		}
		if n := f.gw.Captures(o.ID); n != 1 {
			t.Fatalf("%d captures, want 1", n)
		}
	})
}

// TestCompleterFinishesAbandonedRequests: with no client retry, the
// completer brings an order whose reply was lost, and one whose worker died
// mid-call, to a definite state; the client's later retry replays it.
func TestCompleterFinishesAbandonedRequests(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()

		// 1. Lost reply: the key is left with an unknown outcome.
		lost := f.order(t)
		f.gw.dropNext.Store(true)
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: lost.ID, Key: key("L")}, payIn); err == nil {
			t.Fatal("pay with a lost reply succeeded")
		}

		// 2. Dead worker: it claimed the key, recorded the attempt and
		// charged, then vanished before the post-call write.
		dead := f.order(t)
		now := f.clk.Now()
		claim := store.Claim{Record: idempotency.Record{TenantID: "t1", KeyHash: idempotency.HashKey("D"), Fingerprint: "fp-D",
			ResourceID: dead.ID}, TTL: time.Hour, Lease: 10 * time.Second}
		rec, ok, err := f.st.AcquireLease(ctx, claim)
		if err != nil || !ok {
			t.Fatalf("AcquireLease: %v %v", ok, err)
		}
		pk := dead.ID + "/pay/1"
		if _, err := f.st.RecordAttempt(ctx, store.LeaseOf(rec), payment.Attempt{ProviderKey: pk, TenantID: "t1", OrderID: dead.ID,
			Kind: payment.AttemptCharge, Status: payment.AttemptPending, Amount: 1500, Currency: "EUR",
			PaymentMethod: testmode.MethodApproved, CreatedAt: now, UpdatedAt: now}, dead.Version); err != nil {
			t.Fatal(err)
		}
		ref := payment.Reference{OrderID: dead.ID, Key: pk}
		in, err := f.gw.IntentGateway.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: pk + "/prepare", Reference: ref,
			Amount: 1500, Currency: "EUR"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.gw.IntentGateway.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: pk + "/confirm", IntentID: in.ID,
			PaymentMethod: testmode.MethodApproved, Reference: ref}); err != nil {
			t.Fatal(err)
		}

		// 3. A request that claimed its key and died before any provider
		// call: it is released as a retryable failure.
		idle := f.order(t)
		claim.KeyHash, claim.Fingerprint, claim.ResourceID = idempotency.HashKey("I"), "fp-I", idle.ID
		if _, ok, err := f.st.AcquireLease(ctx, claim); err != nil || !ok {
			t.Fatalf("AcquireLease: %v %v", ok, err)
		}

		// The dead workers' leases are live: nothing to take over yet except
		// the unknown outcome.
		if n, err := f.svc.RecoverAbandoned(ctx, 10); err != nil || n != 1 {
			t.Fatalf("first pass took over %d (%v), want 1 (the unknown outcome)", n, err)
		}
		f.clk.Advance(11 * time.Second)
		if n, err := f.svc.RecoverAbandoned(ctx, 10); err != nil || n != 2 {
			t.Fatalf("second pass took over %d (%v), want 2", n, err)
		}
		if n, err := f.svc.RecoverAbandoned(ctx, 10); err != nil || n != 0 {
			t.Fatalf("third pass took over %d (%v), want 0: everything is settled", n, err)
		}
		for _, c := range []struct {
			o order.Order
			k string
		}{{lost, "L"}, {dead, "D"}} {
			got, _ := f.st.GetOrder(ctx, "t1", c.o.ID)
			if got.State != order.Paid || f.gw.Captures(c.o.ID) != 1 {
				t.Fatalf("order %s is %s with %d captures, want PAID with 1", c.k, got.State, f.gw.Captures(c.o.ID))
			}
			res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: c.o.ID, Key: key(c.k)}, payIn)
			if err != nil || !res.Replayed {
				t.Fatalf("retry of %s after the completer = %+v, %v; want a 200 replay", c.k, res, err)
			}
		}
		if info, _ := f.svc.KeyStatus(ctx, "t1", "I"); info.State != service.KeyRetryableFailure {
			t.Fatalf("idle key is %s, want retryable_failure", info.State)
		}
		if got, _ := f.st.GetOrder(ctx, "t1", idle.ID); got.State != order.Received || f.gw.Captures(idle.ID) != 0 {
			t.Fatalf("idle order is %s with %d captures, want RCVD with 0", got.State, f.gw.Captures(idle.ID))
		}
	})
}

// TestKeyLifecycle: replay inside the retention window; after it, a clear
// "expired" error (before and after the sweeper makes a tombstone); after
// the tombstone window, the row is gone.
func TestKeyLifecycle(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		first, err := f.svc.Create(ctx, "t1", key("life"), input)
		if err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(59 * time.Minute)
		if res, err := f.svc.Create(ctx, "t1", key("life"), input); err != nil || !res.Replayed || res.Order.ID != first.Order.ID {
			t.Fatalf("replay inside the window = %+v, %v", res, err)
		}
		if res, _ := f.svc.SweepKeys(ctx, 100); res.Tombstoned != 0 || res.Deleted != 0 {
			t.Fatalf("sweep inside the window = %+v, want nothing", res)
		}

		f.clk.Advance(2 * time.Minute) // past the 1h retention
		if _, err := f.svc.Create(ctx, "t1", key("life"), input); apperr.ErrorCode(err) != apperr.EKeyExpired {
			t.Fatalf("retry after retention: %v, want EKeyExpired", err)
		}
		if res, err := f.svc.SweepKeys(ctx, 100); err != nil || res.Tombstoned != 1 {
			t.Fatalf("sweep after retention = %+v, %v; want 1 tombstone", res, err)
		}
		rec, err := f.st.LookupKey(ctx, "t1", idempotency.HashKey("life"))
		if err != nil || rec.State != idempotency.StateExpired || rec.ErrorCode != "" || rec.ResourceID != first.Order.ID || rec.Fingerprint != "fp-life" {
			t.Fatalf("tombstone = %+v, %v; want expired, outcome dropped, fingerprint and resource kept", rec, err)
		}
		if _, err := f.svc.Create(ctx, "t1", key("life"), input); apperr.ErrorCode(err) != apperr.EKeyExpired {
			t.Fatalf("retry against the tombstone: %v, want EKeyExpired", err)
		}
		if info, err := f.svc.KeyStatus(ctx, "t1", "life"); err != nil || info.State != service.KeyExpired {
			t.Fatalf("key status = %+v, %v; want expired", info, err)
		}
		if n := count(t, f, "cus_1"); n != 1 {
			t.Fatalf("%d orders, want 1: an expired key must never re-execute", n)
		}

		f.clk.Advance(2 * time.Hour) // past the tombstone window
		if res, err := f.svc.SweepKeys(ctx, 100); err != nil || res.Deleted != 1 {
			t.Fatalf("sweep after the tombstone window = %+v, %v; want 1 deleted", res, err)
		}
		if _, err := f.st.LookupKey(ctx, "t1", idempotency.HashKey("life")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("LookupKey after the tombstone window: %v, want ErrNotFound", err)
		}
		if _, err := f.svc.KeyStatus(ctx, "t1", "life"); apperr.ErrorCode(err) != apperr.ENotFound {
			t.Fatalf("key status after deletion: %v, want ENotFound", err)
		}
	})
}

// TestDerivedKeysAreDeletedNotTombstoned: a derived key only absorbs
// duplicates in its short window; the sweeper deletes it afterwards.
func TestDerivedKeysAreDeletedNotTombstoned(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		k := idempotency.Key{Value: idempotency.DerivedKey("fp-x"), Derived: true, Fingerprint: "fp-x"}
		if _, err := f.svc.Create(ctx, "t1", k, input); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(11 * time.Minute)
		if res, err := f.svc.SweepKeys(ctx, 100); err != nil || res.Deleted != 1 || res.Tombstoned != 0 {
			t.Fatalf("sweep = %+v, %v; want the derived key deleted", res, err)
		}
		res, err := f.svc.Create(ctx, "t1", k, input)
		if err != nil || res.Replayed {
			t.Fatalf("the same order later = %+v, %v; want a new order", res, err)
		}
		if n := count(t, f, "cus_1"); n != 2 {
			t.Fatalf("%d orders, want 2", n)
		}
	})
}

func count(t *testing.T, f *fixture, customer string) int {
	t.Helper()
	os, _, err := f.svc.List(context.Background(), "t1", order.Filter{CustomerID: customer, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(os)
}

// TestResumedKeyKeepsItsOwnAttempt: a pay whose answer was lost was in fact
// declined. Another request with another card must neither adopt that
// outcome nor have its card swapped (409 order_busy until it is resolved);
// the lost request, resumed, ends with its own decline — never a second
// charge of its card at a later version — and the other card then pays.
func TestResumedKeyKeepsItsOwnAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		poor := service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: testmode.MethodInsufficientFunds}
		f.gw.dropNext.Store(true)
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K1")}, poor); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("K1 with a lost answer: %v, want EUnavailable", err)
		}
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K2")}, payIn); apperr.ErrorCode(err) != apperr.EOrderBusy {
			t.Fatalf("K2 with another card while K1's charge is unresolved: %v, want EOrderBusy", err)
		}
		if n, err := f.svc.RecoverAbandoned(ctx, 10); err != nil || n != 1 {
			t.Fatalf("completer took over %d (%v), want K1", n, err)
		}
		res, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K1")}, poor)
		if apperr.ErrorCode(err) != apperr.EDeclined || !res.Replayed {
			t.Fatalf("K1 after recovery = %+v, %v; want its own decline, replayed", res, err)
		}
		callsBefore := f.gw.Calls()
		res, err = f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K2")}, payIn)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("K2 after K1 resolved = %+v, %v; want PAID with its own card", res, err)
		}
		if f.gw.Calls() != callsBefore+1 || f.gw.Captures(o.ID) != 1 {
			t.Fatalf("charge calls %d→%d, captures %d; want exactly one new call and one capture",
				callsBefore, f.gw.Calls(), f.gw.Captures(o.ID))
		}
		for _, in := range f.gw.Intents() {
			if in.Reference.OrderID == o.ID && in.AmountReceived > 0 && in.Reference.Key != o.ID+"/pay/2" {
				t.Fatalf("captured %s, want only the second version's charge", in.Reference.Key)
			}
		}
	})
}

// TestRefundRefusedForGoodIsFinal: a provider that knows no charge to refund
// (the order was paid through another provider) refuses for good; the cancel
// is a stored 422, not an endless retryable 503, and the order stays PAID.
func TestRefundRefusedForGoodIsFinal(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		if _, err := f.svc.Pay(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("P")}, payIn); err != nil {
			t.Fatal(err)
		}
		other := service.New(f.st, simulator.NewIntentGateway(), simulator.NewWarehouse(), service.Config{
			Now: f.clk.Now, LeaseDuration: 10 * time.Second,
		})
		for i, want := range []bool{false, true} {
			res, err := other.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("C")})
			if apperr.ErrorCode(err) != apperr.ERefundRejected || res.Replayed != want {
				t.Fatalf("cancel %d = %+v, %v; want a 422 refund_rejected (replayed: %v)", i, res, err, want)
			}
		}
		if got, _ := f.st.GetOrder(ctx, "t1", o.ID); got.State != order.Paid {
			t.Fatalf("order is %s, want PAID", got.State)
		}
	})
}

// TestPendingAttemptOfACrashedHolderStaysOpen: a worker recorded a charge
// and died mid-call (its request may be at the provider, or still being
// processed there). Whoever resumes it asks first, and a retryable answer
// to the charge sent again does not close the attempt as "nothing
// happened": it stays unknown, so no other provider call (a refund, a
// shipment) can start on the order until the provider has answered.
func TestPendingAttemptOfACrashedHolderStaysOpen(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		in := service.PayInput{Amount: o.Amount, Currency: o.Currency, PaymentMethod: simulator.MethodProviderError}
		// The crashed worker's phase 1: key leased, charge recorded pending.
		now := f.clk.Now()
		amount := o.Amount
		claim := store.Claim{Record: idempotency.Record{TenantID: "t1", KeyHash: idempotency.HashKey("crashed"), Fingerprint: "fp-crashed",
			Operation: idempotency.OpPay, ResourceID: o.ID}, TTL: time.Hour, Lease: 10 * time.Second}
		st, err := f.st.StartLeased(ctx, claim, store.Intent{From: order.Received, Kind: payment.AttemptCharge,
			ProviderKeyPrefix: o.ID + "/pay/", Versioned: true, Amount: &amount, Currency: o.Currency,
			PaymentMethod: in.PaymentMethod, At: now})
		if err != nil || !st.Acquired || st.Attempt == nil {
			t.Fatalf("crashed worker's phase 1 = %+v, %v", st, err)
		}
		f.clk.Advance(time.Minute) // its lease runs out
		if _, err := f.svc.RecoverAbandoned(ctx, 10); err != nil {
			t.Fatal(err)
		}
		a, err := f.st.GetAttempt(ctx, st.Attempt.ProviderKey)
		if err != nil || a.Status != payment.AttemptUnknown {
			t.Fatalf("attempt after a retryable answer = %s, %v; want unknown (still open)", a.Status, err)
		}
		_, err = f.svc.Cancel(ctx, service.Call{TenantID: "t1", OrderID: o.ID, Key: key("cancel-1")})
		if apperr.ErrorCode(err) != apperr.EOrderBusy {
			t.Fatalf("cancel beside the open charge = %v; want order_busy", err)
		}
	})
}

// TestRetriedKeyIsNotAnsweredWithAnotherRequestsDecline: K1's charge fails
// retryably (nothing happened at the provider), K2 then tries the same
// version with another card and is declined, K3 pays. K1 retried (README
// "Idempotency rules" 7: a 503 is retried with the same key) is a pay on a
// PAID order, a 200 no-op: K2's decline, of a card K1 never sent, is not
// K1's outcome (it was answered, and stored, as a 402).
func TestRetriedKeyIsNotAnsweredWithAnotherRequestsDecline(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		o := f.order(t)
		call := func(k string) service.Call { return service.Call{TenantID: "t1", OrderID: o.ID, Key: key(k)} }
		flaky := service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: simulator.MethodProviderError}
		declined := service.PayInput{Amount: 1500, Currency: "EUR", PaymentMethod: testmode.MethodDeclined}
		if _, err := f.svc.Pay(ctx, call("K1"), flaky); apperr.ErrorCode(err) != apperr.EUnavailable {
			t.Fatalf("K1 with a provider error: %v, want EUnavailable", err)
		}
		if _, err := f.svc.Pay(ctx, call("K2"), declined); apperr.ErrorCode(err) != apperr.EDeclined {
			t.Fatalf("K2 with a declined card: %v, want EDeclined", err)
		}
		if res, err := f.svc.Pay(ctx, call("K3"), payIn); err != nil || res.Order.State != order.Paid {
			t.Fatalf("K3 = %+v, %v; want PAID", res, err)
		}
		res, err := f.svc.Pay(ctx, call("K1"), flaky)
		if err != nil || res.Order.State != order.Paid {
			t.Fatalf("K1 retried after the order was paid = %+v, %v; want a 200 no-op with the PAID order", res, err)
		}
		if f.gw.Captures(o.ID) != 1 {
			t.Fatalf("captures = %d, want 1", f.gw.Captures(o.ID))
		}
	})
}
