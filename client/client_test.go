package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
)

func TestEachLogicalOperationGetsItsOwnUUIDv4Key(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusCreated, sampleOrder(order.Received))
	})
	c, _ := newClient(t, f.URL)
	ctx := context.Background()
	a, err := c.CreateOrder(ctx, newInput)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.CreateOrder(ctx, newInput)
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if reqs[0].Key == reqs[1].Key {
		t.Fatalf("two operations shared the key %q", reqs[0].Key)
	}
	for i, r := range reqs {
		u, err := uuid.Parse(r.Key)
		if err != nil || u.Version() != 4 {
			t.Fatalf("request %d key %q is not a UUIDv4", i+1, r.Key)
		}
	}
	if a.IdempotencyKey != reqs[0].Key || b.IdempotencyKey != reqs[1].Key {
		t.Fatalf("Response keys %q, %q; sent %q, %q", a.IdempotencyKey, b.IdempotencyKey, reqs[0].Key, reqs[1].Key)
	}
}

func TestWithIdempotencyKeyIsSentOnEveryAttempt(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			writeProblem(w, http.StatusConflict, client.CodeKeyInProgress, "running")
			return
		}
		writeJSON(w, http.StatusOK, sampleOrder(order.Fulfilled))
	})
	c, _ := newClient(t, f.URL)
	res, err := c.FulfillOrder(context.Background(), "ord_1", client.WithIdempotencyKey("ship-001"))
	if err != nil {
		t.Fatal(err)
	}
	if key := wantOneKey(t, f.requests()); key != "ship-001" || res.IdempotencyKey != "ship-001" {
		t.Fatalf("sent %q, Response has %q; want ship-001", key, res.IdempotencyKey)
	}
}

func TestKeysAreSentAsStructuredFieldStrings(t *testing.T) {
	t.Parallel()
	var raw string
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		raw = r.Header.Get("Idempotency-Key")
		writeJSON(w, http.StatusOK, sampleOrder(order.Cancelled))
	})
	c, _ := newClient(t, f.URL)
	if _, err := c.CancelOrder(context.Background(), "ord_1", client.WithIdempotencyKey(`a"b\c`)); err != nil {
		t.Fatal(err)
	}
	if want := `"a\"b\\c"`; raw != want {
		t.Fatalf("Idempotency-Key: %s, want %s", raw, want)
	}
}

func TestInvalidKeysAreRejectedBeforeSending(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, sampleOrder(order.Cancelled))
	})
	for _, key := range []string{"has space", "ünïcode", strings.Repeat("k", 256)} {
		c, _ := newClient(t, f.URL)
		res, err := c.CancelOrder(context.Background(), "ord_1", client.WithIdempotencyKey(key))
		if err == nil || res == nil || res.Attempts != 0 {
			t.Fatalf("key %q: err %v, res %+v; want an error and no attempt", key, err, res)
		}
	}
	c, _ := newClient(t, f.URL, client.WithKeyGenerator(func() string { return "" }))
	if _, err := c.CancelOrder(context.Background(), "ord_1"); err == nil {
		t.Fatal("an empty generated key was sent")
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("server saw %d requests, want 0", n)
	}
}

func TestReplayedAndKeyExpiryAreParsed(t *testing.T) {
	t.Parallel()
	expires := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Idempotency-Replayed", "true")
		w.Header().Set("Idempotency-Key-Expires", expires.Format(http.TimeFormat))
		if strings.HasSuffix(r.URL.Path, "/pay") {
			writeProblem(w, http.StatusPaymentRequired, client.CodeDeclined, "the payment was declined: card_declined")
			return
		}
		w.Header().Set("Location", "/v1/orders/ord_0001")
		writeJSON(w, http.StatusCreated, sampleOrder(order.Received))
	})
	c, _ := newClient(t, f.URL)
	res, err := c.CreateOrder(context.Background(), newInput)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Replayed || !res.KeyExpiresAt.Equal(expires) || res.StatusCode != 201 || res.Header.Get("Location") != "/v1/orders/ord_0001" {
		t.Fatalf("Response %+v: want Replayed, KeyExpiresAt %v, 201 and Location", res, expires)
	}
	pr, err := c.PayOrder(context.Background(), "ord_0001", client.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: "pm_card_declined"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || !apiErr.Replayed || !client.IsDeclined(err) {
		t.Fatalf("err = %v, want a replayed decline", err)
	}
	if !pr.Replayed || !pr.KeyExpiresAt.Equal(expires) {
		t.Fatalf("Response %+v: want Replayed and KeyExpiresAt on an error too", pr)
	}
}

