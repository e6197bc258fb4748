package intake_test

import (
	"testing"

	"github.com/orderly/orderly/intake"
)

// BenchmarkDecodeCreate measures decoding, validating and fingerprinting
// one create body (with a volatile member) under a client key: the intake
// work of POST /v1/orders before the service.
//
//	go test -run '^$' -bench DecodeCreate -benchmem ./intake/
func BenchmarkDecodeCreate(b *testing.B) {
	body := []byte(`{"customer_id":"cus_bench_0001","currency":"EUR","client_timestamp":"2026-12-02T05:00:00Z",` +
		`"items":[{"sku":"SKU-RED-SHIRT","quantity":2,"unit_price":1999},{"sku":"SKU-BLUE-HAT","quantity":1,"unit_price":2500}]}`)
	keys := []string{"bench-key-0001"}
	var d intake.Decoder
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := d.Create(keys, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePay is BenchmarkDecodeCreate for a pay body.
func BenchmarkDecodePay(b *testing.B) {
	body := []byte(`{"amount":6498,"currency":"EUR","payment_method":"pm_card_visa"}`)
	keys := []string{"bench-key-0002"}
	var d intake.Decoder
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Transition("t1", intake.OpPay, "ord_1", keys, body, 0); err != nil {
			b.Fatal(err)
		}
	}
}
