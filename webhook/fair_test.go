package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/webhook"
)

// hangingReceiver is a loopback endpoint that holds every request until
// the request is cancelled (the dispatcher's timeout or shutdown) or hold
// elapses, then answers 200. It counts requests in flight and the most
// there were at once.
type hangingReceiver struct {
	*httptest.Server
	inFlight, most, calls *atomic.Int32
}

func newHangingReceivers(tb testing.TB, n int, hold time.Duration) []hangingReceiver {
	var inFlight, most, calls atomic.Int32
	out := make([]hangingReceiver, n)
	for i := range out {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Read the body first: only then does net/http watch the
			// connection and cancel r.Context() when the client gives up.
			_, _ = io.Copy(io.Discard, r.Body)
			calls.Add(1)
			now := inFlight.Add(1)
			defer inFlight.Add(-1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			select {
			case <-r.Context().Done():
			case <-time.After(hold):
			}
		}))
		tb.Cleanup(srv.Close)
		out[i] = hangingReceiver{srv, &inFlight, &most, &calls}
	}
	return out
}

// createOrder creates an order of tenant (one order.created event).
func createOrder(tb testing.TB, env *testenv.Env, tenant string, i int) string {
	tb.Helper()
	res, err := env.Service.Create(context.Background(), tenant, idempotency.Key{}, order.NewOrderInput{CustomerID: fmt.Sprint("c", i),
		Currency: "EUR", Items: []order.Item{{SKU: "sku", Quantity: 1, UnitPrice: 500}}})
	if err != nil {
		tb.Fatal(err)
	}
	return res.Order.ID
}

// runDispatcher runs d.Run until the test ends, and waits for it to stop.
func runDispatcher(tb testing.TB, d *webhook.Dispatcher, interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, interval) }()
	tb.Cleanup(func() { cancel(); <-done })
}

// TestHangingTenantCannotDelayAnother: tenant A's ten endpoints hang (they
// answer only when the dispatcher gives up, after 10 minutes), with 40
// deliveries due, all older than tenant B's; B's deliveries all arrive
// while A's hang, and A never holds more than its in-flight cap. Asserted
// by condition (bounded at two minutes, far below A's timeout): with
// first-in first-out claims and a batch that waits for its slowest
// delivery, A's hanging deliveries held every slot and B's waited for
// A's timeout.
func TestHangingTenantCannotDelayAnother(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			f.ep.MaxPerTenant = 0
			for _, r := range newHangingReceivers(t, 10, time.Hour) {
				if _, err := f.ep.Create(t.Context(), testenv.TenantA, r.URL+"/hook", []event.Type{event.OrderCreated}); err != nil {
					t.Fatal(err)
				}
			}
			b := newReceiver(t)
			bep, err := f.ep.Create(t.Context(), testenv.TenantB, b.URL+"/hook", []event.Type{event.OrderCreated})
			if err != nil {
				t.Fatal(err)
			}
			b.secret = bep.Secret
			for i := range 4 {
				createOrder(t, f.env, testenv.TenantA, i)
			}
			const perTenant = 3
			d := f.dispatcher(webhook.Config{Workers: 6, Batch: 16, InFlightPerTenant: perTenant, InFlightPerEndpoint: 1,
				Timeout: 10 * time.Minute, Lease: time.Hour})
			// 100ms between claims: on SQLite every claim takes the write lock,
			// and at 10ms a busy machine starves the writers of outcomes.
			runDispatcher(t, d, 100*time.Millisecond)
			var bOrders []string
			for i := range 5 {
				bOrders = append(bOrders, createOrder(t, f.env, testenv.TenantB, i))
			}
			// Every one of B's deliveries succeeds (recorded as such, not
			// only received) while A's hang.
			deadline := time.Now().Add(2 * time.Minute)
			began := time.Now()
			for {
				ds, err := f.ep.Deliveries(t.Context(), testenv.TenantB, bep.ID, 10)
				if err != nil {
					t.Fatal(err)
				}
				if len(ds) == len(bOrders) && !slices.ContainsFunc(ds, func(d event.Delivery) bool { return d.Status != event.DeliverySucceeded }) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("tenant B's deliveries after two minutes while tenant A's endpoints hang: %+v", ds)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("tenant B's %d deliveries succeeded within %s", len(bOrders), time.Since(began))
			b.mu.Lock()
			if len(b.got) != len(bOrders) {
				t.Errorf("tenant B's receiver got %d events, want %d", len(b.got), len(bOrders))
			}
			b.mu.Unlock()
			// A's endpoints really hung, and within A's cap.
			aEndpoints, _ := f.ep.List(t.Context(), testenv.TenantA)
			var aInFlight int
			for _, ep := range aEndpoints {
				ds, _ := f.ep.Deliveries(t.Context(), testenv.TenantA, ep.ID, 10)
				for _, dl := range ds {
					if dl.Status == event.DeliveryDelivering {
						aInFlight++
					}
					if dl.Status == event.DeliverySucceeded {
						t.Fatalf("a hanging endpoint's delivery succeeded: %+v", dl)
					}
				}
			}
			if aInFlight == 0 || aInFlight > perTenant {
				t.Fatalf("tenant A has %d deliveries in flight, want 1 to %d", aInFlight, perTenant)
			}
		})
	}
}

