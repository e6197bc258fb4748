package stripesim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

const testKey = "sk_test_paysim_0123456789"

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	t     *testing.T
	dir   string
	sim   *stripesim.Server
	ts    *httptest.Server
	clock *clock
	close func()
}

func start(t *testing.T, c stripesim.Config) *env {
	t.Helper()
	return startIn(t, t.TempDir(), c)
}

func startIn(t *testing.T, dir string, c stripesim.Config) *env {
	t.Helper()
	ctx := context.Background()
	l, err := paysim.OpenLedger(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	native, err := paysim.NewServer(l, paysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now().UTC()}
	if c.Now == nil {
		c.Now = clk.Now
	}
	sim, err := stripesim.New(ctx, l, native, c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	e := &env{t: t, dir: dir, sim: sim, ts: ts, clock: clk}
	var once sync.Once
	e.close = func() {
		once.Do(func() {
			sim.StopDelays()
			ts.Close()
			l.Close()
		})
	}
	t.Cleanup(e.close)
	return e
}

// resp is an answer read in full.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return m
}

func (r resp) errField(t *testing.T, f string) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	s, _ := e[f].(string)
	return s
}

// freshConns opens a connection per request: net/http would otherwise
// resend a POST carrying an Idempotency-Key once when a reused keep-alive
// connection closes before an answer (net/http's Request.isReplayable),
// hiding a dropped answer.
var freshConns = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// do sends a form request; key "" sends no Idempotency-Key. A transport
// error is returned as err.
func (e *env) do(method, path, key string, form url.Values, hdr ...string) (resp, error) {
	var body io.Reader
	if form != nil && method == http.MethodPost {
		body = strings.NewReader(form.Encode())
	} else if form != nil {
		path += "?" + form.Encode()
	}
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	if err != nil {
		return resp{}, err
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := freshConns.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}, err
}

func (e *env) must(method, path, key string, form url.Values, hdr ...string) resp {
	e.t.Helper()
	r, err := e.do(method, path, key, form, hdr...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (e *env) ledger() paysim.Snapshot {
	e.t.Helper()
	s, err := paysim.NewAdminClient(e.ts.URL).Ledger(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) createIntent(key, order string, amount string) string {
	e.t.Helper()
	r := e.must("POST", "/v1/payment_intents", key, url.Values{"amount": {amount}, "currency": {"eur"},
		"metadata[orderly_order_id]": {order}, "metadata[orderly_reference]": {order + "/pay/1"}})
	if r.status != 200 {
		e.t.Fatalf("create: %d %s", r.status, r.body)
	}
	return r.json(e.t)["id"].(string)
}
