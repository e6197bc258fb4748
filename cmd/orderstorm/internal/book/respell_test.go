package book

import (
	"encoding/json"
	"testing"

	"github.com/orderly/orderly/idempotency"
)

// TestRespellIsTheSameRequest: the second click's body differs in bytes but
// not in meaning, so the server's fingerprint (which ignores member order,
// whitespace and volatile members) must be the same.
func TestRespellIsTheSameRequest(t *testing.T) {
	for _, body := range [][]byte{
		[]byte(`{"customer_id":"c","currency":"USD","items":[{"sku":"s","quantity":2,"unit_price":1250}]}`),
		[]byte(`{"amount":2500,"currency":"USD","payment_method":"pm_card_visa"}`),
		nil,
	} {
		alt := respell(body, 7)
		if string(alt) == string(body) || !json.Valid(alt) {
			t.Fatalf("respell(%s) = %s", body, alt)
		}
		fp := func(b []byte) string {
			if b == nil {
				b = []byte("{}")
			}
			f, err := idempotency.Fingerprinter{VolatileFields: idempotency.DefaultVolatileFields}.Fingerprint(
				idempotency.Request{Method: "POST", Route: "/r", Body: b})
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		if fp(body) != fp(alt) {
			t.Errorf("%s and %s fingerprint differently", body, alt)
		}
	}
}
