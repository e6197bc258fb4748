package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
)

func TestIdempotencyReplay(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})

		t.Run("a repeated create replays 201 with Location and the current order", func(t *testing.T) {
			customer, key := newCustomer(t), newKey(t)
			o := create(t, env, testenv.KeyA, key, customer)

			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(customer))
			wantReplayOf(t, r, http.StatusCreated)
			if got := orderOf(t, r); got.ID != o.ID || got.State != order.Received {
				t.Fatalf("replay shows %s %s, want %s RCVD", got.ID, got.State, o.ID)
			}
			if loc := r.Header.Get("Location"); loc != "/v1/orders/"+o.ID {
				t.Fatalf("replay Location = %q, want /v1/orders/%s", loc, o.ID)
			}

			wantStatus(t, fire(t, env, o, order.EventPay, newKey(t)), http.StatusOK)
			r = do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(customer))
			wantReplayOf(t, r, http.StatusCreated)
			if got := orderOf(t, r); got.ID != o.ID || got.State != order.Paid || got.Version != 2 {
				t.Fatalf("replay after pay shows %s %s v%d, want the current %s PAID v2", got.ID, got.State, got.Version, o.ID)
			}
			wantOrders(t, env, testenv.KeyA, customer, o.ID)
		})

		t.Run("a key reused with another body is rejected and its record kept", func(t *testing.T) {
			customer, other, key := newCustomer(t), newCustomer(t), newKey(t)
			o := create(t, env, testenv.KeyA, key, customer)

			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(other))
			wantProblem(t, r, http.StatusUnprocessableEntity, apperr.EKeyReused)
			wantOrders(t, env, testenv.KeyA, other)

			r = do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(customer))
			wantReplayOf(t, r, http.StatusCreated)
			if got := orderOf(t, r); got.ID != o.ID {
				t.Fatalf("original replay shows order %s, want %s", got.ID, o.ID)
			}
		})

		t.Run("a key reused on another order's pay is rejected", func(t *testing.T) {
			first, second := orderIn(t, env, order.Received), orderIn(t, env, order.Received)
			key := newKey(t)
			wantStatus(t, fire(t, env, first, order.EventPay, key), http.StatusOK)

			wantProblem(t, fire(t, env, second, order.EventPay, key), http.StatusUnprocessableEntity, apperr.EKeyReused)
			if got := get(t, env, testenv.KeyA, second.ID); got.State != order.Received {
				t.Fatalf("the other order is %s, want RCVD", got.State)
			}
			if n := env.Gateway.Captures(second.ID); n != 0 {
				t.Fatalf("the other order was captured %d times, want 0", n)
			}
		})

		t.Run("a declined payment replays as the same decline without charging", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			key := newKey(t)
			declined := payBody(o, testmode.MethodDeclined)
			first := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, declined)
			p := wantProblem(t, first, http.StatusPaymentRequired, apperr.EDeclined)
			if first.replayed() {
				t.Fatal("the first decline was marked as a replay")
			}
			calls := env.Gateway.Calls()

			again := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, declined)
			wantReplayOf(t, again, http.StatusPaymentRequired)
			if q := wantProblem(t, again, http.StatusPaymentRequired, apperr.EDeclined); q.Detail != p.Detail {
				t.Fatalf("replayed detail %q, want %q", q.Detail, p.Detail)
			}
			if n := env.Gateway.Calls(); n != calls {
				t.Fatalf("the replay reached the payment provider (%d calls, want %d)", n, calls)
			}
			if n := env.Gateway.Captures(o.ID); n != 0 {
				t.Fatalf("%d captures, want 0", n)
			}
			// The decline moves the version on (the next pay is a new logical
			// charge); the state stays RCVD.
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || got.Version != 2 {
				t.Fatalf("order is %s v%d, want RCVD v2", got.State, got.Version)
			}
		})

		t.Run("after a decline another payment method can pay the order, once", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			wantProblem(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, newKey(t),
				payBody(o, testmode.MethodInsufficientFunds)), http.StatusPaymentRequired, apperr.EDeclined)
			paid := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, newKey(t),
				payBody(o, testmode.MethodApproved))
			wantStatus(t, paid, http.StatusOK)
			if got := orderOf(t, paid); got.State != order.Paid {
				t.Fatalf("order is %s after paying with another card, want PAID", got.State)
			}
			again := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, newKey(t),
				payBody(o, testmode.MethodApproved))
			wantStatus(t, again, http.StatusOK)
			if n := env.Gateway.Captures(o.ID); n != 1 {
				t.Fatalf("%d captures, want 1", n)
			}
		})

		t.Run("a payment that does not match the order replays as the same mismatch", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			key := newKey(t)
			wrong := payBody(o, testmode.MethodApproved)
			wrong["amount"] = o.Amount + 1
			p := wantProblem(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, wrong),
				http.StatusUnprocessableEntity, apperr.EMismatch)
			// The detail speaks major units with the currency, and the minor units the API takes.
			for _, want := range []string{order.DescribeAmount(o.Amount+1, o.Currency), order.DescribeAmount(o.Amount, o.Currency)} {
				if !strings.Contains(p.Detail, want) {
					t.Errorf("detail %q does not name %q", p.Detail, want)
				}
			}

			r := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, wrong)
			wantReplayOf(t, r, http.StatusUnprocessableEntity)
			wantProblem(t, r, http.StatusUnprocessableEntity, apperr.EMismatch)
			if n := env.Gateway.Captures(o.ID); n != 0 {
				t.Fatalf("%d captures, want 0", n)
			}
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received {
				t.Fatalf("order is %s, want RCVD", got.State)
			}
		})

		t.Run("an invalid transition replays as 409 after the order has moved", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			key := newKey(t)
			wantProblem(t, fire(t, env, o, order.EventFulfill, key), http.StatusConflict, apperr.EInvalidTransition)
			wantStatus(t, fire(t, env, o, order.EventPay, newKey(t)), http.StatusOK)

			r := fire(t, env, o, order.EventFulfill, key)
			wantReplayOf(t, r, http.StatusConflict)
			wantProblem(t, r, http.StatusConflict, apperr.EInvalidTransition)
			if n := env.Warehouse.Shipments(o.ID); n != 0 {
				t.Fatalf("the replay shipped the order %d times, want 0", n)
			}
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Paid {
				t.Fatalf("order is %s, want PAID", got.State)
			}
		})

		t.Run("a quoted key is the same key as the bare one", func(t *testing.T) {
			customer, key := newCustomer(t), newKey(t)
			o := create(t, env, testenv.KeyA, `"`+key+`"`, customer)
			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(customer))
			wantReplayOf(t, r, http.StatusCreated)
			if got := orderOf(t, r); got.ID != o.ID {
				t.Fatalf("bare key replayed order %s, want %s", got.ID, o.ID)
			}
		})

		t.Run("X-Idempotency-Key is an alias of Idempotency-Key", func(t *testing.T) {
			customer, key := newCustomer(t), newKey(t)
			r := exchange(t, env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA,
				Body: orderBody(customer), Header: http.Header{"X-Idempotency-Key": {key}}})
			wantStatus(t, r, http.StatusCreated)
			o := orderOf(t, r)

			r = do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(customer))
			wantReplayOf(t, r, http.StatusCreated)
			if got := orderOf(t, r); got.ID != o.ID {
				t.Fatalf("Idempotency-Key replayed order %s, want %s", got.ID, o.ID)
			}
			wantOrders(t, env, testenv.KeyA, customer, o.ID)
		})

		t.Run("an invalid key is a 400 that creates nothing", func(t *testing.T) {
			for _, tc := range []struct {
				name   string
				header http.Header
			}{
				{"256 characters", http.Header{"Idempotency-Key": {strings.Repeat("k", idempotency.MaxKeyLength+1)}}},
				{"non-ASCII", http.Header{"Idempotency-Key": {"clé-" + newKey(t)}}},
				{"empty quoted string", http.Header{"Idempotency-Key": {`""`}}},
				{"a list of keys", http.Header{"Idempotency-Key": {newKey(t) + ", " + newKey(t)}}},
				{"two header lines", http.Header{"Idempotency-Key": {newKey(t), newKey(t)}}},
				{"both the header and its alias", http.Header{"Idempotency-Key": {newKey(t)}, "X-Idempotency-Key": {newKey(t)}}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					customer := newCustomer(t)
					r := exchange(t, env, call{Method: http.MethodPost, Path: "/v1/orders", APIKey: testenv.KeyA,
						Body: orderBody(customer), Header: tc.header, Malformed: true})
					wantFields(t, wantProblem(t, r, http.StatusBadRequest, apperr.EInvalid), "Idempotency-Key")
					wantOrders(t, env, testenv.KeyA, customer)
				})
			}
		})

		t.Run("keys are scoped to the tenant", func(t *testing.T) {
			customer, key := newCustomer(t), newKey(t)
			a := create(t, env, testenv.KeyA, key, customer)
			b := create(t, env, testenv.KeyB, key, customer)
			if a.ID == b.ID {
				t.Fatalf("tenant B's create with tenant A's key returned A's order %s", a.ID)
			}
			wantOrders(t, env, testenv.KeyA, customer, a.ID)
			wantOrders(t, env, testenv.KeyB, customer, b.ID)
		})
	})
}

