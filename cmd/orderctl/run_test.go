package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
)

// outcome is one orderctl run.
type outcome struct {
	code           int
	stdout, stderr string
}

func (o outcome) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", o.code, o.stdout, o.stderr)
}

// orderctl runs the command with ORDERLY_URL and ORDERLY_API_KEY set to url
// and apiKey.
func orderctl(t *testing.T, url, apiKey string, args ...string) outcome {
	t.Helper()
	vars := map[string]string{"ORDERLY_URL": url, "ORDERLY_API_KEY": apiKey}
	var stdout, stderr strings.Builder
	code := run(context.Background(), args, &stdout, &stderr, func(k string) string { return vars[k] })
	return outcome{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// stack is the real Orderly stack on SQLite with orderctl pointed at it.
type stack struct {
	t   *testing.T
	env *testenv.Env
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return &stack{t: t, env: testenv.New(t, testenv.SQLite, testenv.Options{})}
}

// run runs orderctl against the stack as tenant A.
func (s *stack) run(args ...string) outcome {
	s.t.Helper()
	return orderctl(s.t, s.env.Server.URL, testenv.KeyA, args...)
}

// ok runs orderctl and fails the test unless it exits 0.
func (s *stack) ok(args ...string) outcome {
	s.t.Helper()
	o := s.run(args...)
	if o.code != exitOK {
		s.t.Fatalf("orderctl %s: %s", strings.Join(args, " "), o)
	}
	return o
}

var orderLineRE = regexp.MustCompile(`^order (ord_[0-9a-f]{32}) ([A-Z]+) (\S+ [A-Z]{3}) \((\d+ items?)\)( \(replayed\))?$`)

// line parses a one-line order summary.
func line(t *testing.T, s string) (id, state, amount, items string, replayed bool) {
	t.Helper()
	m := orderLineRE.FindStringSubmatch(strings.TrimSuffix(s, "\n"))
	if m == nil {
		t.Fatalf("not an order line: %q", s)
	}
	return m[1], m[2], m[3], m[4], m[5] != ""
}

// create makes an order for customer and returns its id.
func (s *stack) create(customer string) string {
	s.t.Helper()
	id, _, _, _, _ := line(s.t, s.ok("create", "--customer", customer, "--currency", "USD", "--item", "book:2:1250").stdout)
	return id
}

func TestCreatePayFulfillGet(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	create := []string{"create", "--customer", "cus_42", "--currency", "USD", "--item", "book:2:1250", "--idempotency-key", "create-001"}
	out := s.ok(create...)
	id, state, amount, items, replayed := line(t, out.stdout)
	if state != "RCVD" || amount != "25.00 USD" || items != "2 items" || replayed {
		t.Fatalf("create printed %q", out.stdout)
	}
	again := s.ok(create...)
	if id2, _, _, _, replayed := line(t, again.stdout); id2 != id || !replayed {
		t.Fatalf("create with the same key printed %q, want %s (replayed)", again.stdout, id)
	}

	out = s.ok("pay", id, "--amount", "2500", "--currency", "USD", "--method", "pm_card_visa")
	if _, state, _, _, _ := line(t, out.stdout); state != "PAID" {
		t.Fatalf("pay printed %q", out.stdout)
	}
	out = s.ok("fulfill", id)
	if _, state, _, _, _ := line(t, out.stdout); state != "FULFILLED" {
		t.Fatalf("fulfill printed %q", out.stdout)
	}
	out = s.ok("get", id)
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if _, state, _, _, _ := line(t, lines[0]); state != "FULFILLED" || len(lines) != 2 || lines[1] != "  2 × book at 12.50 USD" {
		t.Fatalf("get printed %q", out.stdout)
	}
	if n := s.env.Gateway.Captures(id); n != 1 {
		t.Fatalf("%d captures, want 1", n)
	}
}

func TestPayWithoutAmountUsesTheOrders(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	id := s.create("cus_pay_default")
	out := s.ok("--idempotency-key", "pay-1", "pay", id, "--method", "pm_card_visa")
	if _, state, amount, _, _ := line(t, out.stdout); state != "PAID" || amount != "25.00 USD" {
		t.Fatalf("pay printed %q", out.stdout)
	}
	out = s.ok("pay", id, "--method", "pm_card_visa", "--idempotency-key", "pay-1")
	if _, _, _, _, replayed := line(t, out.stdout); !replayed {
		t.Fatalf("pay with the same key printed %q, want (replayed)", out.stdout)
	}
	if n := s.env.Gateway.Captures(id); n != 1 {
		t.Fatalf("%d captures, want 1", n)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	id := s.create("cus_cancel")
	for range 2 { // cancelling a cancelled order is a no-op success
		if _, state, _, _, _ := line(t, s.ok("cancel", id).stdout); state != "CANCELLED" {
			t.Fatalf("cancel did not print CANCELLED")
		}
	}
	if o := s.run("pay", id, "--method", "pm_card_visa"); o.code != exitConflict {
		t.Fatalf("pay of a cancelled order: %s, want exit %d", o, exitConflict)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	var ids []string
	for range 3 {
		ids = append(ids, s.create("cus_list"))
	}
	s.create("cus_other")
	s.ok("pay", ids[0], "--method", "pm_card_visa")

	out := s.ok("list", "--customer", "cus_list", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[2], "next page: --cursor ") {
		t.Fatalf("list page 1 printed %q", out.stdout)
	}
	first, _, _, _, _ := line(t, lines[0])
	second, _, _, _, _ := line(t, lines[1])
	cursor := strings.TrimPrefix(lines[2], "next page: --cursor ")
	out = s.ok("list", "--customer", "cus_list", "--limit", "2", "--cursor", cursor)
	third, _, _, _, _ := line(t, out.stdout)
	if got := []string{first, second, third}; got[0] != ids[2] || got[1] != ids[1] || got[2] != ids[0] {
		t.Fatalf("listed %v, want newest first %v", got, []string{ids[2], ids[1], ids[0]})
	}

	out = s.ok("list", "--customer", "cus_list", "--state", "paid")
	if id, state, _, _, _ := line(t, out.stdout); id != ids[0] || state != "PAID" {
		t.Fatalf("list --state paid printed %q", out.stdout)
	}
	if out := s.ok("list", "--customer", "nobody"); out.stdout != "no orders\n" {
		t.Fatalf("empty list printed %q", out.stdout)
	}
}

func TestJSONOutputParses(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	var created order.Order
	out := s.ok("--json", "create", "--customer", "cus_json", "--currency", "JPY", "--item", "tea:3:500")
	if err := json.Unmarshal([]byte(out.stdout), &created); err != nil || created.Amount != 1500 || created.State != order.Received {
		t.Fatalf("create --json printed %q (%v)", out.stdout, err)
	}
	var got order.Order
	out = s.ok("get", created.ID, "--json")
	if err := json.Unmarshal([]byte(out.stdout), &got); err != nil || got.ID != created.ID {
		t.Fatalf("get --json printed %q (%v)", out.stdout, err)
	}
	var list client.OrderList
	out = s.ok("list", "--json", "--customer", "cus_json")
	if err := json.Unmarshal([]byte(out.stdout), &list); err != nil || len(list.Data) != 1 || list.Data[0].ID != created.ID {
		t.Fatalf("list --json printed %q (%v)", out.stdout, err)
	}
	if out := s.ok("get", created.ID); !strings.Contains(out.stdout, "1500 JPY (3 items)") {
		t.Fatalf("JPY order printed %q, want no decimals", out.stdout)
	}
	o := s.run("--json", "get", "ord_00000000000000000000000000000000")
	var p map[string]any
	if err := json.Unmarshal([]byte(o.stderr), &p); err != nil || o.code != exitNotFound || p["type"] != client.ProblemBaseURI+client.CodeNotFound {
		t.Fatalf("get --json of an unknown order: %s (%v)", o, err)
	}
}

func TestCreateFromFile(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	path := filepath.Join(t.TempDir(), "body.json")
	body := `{"customer_id":"cus_file","currency":"EUR","items":[{"sku":"a:b","quantity":1,"unit_price":999}]}`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out := s.ok("create", "--file", path)
	if _, _, amount, items, _ := line(t, out.stdout); amount != "9.99 EUR" || items != "1 item" {
		t.Fatalf("create --file printed %q", out.stdout)
	}
}

func TestExitCodesOfRejectedRequests(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	unpaid := s.create("cus_exit")
	cases := []struct {
		name   string
		args   []string
		apiKey string
		want   int
		stderr []string
	}{
		{name: "404 unknown order", args: []string{"get", "ord_00000000000000000000000000000000"}, want: exitNotFound,
			stderr: []string{"error: Not found: order ord_00000000000000000000000000000000 not found"}},
		{name: "402 declined card", args: []string{"pay", unpaid, "--method", "pm_card_declined"}, want: exitDeclined,
			stderr: []string{"error: Payment declined: the payment was declined: card_declined"}},
		{name: "409 fulfil before pay", args: []string{"fulfill", unpaid}, want: exitConflict,
			stderr: []string{"error: Invalid state transition: "}},
		{name: "422 amount mismatch", args: []string{"pay", unpaid, "--amount", "1", "--currency", "USD", "--method", "pm_card_visa"},
			want: exitRejected, stderr: []string{"error: Request does not match the order: "}},
		{name: "400 invalid fields", args: []string{"create", "--customer", "c", "--currency", "usd", "--item", "x:0:1"}, want: exitRejected,
			stderr: []string{"error: Invalid request: the order has invalid fields", "  currency: must be", "  items[0].quantity: must be"}},
		{name: "401 unknown key", args: []string{"get", unpaid}, apiKey: "sk_wrong_key_000", want: exitRejected,
			stderr: []string{"error: Unauthorized: "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := testenv.KeyA
			if tc.apiKey != "" {
				key = tc.apiKey
			}
			o := orderctl(t, s.env.Server.URL, key, tc.args...)
			if o.code != tc.want || o.stdout != "" {
				t.Fatalf("%s\nwant exit %d and no stdout", o, tc.want)
			}
			for _, want := range tc.stderr {
				if !strings.Contains(o.stderr, want) {
					t.Fatalf("stderr %q lacks %q", o.stderr, want)
				}
			}
		})
	}
	// A declined payment is final and replays as the same decline.
	o := s.run("pay", unpaid, "--method", "pm_card_declined", "--idempotency-key", "pay-declined")
	o2 := s.run("pay", unpaid, "--method", "pm_card_declined", "--idempotency-key", "pay-declined")
	if o.code != exitDeclined || o2.code != exitDeclined || !strings.Contains(o2.stderr, "(replayed)") {
		t.Fatalf("declines:\n%s\n%s", o, o2)
	}
	if n := s.env.Gateway.Captures(unpaid); n != 0 {
		t.Fatalf("%d captures, want 0", n)
	}
}

func TestUsageErrorsSendNothing(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "unexpected", http.StatusTeapot)
	}))
	t.Cleanup(srv.Close)
	cases := map[string][]string{
		"no command":                {},
		"unknown command":           {"explode"},
		"unknown flag":              {"get", "ord_1", "--frobnicate"},
		"missing id":                {"get"},
		"extra argument":            {"cancel", "ord_1", "ord_2"},
		"create without items":      {"create", "--customer", "c", "--currency", "USD"},
		"bad item":                  {"create", "--customer", "c", "--currency", "USD", "--item", "book:two:100"},
		"file and flags":            {"create", "--file", "x.json", "--customer", "c"},
		"missing file":              {"create", "--file", filepath.Join(t.TempDir(), "none.json")},
		"pay without method":        {"pay", "ord_1", "--amount", "1", "--currency", "USD"},
		"pay with amount only":      {"pay", "ord_1", "--amount", "1", "--method", "pm"},
		"pay amount not an integer": {"pay", "ord_1", "--amount", "25.00", "--currency", "USD", "--method", "pm"},
		"bad state":                 {"list", "--state", "SHIPPED"},
		"bad limit":                 {"list", "--limit", "500"},
		"key on a GET":              {"get", "ord_1", "--idempotency-key", "k"},
		"key with a space":          {"cancel", "ord_1", "--idempotency-key", "a b"},
		"bad url":                   {"--url", "localhost:8080", "get", "ord_1"},
		"bad timeout":               {"--timeout", "soon", "get", "ord_1"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := orderctl(t, srv.URL, "k", args...)
			if o.code != exitUsage || !strings.Contains(o.stderr, "orderctl -h") {
				t.Fatalf("%s\nwant exit %d with a usage hint", o, exitUsage)
			}
		})
	}
	t.Cleanup(func() {
		if n := hits.Load(); n != 0 {
			t.Errorf("usage errors sent %d requests", n)
		}
	})
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		o := orderctl(t, "http://127.0.0.1:1", "k", args...)
		if o.code != exitOK || !strings.Contains(o.stdout, "Exit status:") || !strings.Contains(o.stdout, "6  not found") {
			t.Fatalf("orderctl %v: %s", args, o)
		}
	}
	o := orderctl(t, "http://127.0.0.1:1", "sk_secret_from_env", "pay", "-h")
	if o.code != exitOK || !strings.Contains(o.stdout, "-method") {
		t.Fatalf("orderctl pay -h: %s", o)
	}
	if strings.Contains(o.stdout, "sk_secret_from_env") {
		t.Fatalf("help shows the API key from the environment:\n%s", o.stdout)
	}
}

