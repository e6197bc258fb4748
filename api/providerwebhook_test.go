package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/paysim/testmode"
	"github.com/orderly/orderly/service"
)

var webhookSecret = []byte("whsec_api_test")

// lostReplies charges, then loses the answer: every pay's outcome is
// unknown to orderd.
type lostReplies struct{ payment.Gateway }

func (g lostReplies) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	if _, err := g.Gateway.Confirm(ctx, req); err != nil {
		return payment.Intent{}, err
	}
	return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

// Retrieve and Find lose their answers too: only the webhook can tell.
func (g lostReplies) Retrieve(ctx context.Context, id string) (payment.Intent, error) {
	return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

func (g lostReplies) Find(ctx context.Context, ref payment.Reference) (payment.Intent, error) {
	return payment.Intent{}, &payment.ProviderError{Err: payment.ErrUnknownOutcome}
}

// webhook posts a paysim event about the charge key (of 0 USD), signed at t
// with secret (nil: unsigned).
func webhook(t *testing.T, env *testenv.Env, id, typ, chargeKey string, secret []byte, at time.Time) reply {
	t.Helper()
	return webhookData(t, env, id, typ, paysim.WebhookData{IdempotencyKey: chargeKey, Currency: "USD"}, secret, at)
}

// chargeData is the data of a paysim event about the charge of o at its
// version, for amount minor units of o's currency.
func chargeData(o order.Order, amount int64) paysim.WebhookData {
	return paysim.WebhookData{ObjectID: "ch_test", IdempotencyKey: fmt.Sprintf("%s/pay/%d", o.ID, o.Version),
		OrderID: o.ID, Amount: amount, Currency: o.Currency}
}

// webhookData posts a paysim event with data, signed at t with secret (nil:
// unsigned).
func webhookData(t *testing.T, env *testenv.Env, id, typ string, data paysim.WebhookData, secret []byte, at time.Time) reply {
	t.Helper()
	body, err := json.Marshal(paysim.WebhookEvent{ID: id, Type: typ, Created: at.Unix(), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	if secret != nil {
		h.Set(paysim.SignatureHeader, paysim.Sign(secret, at, body))
	}
	return exchange(t, env, call{Method: http.MethodPost, Path: api.ProviderWebhookPath, Body: body, Header: h})
}

func TestProviderWebhook(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{
			WrapGateway:     func(g payment.Gateway) payment.Gateway { return lostReplies{g} },
			ProviderWebhook: paysimclient.Webhooks{Secret: webhookSecret},
		})
		o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		payKey := newKey(t)
		r := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, payKey, payBody(o, testmode.MethodApproved))
		wantProblem(t, r, http.StatusServiceUnavailable, apperr.EUnavailable)
		chargeKey := fmt.Sprintf("%s/pay/%d", o.ID, o.Version)
		now := time.Now()

		// Refused before anything is recorded: no signature, a wrong
		// secret, a stale timestamp (401); a malformed event (400).
		wantProblem(t, webhook(t, env, "evt_a", paysim.EventChargeSucceeded, chargeKey, nil, now), http.StatusUnauthorized, "unauthorized")
		wantProblem(t, webhook(t, env, "evt_a", paysim.EventChargeSucceeded, chargeKey, []byte("nope"), now), http.StatusUnauthorized, "unauthorized")
		wantProblem(t, webhook(t, env, "evt_a", paysim.EventChargeSucceeded, chargeKey, webhookSecret, now.Add(-time.Hour)), http.StatusUnauthorized, "unauthorized")
		wantProblem(t, webhook(t, env, "evt_a", "charge.exploded", chargeKey, webhookSecret, now), http.StatusBadRequest, apperr.EInvalid)
		if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received {
			t.Fatalf("a refused webhook moved the order to %s", got.State)
		}

		for i, want := range []string{"applied", "duplicate"} {
			r := webhookData(t, env, "evt_a", paysim.EventChargeSucceeded, chargeData(o, o.Amount), webhookSecret, now)
			wantStatus(t, r, http.StatusOK)
			if got := decode[map[string]string](t, r)["outcome"]; got != want {
				t.Fatalf("delivery %d: outcome %q, want %q", i+1, got, want)
			}
		}
		if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Paid || got.Version != o.Version+1 {
			t.Fatalf("after the webhook: %s v%d, want PAID v%d", got.State, got.Version, o.Version+1)
		}
		// The client's retry finds the outcome without asking the provider.
		r = do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, payKey, payBody(o, testmode.MethodApproved))
		wantStatus(t, r, http.StatusOK)
		if n := env.Gateway.Captures(o.ID); n != 1 {
			t.Fatalf("captures = %d, want 1", n)
		}
	})
}

// TestProviderWebhookAmountMismatch: a correctly signed paysim
// charge.succeeded whose amount (or currency) is not the attempt's moves
// nothing and parks the attempt needs_attention, on both stores; the
// provider's event with the right amount then settles it. Regression (issue
// 15): such an event marked the order PAID while the provider had captured
// something else.
func TestProviderWebhookAmountMismatch(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		env := testenv.New(t, kind, testenv.Options{
			WrapGateway:     func(g payment.Gateway) payment.Gateway { return lostReplies{g} },
			ProviderWebhook: paysimclient.Webhooks{Secret: webhookSecret},
		})
		o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		r := do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, newKey(t), payBody(o, testmode.MethodApproved))
		wantProblem(t, r, http.StatusServiceUnavailable, apperr.EUnavailable)
		now := time.Now()
		short := chargeData(o, o.Amount-1)
		otherCurrency := chargeData(o, o.Amount)
		otherCurrency.Currency = "JPY"
		otherOrder := chargeData(o, o.Amount)
		otherOrder.OrderID = "ord_someone_else"
		for i, d := range []paysim.WebhookData{short, otherCurrency, otherOrder} {
			r := webhookData(t, env, fmt.Sprintf("evt_bad_%d", i), paysim.EventChargeSucceeded, d, webhookSecret, now)
			wantStatus(t, r, http.StatusOK)
			if got := decode[map[string]string](t, r)["outcome"]; got != "mismatch" {
				t.Fatalf("event %d (%+v): outcome %q, want mismatch", i, d, got)
			}
			if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Received || got.Version != o.Version {
				t.Fatalf("event %d (%+v) moved the order to %s v%d", i, d, got.State, got.Version)
			}
		}
		a, err := env.Store.GetAttempt(t.Context(), short.IdempotencyKey)
		if err != nil || a.Status != payment.AttemptNeedsAttention || a.ErrorCode != service.ErrorProviderEventMismatch {
			t.Fatalf("attempt = %+v, %v; want needs_attention (%s)", a, err, service.ErrorProviderEventMismatch)
		}
		r = webhookData(t, env, "evt_good", paysim.EventChargeSucceeded, chargeData(o, o.Amount), webhookSecret, now)
		wantStatus(t, r, http.StatusOK)
		if got := get(t, env, testenv.KeyA, o.ID); got.State != order.Paid {
			t.Fatalf("after the right event: %s, want PAID", got.State)
		}
	})
}