func TestVolatileFieldsIgnored(t *testing.T) {
	t.Parallel()
	const window = time.Minute
	// withVolatile returns a create body for customer carrying per-attempt
	// members that clients change on every retry.
	withVolatile := func(customer, attempt string) map[string]any {
		b := orderBody(customer)
		b["request_id"] = "req-" + attempt
		b["client_timestamp"] = "2030-01-02T03:04:0" + attempt + "Z"
		return b
	}
	eachStore(t, func(t *testing.T, kind string) {
		clk := newClock()
		env := testenv.New(t, kind, testenv.Options{Clock: clk, DerivedKeyTTL: window})

		t.Run("volatile members are accepted in a create and a pay", func(t *testing.T) {
			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), withVolatile(newCustomer(t), "1"))
			wantStatus(t, r, http.StatusCreated)
			o := orderOf(t, r)
			pay := payBody(o, testmode.MethodApproved)
			pay["request_id"] = "req-1"
			wantStatus(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, newKey(t), pay), http.StatusOK)
		})

		t.Run("nested volatile members are accepted and ignored, as at the top level", func(t *testing.T) {
			customer, key := newCustomer(t), newKey(t)
			nested := func(trace string) string {
				return `{"customer_id":"` + customer + `","currency":"USD","items":[{"sku":"sku_book","quantity":2,` +
					`"unit_price":1250,"trace_id":"` + trace + `"}]}`
			}
			first := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, nested("t-1"))
			wantStatus(t, first, http.StatusCreated)
			wantReplayOf(t, do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, nested("t-2")), http.StatusCreated)
			bad := strings.Replace(nested("t-3"), `"trace_id"`, `"colour"`, 1)
			wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), bad), http.StatusBadRequest, apperr.EInvalid)
			dup := strings.Replace(nested("t-4"), `"quantity":2,`, `"quantity":2,"quantity":3,`, 1)
			wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, newKey(t), dup), http.StatusBadRequest, apperr.EInvalid)
		})

		t.Run("other unknown members are still rejected", func(t *testing.T) {
			customer := newCustomer(t)
			b := withVolatile(customer, "1")
			b["colour"] = "red"
			wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, "", b), http.StatusBadRequest, apperr.EInvalid)
			wantOrders(t, env, testenv.KeyA, customer)
		})

		t.Run("a retry with the same key and new volatile members replays", func(t *testing.T) {
			customer, key := newCustomer(t), newKey(t)
			first := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, withVolatile(customer, "1"))
			wantStatus(t, first, http.StatusCreated)
			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, withVolatile(customer, "2"))
			wantReplayOf(t, r, http.StatusCreated)
			wantOrders(t, env, testenv.KeyA, customer, orderOf(t, first).ID)
		})

		t.Run("without a key, creates differing only in volatile members make one order until the window ends", func(t *testing.T) {
			customer := newCustomer(t)
			first := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, "", withVolatile(customer, "1"))
			wantStatus(t, first, http.StatusCreated)
			o := orderOf(t, first)

			clk.Advance(window - time.Second)
			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, "", withVolatile(customer, "2"))
			wantReplayOf(t, r, http.StatusCreated)
			if got := orderOf(t, r); got.ID != o.ID {
				t.Fatalf("double click created order %s besides %s", got.ID, o.ID)
			}
			wantOrders(t, env, testenv.KeyA, customer, o.ID)

			clk.Advance(2 * time.Second)
			r = do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, "", withVolatile(customer, "3"))
			wantStatus(t, r, http.StatusCreated)
			if r.replayed() {
				t.Fatalf("a create after the derived key's window was replayed: %s", r)
			}
			again := orderOf(t, r)
			if again.ID == o.ID {
				t.Fatalf("a create after the window returned the old order %s", o.ID)
			}
			wantOrders(t, env, testenv.KeyA, customer, again.ID, o.ID)
		})
	})
}

