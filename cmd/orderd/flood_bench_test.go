package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/natsbus"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/store/pgtest"
)

// BenchmarkTenantFlood measures what tenant A's flood costs tenant B on one
// orderd (the production Run: one admission gate for HTTP and NATS
// commands, the webhook dispatcher, paysim over HTTP in this process, on
// PostgreSQL when ORDERLY_TEST_DATABASE_URL is set, else SQLite).
//
// The flood, all at once, from 15 s before B is measured until B is done:
//   - 70 connections that send A's headers and then trickle the body, one
//     byte a second (the audit's slow bodies);
//   - 200 goroutines sending A's creates back to back (a one-tenant storm);
//   - A's pays as NATS commands with a 2 s provider call (paysim's
//     pm_fault_latency), 20 published a second (slow bus commands);
//   - 100 registrations of webhook endpoints of A's (the per-tenant cap,
//     ORDERD_WEBHOOK_ENDPOINTS_PER_TENANT, keeps 16), subscribed to
//     order.paid, that never answer (held until the delivery times out).
//
// B, one request at a time, b.N times: a create (HTTP), a pay (HTTP), the
// order.paid webhook's arrival at B's receiver after the pay's answer, and
// a pay sent as a NATS command until the order reads PAID. Each is reported
// as p50 and p99 in milliseconds, with A's answers by class (A must see
// 429s, never a 5xx).
//
// The bound: flooded, B's creates and pays keep p99 under 1 s and B's
// deliveries under 2 s (idle, each is tens of milliseconds; see
// BENCHMARKS.md for figures). A delivery that takes longer than
// deliveryWait is counted as that long and in delivery_timeouts. Run:
//
//	ORDERLY_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	  go test -run '^$' -bench TenantFlood -benchtime 100x -timeout 30m ./cmd/orderd/
func BenchmarkTenantFlood(b *testing.B) {
	for _, flooded := range []bool{false, true} {
		name := "idle"
		if flooded {
			name = "flooded"
		}
		b.Run(name, func(b *testing.B) {
			kind := testenv.SQLite
			if os.Getenv("ORDERLY_TEST_DATABASE_URL") != "" {
				kind = testenv.Postgres
			}
			s := startFloodStack(b, kind)
			var stop func() floodCounts
			if flooded {
				stop = s.flood(b)
			}
			var create, pay, delivery, busPay []time.Duration
			lost := 0 // deliveries that took longer than deliveryWait
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				o := s.post(b, "/v1/orders", keyB, uuid.NewString(), s.orderBody())
				create = append(create, time.Since(t0))
				t0 = time.Now()
				paid := s.post(b, "/v1/orders/"+o+"/pay", keyB, uuid.NewString(), payBodyOf(testmode.MethodApproved))
				pay = append(pay, time.Since(t0))
				answered := time.Now()
				at, ok := s.receiverB.await(paid, deliveryWait)
				if !ok {
					lost++
				}
				delivery = append(delivery, at.Sub(answered))

				o2 := s.post(b, "/v1/orders", keyB, uuid.NewString(), s.orderBody())
				t0 = time.Now()
				s.publishPay(b, tenantB, keyB, o2, testmode.MethodApproved)
				s.awaitPaid(b, keyB, o2)
				busPay = append(busPay, time.Since(t0))
			}
			b.StopTimer()
			for _, m := range []struct {
				name string
				ds   []time.Duration
			}{{"create", create}, {"pay", pay}, {"delivery", delivery}, {"bus_pay", busPay}} {
				b.ReportMetric(percentile(m.ds, 50), m.name+"_p50_ms")
				b.ReportMetric(percentile(m.ds, 99), m.name+"_p99_ms")
			}
			b.ReportMetric(float64(lost), "delivery_timeouts")
			if stop != nil {
				c := stop()
				b.ReportMetric(float64(c.ok), "A_2xx")
				b.ReportMetric(float64(c.limited), "A_429")
				b.ReportMetric(float64(c.failed), "A_5xx")
				b.ReportMetric(float64(c.slowBodies), "A_slow_bodies")
				b.ReportMetric(float64(c.commands), "A_slow_commands")
				if c.failed > 0 {
					b.Errorf("tenant A saw %d 5xx answers; its excess must be its own 429", c.failed)
				}
			}
		})
	}
}

const (
	tenantA, keyA = "flood_a", "sk_flood_tenant_a_0001"
	tenantB, keyB = "flood_b", "sk_flood_tenant_b_0002"
)

// floodStack is orderd with paysim, a NATS commands stream of its own and
// B's webhook receiver.
type floodStack struct {
	api       string
	root      string
	stream    string
	nc        *nats.Conn
	receiverB *orderReceiver
	hung      *httptest.Server // A's endpoints: never answer
	release   chan struct{}    // closed: the hung endpoints return
}

