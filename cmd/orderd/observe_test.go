package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store/pgtest"
)

// syncBuffer is a log sink that goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// observed is an orderd run in this process by Run, on its own PostgreSQL
// database, against a paysim served in this process on loopback.
type observed struct {
	api, admin string      // host:port of the API and of the admin listener
	logs       *syncBuffer // orderd's log
	paysimLogs *syncBuffer
}

// startObserved starts paysim and orderd (tracing with tp when it is not
// nil) and waits until both orderd listeners listen. The completer and the
// sweeper pass once at start, then not again during a test.
func startObserved(t *testing.T, tp trace.TracerProvider) *observed {
	t.Helper()
	o := &observed{logs: &syncBuffer{}, paysimLogs: &syncBuffer{}}
	ledger, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ledger.Close() })
	sim, err := paysim.NewServer(ledger, paysim.Config{Logger: slog.New(slog.NewJSONHandler(o.paysimLogs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(ts.Close)

	c, err := ParseConfig([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0",
		"-database-url", pgtest.NewDatabase(t), "-api-keys", "tenant_p:" + testKey, "-payment-url", ts.URL,
		"-operator-keys", "operator:olga:" + testOperatorToken + ",reader:rita:" + testReaderToken,
		"-provider-timeout", "2s", "-lease", "6s", "-completer-interval", "1h", "-sweep-interval", "1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c.tracerProvider = tp
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, c, o.logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for o.api == "" || o.admin == "" {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("orderd stopped before listening: %v\n%s", err, o.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		for _, line := range strings.Split(o.logs.String(), "\n") {
			var l struct{ Msg, Addr string }
			_ = json.Unmarshal([]byte(line), &l)
			switch l.Msg {
			case "listening":
				o.api = l.Addr
			case "admin listening":
				o.admin = l.Addr
			}
		}
	}
	return o
}

// scrape returns the admin listener's /metrics as series → value: a
// counter's or gauge's value, and a histogram's _count and _sum. A series
// is written name{label="value",…} with its labels sorted.
func scrape(t *testing.T, admin string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := seriesLabels(m)
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[name+labels] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name+labels] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[name+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			default:
				out[name+labels] = m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

func seriesLabels(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(ls)
	return "{" + strings.Join(ls, ",") + "}"
}

// payBody is the body of paying orderBody's order with method.
func payBody(method string) string {
	return `{"amount":2997,"currency":"USD","payment_method":"` + method + `"}`
}

// TestMetricsCountTheScriptedSequence scrapes /metrics before and after
// create, replay, mismatch, pay, a no-op pay, decline and unknown outcome,
// and checks that every counter of the idempotency protocol, the provider
// calls, the orders and the HTTP requests moved by exactly what the
// sequence did, and no other.
func TestMetricsCountTheScriptedSequence(t *testing.T) {
	o := startObserved(t, nil)
	before := scrape(t, o.admin)

	step := func(name string, got reply, status int, replayed bool) reply {
		t.Helper()
		if got.status != status || got.replayed != replayed {
			t.Fatalf("%s = %+v, want status %d replayed %t", name, got, status, replayed)
		}
		return got
	}
	body := func(customer string) string { return strings.Replace(orderBody, "cus_proc", customer, 1) }
	c1 := step("create", post(t, o.api, "/v1/orders", "create-1", body("cus_1")), 201, false)
	step("replay", post(t, o.api, "/v1/orders", "create-1", body("cus_1")), 201, true)
	step("mismatch", post(t, o.api, "/v1/orders", "create-1", body("cus_other")), 422, false)
	step("pay", post(t, o.api, "/v1/orders/"+c1.id+"/pay", "pay-1", payBody("pm_card_visa")), 200, false)
	step("no-op pay", post(t, o.api, "/v1/orders/"+c1.id+"/pay", "pay-2", payBody("pm_card_visa")), 200, false)
	c2 := step("create 2", post(t, o.api, "/v1/orders", "create-2", body("cus_2")), 201, false)
	step("decline", post(t, o.api, "/v1/orders/"+c2.id+"/pay", "pay-3", payBody("pm_card_declined")), 402, false)
	c3 := step("create 3", post(t, o.api, "/v1/orders", "create-3", body("cus_3")), 201, false)
	step("unknown outcome", post(t, o.api, "/v1/orders/"+c3.id+"/pay", "pay-4", payBody(paysim.MethodFaultDropAfterCommit)), 503, false)

	after := scrape(t, o.admin)
	want := map[string]float64{
		`orderly_idempotency_keys_claimed_total{operation="create"}`:           3,
		`orderly_idempotency_keys_claimed_total{operation="pay"}`:              4,
		`orderly_idempotency_replays_total{operation="create"}`:                1,
		`orderly_idempotency_fingerprint_mismatches_total{operation="create"}`: 1,
		`orderly_order_transitions_total{from="none",to="RCVD"}`:               3,
		`orderly_order_transitions_total{from="RCVD",to="PAID"}`:               1,
		`orderly_order_noops_total{event="pay"}`:                               1,
		`orderly_provider_calls_total{operation="charge",outcome="approved"}`:  1,
		`orderly_provider_calls_total{operation="charge",outcome="declined"}`:  1,
		`orderly_provider_calls_total{operation="charge",outcome="unknown"}`:   1,
		`orderly_provider_call_duration_seconds_count{operation="charge"}`:     3,
		// Each pay that reaches the provider prepares its intent first.
		`orderly_provider_calls_total{operation="prepare",outcome="approved"}`:                      3,
		`orderly_provider_call_duration_seconds_count{operation="prepare"}`:                         3,
		`orderly_http_requests_total{method="POST",route="/v1/orders",status_class="2xx"}`:          4,
		`orderly_http_requests_total{method="POST",route="/v1/orders",status_class="4xx"}`:          1,
		`orderly_http_requests_total{method="POST",route="/v1/orders/{id}/pay",status_class="2xx"}`: 2,
		`orderly_http_requests_total{method="POST",route="/v1/orders/{id}/pay",status_class="4xx"}`: 1,
		`orderly_http_requests_total{method="POST",route="/v1/orders/{id}/pay",status_class="5xx"}`: 1,
		`orderly_http_request_duration_seconds_count{route="/v1/orders"}`:                           5,
		`orderly_http_request_duration_seconds_count{route="/v1/orders/{id}/pay"}`:                  4,
	}
	counted := []string{"orderly_idempotency_", "orderly_order_", "orderly_provider_calls_total",
		"orderly_provider_call_duration_seconds_count", "orderly_http_requests_total", "orderly_http_request_duration_seconds_count"}
	series := map[string]bool{}
	for s := range after {
		series[s] = true
	}
	for s := range want {
		series[s] = true
	}
	for s := range series {
		if !hasAnyPrefix(s, counted) {
			continue
		}
		if d := after[s] - before[s]; d != want[s] {
			t.Errorf("%s moved by %v, want %v", s, d, want[s])
		}
	}
	if got := after["orderly_http_requests_in_flight"]; got != 0 {
		t.Errorf("orderly_http_requests_in_flight = %v after the sequence, want 0", got)
	}
	if got := after["orderly_db_pool_max_connections"]; got < 1 {
		t.Errorf("orderly_db_pool_max_connections = %v, want the pool's size", got)
	}
	if got := after["orderly_provider_attempts_needing_attention"]; got != 0 {
		t.Errorf("orderly_provider_attempts_needing_attention = %v, want 0", got)
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// TestTraceOfOnePay exports the trace of one pay to an in-memory exporter
// and checks its spans — the HTTP request, the service operation, the
// provider call (whose traceparent paysim logs) and the pipelined database
// statements — and that the request's log line carries its trace id.
func TestTraceOfOnePay(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	o := startObserved(t, tp)
	c := post(t, o.api, "/v1/orders", "trace-create", orderBody)
	if c.status != http.StatusCreated {
		t.Fatalf("create = %+v", c)
	}
	if got := post(t, o.api, "/v1/orders/"+c.id+"/pay", "trace-pay", payBody("pm_card_visa")); got.status != http.StatusOK {
		t.Fatalf("pay = %+v", got)
	}

	// The server span ends as the handler returns, which may be just
	// after the client has read the answer.
	var server tracetest.SpanStub
	for server.Name == "" {
		for _, s := range exp.GetSpans() {
			if s.Name == "POST /v1/orders/{id}/pay" {
				server = s
			}
		}
		time.Sleep(time.Millisecond)
	}
	traceID := server.SpanContext.TraceID()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == traceID {
			byName[s.Name] = append(byName[s.Name], s)
		}
	}
	one := func(name string) tracetest.SpanStub {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d spans named %q in the pay's trace, want 1; the trace has %v", len(byName[name]), name, names(byName))
		}
		return byName[name][0]
	}
	op, call := one("service.pay"), one("provider.charge")
	if op.Parent.SpanID() != server.SpanContext.SpanID() {
		t.Errorf("service.pay's parent is %s, want the request's span %s", op.Parent.SpanID(), server.SpanContext.SpanID())
	}
	if call.Parent.SpanID() != op.SpanContext.SpanID() {
		t.Errorf("provider.charge's parent is %s, want service.pay %s", call.Parent.SpanID(), op.SpanContext.SpanID())
	}
	// Phase 1 and phase 3 are each one pipelined batch.
	if n := len(byName["db.batch"]); n < 2 {
		t.Errorf("%d db.batch spans in the pay's trace, want at least 2 (phases 1 and 3); the trace has %v", n, names(byName))
	}
	for _, b := range byName["db.batch"] {
		if b.Parent.SpanID() != op.SpanContext.SpanID() {
			t.Errorf("a db.batch's parent is %s, want service.pay %s", b.Parent.SpanID(), op.SpanContext.SpanID())
		}
	}
	if n := len(byName["db.batch.query"]); n < 2 {
		t.Errorf("%d db.batch.query spans, want one per statement of the batches", n)
	}

	id := traceID.String()
	if !strings.Contains(o.paysimLogs.String(), `"traceparent":"00-`+id+`-`) {
		t.Errorf("paysim did not log the pay's traceparent (trace %s):\n%s", id, o.paysimLogs.String())
	}
	var line string
	for _, l := range strings.Split(o.logs.String(), "\n") {
		if strings.Contains(l, `"msg":"request"`) && strings.Contains(l, `"route":"/v1/orders/{id}/pay"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"trace_id":"`+id+`"`) || !strings.Contains(line, `"request_id":"`) {
		t.Errorf("the pay's log line lacks trace_id %s or a request_id:\n%s", id, line)
	}
}

func names(byName map[string][]tracetest.SpanStub) []string {
	var out []string
	for n, ss := range byName {
		out = append(out, fmt.Sprintf("%s×%d", n, len(ss)))
	}
	sort.Strings(out)
	return out
}

const (
	testOperatorToken = "op-token-for-orderd-tests-1"
	testReaderToken   = "rd-token-for-orderd-tests-1"
)

// TestOperatorAPIOnAdminListener: orderd mounts the operator API on the
// admin listener under /operator/v1/, for operator credentials only (a
// tenant API key is a 401), with roles (a reader's write is a 403); the
// tenant API port does not serve it.
func TestOperatorAPIOnAdminListener(t *testing.T) {
	o := startObserved(t, nil)
	for _, tc := range []struct {
		addr, method, path, token string
		status                    int
	}{
		{o.admin, "GET", "/operator/v1/attempts", testOperatorToken, 200},
		{o.admin, "GET", "/operator/v1/attempts", testReaderToken, 200},
		{o.admin, "GET", "/operator/v1/attempts", testKey, 401},
		{o.admin, "GET", "/operator/v1/attempts", "", 401},
		{o.admin, "POST", "/operator/v1/attempts/recheck", testReaderToken, 403},
		{o.api, "GET", "/operator/v1/attempts", testOperatorToken, 404},
	} {
		req, _ := http.NewRequest(tc.method, "http://"+tc.addr+tc.path, strings.NewReader(`{"provider_key":"x","reason":"r"}`))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s on %s with %q = %d, want %d", tc.method, tc.path, tc.addr, tc.token, resp.StatusCode, tc.status)
		}
	}
}

// TestAdminListener checks what the admin listener serves — /metrics,
// /debug/pprof/, /healthz, /readyz — and that the API port does not serve
// the operators' endpoints.
func TestAdminListener(t *testing.T) {
	o := startObserved(t, nil)
	for _, tc := range []struct {
		addr, path string
		status     int
		contains   string
	}{
		{o.admin, "/metrics", 200, "# TYPE orderly_idempotency_replays_total counter"},
		{o.admin, "/debug/pprof/", 200, "goroutine"},
		// The command line holds secrets passed as flags (regression: it
		// was served).
		{o.admin, "/debug/pprof/cmdline", 404, ""},
		{o.admin, "/debug/pprof/symbol", 200, "num_symbols"},
		{o.admin, "/healthz", 200, `"ok"`},
		{o.admin, "/readyz", 200, `"ready"`},
		{o.api, "/metrics", 404, ""},
		{o.api, "/debug/pprof/", 404, ""},
	} {
		resp, err := http.Get("http://" + tc.addr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.contains) {
			t.Errorf("GET %s on %s = %d, want %d containing %q", tc.path, tc.addr, resp.StatusCode, tc.status, tc.contains)
		}
	}
}

// TestAdminAddr checks the admin listener's setting: off by default, off
// when empty, and a host that is not loopback refused unless
// -admin-allow-remote opts in. Regression: the default 127.0.0.1:9090 kept
// a second orderd on the machine from starting, and 0.0.0.0 passed.
func TestAdminAddr(t *testing.T) {
	c, err := ParseConfig(nil, io.Discard)
	if err != nil || c.AdminAddr != "" {
		t.Errorf("default AdminAddr = %q, %v; want empty (no admin listener)", c.AdminAddr, err)
	}
	t.Setenv("ORDERD_ADMIN_ADDR", "")
	c, err = ParseConfig(nil, io.Discard)
	if err != nil || c.AdminAddr != "" {
		t.Errorf("ORDERD_ADMIN_ADDR empty: AdminAddr = %q, %v; want empty (disabled)", c.AdminAddr, err)
	}
	for _, addr := range []string{"127.0.0.1:9090", "[::1]:9090", "localhost:9090"} {
		if c, err := ParseConfig([]string{"-admin-addr", addr}, io.Discard); err != nil || c.AdminAddr != addr {
			t.Errorf("-admin-addr %s: AdminAddr = %q, %v", addr, c.AdminAddr, err)
		}
	}
	for _, addr := range []string{":9090", "0.0.0.0:9090", "[::]:9090", "192.0.2.1:9090", "admin.internal:9090", "127.0.0.1"} {
		_, err := ParseConfig([]string{"-admin-addr", addr}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "ORDERD_ADMIN_ADDR") {
			t.Errorf("-admin-addr %s: err = %v, want a refusal naming ORDERD_ADMIN_ADDR", addr, err)
		}
		if addr != "127.0.0.1" && (err == nil || !strings.Contains(err.Error(), "ORDERD_ADMIN_ALLOW_REMOTE=true")) {
			t.Errorf("-admin-addr %s: err = %v, want it to name the opt-in ORDERD_ADMIN_ALLOW_REMOTE=true", addr, err)
		}
	}
	t.Setenv("ORDERD_ADMIN_ALLOW_REMOTE", "true")
	if c, err := ParseConfig([]string{"-admin-addr", "0.0.0.0:9090"}, io.Discard); err != nil || c.AdminAddr != "0.0.0.0:9090" {
		t.Errorf("with the opt-in: AdminAddr = %q, %v; want 0.0.0.0:9090", c.AdminAddr, err)
	}
	stop, err := startAdmin(Config{}, nil, nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stop(context.Background())
}

// TestTwoOrderdWithDefaults starts two orderd in this process on one
// database with nothing configured but the API address (and the database
// they share, as in the README's two-instance walk-through): both start
// and serve. Regression: both took the admin listener's default
// 127.0.0.1:9090 and the second failed to start.
func TestTwoOrderdWithDefaults(t *testing.T) {
	url := pgtest.NewDatabase(t)
	for i := range 2 {
		c, err := ParseConfig([]string{"-addr", "127.0.0.1:0", "-database-url", url}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		logs := &syncBuffer{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, c, logs) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("orderd %d: Run: %v", i+1, err)
			}
		})
		addr := waitListening(t, logs, done)
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("orderd %d: /readyz = %d", i+1, resp.StatusCode)
		}
		if strings.Contains(logs.String(), `"admin listening"`) {
			t.Errorf("orderd %d started an admin listener nobody asked for", i+1)
		}
	}
}

// waitListening waits (up to two minutes: the machine may be loaded) until
// logs show orderd's API listening and returns its address; it fails the
// test if Run returns first.
func waitListening(t *testing.T, logs *syncBuffer, done chan error) string {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		for _, line := range strings.Split(logs.String(), "\n") {
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" {
				return l.Addr
			}
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("orderd stopped before listening: %v\n%s", err, logs.String())
		case <-deadline:
			t.Fatalf("orderd did not listen within two minutes:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestDashboardUsesOnlyExportedMetrics reads the Grafana dashboard of
// compose.yaml and checks that every orderly_ metric its queries name is
// one a scrape of orderd shows (a histogram by its _bucket, _count or
// _sum series).
func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/grafana/dashboards/orderly.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	o := startObserved(t, nil)
	post(t, o.api, "/v1/orders", "dashboard-create", orderBody) // so the HTTP series exist
	exported := map[string]bool{}
	for series := range scrape(t, o.admin) {
		name, _, _ := strings.Cut(series, "{")
		exported[name] = true
		if base, ok := strings.CutSuffix(name, "_count"); ok {
			exported[base+"_bucket"] = true
		}
	}
	metricName := regexp.MustCompile(`\borderly_[a-z0-9_]+`)
	used := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, name := range metricName.FindAllString(tg.Expr, -1) {
				used++
				if !exported[name] {
					t.Errorf("panel %q queries %s, which orderd does not export", p.Title, name)
				}
			}
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no orderly_ metric")
	}
}

// TestPrometheusScrapesEveryOrderd checks compose.yaml against the
// Prometheus configuration it mounts: every orderd service is a scrape
// target on its admin port, and every target is an orderd service.
func TestPrometheusScrapesEveryOrderd(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image       string
			Environment map[string]string
		}
	}
	var prom struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	for path, into := range map[string]any{"../../compose.yaml": &compose, "../../deploy/prometheus/prometheus.yml": &prom} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	targets := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				targets[tg] = true
			}
		}
	}
	orderds := 0
	for name, svc := range compose.Services {
		if svc.Image != "orderly/orderd" {
			continue
		}
		orderds++
		_, port, _ := strings.Cut(svc.Environment["ORDERD_ADMIN_ADDR"], ":")
		if !targets[name+":"+port] {
			t.Errorf("orderd service %s (admin port %q) is not scraped; targets %v", name, port, targets)
		}
		delete(targets, name+":"+port)
	}
	if orderds != 2 {
		t.Errorf("compose.yaml has %d orderd services, want 2", orderds)
	}
	if len(targets) > 0 {
		t.Errorf("Prometheus scrapes targets that are no orderd service: %v", targets)
	}
}

