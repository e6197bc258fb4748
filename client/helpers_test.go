package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
)

// seen is one request as the fake server received it.
type seen struct {
	Method, Path, RawQuery string
	Key                    string // unquoted Idempotency-Key, "" if absent
	HasKey                 bool
	Body                   string
	ContentType            string
	Auth                   string
	UserAgent              string
}

// fake is an httptest server whose handler is called with the 1-based
// number of the request; it records every request.
type fake struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

// newFake starts a fake server answering with handle, closed when t ends.
func newFake(t *testing.T, handle func(n int, w http.ResponseWriter, r *http.Request)) *fake {
	t.Helper()
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s := seen{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Body: string(body),
			ContentType: r.Header.Get("Content-Type"), Auth: r.Header.Get("Authorization"), UserAgent: r.UserAgent()}
		if v := r.Header.Get("Idempotency-Key"); v != "" {
			s.HasKey = true
			k, err := strconv.Unquote(v)
			if err != nil {
				k = "UNPARSABLE:" + v
			}
			s.Key = k
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, s)
		n := len(f.reqs)
		f.mu.Unlock()
		handle(n, w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// requests returns the requests received so far.
func (f *fake) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

// sleeps records the delays a client asked to wait, without waiting.
type sleeps struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) delays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// newClient returns a client for url that records its sleeps instead of
// sleeping.
func newClient(t *testing.T, url string, opts ...client.Option) (*client.Client, *sleeps) {
	t.Helper()
	s := &sleeps{}
	c, err := client.New(url, "sk_test_key", append([]client.Option{client.WithSleep(s.sleep)}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, s
}

// sampleOrder is an order as the server would return it.
func sampleOrder(state order.State) order.Order {
	return order.Order{
		ID: "ord_0001", CustomerID: "cus_42", Currency: "USD",
		Items:  []order.Item{{SKU: "book", Quantity: 2, UnitPrice: 1250}},
		Amount: 2500, State: state, Version: 1,
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeProblem answers status with a problem of code.
func writeProblem(w http.ResponseWriter, status int, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": client.ProblemBaseURI + code, "title": http.StatusText(status), "status": status,
		"detail": detail, "instance": "/v1/orders",
	})
}

// newInput is a valid order to create.
var newInput = order.NewOrderInput{CustomerID: "cus_42", Currency: "USD",
	Items: []order.Item{{SKU: "book", Quantity: 2, UnitPrice: 1250}}}

// wantOneKey fails the test unless every request carries the same non-empty
// key and the same body, and returns the key.
func wantOneKey(t *testing.T, reqs []seen) string {
	t.Helper()
	if len(reqs) == 0 {
		t.Fatal("no requests")
	}
	first := reqs[0]
	if first.Key == "" {
		t.Fatalf("request 1 has no Idempotency-Key")
	}
	for i, r := range reqs[1:] {
		if r.Key != first.Key {
			t.Fatalf("request %d has key %q, request 1 had %q", i+2, r.Key, first.Key)
		}
		if r.Body != first.Body {
			t.Fatalf("request %d has body %q, request 1 had %q", i+2, r.Body, first.Body)
		}
	}
	return first.Key
}