func startFloodStack(b testing.TB, kind string) *floodStack {
	b.Helper()
	s := &floodStack{release: make(chan struct{})}
	ledger, err := paysim.OpenLedger(context.Background(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ledger.Close() })
	sim, err := paysim.NewServer(ledger, paysim.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	ps := httptest.NewServer(sim)
	b.Cleanup(ps.Close)
	s.receiverB = newOrderReceiver()
	b.Cleanup(s.receiverB.Close)
	s.hung = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
	}))
	b.Cleanup(func() { close(s.release); s.hung.Close() })

	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	s.root = "flood" + id
	stream := "FLOOD_COMMANDS_" + id
	s.stream = stream
	js := testenv.JetStream(b)
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
	if s.nc, err = nats.Connect(testenv.NATSURL()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.nc.Close)
	// A free port, so that orderd can log at warn (a flood would fill an
	// info log) and still be found.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s.api = ln.Addr().String()
	ln.Close()
	args := []string{"-addr", s.api, "-admin-addr", "", "-api-keys", tenantA + ":" + keyA + "," + tenantB + ":" + keyB,
		"-payment-url", ps.URL, "-provider-timeout", "5s", "-lease", "15s",
		"-commands-nats-url", testenv.NATSURL(), "-commands-stream", stream, "-commands-consumer", "orderd-" + id,
		"-commands-subject-root", s.root,
		"-webhook-allow-private", "-webhook-interval", "50ms", "-webhook-timeout", "10s", "-webhook-backoff", "100ms",
		"-completer-interval", "1h", "-sweep-interval", "1h", "-log-level", "warn"}
	if kind == testenv.Postgres {
		args = append(args, "-database-url", pgtest.NewDatabase(b))
	} else {
		args = append(args, "-data-dir", b.TempDir())
	}
	c, err := ParseConfig(args, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	logs := &headBuffer{max: 64 << 10}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, logs) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	})
	for deadline := time.Now().Add(time.Minute); ; {
		if resp, err := http.Get("http://" + s.api + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("orderd did not listen within a minute:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.post(b, "/v1/webhook-endpoints", keyB, uuid.NewString(),
		fmt.Sprintf(`{"url":%q,"events":["order.paid"]}`, s.receiverB.URL+"/b"))
	return s
}

// headBuffer keeps the first max bytes written to it: orderd's first
// log lines, for a failure to start.
type headBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - h.b.Len(); room > 0 {
		h.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.b.String()
}

// floodCounts counts A's answers during a flood.
type floodCounts struct {
	ok, limited, failed, slowBodies, commands int64
}

// flood starts A's flood and returns once it is in effect (A's storm has
// been refused with a 429, A's slow commands and webhooks are under way);
// stop ends it and returns A's counts.
func (s *floodStack) flood(b *testing.B) (stop func() floodCounts) {
	b.Helper()
	for i := range 100 {
		st, _ := s.do(http.MethodPost, "/v1/webhook-endpoints", keyA, uuid.NewString(),
			fmt.Sprintf(`{"url":%q,"events":["order.paid"]}`, s.hung.URL+"/a"+strconv.Itoa(i)))
		if st != http.StatusCreated && i == 0 {
			b.Fatalf("A's first endpoint: %d", st)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var ok, limited, failed, slow, commands atomic.Int64
	count := func(st int) {
		switch {
		case st >= 200 && st < 300:
			ok.Add(1)
		case st == http.StatusTooManyRequests:
			limited.Add(1)
		case st >= 500 || st == 0:
			failed.Add(1)
		}
	}
	// Slow bodies: headers, then a byte a second until the server answers.
	for range 70 {
		wg.Go(func() {
			for ctx.Err() == nil {
				slow.Add(1)
				trickle(ctx, s.api)
			}
		})
	}
	// The storm: 200 goroutines of creates.
	for range 200 {
		wg.Go(func() {
			for ctx.Err() == nil {
				st, _ := s.do(http.MethodPost, "/v1/orders", keyA, uuid.NewString(), s.orderBody())
				if ctx.Err() == nil {
					count(st)
				}
			}
		})
	}
	// Slow bus commands: pays whose provider call takes 2 s, 20 a second.
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			st, id := s.do(http.MethodPost, "/v1/orders", keyA, uuid.NewString(), s.orderBody())
			if st == http.StatusCreated {
				s.publishPay(b, tenantA, keyA, id, paysim.MethodFaultLatency)
				commands.Add(1)
			}
		}
	})
	for deadline := time.Now().Add(2 * time.Minute); limited.Load() == 0 || commands.Load() < 20; {
		if time.Now().After(deadline) {
			b.Fatalf("the flood did not take effect: %d 429s, %d commands", limited.Load(), commands.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let the flood settle before B is measured: A's paid orders have
	// fanned out to its hanging endpoints, which hold their deliveries for
	// the whole webhook timeout, and the slow bodies are all connected.
	time.Sleep(floodWarmUp)
	return func() floodCounts {
		cancel()
		wg.Wait()
		return floodCounts{ok: ok.Load(), limited: limited.Load(), failed: failed.Load(), slowBodies: slow.Load(), commands: commands.Load()}
	}
}

// trickle sends A's create headers to api and then one byte of body a
// second, until the server answers or ctx ends.
func trickle(ctx context.Context, api string) {
	conn, err := net.DialTimeout("tcp", api, 5*time.Second)
	if err != nil {
		time.Sleep(100 * time.Millisecond)
		return
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n", keyA)
	answered := make(chan struct{})
	go func() {
		_, _ = bufio.NewReader(conn).ReadByte()
		close(answered)
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-answered:
			return
		case <-t.C:
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}
}

var floodClient = &http.Client{Timeout: 2 * time.Minute,
	Transport: &http.Transport{MaxIdleConns: 512, MaxIdleConnsPerHost: 512}}

// do sends a request and returns its status and the id in its body.
func (s *floodStack) do(method, path, apiKey, idemKey, body string) (int, string) {
	req, _ := http.NewRequest(method, "http://"+s.api+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := floodClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v struct{ ID string }
	_ = json.Unmarshal(raw, &v)
	return resp.StatusCode, v.ID
}

// post is do that fails b unless the answer is a 2xx; it returns the id.
func (s *floodStack) post(b testing.TB, path, apiKey, idemKey, body string) string {
	b.Helper()
	st, id := s.do(http.MethodPost, path, apiKey, idemKey, body)
	if st < 200 || st >= 300 {
		b.Fatalf("POST %s as %s: %d", path, apiKey, st)
	}
	return id
}

func (s *floodStack) orderBody() string {
	return `{"customer_id":"cus_flood","currency":"USD","items":[{"sku":"sku_1","quantity":1,"unit_price":1000}]}`
}

func payBodyOf(method string) string {
	return `{"amount":1000,"currency":"USD","payment_method":"` + method + `"}`
}

// publishPay publishes a signed pay command of tenant's order.
func (s *floodStack) publishPay(b testing.TB, tenant, apiKey, orderID, method string) {
	m := nats.NewMsg(natsbus.CommandSubject(s.root, tenant, "pay"))
	m.Header.Set(nats.MsgIdHdr, "bus-"+uuid.NewString())
	m.Header.Set(natsbus.OrderIDHeader, orderID)
	m.Data = []byte(payBodyOf(method))
	natsbus.Sign(m, apiKey, time.Now())
	js, err := s.nc.JetStream()
	if err == nil {
		_, err = js.PublishMsg(m)
	}
	if err != nil {
		b.Errorf("publish: %v", err)
	}
}

// jsonDecode decodes resp's body into v.
func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }

// awaitPaid polls the tenant's order until it is PAID (two minutes at
// most).
func (s *floodStack) awaitPaid(b testing.TB, apiKey, id string) {
	b.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.api+"/v1/orders/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		if resp, err := floodClient.Do(req); err == nil {
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if bytes.Contains(raw, []byte(`"state":"PAID"`)) {
				return
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Fatalf("order %s was not paid by its command within two minutes", id)
}

// orderReceiver is B's webhook endpoint: it records when each order's
// event arrived.
type orderReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got map[string]time.Time
	c   *sync.Cond
}

func newOrderReceiver() *orderReceiver {
	r := &orderReceiver{got: map[string]time.Time{}}
	r.c = sync.NewCond(&r.mu)
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var ev struct {
			OrderID string `json:"order_id"`
		}
		raw, _ := io.ReadAll(req.Body)
		_ = json.Unmarshal(raw, &ev)
		r.mu.Lock()
		if _, seen := r.got[ev.OrderID]; !seen {
			r.got[ev.OrderID] = time.Now()
		}
		r.c.Broadcast()
		r.mu.Unlock()
	}))
	return r
}

// floodWarmUp is how long the flood runs before B is measured: longer than
// the webhook timeout (10 s), so A's hanging deliveries are being held.
const floodWarmUp = 15 * time.Second

// deliveryWait is how long an iteration waits for B's webhook; a delivery
// that takes longer counts as deliveryWait and as a delivery_timeout.
const deliveryWait = 30 * time.Second

// await returns when the event of order id arrived, waiting at most limit
// (then it returns the time it gave up, and false).
func (r *orderReceiver) await(id string, limit time.Duration) (time.Time, bool) {
	deadline := time.Now().Add(limit)
	stop := time.AfterFunc(limit, func() { r.mu.Lock(); r.c.Broadcast(); r.mu.Unlock() })
	defer stop.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if at, ok := r.got[id]; ok {
			return at, true
		}
		if now := time.Now(); now.After(deadline) {
			return now, false
		}
		r.c.Wait()
	}
}

// percentile returns the p-th percentile of ds in milliseconds (nearest
// rank).
func percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	i = min(max(i, 1), len(s)) - 1
	return float64(s[i].Microseconds()) / 1000
}
