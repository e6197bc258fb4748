package faulttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
)

const (
	tenant = "tenant_fault"
	apiKey = "sk_test_faults_0001"
)

// orderAmount is the amount of every order the tests create: 3 × 999.
const orderAmount = 2997

// countingTransport counts the requests it sends, by method.
type countingTransport struct {
	base   http.RoundTripper
	posts  atomic.Int64
	gets   atomic.Int64
	fivexx atomic.Int64 // 5xx answers
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		c.posts.Add(1)
	} else {
		c.gets.Add(1)
	}
	resp, err := c.base.RoundTrip(r)
	if err == nil && resp.StatusCode >= 500 {
		c.fivexx.Add(1)
	}
	return resp, err
}

// orderdAPI talks to one orderd over plain net/http and counts what it
// sends.
type orderdAPI struct {
	base string
	hc   *http.Client
	ct   *countingTransport
}

// orderJSON is the part of an order the tests read.
type orderJSON struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Amount  int64  `json:"amount"`
	Version int64  `json:"version"`
	// AmountRefunded is what the order says was refunded (minor units).
	AmountRefunded *int64 `json:"amount_refunded"`
}

// reply is one answer of orderd (err set when none came).
type reply struct {
	status     int
	replayed   bool
	retryAfter string
	order      orderJSON
	problem    string // the problem type's slug, for errors
	body       string
	err        error
}

func (r reply) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	s := fmt.Sprintf("%d", r.status)
	if r.replayed {
		s += " (replayed)"
	}
	if r.order.State != "" {
		s += " " + r.order.State
	}
	if r.problem != "" {
		s += " " + r.problem
	}
	return s
}

func (a *orderdAPI) do(ctx context.Context, method, path, key string, body any) reply {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return reply{err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return reply{err: err}
	}
	r := reply{status: resp.StatusCode, replayed: resp.Header.Get("Idempotency-Replayed") == "true",
		retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_ = json.Unmarshal(b, &r.order)
	} else {
		var p struct{ Type string }
		_ = json.Unmarshal(b, &p)
		r.problem = strings.TrimPrefix(p.Type, "https://orderly.dev/problems/")
	}
	return r
}

