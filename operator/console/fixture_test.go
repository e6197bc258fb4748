package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/operator/console"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/webhook"
)

// TestMain keeps INFO lines out of the output and reports skipped
// PostgreSQL tests (pgtest.Run).
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(pgtest.Run(m))
}

const (
	readerToken   = "reader-token-000000000001"
	operatorToken = "operator-token-0000000001"
)

// splitGateway is paysim over HTTP with a short timeout for charges (so
// pm_fault_timeout loses the answer) and a long one for lookups, as in
// package operator's tests.
type splitGateway struct {
	*paysimclient.Intents
	short *paysimclient.Intents
}

func (g splitGateway) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	return g.short.Confirm(ctx, req)
}

type fixture struct {
	t       *testing.T
	env     *testenv.Env
	clk     *testclock.Clock
	ops     *service.Operations
	console *httptest.Server // the admin mux: console and operator API
	disp    *webhook.Dispatcher
}

func newFixture(t *testing.T, kind string, cfg console.Config) *fixture {
	t.Helper()
	ctx := context.Background()
	l, err := paysim.OpenLedger(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := paysim.NewServer(l, paysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.StopDelays(); ts.Close(); l.Close() })
	short, err := paysimclient.NewIntents(ts.URL, paysimclient.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	long, err := paysimclient.NewIntents(ts.URL, paysimclient.WithTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(testclock.Start)
	env := testenv.New(t, kind, testenv.Options{Clock: clk, UnresolvedAfter: time.Hour,
		WrapGateway:   func(payment.Gateway) payment.Gateway { return splitGateway{Intents: long, short: short} },
		WrapWarehouse: func(w fulfillment.Warehouse) fulfillment.Warehouse { return w }})
	ops, err := env.Service.Operations()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := operator.ParseCredentials("reader:rita:" + readerToken + ",operator:olga:" + operatorToken)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Credentials = creds
	if cfg.AuthFailuresPerMinute == 0 {
		cfg.AuthFailuresPerMinute = 100
	}
	mux := http.NewServeMux()
	mux.Handle(operator.Prefix, operator.New(ops, operator.Config{Credentials: creds}))
	mux.Handle(console.Prefix, console.New(ops, cfg))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	disp := webhook.NewDispatcher(env.Store.(store.EventStore), webhook.Config{AllowPrivate: true, Now: clk.Now,
		Timeout: 30 * time.Second, InFlightPerTenant: -1, InFlightPerEndpoint: -1})
	return &fixture{t: t, env: env, clk: clk, ops: ops, console: hs, disp: disp}
}

var input = order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR", Items: []order.Item{{SKU: "sku", Quantity: 2, UnitPrice: 750}}}

func (f *fixture) create(in order.NewOrderInput) order.Order {
	f.t.Helper()
	res, err := f.env.Service.Create(context.Background(), testenv.TenantA, idempotency.Key{}, in)
	if err != nil {
		f.t.Fatal(err)
	}
	return res.Order
}

// park creates an order and pays it with pm_fault_timeout under key
// "pay-1": the answer is lost, and past UnresolvedAfter the completer
// parks the attempt (paysim knows no such charge).
func (f *fixture) park() (order.Order, payment.Attempt) {
	f.t.Helper()
	ctx := context.Background()
	o := f.create(input)
	if st, body := f.pay(o, "pay-1", paysim.MethodFaultTimeout); st != http.StatusServiceUnavailable {
		f.t.Fatalf("pay with a lost answer: %d %s, want 503", st, body)
	}
	f.clk.Advance(2 * time.Hour)
	for range 50 {
		if _, err := f.env.Service.RecoverAbandoned(ctx, 10); err != nil {
			f.t.Logf("completer: %v", err)
		}
		as, err := f.ops.Store().ParkedAttempts(ctx, store.ParkedFilter{Tenants: store.AnyTenant, Limit: 10})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, a := range as {
			if a.OrderID == o.ID {
				return o, a
			}
		}
		f.clk.Advance(15 * time.Minute)
	}
	f.t.Fatalf("the attempt of %s was never parked", o.ID)
	return o, payment.Attempt{}
}

// pay is the tenant API's pay of o under key.
func (f *fixture) pay(o order.Order, key, method string) (int, string) {
	f.t.Helper()
	b, _ := json.Marshal(map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": method})
	req, _ := http.NewRequest("POST", f.env.Server.URL+"/v1/orders/"+o.ID+"/pay", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+testenv.KeyA)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (f *fixture) attempt(key string) payment.Attempt {
	f.t.Helper()
	a, err := f.env.Store.GetAttempt(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// receiver is a loopback webhook receiver: it answers status (410 Gone
// until told otherwise) and records the event ids it was sent.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	got    []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{status: http.StatusGone}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var e event.Event
		_ = json.NewDecoder(req.Body).Decode(&e)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, e.ID)
		w.WriteHeader(r.status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) answer(status int) { r.mu.Lock(); r.status = status; r.mu.Unlock() }

func (r *receiver) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// failedDelivery registers an endpoint at rcv for order.created, creates
// an order, and delivers its event once: rcv answers 410, so the delivery
// fails for good and the endpoint is disabled.
func (f *fixture) failedDelivery(rcv *receiver) (event.Endpoint, event.Delivery, order.Order) {
	f.t.Helper()
	ctx := context.Background()
	ep := event.Endpoint{ID: "we_" + strings.Repeat("a", 32), TenantID: testenv.TenantA, URL: rcv.URL + "/hook",
		Types: []event.Type{event.OrderCreated}, Secret: "whsec_never_rendered_0001", Enabled: true, CreatedAt: f.clk.Now()}
	if err := f.env.Store.(store.EventStore).CreateEndpoint(ctx, ep, 0); err != nil {
		f.t.Fatal(err)
	}
	o := f.create(order.NewOrderInput{CustomerID: "cus_hook", Currency: "JPY", Items: []order.Item{{SKU: "tea", Quantity: 1, UnitPrice: 1200}}})
	if _, err := f.disp.RunOnce(ctx); err != nil {
		f.t.Fatal(err)
	}
	ds, err := f.ops.Store().SearchDeliveries(ctx, store.DeliverySearch{Tenants: store.AnyTenant, EndpointID: ep.ID, Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].Status != event.DeliveryFailed {
		f.t.Fatalf("deliveries after a 410 = %+v, %v; want one failed", ds, err)
	}
	return ep, ds[0], o
}

// chromium returns the browser to drive: $ORDERLY_CHROMIUM, or chromium
// (Debian's /usr/bin/chromium), chromium-browser or google-chrome on PATH.
func chromium() string {
	if p := os.Getenv("ORDERLY_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// browserRequired reports whether a missing browser fails the tests (CI,
// or ORDERLY_REQUIRE_BROWSER=1) instead of skipping them.
func browserRequired() bool {
	ci := os.Getenv("CI")
	return (ci != "" && ci != "0" && ci != "false") || os.Getenv("ORDERLY_REQUIRE_BROWSER") == "1"
}

// browser starts a headless Chromium with a fresh profile for t and
// returns its context (closed when t ends). Without a browser it skips,
// or fails when one is required.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		if browserRequired() {
			t.Fatal("no Chromium found (CI or ORDERLY_REQUIRE_BROWSER=1 require one): install it (apt-get install chromium) or set ORDERLY_CHROMIUM")
		}
		t.Skip("no Chromium found: install it (apt-get install chromium) or set ORDERLY_CHROMIUM to run the console's browser tests")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("mute-audio", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	// A bound on a hung browser, not a deadline any step must meet.
	ctx, cancelTimeout := context.WithTimeout(ctx, 5*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		if browserRequired() {
			t.Fatalf("start %s: %v", path, err)
		}
		t.Skipf("%s does not start (%v): the console's browser tests need a working Chromium (apt-get install chromium, or set ORDERLY_CHROMIUM)", path, err)
	}
	return ctx
}

// do runs steps in ctx, failing t on error.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// login logs in at base (the console's root URL, ending in /operator/)
// with token and waits for the overview.
func login(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(base+"login"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token), chromedp.Submit(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#backlogs")))
}

// text returns the text of the first node matching sel, once it exists
// (waiting at most a minute: a bound on a page that never comes, not a
// deadline a step must meet).
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// count returns how many nodes match sel, now.
func count(t *testing.T, ctx context.Context, sel string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int]("document.querySelectorAll("+jsString(sel)+").length"))
	if err != nil {
		t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

func jsString(s string) string { b, _ := json.Marshal(s); return string(b) }
