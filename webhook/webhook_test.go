package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/webhook"
)

// receiver is a loopback webhook endpoint that records what it gets and
// answers with respond (2xx by default).
type receiver struct {
	*httptest.Server
	secret  string
	mu      sync.Mutex
	got     []received
	calls   atomic.Int32
	active  sync.Map // event id → *atomic.Int32 of requests in flight
	overlap atomic.Bool
	// respond answers call n (1-based) and returns the status it wrote,
	// or 0 to let the receiver answer 200 and record the event.
	respond func(n int, w http.ResponseWriter) int
}

type received struct {
	ev       event.Event
	sigValid bool
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := int(r.calls.Add(1))
		body, _ := io.ReadAll(req.Body)
		id := req.Header.Get(event.EventIDHeader)
		c, _ := r.active.LoadOrStore(id, new(atomic.Int32))
		if c.(*atomic.Int32).Add(1) > 1 {
			r.overlap.Store(true)
		}
		defer c.(*atomic.Int32).Add(-1)
		time.Sleep(time.Millisecond) // widen the window an overlap would need
		var ev event.Event
		if err := json.Unmarshal(body, &ev); err != nil || ev.ID != id {
			t.Errorf("delivery %q: body %s (%v)", id, body, err)
		}
		// The dispatcher signs with its own clock: verify at that time.
		sig := req.Header.Get(event.SignatureHeader)
		valid := event.Verify(r.secret, sig, body, time.Time{}, 0) == nil
		if r.respond != nil && r.respond(n, w) != 0 {
			return
		}
		r.mu.Lock()
		r.got = append(r.got, received{ev, valid})
		r.mu.Unlock()
	}))
	t.Cleanup(r.Close)
	return r
}

type fixture struct {
	env *testenv.Env
	es  store.EventStore
	clk *testclock.Clock // the service's, the dispatcher's and the database's: backoff and retry windows pass without waiting
	ep  *webhook.Endpoints
}

func newFixture(t *testing.T, kind string) *fixture {
	clk := testclock.New(testclock.Start)
	env := testenv.New(t, kind, testenv.Options{Clock: clk})
	es := env.Store.(store.EventStore)
	return &fixture{env: env, es: es, clk: clk, ep: &webhook.Endpoints{Store: es, AllowPrivate: true, Now: clk.Now}}
}

func (f *fixture) endpoint(t *testing.T, r *receiver, types ...event.Type) event.Endpoint {
	t.Helper()
	if len(types) == 0 {
		types = event.Types
	}
	ep, err := f.ep.Create(t.Context(), testenv.TenantA, r.URL+"/hook", types)
	if err != nil {
		t.Fatalf("Create endpoint: %v", err)
	}
	r.secret = ep.Secret
	return ep
}

func (f *fixture) dispatcher(cfg webhook.Config) *webhook.Dispatcher {
	cfg.AllowPrivate, cfg.Now = true, f.clk.Now
	return webhook.NewDispatcher(f.es, cfg)
}

// drain runs passes until one leases nothing.
func drain(t *testing.T, d *webhook.Dispatcher) {
	t.Helper()
	for range 1000 {
		n, err := d.RunOnce(t.Context())
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		if n == 0 {
			return
		}
	}
	t.Fatal("deliveries never ran out")
}

