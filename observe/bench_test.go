package observe_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/observe"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

const benchKey = "sk_bench_observe_01"

// stack is the API over the service over PostgreSQL, observed or not.
func stack(b *testing.B, url string, m *observe.Metrics, tp trace.TracerProvider) http.Handler {
	b.Helper()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	var obs service.Observer
	if m != nil {
		pc.ConnConfig.Tracer = observe.NewPgxTracer(m, tp)
		obs = observe.NewObserver(m, tp)
	}
	st, err := postgres.OpenConfig(context.Background(), pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	if m != nil {
		m.Registry().MustRegister(observe.NewPoolCollector(st.Pool()))
	}
	quiet := slog.New(slog.DiscardHandler)
	svc := service.New(st, simulator.NewIntentGateway(), simulator.NewWarehouse(),
		service.Config{Observer: obs, Logger: quiet, GroupCommit: true})
	b.Cleanup(svc.Close)
	h := api.New(svc, api.Config{APIKeys: map[string]string{benchKey: "bench"}, Logger: quiet})
	if m == nil {
		return h
	}
	return observe.HTTP(h, m, tp)
}

// BenchmarkCreate measures creates through the HTTP handler on PostgreSQL,
// 8 concurrent clients per core with group commit on (orderd's default),
// with metrics and tracing off (the service without an observer, the
// handler unwrapped) and on (metrics, the PostgreSQL tracer, and an
// OpenTelemetry SDK that records every span but exports none), plus
// metrics with the no-op tracer orderd runs when OTEL_EXPORTER_OTLP_ENDPOINT
// is unset. The variants take turns in rounds of creates, so drift in the
// machine's load (the cores are shared) falls on all of them alike; each
// reports its req/s and this process's CPU time per create (the CPU
// figure hardly depends on the machine's load, and leaves out PostgreSQL's
// own work, so it overstates the share observability takes); "overhead-%"
// is how many fewer req/s "on" served than "off". One benchmark op is one
// round of every variant.
//
//	go test -run '^$' -bench BenchmarkCreate -benchtime 40x ./observe/
func BenchmarkCreate(b *testing.B) {
	url := pgtest.NewDatabase(b)
	variants := []struct {
		name    string
		h       http.Handler
		elapsed time.Duration
		cpu     time.Duration // this process's CPU time (user+system)
		n       int
	}{
		{name: "off", h: stack(b, url, nil, nil)},
		{name: "on", h: stack(b, url, observe.NewMetrics(), sdktrace.NewTracerProvider())},
		{name: "metrics+noop-tracing", h: stack(b, url, observe.NewMetrics(), noop.NewTracerProvider())},
	}
	const round, clients = 200, 16 // creates per variant per round
	body := `{"customer_id":"cus_bench","currency":"USD","items":[{"sku":"sku_1","quantity":1,"unit_price":100}]}`
	create := func(h http.Handler) {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+benchKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Errorf("create = %d %s", w.Code, w.Body)
		}
	}
	for i := range b.N {
		for j := range variants {
			v := &variants[(i+j)%len(variants)] // each variant goes first in turn
			var wg sync.WaitGroup
			var next atomic.Int64
			start, cpuStart := time.Now(), cpuTime(b)
			for range clients {
				wg.Go(func() {
					for next.Add(1) <= round {
						create(v.h)
					}
				})
			}
			wg.Wait()
			v.elapsed += time.Since(start)
			v.cpu += cpuTime(b) - cpuStart
			v.n += round
		}
	}
	rate := map[string]float64{}
	for _, v := range variants {
		rate[v.name] = float64(v.n) / v.elapsed.Seconds()
		b.ReportMetric(rate[v.name], v.name+"-req/s")
		b.ReportMetric(float64(v.cpu.Microseconds())/float64(v.n), v.name+"-cpu-µs/req")
	}
	b.ReportMetric(100*(1-rate["on"]/rate["off"]), "overhead-%")
	b.ReportMetric(100*(1-rate["metrics+noop-tracing"]/rate["off"]), "noop-overhead-%")
}

// BenchmarkHTTPLayer measures what the HTTP instrumentation alone adds to
// one request (ns/op and allocations), on a chi router whose handler does
// nothing: a figure the shared machine's load hardly moves, to set beside
// a create's latency.
//
//	go test -run '^$' -bench BenchmarkHTTPLayer -benchmem ./observe/
func BenchmarkHTTPLayer(b *testing.B) {
	r := chi.NewRouter()
	r.Post("/v1/orders/{id}/pay", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"off", r},
		{"metrics+noop-tracing", observe.HTTP(r, observe.NewMetrics(), noop.NewTracerProvider())},
		{"metrics+sdk-tracing-no-exporter", observe.HTTP(r, observe.NewMetrics(), sdktrace.NewTracerProvider())},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/v1/orders/ord_1/pay", nil)
				tc.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
