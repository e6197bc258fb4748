package paysimclient_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
)

// provider is a paysim server on a loopback httptest.Server.
type provider struct {
	*httptest.Server
	sim *paysim.Server
}

// startProvider serves a fresh paysim ledger with faults f until the test
// ends.
func startProvider(t *testing.T, f paysim.Faults) provider {
	t.Helper()
	l, err := paysim.OpenLedger(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sim, err := paysim.NewServer(l, paysim.Config{Faults: f})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.StopDelays()
		ts.Close()
		l.Close()
	})
	return provider{Server: ts, sim: sim}
}

// stats returns the provider's counts.
func (p provider) stats(t *testing.T) paysim.Stats {
	t.Helper()
	st, err := p.sim.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// captures returns the provider's number of captures for orderID.
func (p provider) captures(t *testing.T, orderID string) int {
	t.Helper()
	return p.stats(t).CapturesByOrder[orderID]
}

// shipments returns the provider's number of shipments for orderID.
func (p provider) shipments(t *testing.T, orderID string) int {
	t.Helper()
	return p.stats(t).ShipmentsByOrder[orderID]
}

func newIntents(t *testing.T, url string, opts ...paysimclient.Option) *paysimclient.Intents {
	t.Helper()
	gw, err := paysimclient.NewIntents(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return gw
}

func newWarehouse(t *testing.T, url string, opts ...paysimclient.Option) *paysimclient.Warehouse {
	t.Helper()
	w, err := paysimclient.NewWarehouse(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// timeouts returns the per-call timeouts a timeout test tries, doubling from
// 200ms to below paysimTimeoutDelay, the fault delay of those tests. A test tries the next one while the call ends before
// the request was written (a busy machine's scheduler did not get to it in
// time) and asserts what a call that timed out after sending returns: no
// test depends on a deadline being met by the scheduler.
func timeouts() []time.Duration {
	var ds []time.Duration
	for d := 200 * time.Millisecond; d < paysimTimeoutDelay; d *= 2 {
		ds = append(ds, d)
	}
	return ds
}

// payRef is the Reference of the first pay attempt of orderID.
func payRef(orderID string) payment.Reference {
	return payment.Reference{OrderID: orderID, Key: orderID + "/pay/1"}
}

// prepare prepares an intent of 42.00 USD for orderID through gw, under
// the key "<order id>/pay/1/prepare".
func prepare(t *testing.T, gw payment.Gateway, orderID string) payment.Intent {
	t.Helper()
	in, err := gw.Prepare(context.Background(), payment.PrepareRequest{IdempotencyKey: orderID + "/pay/1/prepare",
		Reference: payRef(orderID), Amount: 4200, Currency: "USD"})
	if err != nil {
		t.Fatalf("Prepare %s: %v", orderID, err)
	}
	return in
}

// confirmReq returns the request confirming intent in of orderID with
// method under the key "<order id>/pay/1/confirm".
func confirmReq(orderID string, in payment.Intent, method string) payment.ConfirmRequest {
	return payment.ConfirmRequest{IdempotencyKey: orderID + "/pay/1/confirm", IntentID: in.ID, PaymentMethod: method,
		Reference: payRef(orderID)}
}

// shipReq returns a request to ship one of each SKU for orderID.
func shipReq(orderID string, skus ...string) fulfillment.ShipmentRequest {
	if len(skus) == 0 {
		skus = []string{"sku_mug"}
	}
	items := make([]order.Item, len(skus))
	for i, s := range skus {
		items[i] = order.Item{SKU: s, Quantity: 1, UnitPrice: 1500}
	}
	return fulfillment.ShipmentRequest{IdempotencyKey: orderID + "/fulfill", OrderID: orderID,
		Reference: shipRef(orderID), Items: items}
}

// shipRef is the reference shipReq sets for orderID.
func shipRef(orderID string) fulfillment.Reference {
	return fulfillment.Reference{OrderID: orderID, Key: orderID + "/fulfill"}
}

// paysimTimeoutDelay is how long paysim holds a request under its timeout
// fault in the timeout tests: longer than any timeout they try.
const paysimTimeoutDelay = 30 * time.Second