func TestServerFailureAfterRetriesExits5WithTheKey(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	keys := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		keys <- r.Header.Get("Idempotency-Key")
		w.Header().Set("Retry-After", "0")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"type":"https://orderly.dev/problems/unavailable","title":"Service unavailable","status":503,"detail":"the payment provider is unavailable"}`)
	}))
	t.Cleanup(srv.Close)
	o := orderctl(t, srv.URL, "k", "pay", "ord_1", "--amount", "1", "--currency", "USD", "--method", "pm", "--idempotency-key", "pay-77")
	if o.code != exitFailure || !strings.Contains(o.stderr, "error: Service unavailable: the payment provider is unavailable") ||
		!strings.Contains(o.stderr, "--idempotency-key pay-77") || !strings.Contains(o.stderr, "may or may not have taken effect") {
		t.Fatalf("%s\nwant exit %d naming the key", o, exitFailure)
	}
	if n := hits.Load(); n != client.DefaultMaxAttempts {
		t.Fatalf("server saw %d attempts, want %d", n, client.DefaultMaxAttempts)
	}
	close(keys)
	for k := range keys {
		if k != `"pay-77"` {
			t.Fatalf("attempt sent key %s, want \"pay-77\"", k)
		}
	}
}

func TestNetworkFailureExits5(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	o := orderctl(t, url, "k", "cancel", "ord_1")
	if o.code != exitFailure || !strings.Contains(o.stderr, "error: ") || !strings.Contains(o.stderr, "--idempotency-key ") {
		t.Fatalf("%s\nwant exit %d with a key to retry with", o, exitFailure)
	}
	// A refused connection sent nothing: no "may or may not".
	if !strings.Contains(o.stderr, "was not sent") || strings.Contains(o.stderr, "may or may not") {
		t.Fatalf("%s\nwant it to say the request was not sent", o)
	}
}

func TestKeyStatus(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/idempotency-keys/pay-001" || r.Header.Get("Idempotency-Key") != "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"key":"pay-001","state":"completed","expires_at":"2026-05-06T07:08:09Z","resource_id":"ord_1","status_code":200}`)
	}))
	t.Cleanup(srv.Close)
	o := orderctl(t, srv.URL, "k", "key-status", "pay-001")
	if want := "key pay-001 completed order ord_1 status 200 expires 2026-05-06T07:08:09Z\n"; o.code != 0 || o.stdout != want {
		t.Fatalf("%s\nwant stdout %q", o, want)
	}
	o = orderctl(t, srv.URL, "k", "key-status", "--json", "pay-001")
	var ks client.KeyStatus
	if err := json.Unmarshal([]byte(o.stdout), &ks); err != nil || ks.State != client.KeyCompleted {
		t.Fatalf("key-status --json: %s (%v)", o, err)
	}
}

func TestFlagsOverrideTheEnvironment(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	id := s.create("cus_env")
	o := orderctl(t, "http://127.0.0.1:1", "sk_wrong_key_000", "--url", s.env.Server.URL, "--api-key", testenv.KeyA, "get", id)
	if o.code != exitOK {
		t.Fatalf("%s", o)
	}
}
