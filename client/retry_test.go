package client_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
)

func TestRetriesRetryableStatusesWithTheSameKeyAndBody(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		code   string
	}{
		{"409 idempotency_key_in_progress", http.StatusConflict, client.CodeKeyInProgress},
		{"429 too many requests", http.StatusTooManyRequests, ""},
		{"500 internal", http.StatusInternalServerError, client.CodeInternal},
		{"502 bad gateway", http.StatusBadGateway, ""},
		{"503 unavailable", http.StatusServiceUnavailable, client.CodeUnavailable},
		{"504 gateway timeout", http.StatusGatewayTimeout, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n <= 2 {
					if tc.code == "" {
						http.Error(w, "try later", tc.status)
						return
					}
					writeProblem(w, tc.status, tc.code, "try later")
					return
				}
				writeJSON(w, http.StatusCreated, sampleOrder(order.Received))
			})
			c, sl := newClient(t, f.URL)
			res, err := c.CreateOrder(context.Background(), newInput)
			if err != nil {
				t.Fatalf("CreateOrder: %v", err)
			}
			reqs := f.requests()
			if len(reqs) != 3 || res.Attempts != 3 {
				t.Fatalf("server saw %d requests, Attempts = %d; want 3 and 3", len(reqs), res.Attempts)
			}
			if key := wantOneKey(t, reqs); res.IdempotencyKey != key {
				t.Fatalf("Response.IdempotencyKey = %q, sent %q", res.IdempotencyKey, key)
			}
			if res.StatusCode != http.StatusCreated || res.Value.ID != "ord_0001" {
				t.Fatalf("response %d %+v, want 201 ord_0001", res.StatusCode, res.Value)
			}
			if n := len(sl.delays()); n != 2 {
				t.Fatalf("slept %d times, want 2", n)
			}
		})
	}
}

func TestDoesNotRetryFinalStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		code   string
	}{
		{"400 invalid", http.StatusBadRequest, client.CodeInvalid},
		{"401 unauthorized", http.StatusUnauthorized, client.CodeUnauthorized},
		{"403 forbidden", http.StatusForbidden, ""},
		{"404 not found", http.StatusNotFound, client.CodeNotFound},
		{"422 mismatch", http.StatusUnprocessableEntity, client.CodeMismatch},
		{"422 key reused", http.StatusUnprocessableEntity, client.CodeKeyReused},
		{"409 invalid_transition", http.StatusConflict, client.CodeInvalidTransition},
		{"409 of an unknown type", http.StatusConflict, "something_else"},
		{"402 payment_declined", http.StatusPaymentRequired, client.CodeDeclined},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if tc.code == "" {
					http.Error(w, "no", tc.status)
					return
				}
				writeProblem(w, tc.status, tc.code, "no")
			})
			c, sl := newClient(t, f.URL)
			res, err := c.PayOrder(context.Background(), "ord_1", client.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: "pm_card_visa"})
			var apiErr *client.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *client.Error", err)
			}
			if apiErr.StatusCode != tc.status || apiErr.Code != tc.code || apiErr.Retryable {
				t.Fatalf("error %+v, want status %d code %q not retryable", apiErr, tc.status, tc.code)
			}
			if n := len(f.requests()); n != 1 || res.Attempts != 1 {
				t.Fatalf("server saw %d requests, Attempts = %d; want 1 and 1", n, res.Attempts)
			}
			if len(sl.delays()) != 0 {
				t.Fatalf("slept %v, want no sleep", sl.delays())
			}
			if res.StatusCode != tc.status {
				t.Fatalf("Response.StatusCode = %d, want %d", res.StatusCode, tc.status)
			}
		})
	}
}

func TestGivesUpAfterMaxAttemptsWithARetryableError(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusServiceUnavailable, client.CodeUnavailable, "provider down")
	})
	c, sl := newClient(t, f.URL, client.WithMaxAttempts(4))
	res, err := c.CancelOrder(context.Background(), "ord_1")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || !apiErr.Retryable || apiErr.StatusCode != 503 || !client.IsRetryable(err) {
		t.Fatalf("err = %v, want a retryable 503 *client.Error", err)
	}
	if n := len(f.requests()); n != 4 || res.Attempts != 4 {
		t.Fatalf("server saw %d requests, Attempts = %d; want 4 and 4", n, res.Attempts)
	}
	if n := len(sl.delays()); n != 3 {
		t.Fatalf("slept %d times, want 3 (none after the last attempt)", n)
	}
	wantOneKey(t, f.requests())
}

