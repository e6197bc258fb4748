package paysim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
)

// env is one paysim server on a loopback httptest.Server over a ledger in a
// temporary directory.
type env struct {
	t      *testing.T
	dir    string
	ledger *paysim.Ledger
	srv    *paysim.Server
	ts     *httptest.Server
}

// start serves a fresh ledger in a new temporary directory.
func start(t *testing.T, f paysim.Faults) *env {
	t.Helper()
	return startIn(t, t.TempDir(), f)
}

// startIn serves the ledger in dir. The server and ledger are closed at the
// end of the test, or earlier by stop.
func startIn(t *testing.T, dir string, f paysim.Faults) *env {
	t.Helper()
	return startWith(t, dir, paysim.Config{Faults: f})
}

// startWith serves the ledger in dir with c, as startIn does.
func startWith(t *testing.T, dir string, c paysim.Config) *env {
	t.Helper()
	l, err := paysim.OpenLedger(context.Background(), dir)
	if err != nil {
		t.Fatalf("OpenLedger: %v", err)
	}
	srv, err := paysim.NewServer(l, c)
	if err != nil {
		l.Close()
		t.Fatalf("NewServer: %v", err)
	}
	e := &env{t: t, dir: dir, ledger: l, srv: srv, ts: httptest.NewServer(srv)}
	t.Cleanup(e.stop)
	return e
}

// stop closes the server and the ledger; it may be called more than once.
func (e *env) stop() {
	if e.ts == nil {
		return
	}
	e.srv.StopDelays()
	e.ts.Close()
	if err := e.ledger.Close(); err != nil {
		e.t.Errorf("closing the ledger: %v", err)
	}
	e.ts = nil
}

// client never reuses connections, so that a dropped reply is always seen
// (the transport would silently resend a request with an Idempotency-Key
// that failed on a reused connection).
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 60 * time.Second}

// reply is one answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// replayed reports whether the answer carries Idempotent-Replayed: true.
func (r reply) replayed() bool { return r.header.Get(paysim.ReplayedHeader) == "true" }

// errType returns error.type and error.code of an error body.
func (r reply) errType() (typ, code string) {
	var b struct {
		Error struct{ Type, Code string }
	}
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Type, b.Error.Code
}

// request is one API call.
type request struct {
	method, path string
	key          string // Idempotency-Key; "" for none
	fault        string // Paysim-Fault; "" for none
	body         any    // marshalled unless a string
}

// concurrently sends n requests at once, the i-th made by req(i), and
// returns their replies in order; a transport error fails the test.
func (e *env) concurrently(n int, req func(i int) request) []reply {
	e.t.Helper()
	replies := make([]reply, n)
	errs := make([]error, n)
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-begin
			replies[i], errs[i] = e.send(context.Background(), req(i))
		})
	}
	close(begin)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			e.t.Fatalf("request %d: %v", i, err)
		}
	}
	return replies
}

// send sends req and returns the answer or the transport error.
func (e *env) send(ctx context.Context, req request) (reply, error) {
	e.t.Helper()
	var body io.Reader
	switch b := req.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		body = bytes.NewReader(raw)
	}
	r, err := http.NewRequestWithContext(ctx, req.method, e.ts.URL+req.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if req.key != "" {
		r.Header.Set(paysim.IdempotencyKeyHeader, req.key)
	}
	if req.fault != "" {
		r.Header.Set(paysim.FaultHeader, req.fault)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(r)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: raw}, nil
}

// do sends req and fails the test on a transport error.
func (e *env) do(req request) reply {
	e.t.Helper()
	r, err := e.send(context.Background(), req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.method, req.path, err)
	}
	return r
}

// charge posts a charge of 4200 USD for orderID with method under key.
func (e *env) charge(key, orderID, method, fault string) reply {
	e.t.Helper()
	return e.do(request{method: "POST", path: "/v1/charges", key: key, fault: fault, body: chargeParams(orderID, method)})
}

func chargeParams(orderID, method string) paysim.ChargeParams {
	return paysim.ChargeParams{OrderID: orderID, Amount: 4200, Currency: "USD", PaymentMethod: method}
}

// ship posts a shipment of one of each SKU for orderID under key.
func (e *env) ship(key, orderID, fault string, skus ...string) reply {
	e.t.Helper()
	return e.do(request{method: "POST", path: "/v1/shipments", key: key, fault: fault, body: shipParams(orderID, skus...)})
}

func shipParams(orderID string, skus ...string) paysim.ShipmentParams {
	if len(skus) == 0 {
		skus = []string{"sku_mug"}
	}
	p := paysim.ShipmentParams{OrderID: orderID}
	for _, s := range skus {
		p.Items = append(p.Items, paysim.Item{SKU: s, Quantity: 1, UnitPrice: 1500})
	}
	return p
}

// lookup gets /v1/<what>?idempotency_key=key.
func (e *env) lookup(what, key string) reply {
	e.t.Helper()
	return e.do(request{method: "GET", path: "/v1/" + what + "?idempotency_key=" + key})
}

// chargeUnder returns the charge (a capture, or a remembered decline) the
// ledger holds under idempotency key key, from GET /admin/ledger, and
// whether there is one.
func (e *env) chargeUnder(key string) (paysim.Charge, bool) {
	e.t.Helper()
	for _, c := range e.snapshot().Charges {
		if c.IdempotencyKey == key {
			return c, true
		}
	}
	return paysim.Charge{}, false
}

// stats returns GET /admin/stats.
func (e *env) stats() paysim.Stats {
	e.t.Helper()
	var st paysim.Stats
	decode(e.t, e.do(request{method: "GET", path: "/admin/stats"}), http.StatusOK, &st)
	return st
}

// snapshot returns GET /admin/ledger.
func (e *env) snapshot() paysim.Snapshot {
	e.t.Helper()
	var s paysim.Snapshot
	decode(e.t, e.do(request{method: "GET", path: "/admin/ledger"}), http.StatusOK, &s)
	return s
}

// setFaults puts f to /admin/faults.
func (e *env) setFaults(f paysim.Faults) {
	e.t.Helper()
	r := e.do(request{method: "PUT", path: "/admin/faults", body: f})
	if r.status != http.StatusOK {
		e.t.Fatalf("PUT /admin/faults = %d %s", r.status, r.body)
	}
}

// decode checks r's status and decodes its body into v.
func decode(t *testing.T, r reply, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

// wantError checks r is an error answer with status, type and code.
func wantError(t *testing.T, r reply, status int, typ, code string) {
	t.Helper()
	gotType, gotCode := r.errType()
	if r.status != status || gotType != typ || gotCode != code {
		t.Fatalf("answer = %d %s/%s (%s), want %d %s/%s", r.status, gotType, gotCode, r.body, status, typ, code)
	}
}
