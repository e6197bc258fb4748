package api_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/stripesim"
)

// pendingPayment is what a 202 pay answer shows of the order's payment.
type pendingPayment struct {
	State   order.State `json:"state"`
	Version int64       `json:"version"`
	Payment *struct {
		Status       string         `json:"status"`
		IntentID     string         `json:"intent_id"`
		ClientSecret string         `json:"client_secret"`
		NextAction   map[string]any `json:"next_action"`
	} `json:"payment"`
}

// wantPending fails the test unless r is a 202 with the order still RCVD
// and a pending payment of status, and returns its intent id.
func wantPending(t *testing.T, r reply, status string) string {
	t.Helper()
	wantStatus(t, r, http.StatusAccepted)
	p := decode[pendingPayment](t, r)
	if p.State != order.Received || p.Payment == nil || p.Payment.Status != status || p.Payment.IntentID == "" {
		t.Fatalf("202 answer %s, want RCVD with a %s payment naming its intent", r, status)
	}
	if status == "requires_action" && (p.Payment.ClientSecret == "" || p.Payment.NextAction == nil) {
		t.Fatalf("202 answer %s, want the client secret and the next action", r)
	}
	return p.Payment.IntentID
}

// complete asks paysim's Stripe mode to finish the customer's (or the
// bank's) part of intent id: action is "authenticate" (3-D Secure) or
// "settle" (a bank debit), outcome "success" or "failure".
func (s *stripeStack) complete(t *testing.T, id, action, outcome string) {
	t.Helper()
	resp, err := http.Post(s.base+"/admin/stripe/payment_intents/"+id+"/"+action+"?outcome="+outcome, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("paysim %s %s: %s", action, id, resp.Status)
	}
}

// confirmDirectly confirms intent id at paysim's Stripe mode with method,
// as a customer's browser holding its client secret would, and returns the
// answer's status.
func (s *stripeStack) confirmDirectly(t *testing.T, id, method string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/payment_intents/"+id+"/confirm",
		strings.NewReader(url.Values{"payment_method": {method}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("sk_test_orderly", "")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStripeWebhookSettlesAPendingPayment: with the Stripe adapter against
// paysim's Stripe mode, on both stores, a pay that needs 3-D Secure answers
// 202 with the next action; once the customer authenticates, paysim's
// Stripe-signed payment_intent.succeeded taken in at the webhook endpoint,
// raced by a retry of the pay's key and delivered twice, makes one capture,
// one order.paid and the order PAID, and the key then replays 200 PAID. A
// failed authentication's payment_intent.payment_failed leaves the order
// payable with another method (one capture in all); a bank debit settled
// by the bank is PAID by its webhook (issue 16 with issue 15's inbox).
func TestStripeWebhookSettlesAPendingPayment(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		s := newStripeStack(t, kind, testenv.Options{})

		t.Run("3-D Secure, the webhook racing a retry", func(t *testing.T) {
			o := create(t, s.env, testenv.KeyA, newKey(t), newCustomer(t))
			key := newKey(t)
			id := wantPending(t, s.pay(t, o, key, stripesim.Method3DS2Required), "requires_action")
			if again := s.pay(t, o, key, stripesim.Method3DS2Required); !again.replayed() {
				t.Fatalf("the same key while the customer authenticates: %s, want a replay", again)
			} else if wantPending(t, again, "requires_action") != id {
				t.Fatalf("the replay names another intent than %s: %s", id, again)
			}
			s.complete(t, id, "authenticate", "success")
			d := s.tap.waitFor(t, "payment_intent.succeeded", id)
			retry := make(chan reply, 1)
			go func() { retry <- s.pay(t, o, key, stripesim.Method3DS2Required) }()
			s.postWant(t, d, "applied", "already_settled")
			wantPaid(t, <-retry)
			s.postWant(t, d, "duplicate")
			wantPaid(t, s.pay(t, o, key, stripesim.Method3DS2Required))
			if got := get(t, s.env, testenv.KeyA, o.ID); got.State != order.Paid || got.Version != o.Version+1 {
				t.Fatalf("order %s v%d, want PAID v%d", got.State, got.Version, o.Version+1)
			}
			s.wantMoney(t, o.ID, 1, 0)
			s.wantEvents(t, o.ID, event.OrderCreated, event.OrderPaid)
		})

		t.Run("failed authentication, then another card", func(t *testing.T) {
			o := create(t, s.env, testenv.KeyA, newKey(t), newCustomer(t))
			id := wantPending(t, s.pay(t, o, newKey(t), stripesim.Method3DS2Required), "requires_action")
			s.complete(t, id, "authenticate", "failure")
			s.postWant(t, s.tap.waitFor(t, "payment_intent.payment_failed", id), "applied", "already_settled")
			// The declined intent is cancelled: its client secret no longer
			// lets the customer confirm it with another card.
			if st := s.confirmDirectly(t, id, stripesim.MethodVisa); st == http.StatusOK {
				t.Fatalf("a confirm of the declined intent by the customer answered %d, want it refused", st)
			}
			bumped := get(t, s.env, testenv.KeyA, o.ID)
			if bumped.State != order.Received || bumped.Version != o.Version+1 {
				t.Fatalf("order after the failed authentication: %s v%d, want RCVD v%d", bumped.State, bumped.Version, o.Version+1)
			}
			wantPaid(t, s.pay(t, bumped, newKey(t), stripesim.MethodVisa))
			s.wantMoney(t, o.ID, 1, 0)
		})

		t.Run("a bank debit settled by its webhook", func(t *testing.T) {
			o := create(t, s.env, testenv.KeyA, newKey(t), newCustomer(t))
			id := wantPending(t, s.pay(t, o, newKey(t), stripesim.MethodSEPADebit), "processing")
			s.complete(t, id, "settle", "success")
			s.postWant(t, s.tap.waitFor(t, "payment_intent.succeeded", id), "applied")
			if got := get(t, s.env, testenv.KeyA, o.ID); got.State != order.Paid {
				t.Fatalf("order %s after the debit's webhook, want PAID", got.State)
			}
			s.wantMoney(t, o.ID, 1, 0)
			s.wantEvents(t, o.ID, event.OrderCreated, event.OrderPaid)
		})
	})
}
