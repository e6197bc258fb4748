package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
)

// TestUnknownOrderOrAuthStoresNothing: a request that names no order of the
// tenant (404) or is not authenticated (401) did not happen; the corrected
// request with the same key runs afresh.
func TestUnknownOrderOrAuthStoresNothing(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{})
		for _, ev := range []order.Event{order.EventPay, order.EventFulfill, order.EventCancel} {
			t.Run(string(ev), func(t *testing.T) {
				o := orderIn(t, env, order.Received)
				if ev == order.EventFulfill {
					o = orderIn(t, env, order.Paid)
				}
				foreign := create(t, env, testenv.KeyB, newKey(t), newCustomer(t))
				body := func(id string) any {
					if ev == order.EventPay {
						return payBody(o, "pm_card_visa")
					}
					return nil
				}
				key := newKey(t)
				for _, wrong := range []string{order.NewID(), foreign.ID, "ord_typo"} {
					r := do(t, env, http.MethodPost, eventPath(wrong, ev), testenv.KeyA, key, body(wrong))
					wantProblem(t, r, http.StatusNotFound, apperr.ENotFound)
				}
				r := do(t, env, http.MethodPost, eventPath(o.ID, ev), "sk_wrong_key_123", key, body(o.ID))
				wantStatus(t, r, http.StatusUnauthorized)
				r = do(t, env, http.MethodPost, eventPath(o.ID, ev), testenv.KeyA, key, body(o.ID))
				wantStatus(t, r, http.StatusOK)
				if r.replayed() {
					t.Fatalf("the corrected request was answered as a replay: %s", r)
				}
			})
		}
	})
}

// lostGateway loses every charge before it reaches the provider: an
// unknown outcome that nothing captured.
type lostGateway struct{ payment.Gateway }

func (lostGateway) Confirm(context.Context, payment.ConfirmRequest) (payment.Intent, error) {
	return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

// TestUnresolvedChargeIsListedAndNeverRetried: past the unresolved age, a
// retry of an unknown charge is a 409 needs_attention (no charge), and the
// attempt is listed by GET /v1/attempts for its tenant only.
func TestUnresolvedChargeIsListedAndNeverRetried(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		clk := newClock()
		env := testenv.New(t, kind, testenv.Options{Clock: clk,
			WrapGateway: func(gw payment.Gateway) payment.Gateway { return lostGateway{gw} }})
		o := orderIn(t, env, order.Received)
		key := newKey(t)
		wantProblem(t, fire(t, env, o, order.EventPay, key), http.StatusServiceUnavailable, apperr.EUnavailable)
		clk.Advance(13 * time.Hour)
		p := wantProblem(t, fire(t, env, o, order.EventPay, key), http.StatusConflict, apperr.ENeedsAttention)
		if p.Detail == "" {
			t.Fatal("needs_attention problem without detail")
		}
		r := do(t, env, http.MethodGet, "/v1/attempts?status=needs_attention", testenv.KeyA, "", nil)
		wantStatus(t, r, http.StatusOK)
		list := decode[struct {
			Data []struct {
				OrderID string `json:"order_id"`
				Status  string `json:"status"`
				Amount  int64  `json:"amount"`
			} `json:"data"`
		}](t, r)
		if len(list.Data) != 1 || list.Data[0].OrderID != o.ID || list.Data[0].Status != "needs_attention" || list.Data[0].Amount != o.Amount {
			t.Fatalf("attempts = %s, want the charge of %s", r, o.ID)
		}
		r = do(t, env, http.MethodGet, "/v1/attempts", testenv.KeyB, "", nil)
		if wantStatus(t, r, http.StatusOK); string(r.Body) != "{\"data\":[]}\n" {
			t.Fatalf("tenant B sees %s", r)
		}
		wantProblem(t, doMalformed(t, env, http.MethodGet, "/v1/attempts?status=unknown", testenv.KeyA, "", nil), http.StatusBadRequest, apperr.EInvalid)
		if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || env.Gateway.Captures(o.ID) != 0 {
			t.Fatalf("order is %s with %d captures, want RCVD with none", got.State, env.Gateway.Captures(o.ID))
		}
	})
}