// hijackClose drops the connection without answering.
func hijackClose(t *testing.T, w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	conn.Close()
}

func TestRetriesAConnectionClosedWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			hijackClose(t, w)
			return
		}
		writeJSON(w, http.StatusOK, sampleOrder(order.Paid))
	})
	c, _ := newClient(t, f.URL)
	res, err := c.PayOrder(context.Background(), "ord_0001", client.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatalf("PayOrder: %v", err)
	}
	if res.Attempts != 2 || len(f.requests()) != 2 {
		t.Fatalf("Attempts = %d, server saw %d; want 2 and 2", res.Attempts, len(f.requests()))
	}
	wantOneKey(t, f.requests())
	if res.Value.State != order.Paid {
		t.Fatalf("state %s, want PAID", res.Value.State)
	}
}

func TestNetworkErrorAfterTheLastAttemptIsWrappedWithTheCount(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) { hijackClose(t, w) })
	c, _ := newClient(t, f.URL, client.WithMaxAttempts(3))
	res, err := c.FulfillOrder(context.Background(), "ord_1")
	var ne *client.NetworkError
	if !errors.As(err, &ne) || ne.Attempts != 3 {
		t.Fatalf("err = %v, want *client.NetworkError after 3 attempts", err)
	}
	if !strings.Contains(err.Error(), "after 3 attempts") || !client.IsRetryable(err) {
		t.Fatalf("err = %q: want the count in the message and IsRetryable", err)
	}
	if res.Attempts != 3 || res.IdempotencyKey == "" || res.IdempotencyKey != wantOneKey(t, f.requests()) {
		t.Fatalf("Response %+v: want Attempts 3 and the key sent", res)
	}
}

func TestRetriesARefusedConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, sl := newClient(t, "http://"+addr, client.WithMaxAttempts(3))
	_, err = c.GetOrder(context.Background(), "ord_1")
	var ne *client.NetworkError
	if !errors.As(err, &ne) || ne.Attempts != 3 || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want a refused *client.NetworkError after 3 attempts", err)
	}
	if n := len(sl.delays()); n != 2 {
		t.Fatalf("slept %d times, want 2", n)
	}
}

func TestRetriesAnAttemptThatTimesOut(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		writeJSON(w, http.StatusCreated, sampleOrder(order.Received))
	})
	c, _ := newClient(t, f.URL, client.WithAttemptTimeout(100*time.Millisecond))
	res, err := c.CreateOrder(context.Background(), newInput)
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	// A busy machine may let a later attempt time out too; what matters is
	// that the timed-out attempt was retried under the same key.
	if res.Attempts < 2 {
		t.Fatalf("Attempts = %d, want at least 2", res.Attempts)
	}
	wantOneKey(t, f.requests())
}

func TestHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		retryAfter string
		opts       []client.Option
		want       time.Duration
	}{
		{"delta seconds", "3", nil, 3 * time.Second},
		{"HTTP date", now.Add(7 * time.Second).Format(http.TimeFormat), nil, 7 * time.Second},
		{"date in the past", now.Add(-time.Minute).Format(http.TimeFormat), nil, 0},
		{"capped at the default 30s", "120", nil, 30 * time.Second},
		{"capped at MaxRetryAfter", now.Add(time.Hour).Format(http.TimeFormat), []client.Option{client.WithMaxRetryAfter(5 * time.Second)}, 5 * time.Second},
		{"zero", "0", nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
				if n == 1 {
					w.Header().Set("Retry-After", tc.retryAfter)
					writeProblem(w, http.StatusServiceUnavailable, client.CodeUnavailable, "later")
					return
				}
				writeJSON(w, http.StatusOK, sampleOrder(order.Paid))
			})
			opts := append([]client.Option{client.WithClock(func() time.Time { return now }),
				client.WithBackoff(time.Millisecond, time.Millisecond)}, tc.opts...)
			c, sl := newClient(t, f.URL, opts...)
			if _, err := c.PayOrder(context.Background(), "ord_1", client.PayInput{Amount: 1, Currency: "USD", PaymentMethod: "pm"}); err != nil {
				t.Fatalf("PayOrder: %v", err)
			}
			if d := sl.delays(); len(d) != 1 || d[0] != tc.want {
				t.Fatalf("slept %v, want [%v]", d, tc.want)
			}
		})
	}
}