func TestRequireAndOffPolicies(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		t.Run("PolicyRequire rejects a request without a key and creates nothing", func(t *testing.T) {
			env := testenv.New(t, kind, testenv.Options{Policy: idempotency.PolicyRequire})
			customer := newCustomer(t)
			r := do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, "", orderBody(customer))
			wantProblem(t, r, http.StatusBadRequest, apperr.EKeyRequired)
			wantOrders(t, env, testenv.KeyA, customer)

			o := create(t, env, testenv.KeyA, newKey(t), customer)
			wantProblem(t, fire(t, env, o, order.EventPay, ""), http.StatusBadRequest, apperr.EKeyRequired)
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || env.Gateway.Calls() != 0 {
				t.Fatalf("an unkeyed pay changed the order to %s or reached the provider (%d calls)", got.State, env.Gateway.Calls())
			}
		})

		t.Run("PolicyOff runs every unkeyed request", func(t *testing.T) {
			env := testenv.New(t, kind, testenv.Options{Policy: idempotency.PolicyOff})
			customer := newCustomer(t)
			first := create(t, env, testenv.KeyA, "", customer)
			second := create(t, env, testenv.KeyA, "", customer)
			wantOrders(t, env, testenv.KeyA, customer, second.ID, first.ID)

			key := newKey(t)
			keyed := create(t, env, testenv.KeyA, key, customer)
			wantReplayOf(t, do(t, env, http.MethodPost, "/v1/orders", testenv.KeyA, key, orderBody(customer)), http.StatusCreated)
			wantOrders(t, env, testenv.KeyA, customer, keyed.ID, second.ID, first.ID)
		})
	})
}