// lifecycle creates an order and takes it through pay and fulfil (or
// cancel, for odd i).
func (f *fixture) lifecycle(t *testing.T, i int) string {
	t.Helper()
	ctx := context.Background()
	svc := f.env.Service
	res, err := svc.Create(ctx, testenv.TenantA, idempotency.Key{}, order.NewOrderInput{CustomerID: fmt.Sprint("c", i), Currency: "EUR",
		Items: []order.Item{{SKU: "sku", Quantity: 1, UnitPrice: 500}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Order.ID
	call := func(k string) service.Call {
		return service.Call{TenantID: testenv.TenantA, OrderID: id, Key: idempotency.Key{Value: k + id, Fingerprint: k}}
	}
	if _, err := svc.Pay(ctx, call("pay"), service.PayInput{Amount: 500, Currency: "EUR", PaymentMethod: testmode.MethodApproved}); err != nil {
		t.Fatal(err)
	}
	if i%2 == 0 {
		_, err = svc.Fulfill(ctx, call("ship"))
	} else {
		_, err = svc.Cancel(ctx, call("cancel"))
	}
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDeliveryInOrderSignedOnce: two dispatchers (two instances) deliver
// every event of every order, in each order's sequence, each signed, never
// the same event twice at once.
func TestDeliveryInOrderSignedOnce(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			r := newReceiver(t)
			f.endpoint(t, r)
			const orders = 8
			var ids []string
			for i := range orders {
				ids = append(ids, f.lifecycle(t, i))
			}
			var wg sync.WaitGroup
			for range 2 {
				d := f.dispatcher(webhook.Config{Batch: 4})
				wg.Go(func() { drain(t, d) })
			}
			wg.Wait()
			if r.overlap.Load() {
				t.Fatal("one event was delivered twice at the same time")
			}
			perOrder := map[string][]int64{}
			for _, g := range r.got {
				if !g.sigValid {
					t.Errorf("event %s: signature does not verify", g.ev.ID)
				}
				perOrder[g.ev.OrderID] = append(perOrder[g.ev.OrderID], g.ev.Sequence)
			}
			for _, id := range ids {
				if got := perOrder[id]; fmt.Sprint(got) != "[1 2 3]" {
					t.Errorf("order %s: sequences delivered %v, want [1 2 3]", id, got)
				}
			}
		})
	}
}

// TestRetriesWithBackoff: a receiver that fails the first three times gets
// the event on the fourth attempt; each wait is within its full-jitter
// bound, and a Retry-After is honoured.
func TestRetriesWithBackoff(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			r := newReceiver(t)
			r.respond = func(n int, w http.ResponseWriter) int {
				switch n {
				case 1, 2:
					w.WriteHeader(http.StatusInternalServerError)
					return http.StatusInternalServerError
				case 3:
					w.Header().Set("Retry-After", "3600")
					w.WriteHeader(http.StatusServiceUnavailable)
					return http.StatusServiceUnavailable
				}
				return 0
			}
			ep := f.endpoint(t, r, event.OrderCreated)
			if _, err := f.env.Service.Create(t.Context(), testenv.TenantA, idempotency.Key{}, order.NewOrderInput{
				CustomerID: "c", Currency: "EUR", Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 1}}}); err != nil {
				t.Fatal(err)
			}
			d := f.dispatcher(webhook.Config{BaseBackoff: time.Second, MaxBackoff: time.Minute})
			// The full-jitter bound of the wait after attempt n (n = 1, 2);
			// attempt 3 answers Retry-After: 3600.
			bound := map[int]time.Duration{1: time.Second, 2: 2 * time.Second}
			for attempt := 1; attempt <= 3; attempt++ {
				if n, err := d.RunOnce(t.Context()); err != nil || n != 1 {
					t.Fatalf("attempt %d: RunOnce = %d, %v", attempt, n, err)
				}
				ds, err := f.ep.Deliveries(t.Context(), testenv.TenantA, ep.ID, 10)
				if err != nil || len(ds) != 1 || ds[0].Status != event.DeliveryPending || ds[0].Attempts != attempt || ds[0].NextAttemptAt == nil {
					t.Fatalf("after attempt %d: %+v, %v", attempt, ds, err)
				}
				wait := ds[0].NextAttemptAt.Sub(f.clk.Now())
				switch {
				case bound[attempt] > 0 && (wait < 0 || wait >= bound[attempt]):
					t.Fatalf("attempt %d: waits %s, want full jitter in [0, %s)", attempt, wait, bound[attempt])
				case attempt == 3 && wait < time.Hour:
					t.Fatalf("attempt 3: waits %s, want the Retry-After of 1h", wait)
				}
				// Not before its time …
				if n, _ := d.RunOnce(t.Context()); n != 0 && wait > 0 {
					t.Fatalf("attempt %d: retried %s early", attempt, wait)
				}
				f.clk.Advance(wait)
			}
			drain(t, d)
			if len(r.got) != 1 || r.calls.Load() != 4 {
				t.Fatalf("received %d after %d calls; want 1 after 4", len(r.got), r.calls.Load())
			}
			ds, _ := f.ep.Deliveries(t.Context(), testenv.TenantA, ep.ID, 10)
			if ds[0].Status != event.DeliverySucceeded || ds[0].Attempts != 4 {
				t.Fatalf("delivery = %+v", ds[0])
			}
		})
	}
}

// TestGoneDisablesAndWindowEnds: a 410 disables the endpoint; a receiver
// that never answers 2xx is given up once the retry window has passed.
func TestGoneDisablesAndWindowEnds(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			gone := newReceiver(t)
			gone.respond = func(_ int, w http.ResponseWriter) int { w.WriteHeader(http.StatusGone); return http.StatusGone }
			down := newReceiver(t)
			down.respond = func(_ int, w http.ResponseWriter) int {
				w.WriteHeader(http.StatusBadGateway)
				return http.StatusBadGateway
			}
			gep := f.endpoint(t, gone)
			dep := f.endpoint(t, down)
			f.lifecycle(t, 0)
			d := f.dispatcher(webhook.Config{RetryWindow: time.Hour, BaseBackoff: time.Minute, MaxBackoff: 10 * time.Minute})
			for range 100 {
				drain(t, d)
				f.clk.Advance(10 * time.Minute)
			}
			if n := gone.calls.Load(); n != 1 {
				t.Fatalf("a 410 endpoint was called %d times, want 1", n)
			}
			e, err := f.ep.Get(t.Context(), testenv.TenantA, gep.ID)
			if err != nil || e.Enabled || !strings.Contains(e.DisabledReason, "410") {
				t.Fatalf("endpoint after 410 = %+v, %v", e, err)
			}
			ds, _ := f.ep.Deliveries(t.Context(), testenv.TenantA, dep.ID, 10)
			if len(ds) != 3 {
				t.Fatalf("%d deliveries, want 3", len(ds))
			}
			// The first event was given up at the window's end; the later
			// ones then went out in turn and were given up too.
			for _, dl := range ds {
				if dl.Status != event.DeliveryFailed || dl.LastStatus != http.StatusBadGateway {
					t.Fatalf("delivery to a failing endpoint = %+v", dl)
				}
			}
			if n := down.calls.Load(); n < 3 || n > 3*int32(time.Hour/time.Minute) {
				t.Fatalf("failing endpoint called %d times", n)
			}
		})
	}
}

