package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/store/pgtest"
)

// benchPayBody is the pay body of BenchmarkHandler: the whole of
// benchOrderBody's total (2×1999 + 2500 minor units of EUR) with the
// built-in simulator's approved test card.
const benchPayBody = `{"amount":6498,"currency":"EUR","payment_method":"pm_card_visa"}`

// benchOrderBody is the create body of BenchmarkHandler: two items and a
// volatile member (client_timestamp), as a typical client sends.
const benchOrderBody = `{"customer_id":"cus_bench_0001","currency":"EUR","client_timestamp":"2026-12-02T05:00:00Z",` +
	`"items":[{"sku":"SKU-RED-SHIRT","quantity":2,"unit_price":1999},{"sku":"SKU-BLUE-HAT","quantity":1,"unit_price":2500}]}`

// BenchmarkHandler measures the production handler chain (build, the one
// Run serves: observe.HTTP's metrics and tracing, the API's request id,
// request log, authentication, admission and deadline, the service and the
// store) per request, on the embedded store and on PostgreSQL (a fresh
// database of pgtest; skipped without a server). Requests go to the
// handler's ServeHTTP directly (no sockets), with orderd's log encoded at
// its default level into io.Discard. The tenant rate limit is off
// (-tenant-rate-limit 0): the benchmark sends far more than 1000/s.
//
//   - create: POST /v1/orders with a new Idempotency-Key each time (201);
//   - create16: the same from 16 goroutines at once, with creates/s;
//   - replay: the same key and body every time (201, Idempotency-Replayed);
//   - pay:    POST /v1/orders/{id}/pay of a fresh order (created before the
//     timer starts) with a new key (200, PAID): both phases of the attempt
//     around the built-in simulator's charge, whose own work is in
//     cpu-µs/op (it runs in this process, as it does in orderd);
//   - payreplay: the same pay, key and body every time (200,
//     Idempotency-Replayed);
//   - get:    GET /v1/orders/{id} of one order (200).
//
// Run with allocations:
//
//	ORDERLY_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable \
//	  go test -run '^$' -bench Handler -benchmem ./cmd/orderd/
func BenchmarkHandler(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		b.Run(kind, func(b *testing.B) {
			args := []string{"-api-keys", "bench:" + testKey, "-tenant-rate-limit", "0", "-admin-addr", ""}
			if kind == "sqlite" {
				args = append(args, "-data-dir", b.TempDir())
			} else {
				args = append(args, "-database-url", pgtest.NewDatabase(b))
			}
			h := benchApp(b, args)
			b.Run("create", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for i := range b.N {
					benchDo(b, h, http.MethodPost, "/v1/orders", "bench-create-"+strconv.Itoa(i), benchOrderBody, http.StatusCreated)
				}
			})
			b.Run("create16", func(b *testing.B) {
				// 16 clients at once (the load benchmark's count): how
				// well concurrent creates share commits.
				b.ReportAllocs()
				defer reportCPU(b)()
				var n atomic.Int64
				b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := "bench-create16-" + strconv.FormatInt(n.Add(1), 10)
						if code, body := benchServe(h, http.MethodPost, "/v1/orders", key, benchOrderBody); code != http.StatusCreated {
							b.Errorf("create answered %d: %s", code, body)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "creates/s")
			})
			id := benchCreate(b, h, "bench-replay")
			b.Run("replay", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for range b.N {
					benchDo(b, h, http.MethodPost, "/v1/orders", "bench-replay", benchOrderBody, http.StatusCreated)
				}
			})
			b.Run("pay", func(b *testing.B) {
				ids := make([]string, b.N)
				for i := range ids {
					ids[i] = benchCreate(b, h, "bench-pay-order-"+strconv.Itoa(i)+"-"+strconv.Itoa(b.N))
				}
				b.ReportAllocs()
				defer reportCPU(b)()
				for i, oid := range ids {
					benchDo(b, h, http.MethodPost, "/v1/orders/"+oid+"/pay", "bench-pay-"+strconv.Itoa(i)+"-"+strconv.Itoa(b.N), benchPayBody, http.StatusOK)
				}
			})
			paid := benchCreate(b, h, "bench-payreplay-order")
			benchDo(b, h, http.MethodPost, "/v1/orders/"+paid+"/pay", "bench-payreplay", benchPayBody, http.StatusOK)
			b.Run("payreplay", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for range b.N {
					benchDo(b, h, http.MethodPost, "/v1/orders/"+paid+"/pay", "bench-payreplay", benchPayBody, http.StatusOK)
				}
			})
			b.Run("get", func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for range b.N {
					benchDo(b, h, http.MethodGet, "/v1/orders/"+id, "", "", http.StatusOK)
				}
			})
		})
	}
}

// benchApp builds orderd's handler chain from args (build, as Run does),
// logging into io.Discard, and closes it when b ends.
func benchApp(b *testing.B, args []string) http.Handler {
	b.Helper()
	c, err := ParseConfig(args, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tel, err := startTelemetry(ctx, c, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tel.shutdown(context.Background()) })
	a, err := build(ctx, c, tel)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.close)
	return a.handler
}

// benchCreate creates an order with key and returns its id.
func benchCreate(b *testing.B, h http.Handler, key string) string {
	b.Helper()
	rec := benchDo(b, h, http.MethodPost, "/v1/orders", key, benchOrderBody, http.StatusCreated)
	var o struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || o.ID == "" {
		b.Fatalf("create answered %s (%v)", rec.Body, err)
	}
	return o.ID
}

// benchDo sends one request to h and fails b unless it is answered want.
func benchDo(b *testing.B, h http.Handler, method, path, key, body string, want int) *httptest.ResponseRecorder {
	rec := benchRequest(h, method, path, key, body)
	if rec.Code != want {
		b.Fatalf("%s %s answered %d, want %d: %s", method, path, rec.Code, want, rec.Body)
	}
	return rec
}

// benchServe sends one request to h and returns its status and body.
func benchServe(h http.Handler, method, path, key, body string) (int, string) {
	rec := benchRequest(h, method, path, key, body)
	return rec.Code, rec.Body.String()
}

// benchRequest sends one request to h (a JSON body unless body is empty;
// the benchmark's API key; key as Idempotency-Key unless empty).
func benchRequest(h http.Handler, method, path, key, body string) *httptest.ResponseRecorder {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, path, bytes.NewReader([]byte(body)))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	r.Header.Set("Authorization", "Bearer "+testKey)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// reportCPU returns a function that reports the process's CPU time (user
// and system, every goroutine: the handler, the store's pool and, on the
// embedded store, SQLite itself) per operation since reportCPU was called,
// as cpu-µs/op. Unlike ns/op it leaves out the time spent waiting on
// PostgreSQL, which is another process.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	b.ResetTimer()
	return func() {
		b.StopTimer()
		if b.N > 0 {
			b.ReportMetric(float64((processCPU()-start).Microseconds())/float64(b.N), "cpu-µs/op")
		}
	}
}

// processCPU is this process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
