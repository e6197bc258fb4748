package api_test

import (
	"net/http"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
)

// endpointBody is a registration of a loopback receiver for tag's events.
func endpointBody(path string) map[string]any {
	return map[string]any{"url": "http://127.0.0.1:9/" + path, "events": []string{"order.paid"}}
}

// endpointsOf lists the tenant's endpoints.
func endpointsOf(t *testing.T, env *testenv.Env, apiKey string) []event.Endpoint {
	t.Helper()
	r := do(t, env, http.MethodGet, "/v1/webhook-endpoints", apiKey, "", nil)
	wantStatus(t, r, http.StatusOK)
	return decode[struct{ Data []event.Endpoint }](t, r).Data
}

// TestWebhookEndpointRegistrationHonoursIdempotencyKey: POST
// /v1/webhook-endpoints twice with one Idempotency-Key registers one
// endpoint (the audit: it made two); the retry replays it, secret included,
// with Idempotency-Replayed; the key with another body is a 422; 20
// concurrent registrations with one key make one endpoint; the key is in
// the orders' ledger (another tenant's same key is its own).
func TestWebhookEndpointRegistrationHonoursIdempotencyKey(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{})
		key := newKey(t)
		first := do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, key, endpointBody("a"))
		wantStatus(t, first, http.StatusCreated)
		if first.replayed() || first.Header.Get("Idempotency-Key-Expires") == "" {
			t.Fatalf("first registration: replayed %v, expires %q", first.replayed(), first.Header.Get("Idempotency-Key-Expires"))
		}
		ep := decode[event.Endpoint](t, first)
		again := do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, key, endpointBody("a"))
		wantReplayOf(t, again, http.StatusCreated)
		if got := decode[event.Endpoint](t, again); got.ID != ep.ID || got.Secret != ep.Secret || got.Secret == "" ||
			again.Header.Get("Location") != first.Header.Get("Location") {
			t.Fatalf("replay answered %+v (Location %s), want %+v", got, again.Header.Get("Location"), ep)
		}
		wantProblem(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, key, endpointBody("b")),
			http.StatusUnprocessableEntity, apperr.EKeyReused)
		if eps := endpointsOf(t, env, testenv.KeyA); len(eps) != 1 || eps[0].ID != ep.ID {
			t.Fatalf("endpoints after a retry and a reuse: %+v, want only %s", eps, ep.ID)
		}
		// Another tenant's same key is its own.
		wantStatus(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyB, key, endpointBody("a")), http.StatusCreated)

		// One key, 20 at once: one registration, the rest replays or
		// in progress (409, retry later).
		raced := newKey(t)
		replies := together(t, 20, func(int) (reply, error) {
			return send(env, call{Method: http.MethodPost, Path: "/v1/webhook-endpoints", APIKey: testenv.KeyA, IdemKey: raced,
				Body: endpointBody("raced")})
		})
		originals := 0
		for i, r := range replies {
			switch {
			case r.Status == http.StatusCreated && !r.replayed():
				originals++
			case r.Status == http.StatusCreated:
			case r.Status == http.StatusConflict && r.Problem != nil && r.Problem.Code() == string(apperr.EKeyInProgress):
			default:
				t.Fatalf("raced registration %d: %s", i, r)
			}
		}
		if originals != 1 {
			t.Fatalf("%d original registrations for one key, want 1", originals)
		}
		if eps := endpointsOf(t, env, testenv.KeyA); len(eps) != 2 {
			t.Fatalf("%d endpoints, want 2 (one per key)", len(eps))
		}

		// Deleted, then replayed: its outcome is gone with it.
		wantStatus(t, do(t, env, http.MethodDelete, "/v1/webhook-endpoints/"+ep.ID, testenv.KeyA, "", nil), http.StatusNoContent)
		wantProblem(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, key, endpointBody("a")),
			http.StatusNotFound, apperr.ENotFound)
	})
}

// TestWebhookEndpointRegistrationUnderRequire: with the policy require, a
// registration without a key is a 400 like any other POST.
func TestWebhookEndpointRegistrationUnderRequire(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.SQLite, testenv.Options{Policy: idempotency.PolicyRequire})
	wantProblem(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, "", endpointBody("a")),
		http.StatusBadRequest, apperr.EKeyRequired)
	wantStatus(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, newKey(t), endpointBody("a")), http.StatusCreated)
}