// TestRetryAfterBeyondTheWindowIsCapped: a receiver asking, with
// Retry-After, for a wait past the retry window's end gets its last
// attempt at the window's end instead of being given up at once
// (regression: the delivery failed on the spot).
func TestRetryAfterBeyondTheWindowIsCapped(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			r := newReceiver(t)
			r.respond = func(n int, w http.ResponseWriter) int {
				if n == 1 {
					w.Header().Set("Retry-After", fmt.Sprint((10 * 24 * time.Hour).Seconds()))
					w.WriteHeader(http.StatusServiceUnavailable)
					return http.StatusServiceUnavailable
				}
				return 0
			}
			ep := f.endpoint(t, r, event.OrderCreated)
			createOrder(t, f.env, testenv.TenantA, 0)
			const window = time.Hour
			d := f.dispatcher(webhook.Config{RetryWindow: window, BaseBackoff: time.Second})
			start := f.clk.Now()
			if n, err := d.RunOnce(t.Context()); err != nil || n != 1 {
				t.Fatalf("RunOnce = %d, %v", n, err)
			}
			ds, err := f.ep.Deliveries(t.Context(), testenv.TenantA, ep.ID, 10)
			if err != nil || len(ds) != 1 || ds[0].Status != event.DeliveryPending || ds[0].NextAttemptAt == nil {
				t.Fatalf("after a Retry-After of 10 days in a window of 1h: %+v, %v; want pending", ds, err)
			}
			if next := ds[0].NextAttemptAt.Sub(start); next > window || next < window-time.Minute {
				t.Fatalf("next attempt %s after the event, want at the window's end (%s)", next, window)
			}
			f.clk.Advance(ds[0].NextAttemptAt.Sub(f.clk.Now()))
			drain(t, d)
			ds, _ = f.ep.Deliveries(t.Context(), testenv.TenantA, ep.ID, 10)
			if ds[0].Status != event.DeliverySucceeded || ds[0].Attempts != 2 {
				t.Fatalf("the last attempt at the window's end: %+v", ds[0])
			}
		})
	}
}

// BenchmarkTenantBDeliveryLatency measures tenant B's webhook latency, from
// its order's create to its receiver's answer, on PostgreSQL: idle, and
// while tenant A's 100 endpoints hang (each answers after 20s, past the
// dispatcher's 10s timeout) with 1000 of A's deliveries due. It reports
// the p50 and p99 over b.N deliveries (dispatcher interval 50ms, orderd's
// other webhook defaults).
//
//	go test -run '^$' -bench TenantBDeliveryLatency -benchtime 200x ./webhook/
func BenchmarkTenantBDeliveryLatency(b *testing.B) {
	for _, loaded := range []bool{false, true} {
		name := "idle"
		if loaded {
			name = "tenantA_100_hanging_endpoints"
		}
		b.Run(name, func(b *testing.B) {
			env := testenv.New(b, testenv.Postgres, testenv.Options{})
			es := env.Store.(store.EventStore)
			eps := &webhook.Endpoints{Store: es, AllowPrivate: true}
			var hung *atomic.Int32
			if loaded {
				rs := newHangingReceivers(b, 100, 20*time.Second)
				hung = rs[0].calls
				for _, r := range rs {
					if _, err := eps.Create(context.Background(), testenv.TenantA, r.URL+"/hook", []event.Type{event.OrderCreated}); err != nil {
						b.Fatal(err)
					}
				}
				for i := range 10 {
					createOrder(b, env, testenv.TenantA, i)
				}
			}
			var mu sync.Mutex
			arrived := map[string]time.Time{} // order id → when its order.created arrived
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var ev event.Event
				if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				mu.Lock()
				arrived[ev.OrderID] = time.Now()
				mu.Unlock()
			}))
			b.Cleanup(recv.Close)
			if _, err := eps.Create(context.Background(), testenv.TenantB, recv.URL+"/hook", []event.Type{event.OrderCreated}); err != nil {
				b.Fatal(err)
			}
			runDispatcher(b, webhook.NewDispatcher(es, webhook.Config{AllowPrivate: true, Logger: slog.New(slog.DiscardHandler)}), 50*time.Millisecond)
			if loaded {
				for hung.Load() < webhook.DefaultInFlightPerTenant {
					time.Sleep(10 * time.Millisecond) // A's endpoints hang before B's first order
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				id := createOrder(b, env, testenv.TenantB, i)
				for deadline := start.Add(5 * time.Minute); ; time.Sleep(time.Millisecond) {
					mu.Lock()
					at, ok := arrived[id]
					mu.Unlock()
					if ok {
						lat = append(lat, at.Sub(start))
						break
					}
					if time.Now().After(deadline) {
						b.Fatalf("delivery %d never arrived", i)
					}
				}
			}
			b.StopTimer()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50_ms")
			b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Milliseconds()), "p99_ms")
		})
	}
}
