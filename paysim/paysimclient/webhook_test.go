package paysimclient_test

import (
	"strings"
	"testing"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/paysimclient"
)

// TestParseNamesWhatIsWrong: a webhook Parse refuses says which member is
// wrong (an unknown type was reported as a missing id and key), and does
// not echo an id too long to keep.
func TestParseNamesWhatIsWrong(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct{ name, body, want string }{
		{"unknown type", `{"id":"evt_1","type":"charge.exploded","data":{"idempotency_key":"ord_1/pay/1"}}`,
			`event "evt_1" has type "charge.exploded", not one of charge.succeeded, charge.failed, refund.succeeded, refund.failed`},
		{"no id", `{"id":"","type":"charge.succeeded","data":{"idempotency_key":"ord_1/pay/1"}}`, "the event has no id"},
		{"id too long", `{"id":"` + long + `","type":"charge.succeeded","data":{"idempotency_key":"ord_1/pay/1"}}`,
			"the event id is 300 bytes, more than 255"},
		{"no key", `{"id":"evt_1","type":"charge.succeeded","data":{}}`, `event "evt_1" has no data.idempotency_key`},
		{"no currency", `{"id":"evt_1","type":"charge.succeeded","data":{"idempotency_key":"k","amount":1}}`, `event "evt_1" has no data.currency`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := paysimclient.Webhooks{}.Parse([]byte(tc.body))
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse: err = %v, want %s", err, tc.want)
			}
		})
	}
	in, err := paysimclient.Webhooks{}.Parse([]byte(`{"id":"evt_1","type":"charge.succeeded","data":{"object_id":"ch_1",` +
		`"idempotency_key":"ord_1/pay/1","order_id":"ord_1","amount":4200,"currency":"usd"}}`))
	want := payment.ProviderEvent{Source: paysimclient.Source, EventID: "evt_1", Type: payment.EventPaymentSucceeded,
		ProviderType: "charge.succeeded", ObjectID: "ch_1",
		Reference: payment.Reference{OrderID: "ord_1", Key: "ord_1/pay/1"}, Amount: 4200, Currency: "USD"}
	if err != nil || in != want {
		t.Errorf("Parse of a good event = %+v, %v", in, err)
	}
}
