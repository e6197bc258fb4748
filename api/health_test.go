package api_test

import (
	"net/http"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
)

func TestHealth(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})

		t.Run("liveness and readiness answer 200", func(t *testing.T) {
			for _, path := range []string{"/healthz", "/readyz"} {
				r := do(t, env, http.MethodGet, path, "", "", nil)
				wantStatus(t, r, http.StatusOK)
			}
		})

		t.Run("an unknown route is a 404 problem", func(t *testing.T) {
			wantProblem(t, doMalformed(t, env, http.MethodGet, "/nowhere", "", "", nil), http.StatusNotFound, apperr.ENotFound)
			wantProblem(t, doMalformed(t, env, http.MethodGet, "/v1/nowhere", testenv.KeyA, "", nil), http.StatusNotFound, apperr.ENotFound)
		})

		t.Run("a wrong method is a 405 problem", func(t *testing.T) {
			wantProblem(t, doMalformed(t, env, http.MethodPut, "/healthz", "", "", nil), http.StatusMethodNotAllowed, "method_not_allowed")
			wantProblem(t, doMalformed(t, env, http.MethodDelete, "/v1/orders", testenv.KeyA, "", nil), http.StatusMethodNotAllowed, "method_not_allowed")
			r := doMalformed(t, env, http.MethodGet, "/v1/orders/ord_x/pay", testenv.KeyA, "", nil)
			wantProblem(t, r, http.StatusMethodNotAllowed, "method_not_allowed")
			if got := r.Header.Get("Allow"); got != "POST" {
				t.Errorf("Allow = %q, want POST (RFC 9110 §15.5.6)", got)
			}
			if got := doMalformed(t, env, http.MethodDelete, "/v1/orders", testenv.KeyA, "", nil).Header.Get("Allow"); got != "GET, POST" {
				t.Errorf("Allow = %q, want GET, POST", got)
			}
		})
	})
}
