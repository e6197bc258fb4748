package intake_test

import (
	"testing"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/intake"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store/pgtest"
)

// A key stored before the one-pass parse (issue 19) still replays: the
// key is stored with the fingerprint main computed at 876fc0b for this
// body (idempotency's TestFingerprintsStoredBefore pins it), under a client
// key and as a derived key, and the same request decoded now is a replay
// of it on both stores, not a 422 idempotency_key_reused.
func TestKeyStoredBeforeStillReplays(t *testing.T) {
	const body = `{"customer_id":"cus_bench_0001","currency":"EUR","client_timestamp":"2026-12-02T05:00:00Z",` +
		`"items":[{"sku":"SKU-RED-SHIRT","quantity":2,"unit_price":1999}]}`
	const storedFingerprint = "76fade9e3c52561e2044bdf119329c1c577a83299c5e802dd0df41bc6d3a3354"
	in := order.NewOrderInput{CustomerID: "cus_bench_0001", Currency: "EUR",
		Items: []order.Item{{SKU: "SKU-RED-SHIRT", Quantity: 2, UnitPrice: 1999}}}
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			loc := t.TempDir()
			if kind == testenv.Postgres {
				loc = pgtest.NewDatabase(t)
			}
			st := testenv.Open(t, kind, loc)
			t.Cleanup(func() { st.Close() })
			svc := service.New(st, simulator.NewIntentGateway(), simulator.NewWarehouse(), service.Config{})
			t.Cleanup(svc.Close)
			for _, stored := range []idempotency.Key{
				{Value: "client-key-stored-before", Fingerprint: storedFingerprint},
				{Value: idempotency.DerivedKey(storedFingerprint), Derived: true, Fingerprint: storedFingerprint},
			} {
				first, err := svc.Create(t.Context(), "t1", stored, in)
				if err != nil {
					t.Fatal(err)
				}
				var keys []string
				if !stored.Derived {
					keys = []string{stored.Value}
				}
				key, now, err := intake.Decoder{}.Create(keys, []byte(body))
				if err != nil {
					t.Fatal(err)
				}
				if key.Value != stored.Value {
					t.Fatalf("the request decodes to key %q, want %q", key.Value, stored.Value)
				}
				res, err := svc.Create(t.Context(), "t1", key, now)
				if err != nil || !res.Replayed || res.Order.ID != first.Order.ID {
					t.Errorf("key %s stored before: %+v, %v; want a replay of %s", stored.Value, res, err, first.Order.ID)
				}
			}
		})
	}
}