// TestTraceparentPropagatesWithoutExporter checks the no-op tracing orderd
// runs when OTEL_EXPORTER_OTLP_ENDPOINT is unset: a request's W3C
// traceparent still reaches the request's log line and the provider.
func TestTraceparentPropagatesWithoutExporter(t *testing.T) {
	o := startObserved(t, nil)
	c := post(t, o.api, "/v1/orders", "noop-create", orderBody)
	if c.status != http.StatusCreated {
		t.Fatalf("create = %+v", c)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodPost, "http://"+o.api+"/v1/orders/"+c.id+"/pay", strings.NewReader(payBody("pm_card_visa")))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "noop-pay")
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("pay = %d", resp.StatusCode)
	}
	if !strings.Contains(o.paysimLogs.String(), `"traceparent":"00-`+traceID+`-`) {
		t.Errorf("paysim did not log the caller's trace %s:\n%s", traceID, o.paysimLogs.String())
	}
	found := false
	for _, l := range strings.Split(o.logs.String(), "\n") {
		found = found || (strings.Contains(l, `"route":"/v1/orders/{id}/pay"`) && strings.Contains(l, `"trace_id":"`+traceID+`"`))
	}
	if !found {
		t.Errorf("no pay log line carries trace_id %s:\n%s", traceID, o.logs.String())
	}
}
