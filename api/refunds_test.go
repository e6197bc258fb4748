package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
)

// refund is the body of a 200 from POST /v1/orders/{id}/refunds.
type refund struct {
	ID             string `json:"id"`
	Amount         int64  `json:"amount"`
	Status         string `json:"status"`
	ProviderRef    string `json:"provider_ref"`
	AmountCaptured int64  `json:"amount_captured"`
	AmountRefunded int64  `json:"amount_refunded"`
}

// TestPartialRefundsOverHTTP (issue 16): every request and response is
// checked against the OpenAPI document. Money is never defaulted (400
// naming the member); a refund is a 200 with the totals and replays under
// its key; the same key with another amount is a 422; past the captured
// amount a 409 refund_exceeds_captured; an unpaid order a 409
// invalid_transition naming its state; GET shows what was captured and
// refunded, and the order keeps its state.
func TestPartialRefundsOverHTTP(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		o := orderIn(t, env, order.Fulfilled)
		path := "/v1/orders/" + o.ID + "/refunds"

		p := wantProblem(t, doMalformed(t, env, http.MethodPost, path, testenv.KeyA, newKey(t),
			map[string]any{"currency": o.Currency}), http.StatusBadRequest, apperr.EInvalid)
		wantFields(t, p, "amount")
		p = wantProblem(t, doMalformed(t, env, http.MethodPost, path, testenv.KeyA, newKey(t),
			map[string]any{"amount": 100, "currency": nil}), http.StatusBadRequest, apperr.EInvalid)
		wantFields(t, p, "currency")

		k := newKey(t)
		r := do(t, env, http.MethodPost, path, testenv.KeyA, k, map[string]any{"amount": 600, "currency": o.Currency, "reason": "returned"})
		wantStatus(t, r, http.StatusOK)
		first := decode[refund](t, r)
		if first.Amount != 600 || first.Status != "succeeded" || first.AmountRefunded != 600 || first.AmountCaptured != o.Amount ||
			!strings.HasPrefix(first.ID, o.ID+"/refunds/") || first.ProviderRef == "" {
			t.Fatalf("refund = %+v", first)
		}
		again := do(t, env, http.MethodPost, path, testenv.KeyA, k, map[string]any{"amount": 600, "currency": o.Currency, "reason": "returned"})
		wantReplayOf(t, again, http.StatusOK)
		if got := decode[refund](t, again); got != first {
			t.Fatalf("replay = %+v, want %+v", got, first)
		}
		wantProblem(t, do(t, env, http.MethodPost, path, testenv.KeyA, k, map[string]any{"amount": 700, "currency": o.Currency}),
			http.StatusUnprocessableEntity, apperr.EKeyReused)
		wantProblem(t, do(t, env, http.MethodPost, path, testenv.KeyA, newKey(t), map[string]any{"amount": o.Amount - 599, "currency": o.Currency}),
			http.StatusConflict, apperr.ERefundExceedsCaptured)

		got := get(t, env, testenv.KeyA, o.ID)
		if got.State != order.Fulfilled || got.AmountCaptured == nil || *got.AmountCaptured != o.Amount ||
			got.AmountRefunded == nil || *got.AmountRefunded != 600 || got.Version != o.Version+1 {
			t.Fatalf("order after a refund = %+v, want FULFILLED, captured %d, refunded 600, version %d", got, o.Amount, o.Version+1)
		}
		if n := env.Gateway.Refunds(o.ID); n != 1 {
			t.Fatalf("%d refunds at the provider, want 1", n)
		}

		unpaid := orderIn(t, env, order.Received)
		p = wantProblem(t, do(t, env, http.MethodPost, "/v1/orders/"+unpaid.ID+"/refunds", testenv.KeyA, newKey(t),
			map[string]any{"amount": 1, "currency": unpaid.Currency}), http.StatusConflict, apperr.EInvalidTransition)
		if !strings.Contains(p.Detail, string(order.Received)) {
			t.Fatalf("problem detail %q does not name the state", p.Detail)
		}
	})
}

// TestRacingPartialRefundsOverHTTP: 20 refunds of 150 (distinct keys)
// released at once on an order that captured 2500: each ends 200 or 409
// refund_exceeds_captured after retries of its own key on a busy answer;
// exactly 16 succeed (2400 ≤ 2500), the provider refunded 16 times, and
// every key replays its first final answer.
func TestRacingPartialRefundsOverHTTP(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		o := orderIn(t, env, order.Paid)
		path := "/v1/orders/" + o.ID + "/refunds"
		keys := make([]string, 20)
		for i := range keys {
			keys[i] = newKey(t)
		}
		body := map[string]any{"amount": 150, "currency": o.Currency}
		final := func(r reply) bool {
			return r.Status == http.StatusOK || (r.Problem != nil && strings.HasSuffix(r.Problem.Type, "/refund_exceeds_captured"))
		}
		replies := together(t, len(keys), func(i int) (reply, error) {
			for {
				r, err := send(env, call{Method: http.MethodPost, Path: path, APIKey: testenv.KeyA, IdemKey: keys[i], Body: body})
				if err != nil || final(r) || (r.Status != http.StatusConflict && r.Status != http.StatusServiceUnavailable) {
					return r, err
				}
			}
		})
		ok := 0
		for i, r := range replies {
			if !final(r) {
				t.Fatalf("refund %d = %s", i, r)
			}
			if r.Status == http.StatusOK {
				ok++
			}
			again := do(t, env, http.MethodPost, path, testenv.KeyA, keys[i], body)
			wantReplayOf(t, again, r.Status)
			if r.Status == http.StatusOK && decode[refund](t, again) != decode[refund](t, r) {
				t.Fatalf("replay of refund %d = %s, first %s", i, again, r)
			}
		}
		if got := get(t, env, testenv.KeyA, o.ID); ok != 16 || *got.AmountRefunded != 2400 || env.Gateway.Refunds(o.ID) != 16 {
			t.Fatalf("%d refunds answered 200, order shows %d refunded, provider made %d; want 16, 2400, 16",
				ok, *got.AmountRefunded, env.Gateway.Refunds(o.ID))
		}
	})
}