func TestRestartReplays(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env1 := testenv.New(t, kind, testenv.Options{})
		customer, createKey, payKey := newCustomer(t), newKey(t), newKey(t)
		o := create(t, env1, testenv.KeyA, createKey, customer)
		wantStatus(t, fire(t, env1, o, order.EventPay, payKey), http.StatusOK)
		env1.Close()

		env2 := testenv.New(t, kind, testenv.Options{Location: env1.Location})

		r := do(t, env2, http.MethodPost, "/v1/orders", testenv.KeyA, createKey, orderBody(customer))
		wantReplayOf(t, r, http.StatusCreated)
		if got := orderOf(t, r); got.ID != o.ID || got.State != order.Paid {
			t.Fatalf("create replay after restart shows %s %s, want %s PAID", got.ID, got.State, o.ID)
		}
		wantOrders(t, env2, testenv.KeyA, "", o.ID)

		r = fire(t, env2, o, order.EventPay, payKey)
		wantReplayOf(t, r, http.StatusOK)
		if got := orderOf(t, r); got.State != order.Paid || got.Version != 2 {
			t.Fatalf("pay replay after restart shows %s v%d, want PAID v2", got.State, got.Version)
		}
		if n := env1.Gateway.Captures(o.ID) + env2.Gateway.Captures(o.ID); n != 1 {
			t.Fatalf("%d captures across both runs, want 1", n)
		}
		if n := env2.Gateway.Calls(); n != 0 {
			t.Fatalf("the replay after restart reached the payment provider %d times", n)
		}
	})
}

func TestProviderFailureNotStored(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})

		t.Run("a payment provider outage is a retryable 503 that is not stored", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			key := newKey(t)
			body := payBody(o, simulator.MethodProviderError)
			for attempt := 1; attempt <= 2; attempt++ {
				calls := env.Gateway.Calls()
				r := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, key, body)
				wantProblem(t, r, http.StatusServiceUnavailable, apperr.EUnavailable)
				if r.Header.Get("Retry-After") == "" || r.replayed() {
					t.Fatalf("attempt %d: Retry-After %q, replayed %v; want a fresh retryable 503", attempt, r.Header.Get("Retry-After"), r.replayed())
				}
				if env.Gateway.Calls() != calls+1 {
					t.Fatalf("attempt %d did not reach the provider: the outage was stored", attempt)
				}
			}
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || env.Gateway.Captures(o.ID) != 0 {
				t.Fatalf("order is %s with %d captures, want RCVD with 0", got.State, env.Gateway.Captures(o.ID))
			}
			wantStatus(t, fire(t, env, o, order.EventPay, newKey(t)), http.StatusOK)
			if n := env.Gateway.Captures(o.ID); n != 1 {
				t.Fatalf("%d captures after the outage, want 1", n)
			}
		})

		t.Run("a warehouse outage is a 503; the retry with the same key ships once", func(t *testing.T) {
			o := orderIn(t, env, order.Paid)
			key := newKey(t)
			env.Warehouse.FailNext(1)
			r := fire(t, env, o, order.EventFulfill, key)
			wantProblem(t, r, http.StatusServiceUnavailable, apperr.EUnavailable)
			if r.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Paid || env.Warehouse.Shipments(o.ID) != 0 {
				t.Fatalf("order is %s with %d shipments, want PAID with 0", got.State, env.Warehouse.Shipments(o.ID))
			}

			r = fire(t, env, o, order.EventFulfill, key)
			wantStatus(t, r, http.StatusOK)
			if r.replayed() {
				t.Fatal("the retry after an outage was answered as a replay")
			}
			if got := orderOf(t, r); got.State != order.Fulfilled {
				t.Fatalf("retry shows the order %s, want FULFILLED", got.State)
			}
			wantReplayOf(t, fire(t, env, o, order.EventFulfill, key), http.StatusOK)
			if n := env.Warehouse.Shipments(o.ID); n != 1 {
				t.Fatalf("%d shipments, want 1", n)
			}
		})
	})
}