// create makes an order and fails t unless it is a new RCVD order.
func (a *orderdAPI) create(t *testing.T, key string) orderJSON {
	t.Helper()
	body := map[string]any{"customer_id": "cus_fault", "currency": "USD",
		"items": []map[string]any{{"sku": "sku_fault", "quantity": 3, "unit_price": 999}}}
	var r reply
	for range 10 { // a create is retried with its key only if orderd is briefly unavailable
		r = a.do(context.Background(), http.MethodPost, "/v1/orders", key, body)
		if r.err == nil && r.status != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.status != http.StatusCreated || r.order.State != "RCVD" || r.order.Amount != orderAmount {
		t.Fatalf("create %s = %v %s", key, r, r.body)
	}
	return r.order
}

func payBody(method string) map[string]any {
	return map[string]any{"amount": orderAmount, "currency": "USD", "payment_method": method}
}

// pay sends one pay request.
func (a *orderdAPI) pay(ctx context.Context, id, key, method string) reply {
	return a.do(ctx, http.MethodPost, "/v1/orders/"+id+"/pay", key, payBody(method))
}

// retryable reports whether a client should retry r with the same key: no
// answer, a 5xx, a 429, or a 409 for a key or order still in progress.
func retryable(r reply) bool {
	switch {
	case r.err != nil:
		return true
	case r.status >= 500:
		return true
	case r.status == http.StatusTooManyRequests:
		// The tenant's in-flight bound (ORDERD_TENANT_MAX_IN_FLIGHT), which
		// bus commands share with HTTP: nothing was done, retry the same key.
		return true
	case r.status == http.StatusConflict:
		return r.problem == "idempotency_key_in_progress" || r.problem == "order_busy"
	}
	return false
}

// payUntilFinal sends pay with the same key until it gets a final answer
// (at most 60 attempts and 30s), 250ms apart. It returns the last answer
// and how many were sent.
func (a *orderdAPI) payUntilFinal(id, key, method string) (reply, int) {
	deadline := time.Now().Add(30 * time.Second)
	var r reply
	n := 0
	for n < 60 && time.Now().Before(deadline) {
		n++
		r = a.pay(context.Background(), id, key, method)
		if !retryable(r) {
			return r, n
		}
		time.Sleep(250 * time.Millisecond)
	}
	return r, n
}

// getOrder reads an order.
func (a *orderdAPI) getOrder(id string) reply {
	return a.do(context.Background(), http.MethodGet, "/v1/orders/"+id, "", nil)
}

// keyStatus is GET /v1/idempotency-keys/{key}.
type keyStatus struct {
	State      string `json:"state"`
	ResourceID string `json:"resource_id"`
	StatusCode int    `json:"status_code"`
}

func (a *orderdAPI) keyStatus(key string) (keyStatus, error) {
	r := a.do(context.Background(), http.MethodGet, "/v1/idempotency-keys/"+url.PathEscape(key), "", nil)
	if r.err != nil {
		return keyStatus{}, r.err
	}
	if r.status != http.StatusOK {
		return keyStatus{}, fmt.Errorf("GET key status = %d %s", r.status, r.body)
	}
	var ks keyStatus
	err := json.Unmarshal([]byte(r.body), &ks)
	return ks, err
}

// awaitKeyCompleted polls the key until it is completed or timeout passes;
// it returns the last status seen.
func (a *orderdAPI) awaitKeyCompleted(key string, timeout time.Duration) (keyStatus, error) {
	deadline := time.Now().Add(timeout)
	var ks keyStatus
	var err error
	for time.Now().Before(deadline) {
		ks, err = a.keyStatus(key)
		if err == nil && ks.State == "completed" {
			return ks, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil {
		err = fmt.Errorf("key still %q after %s", ks.State, timeout)
	}
	return ks, err
}

// awaitState polls the order until it is in state or timeout passes; it
// returns the last state seen.
func (a *orderdAPI) awaitState(id, state string, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if r := a.getOrder(id); r.err == nil && r.status == http.StatusOK {
			last = r.order.State
			if last == state {
				return last
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}

// ready reports whether GET /readyz answers 200.
func (a *orderdAPI) ready() bool {
	r := a.do(context.Background(), http.MethodGet, "/readyz", "", nil)
	return r.err == nil && r.status == http.StatusOK
}

// paysimAdmin reads and sets paysim's admin endpoints, failing the test on
// an error.
type paysimAdmin struct {
	*paysim.AdminClient
}

func newPaysimAdmin(addr string) *paysimAdmin {
	return &paysimAdmin{paysim.NewAdminClient("http://" + addr)}
}

func (p *paysimAdmin) stats(t *testing.T) paysim.Stats {
	t.Helper()
	st, err := p.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (p *paysimAdmin) ledger(t *testing.T) paysim.Snapshot {
	t.Helper()
	s, err := p.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// captures returns paysim's captures of order id.
func (p *paysimAdmin) captures(t *testing.T, id string) int {
	t.Helper()
	return p.stats(t).CapturesByOrder[id]
}

// awaitCaptures polls until order id has n captures or timeout passes, and
// returns the last count.
func (p *paysimAdmin) awaitCaptures(t *testing.T, id string, n int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	got := 0
	for time.Now().Before(deadline) {
		if got = p.captures(t, id); got >= n {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
	return got
}

// awaitHolding waits, at most a minute (a bound for a loaded machine, not
// a timing), until paysim has started one more latency delay than before
// (a charge is being held), so a process can be stopped or killed while
// the call is in flight.
func (p *paysimAdmin) awaitHolding(t *testing.T, before int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if p.stats(t).FaultsInjected[paysim.FaultLatency] > before {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("paysim did not receive the charge within a minute")
}

// setFaults replaces paysim's run-level faults.
func (p *paysimAdmin) setFaults(t *testing.T, f paysim.Faults) {
	t.Helper()
	if err := p.SetFaults(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}
