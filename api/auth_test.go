package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})

		t.Run("a request without a valid API key is a 401 challenge that creates nothing", func(t *testing.T) {
			customer := newCustomer(t)
			for _, tc := range []struct {
				name          string
				authorization string
			}{
				{"no Authorization", ""},
				{"an unknown key", "Bearer sk_test_unknown"},
				{"a known key under another scheme", "Basic " + testenv.KeyA},
				{"a bare key", testenv.KeyA},
			} {
				c := call{Method: http.MethodPost, Path: "/v1/orders", IdemKey: newKey(t), Body: orderBody(customer), Malformed: true}
				if tc.authorization != "" {
					c.Header = http.Header{"Authorization": {tc.authorization}}
				}
				r := exchange(t, env, c)
				wantProblem(t, r, http.StatusUnauthorized, "unauthorized")
				if h := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Fatalf("%s: WWW-Authenticate = %q, want a Bearer challenge", tc.name, h)
				}
			}
			wantOrders(t, env, testenv.KeyA, customer)
			wantProblem(t, doMalformed(t, env, http.MethodGet, "/v1/orders", "", "", nil), http.StatusUnauthorized, "unauthorized")
		})

		t.Run("another tenant's order is not found and stays unchanged", func(t *testing.T) {
			o := orderIn(t, env, order.Received)
			path := "/v1/orders/" + o.ID
			wantProblem(t, do(t, env, http.MethodGet, path, testenv.KeyB, "", nil), http.StatusNotFound, apperr.ENotFound)
			wantProblem(t, do(t, env, http.MethodPost, path+"/pay", testenv.KeyB, newKey(t), payBody(o, testmode.MethodApproved)),
				http.StatusNotFound, apperr.ENotFound)
			wantProblem(t, do(t, env, http.MethodPost, path+"/fulfill", testenv.KeyB, newKey(t), nil), http.StatusNotFound, apperr.ENotFound)
			wantProblem(t, do(t, env, http.MethodPost, path+"/cancel", testenv.KeyB, "", nil), http.StatusNotFound, apperr.ENotFound)

			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || got.Version != 1 {
				t.Fatalf("tenant A's order is %s v%d after tenant B's attempts, want RCVD v1", got.State, got.Version)
			}
			if n := env.Gateway.Captures(o.ID); n != 0 {
				t.Fatalf("tenant B's pay captured %d charges", n)
			}
		})

		t.Run("the list shows only the caller's orders", func(t *testing.T) {
			customer := newCustomer(t)
			a := create(t, env, testenv.KeyA, newKey(t), customer)
			b := create(t, env, testenv.KeyB, newKey(t), customer)
			wantOrders(t, env, testenv.KeyA, customer, a.ID)
			wantOrders(t, env, testenv.KeyB, customer, b.ID)
			for _, id := range ordersOf(t, env, testenv.KeyB, "") {
				if id == a.ID {
					t.Fatalf("tenant B's list includes tenant A's order %s", a.ID)
				}
			}
		})
	})
}
