package api_test

import (
	"net/http"
	"testing"

	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
)

// pendingBody is a 202 pay's body (and GET's while a payment waits): the
// order and its pending payment.
type pendingBody struct {
	order.Order
	Payment *struct {
		Status       string `json:"status"`
		IntentID     string `json:"intent_id"`
		ClientSecret string `json:"client_secret"`
		NextAction   *struct {
			Type          string `json:"type"`
			RedirectToURL *struct {
				URL string `json:"url"`
			} `json:"redirect_to_url"`
		} `json:"next_action"`
	} `json:"payment"`
}

// TestPayThreeDSecureAnswers202 (issue 16): a pay needing 3-D Secure is a
// 202 with the order RCVD and its pending payment (next_action,
// client_secret), validated against the OpenAPI document; the same key
// replays the 202; GET shows the pending payment; after the customer
// authenticates the retry of the key is 200 PAID with one capture, and GET
// no longer shows a payment.
func TestPayThreeDSecureAnswers202(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		k := newKey(t)
		path := eventPath(o.ID, order.EventPay)
		r := do(t, env, http.MethodPost, path, testenv.KeyA, k, payBody(o, simulator.MethodThreeDSecure))
		wantStatus(t, r, http.StatusAccepted)
		if r.replayed() {
			t.Fatalf("the first 202 says replayed: %s", r)
		}
		b := decode[pendingBody](t, r)
		if b.State != order.Received || b.Payment == nil || b.Payment.Status != "requires_action" || b.Payment.ClientSecret == "" ||
			b.Payment.NextAction == nil || b.Payment.NextAction.Type != "redirect_to_url" || b.Payment.NextAction.RedirectToURL == nil {
			t.Fatalf("202 body = %s; want RCVD with a requires_action payment, next_action and client_secret", r)
		}
		again := do(t, env, http.MethodPost, path, testenv.KeyA, k, payBody(o, simulator.MethodThreeDSecure))
		wantReplayOf(t, again, http.StatusAccepted)
		if got := decode[pendingBody](t, again); got.Payment == nil || got.Payment.IntentID != b.Payment.IntentID {
			t.Fatalf("replay = %s; want the same pending payment", again)
		}
		g := do(t, env, http.MethodGet, "/v1/orders/"+o.ID, testenv.KeyA, "", nil)
		wantStatus(t, g, http.StatusOK)
		if got := decode[pendingBody](t, g); got.Payment == nil || got.Payment.Status != "requires_action" || got.Payment.IntentID != b.Payment.IntentID || got.Payment.ClientSecret != "" {
			t.Fatalf("GET while pending = %s; want the pending payment without its client secret", g)
		}
		if err := env.Gateway.Authenticate(b.Payment.IntentID, true); err != nil {
			t.Fatal(err)
		}
		done := do(t, env, http.MethodPost, path, testenv.KeyA, k, payBody(o, simulator.MethodThreeDSecure))
		wantStatus(t, done, http.StatusOK)
		if got := orderOf(t, done); got.State != order.Paid || env.Gateway.Captures(o.ID) != 1 {
			t.Fatalf("retry after authentication = %s, %d captures; want PAID once", done, env.Gateway.Captures(o.ID))
		}
		if got := decode[pendingBody](t, do(t, env, http.MethodGet, "/v1/orders/"+o.ID, testenv.KeyA, "", nil)); got.Payment != nil {
			t.Fatalf("GET of the PAID order still shows a pending payment")
		}
		// A pay with another key and method while nothing waits is a no-op.
		wantStatus(t, do(t, env, http.MethodPost, path, testenv.KeyA, newKey(t), payBody(o, testmode.MethodApproved)), http.StatusOK)
	})
}
