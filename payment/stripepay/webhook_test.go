package stripepay_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/payment/stripepay"
	"github.com/orderly/orderly/paysim/stripesim"
)

// TestWebhooksFromStripeModeParse: paysim's Stripe-signed events, signed
// with an old and a new secret while one rotates, verify with either
// configured secret and map to provider events matched by intent id;
// another secret, a changed body or a stale timestamp do not verify.
func TestWebhooksFromStripeModeParse(t *testing.T) {
	type delivery struct {
		body []byte
		sig  string
	}
	got := make(chan delivery, 64)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- delivery{b, r.Header.Get(stripepay.SignatureHeader)}
	}))
	defer recv.Close()
	e := start(t, stripesim.Config{Webhooks: stripesim.WebhookConfig{URL: recv.URL,
		Secrets: []string{"whsec_old_0123456789", "whsec_new_0123456789"}}})
	in := e.prepare("w1", 1500)
	if _, err := e.confirm(in, "w1/pay/1/confirm", "pm_card_visa"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.gw.Refund(context.Background(), payment.RefundRequest{IdempotencyKey: "w1/refund", IntentID: in.ID, Amount: 500,
		Reference: payment.Reference{OrderID: "w1", Key: "w1/refund"}}); err != nil {
		t.Fatal(err)
	}
	onlyNew := stripepay.WebhookVerifier{Secrets: []string{"whsec_new_0123456789"}}
	rotating := stripepay.WebhookVerifier{Secrets: []string{"whsec_other_000000", "whsec_old_0123456789"}}
	want := map[string]bool{"payment_intent.succeeded": false, "refund.created": false, "charge.refunded": false}
	deadline := time.After(30 * time.Second)
	for done := 0; done < len(want); {
		var d delivery
		select {
		case d = <-got:
		case <-deadline:
			t.Fatalf("events: %v", want)
		}
		ev, ok, err := onlyNew.Parse(d.body, d.sig)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		ev2, ok2, err := rotating.Parse(d.body, d.sig)
		if err != nil || ok2 != ok || ev2 != ev {
			t.Fatalf("Parse with the rotating secrets: %+v %v %v", ev2, ok2, err)
		}
		if _, _, err := (stripepay.WebhookVerifier{Secrets: []string{"whsec_wrong_000000"}}).Parse(d.body, d.sig); !errors.Is(err, stripepay.ErrSignature) {
			t.Fatalf("wrong secret: %v", err)
		}
		tampered := strings.Replace(string(d.body), `"amount":`, `"amount":1`, 1)
		if _, _, err := onlyNew.Parse([]byte(tampered), d.sig); !errors.Is(err, stripepay.ErrSignature) {
			t.Fatalf("tampered body: %v", err)
		}
		if done2, seen := want[ev.ProviderType]; !seen || done2 {
			continue
		}
		want[ev.ProviderType] = true
		done++
		if !ok || ev.Source != "stripe" || !strings.HasPrefix(ev.EventID, "evt_") || ev.IntentID != in.ID || ev.Currency != "EUR" {
			t.Fatalf("%s: %+v", ev.ProviderType, ev)
		}
		switch ev.ProviderType {
		case "payment_intent.succeeded":
			if ev.Type != payment.EventPaymentSucceeded || ev.ObjectID != in.ID || ev.Amount != 1500 || ev.Reference != in.Reference {
				t.Fatalf("succeeded: %+v", ev)
			}
		case "refund.created":
			if ev.Type != payment.EventRefundSucceeded || !strings.HasPrefix(ev.ObjectID, "re_") || ev.Amount != 500 || ev.Reference.Key != "w1/refund" {
				t.Fatalf("refund: %+v", ev)
			}
		case "charge.refunded":
			if ev.Type != payment.EventRefundSucceeded || ev.Amount != 500 {
				t.Fatalf("charge.refunded: %+v", ev)
			}
		}
	}
	body := []byte(`{"id":"evt_1","object":"event","api_version":"` + stripesim.APIVersion + `","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}`)
	old := stripesim.Sign([]string{"whsec_new_0123456789"}, time.Now().Add(-10*time.Minute), body)
	if _, _, err := onlyNew.Parse(body, old); !errors.Is(err, stripepay.ErrSignature) {
		t.Fatalf("stale signature: %v", err)
	}
	fresh := stripesim.Sign([]string{"whsec_new_0123456789"}, time.Now(), body)
	if ev, ok, err := onlyNew.Parse(body, fresh); err != nil || !ok || ev.ObjectID != "pi_1" {
		t.Fatalf("fresh: %+v %v %v", ev, ok, err)
	}
}
