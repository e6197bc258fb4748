package intake_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/intake"
)

// FuzzDecode: whatever the body, the key and the operation, the intake
// either accepts the request or refuses it with an *apperr.Error of one of
// its codes (never a panic, never an error a transport would answer 500),
// and decoding is deterministic: the same request yields the same key and
// fingerprint. op "" is a create; pay, fulfill and cancel are transitions.
// It runs apart from package api's tests so that `go test -fuzz` builds,
// instrumented, only what the intake links (.ci/run's fuzz smoke).
func FuzzDecode(f *testing.F) {
	for _, seed := range []struct{ body, key, op string }{
		{`{"customer_id":"c","currency":"USD","items":[{"sku":"a","quantity":1,"unit_price":100}]}`, "k1", ""},
		{`{"customer_id":"c","customer_id":"d"}`, "", ""},
		{`{"items":[{"sku":"a","quantity":1e3}]}`, "k", ""},
		{`{"request_id":"x","nonce":1,"currency":"EUR"} {}`, "", ""},
		{`{"amount":9007199254740993,"currency":"USD","payment_method":"pm_card_visa"}`, "k", "pay"},
		{`{"amount":100,"currency":"USD","payment_method":"pm_card_visa"}`, "derived:x", "pay"},
		{`null`, "", "cancel"}, {``, "k", "fulfill"}, {`{}`, "", "refund"},
		{`[]`, "", ""}, {`{`, "", ""}, {"\xff", "", ""}, {`{"items":[{"sku":"\u0000"}]}`, "", ""},
	} {
		f.Add([]byte(seed.body), seed.key, seed.op)
	}
	f.Fuzz(func(t *testing.T, body []byte, key, op string) {
		var keys []string
		if key != "" {
			keys = []string{key}
		}
		d := intake.Decoder{Policy: idempotency.PolicyDerive}
		decode := func() (idempotency.Key, error) {
			if op == "" {
				k, _, err := d.Create(keys, body)
				return k, err
			}
			tr, err := d.Transition("tenant", intake.Op(op), "ord_1", keys, body, 0)
			return tr.Call.Key, err
		}
		k1, err1 := decode()
		k2, err2 := decode()
		if (err1 == nil) != (err2 == nil) || k1 != k2 {
			t.Fatalf("decoding twice differs: %+v %v, then %+v %v", k1, err1, k2, err2)
		}
		if err1 == nil {
			if k1.Value == "" || k1.Fingerprint == "" {
				t.Fatalf("accepted with key %+v: want a key and a fingerprint under the derive policy", k1)
			}
			return
		}
		var ae *apperr.Error
		if !errors.As(err1, &ae) || !slices.Contains(intake.Codes, ae.Code) {
			t.Fatalf("error %T %v, want an *apperr.Error with one of the intake's codes", err1, err1)
		}
	})
}