func TestBackoffIsFullJitterWithinTheExponentialCap(t *testing.T) {
	t.Parallel()
	const (
		attempts = 12
		base     = 100 * time.Millisecond
		maxDelay = 2 * time.Second
	)
	run := func(seed uint64) []time.Duration {
		f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
			http.Error(w, "busy", http.StatusTooManyRequests)
		})
		c, sl := newClient(t, f.URL, client.WithMaxAttempts(attempts), client.WithBackoff(base, maxDelay),
			client.WithRandSource(rand.NewPCG(seed, 1)))
		if _, err := c.GetOrder(context.Background(), "ord_1"); err == nil {
			t.Fatal("GetOrder succeeded against a server that always answers 429")
		}
		return sl.delays()
	}
	delays := run(42)
	if len(delays) != attempts-1 {
		t.Fatalf("slept %d times, want %d", len(delays), attempts-1)
	}
	distinct := map[time.Duration]bool{}
	for i, d := range delays {
		ceiling := min(maxDelay, base<<i)
		if d < 0 || d > ceiling {
			t.Fatalf("delay %d = %v, want within [0, %v]", i, d, ceiling)
		}
		distinct[d] = true
	}
	if len(distinct) < len(delays)/2 {
		t.Fatalf("delays %v look unrandomised", delays)
	}
	if again := run(42); !equalDurations(again, delays) {
		t.Fatalf("same seed gave %v then %v", delays, again)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestContextCancelledWhileWaitingStopsRetries(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusServiceUnavailable, client.CodeUnavailable, "later")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sleep := func(ctx context.Context, d time.Duration) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	}
	c, err := client.New(f.URL, "k", client.WithSleep(sleep))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.CreateOrder(ctx, newInput)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled wrapped", err)
	}
	if n := len(f.requests()); n != 1 || res.Attempts != 1 {
		t.Fatalf("server saw %d requests, Attempts = %d; want 1 and 1", n, res.Attempts)
	}
	if res.IdempotencyKey == "" {
		t.Fatal("Response lost the idempotency key")
	}
}

func TestContextCancelledInFlightStopsAtOnce(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	})
	c, sl := newClient(t, f.URL)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	start := time.Now()
	res, err := c.PayOrder(ctx, "ord_1", client.PayInput{Amount: 1, Currency: "USD", PaymentMethod: "pm"})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled wrapped", err)
	}
	if res.Attempts != 1 || len(sl.delays()) != 0 {
		t.Fatalf("Attempts = %d, slept %v; want 1 attempt and no sleep", res.Attempts, sl.delays())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v to stop", el)
	}
}

func TestDeadlineStopsRetriesWithTheDeadlineError(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusServiceUnavailable, client.CodeUnavailable, "later")
	})
	// The deadline passes during the first backoff, whatever the time the
	// first attempt took: the sleep makes it pass, then waits for it.
	ctx := newExpiring()
	c, err := client.New(f.URL, "k", client.WithSleep(func(sctx context.Context, _ time.Duration) error {
		ctx.expire()
		<-sctx.Done()
		return sctx.Err()
	}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.GetOrder(ctx, "ord_1")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("err = %v, want DeadlineExceeded naming the last 503", err)
	}
	if res.Attempts != 1 {
		t.Fatalf("Attempts = %d, want 1", res.Attempts)
	}
}

// expiring is a context whose deadline passes when expire is called, so a
// test decides the moment instead of a timer racing the scheduler.
type expiring struct {
	context.Context // Background, for Value
	done            chan struct{}
	once            sync.Once
}

func newExpiring() *expiring {
	return &expiring{Context: context.Background(), done: make(chan struct{})}
}

func (e *expiring) Deadline() (time.Time, bool) { return time.Time{}, false }
func (e *expiring) Done() <-chan struct{}       { return e.done }
func (e *expiring) expire()                     { e.once.Do(func() { close(e.done) }) }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