// TestPrivateTargetsRefused: registration refuses loopback, private,
// link-local and unspecified targets; and a target that passed (or was
// registered while allowed) is refused again at connect time.
func TestPrivateTargetsRefused(t *testing.T) {
	f := newFixture(t, testenv.SQLite)
	strict := &webhook.Endpoints{Store: f.es, Now: f.clk.Now}
	for _, u := range []string{"http://127.0.0.1:8080/h", "http://localhost/h", "http://10.1.2.3/h", "http://192.168.0.1/h",
		"http://172.16.0.1/h", "http://169.254.169.254/latest/meta-data", "http://[::1]/h", "http://[fe80::1]/h",
		"http://0.0.0.0/h", "http://100.64.0.1/h", "http://[::ffff:127.0.0.1]/h", "http://[fd00::1]/h",
		// The IANA special-purpose registries beyond the obvious ones
		// (regression: each of these was accepted): IPv4-compatible,
		// NAT64, 6to4 and Teredo forms of loopback, IETF protocol
		// assignments, benchmarking, reserved, broadcast, documentation.
		"http://[::127.0.0.1]/h", "http://[64:ff9b::7f00:1]/h", "http://[2002:7f00:1::1]/h", "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/h",
		"http://192.0.0.1/h", "http://198.18.0.1/h", "http://240.0.0.1/h", "http://255.255.255.255/h", "http://192.0.2.1/h",
		"http://198.51.100.7/h", "http://203.0.113.9/h", "http://[2001:db8::1]/h", "http://224.0.0.1/h"} {
		_, err := strict.Create(t.Context(), testenv.TenantA, u, []event.Type{event.OrderPaid})
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Code != apperr.EInvalid || ae.Fields[0].Field != "url" {
			t.Errorf("Create(%s) = %v, want EInvalid on url", u, err)
		}
	}
	for _, bad := range []struct{ url, field string }{{"ftp://93.184.216.34/", "url"}, {"http://u:p@93.184.216.34/", "url"}, {"", "url"}} {
		_, err := strict.Create(t.Context(), testenv.TenantA, bad.url, []event.Type{event.OrderPaid})
		var ae *apperr.Error
		if !errors.As(err, &ae) || ae.Fields[0].Field != bad.field {
			t.Errorf("Create(%q) = %v", bad.url, err)
		}
	}
	if _, err := strict.Create(t.Context(), testenv.TenantA, "https://93.184.216.34/hook", []event.Type{"order.shipped"}); err == nil {
		t.Error("an unknown event type was accepted")
	}
	if _, err := strict.Create(t.Context(), testenv.TenantA, "https://93.184.216.34/hook", []event.Type{event.OrderPaid}); err != nil {
		t.Errorf("a public target was refused: %v", err)
	}

	// Connect time: registered while allowed, refused by a dispatcher that
	// is not.
	r := newReceiver(t)
	ep := f.endpoint(t, r, event.OrderCreated)
	// A name resolving to loopback (as a rebound name would at connect
	// time): refused by the dialer too, and last_error names no address
	// (regression: it showed the address the name resolved to).
	_, port, _ := strings.Cut(strings.TrimPrefix(r.URL, "http://"), ":")
	named, err := f.ep.Create(t.Context(), testenv.TenantA, "http://localhost:"+port+"/hook", []event.Type{event.OrderCreated})
	if err != nil {
		t.Fatal(err)
	}
	f.lifecycle(t, 0)
	d := webhook.NewDispatcher(f.es, webhook.Config{Now: f.clk.Now})
	drain(t, d)
	if n := r.calls.Load(); n != 0 {
		t.Fatalf("a loopback receiver was called %d times", n)
	}
	for _, id := range []string{ep.ID, named.ID} {
		ds, _ := f.ep.Deliveries(t.Context(), testenv.TenantA, id, 10)
		if len(ds) != 1 || ds[0].Status != event.DeliveryPending || !strings.Contains(ds[0].LastError, "not global unicast") {
			t.Fatalf("delivery to a loopback target = %+v", ds)
		}
		if le := ds[0].LastError; strings.Contains(le, "127.0.0.1") || strings.Contains(le, "::1") || strings.Contains(le, port) {
			t.Fatalf("last_error %q shows the resolved address", le)
		}
	}
}