func TestProblemFieldsAreParsed(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"type":"https://orderly.dev/problems/invalid","title":"Invalid request","status":400,`+
			`"detail":"the order has invalid fields","instance":"/v1/orders",`+
			`"errors":[{"field":"currency","reason":"is required"},{"field":"items[0].quantity","reason":"must be between 1 and 1000000"}]}`)
	})
	c, _ := newClient(t, f.URL)
	_, err := c.CreateOrder(context.Background(), order.NewOrderInput{CustomerID: "c"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *client.Error", err)
	}
	want := client.Error{StatusCode: 400, Type: "https://orderly.dev/problems/invalid", Code: client.CodeInvalid,
		Title: "Invalid request", Detail: "the order has invalid fields", Instance: "/v1/orders",
		Fields: []client.FieldError{{Field: "currency", Reason: "is required"}, {Field: "items[0].quantity", Reason: "must be between 1 and 1000000"}}}
	got, _ := json.Marshal(apiErr)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("error\n got %s\nwant %s", got, exp)
	}
	if msg := err.Error(); !strings.Contains(msg, "400 invalid: Invalid request: the order has invalid fields") || !strings.Contains(msg, "currency is required") {
		t.Fatalf("Error() = %q", msg)
	}
}

func TestANonProblemErrorBodyStillMakesAnError(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, "<h1>blocked by proxy</h1>")
	})
	c, _ := newClient(t, f.URL)
	_, err := c.GetOrder(context.Background(), "ord_1")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 || apiErr.Title != "Forbidden" || apiErr.Code != "" ||
		!strings.Contains(apiErr.Detail, "blocked by proxy") {
		t.Fatalf("err = %+v", apiErr)
	}
}

func TestRequestShapes(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(n int, w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/idempotency-keys/"):
			writeJSON(w, http.StatusOK, map[string]any{"key": "pay-001", "state": "completed",
				"expires_at": "2026-05-06T07:08:09Z", "resource_id": "ord_0001", "status_code": 200})
		case r.URL.Path == "/v1/orders" && r.Method == http.MethodGet:
			writeJSON(w, http.StatusOK, map[string]any{"data": []order.Order{sampleOrder(order.Paid)}, "next_cursor": "b3JkXzE"})
		default:
			writeJSON(w, http.StatusOK, sampleOrder(order.Paid))
		}
	})
	c, _ := newClient(t, f.URL+"/", client.WithUserAgent("orderctl-test"))
	ctx := context.Background()

	list, err := c.ListOrders(ctx, client.ListParams{State: order.Paid, CustomerID: "cus 42", Limit: 10, Cursor: "b3JkXzA"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Value.Data) != 1 || list.Value.NextCursor != "b3JkXzE" {
		t.Fatalf("list %+v", list.Value)
	}
	ks, err := c.KeyStatus(ctx, "pay-001")
	if err != nil {
		t.Fatal(err)
	}
	wantKS := client.KeyStatus{Key: "pay-001", State: client.KeyCompleted, ExpiresAt: time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC),
		ResourceID: "ord_0001", StatusCode: 200}
	if ks.Value != wantKS {
		t.Fatalf("KeyStatus %+v, want %+v", ks.Value, wantKS)
	}
	if _, err := c.GetOrder(ctx, "ord_0001"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FulfillOrder(ctx, "ord_0001"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PayOrder(ctx, "ord_0001", client.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}

	want := []seen{
		{Method: "GET", Path: "/v1/orders", RawQuery: "cursor=b3JkXzA&customer_id=cus+42&limit=10&state=PAID"},
		{Method: "GET", Path: "/v1/idempotency-keys/pay-001"},
		{Method: "GET", Path: "/v1/orders/ord_0001"},
		{Method: "POST", Path: "/v1/orders/ord_0001/fulfill", HasKey: true},
		{Method: "POST", Path: "/v1/orders/ord_0001/pay", HasKey: true,
			Body: `{"amount":2500,"currency":"USD","payment_method":"pm_card_visa"}`, ContentType: "application/json"},
	}
	reqs := f.requests()
	if len(reqs) != len(want) {
		t.Fatalf("server saw %d requests, want %d", len(reqs), len(want))
	}
	for i, r := range reqs {
		if r.Auth != "Bearer sk_test_key" || r.UserAgent != "orderctl-test" {
			t.Fatalf("request %d: Authorization %q, User-Agent %q", i+1, r.Auth, r.UserAgent)
		}
		r.Auth, r.UserAgent, r.Key = "", "", ""
		if r != want[i] {
			t.Fatalf("request %d:\n got %+v\nwant %+v", i+1, r, want[i])
		}
	}
}

func TestPredicates(t *testing.T) {
	t.Parallel()
	problem := func(status int, code string) error {
		return fmt.Errorf("wrapped: %w", &client.Error{StatusCode: status, Code: code})
	}
	cases := []struct {
		name string
		pred func(error) bool
		yes  []error
		no   []error
	}{
		{"IsNotFound", client.IsNotFound, []error{problem(404, client.CodeNotFound)},
			[]error{problem(409, client.CodeInvalidTransition), errors.New("x"), nil}},
		{"IsDeclined", client.IsDeclined, []error{problem(402, client.CodeDeclined)},
			[]error{problem(422, client.CodeMismatch), nil}},
		{"IsInvalidTransition", client.IsInvalidTransition, []error{problem(409, client.CodeInvalidTransition)},
			[]error{problem(409, client.CodeKeyInProgress), nil}},
		{"IsConflict", client.IsConflict, []error{problem(409, client.CodeInvalidTransition), problem(409, client.CodeKeyInProgress)},
			[]error{problem(422, client.CodeKeyReused)}},
		{"IsKeyReused", client.IsKeyReused, []error{problem(422, client.CodeKeyReused)},
			[]error{problem(422, client.CodeMismatch)}},
		{"IsRetryable", client.IsRetryable,
			[]error{&client.Error{StatusCode: 503, Retryable: true}, &client.NetworkError{Attempts: 5, Err: errors.New("EOF")}},
			[]error{problem(402, client.CodeDeclined), context.Canceled, nil}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, err := range tc.yes {
				if !tc.pred(err) {
					t.Errorf("%s(%v) = false, want true", tc.name, err)
				}
			}
			for _, err := range tc.no {
				if tc.pred(err) {
					t.Errorf("%s(%v) = true, want false", tc.name, err)
				}
			}
		})
	}
}

func TestNewRejectsUnusableBaseURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "http://host/?q=1", "://bad"} {
		if _, err := client.New(u, "k"); err == nil {
			t.Errorf("New(%q) succeeded, want an error", u)
		}
	}
	if _, err := client.New("https://api.example.com/orderly/", "k"); err != nil {
		t.Errorf("New with a path prefix: %v", err)
	}
}
