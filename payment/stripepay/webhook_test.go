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

// TestWebhooksEndpointAdapter: stripepay.Webhooks, the api.ProviderWebhook
// orderd serves at /provider/stripe/webhooks. CheckHeader refuses, before
// the body is read, a missing, malformed or stale Stripe-Signature or one
// without a v1; Authenticate verifies under any of the rotating secrets;
// Parse maps the event, and an event that means nothing to Orderly (another
// type, a pending refund, a refund without orderly_reference) wraps
// payment.ErrIgnoredEvent rather than being malformed.
func TestWebhooksEndpointAdapter(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	w := stripepay.Webhooks{Verifier: stripepay.WebhookVerifier{Secrets: []string{"whsec_old_0123456789", "whsec_new_0123456789"}},
		Now: func() time.Time { return now }}
	hdr := func(v string) http.Header {
		h := http.Header{}
		if v != "" {
			h.Set(stripepay.SignatureHeader, v)
		}
		return h
	}
	for name, v := range map[string]string{
		"missing":   "",
		"malformed": "t=1,v1",
		"no time":   "v1=00ff",
		"no v1":     "t=1800000000,v0=00ff",
		"stale":     "t=1799999000,v1=00ff",
		"bad time":  "t=soon,v1=00ff",
	} {
		if err := w.CheckHeader(hdr(v)); !errors.Is(err, stripepay.ErrSignature) {
			t.Errorf("CheckHeader(%s) = %v, want ErrSignature", name, err)
		}
	}
	if err := w.CheckHeader(hdr("t=1800000000,v1=00ff,v0=zz")); err != nil {
		t.Errorf("CheckHeader(fresh) = %v", err)
	}

	ev := func(typ, obj string) []byte {
		return []byte(`{"id":"evt_1","object":"event","api_version":"` + stripesim.APIVersion + `","type":"` + typ + `","data":{"object":` + obj + `}}`)
	}
	body := ev("payment_intent.succeeded", `{"id":"pi_1","object":"payment_intent","amount":1500,"amount_received":1500,"currency":"eur",`+
		`"metadata":{"orderly_order_id":"o1","orderly_reference":"o1/pay/1"}}`)
	sig := stripesim.Sign([]string{"whsec_new_0123456789"}, time.Now(), body)
	if err := w.Authenticate(hdr(sig), body); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if err := w.Authenticate(hdr(sig), append(body, ' ')); !errors.Is(err, stripepay.ErrSignature) {
		t.Fatalf("Authenticate(tampered) = %v, want ErrSignature", err)
	}
	got, err := w.Parse(body)
	want := payment.ProviderEvent{Source: stripepay.Source, EventID: "evt_1", Type: payment.EventPaymentSucceeded,
		ProviderType: "payment_intent.succeeded", ObjectID: "pi_1", IntentID: "pi_1",
		Reference: payment.Reference{OrderID: "o1", Key: "o1/pay/1"}, Amount: 1500, Currency: "EUR"}
	if err != nil || got != want {
		t.Fatalf("Parse = %+v, %v; want %+v", got, err, want)
	}
	for name, b := range map[string][]byte{
		"another type":   ev("customer.created", `{"id":"cus_1","object":"customer"}`),
		"pending refund": ev("refund.updated", `{"id":"re_1","object":"refund","amount":1,"currency":"eur","status":"pending","payment_intent":"pi_1"}`),
		"foreign refund": ev("charge.refunded", `{"id":"ch_1","object":"charge","amount_refunded":1,"currency":"eur","payment_intent":"pi_1","metadata":{}}`),
	} {
		if _, err := w.Parse(b); !errors.Is(err, payment.ErrIgnoredEvent) {
			t.Errorf("Parse(%s) = %v, want ErrIgnoredEvent", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"not JSON":        []byte("nope"),
		"not an event":    []byte(`{"id":"cus_1","object":"customer"}`),
		"another version": []byte(`{"id":"evt_1","object":"event","api_version":"2011-01-01","type":"payment_intent.succeeded","data":{"object":{}}}`),
	} {
		if _, err := w.Parse(b); err == nil || errors.Is(err, payment.ErrIgnoredEvent) {
			t.Errorf("Parse(%s) = %v, want a malformed event", name, err)
		}
	}
}
