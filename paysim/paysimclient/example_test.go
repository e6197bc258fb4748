package paysimclient_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"

	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
)

// A charge whose reply is lost after the provider captured it has an
// unknown outcome; Lookup tells what happened, and repeating the charge with
// the same key returns the same capture.
func ExampleGateway() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "paysim-example")
	defer os.RemoveAll(dir)
	ledger, _ := paysim.OpenLedger(ctx, dir)
	defer ledger.Close()
	sim, _ := paysim.NewServer(ledger, paysim.Config{})
	provider := httptest.NewServer(sim)
	defer provider.Close()

	gw, _ := paysimclient.NewGateway(provider.URL)
	req := payment.ChargeRequest{
		IdempotencyKey: "ord_123/pay", OrderID: "ord_123", Amount: 4200, Currency: "USD",
		PaymentMethod: paysim.MethodFaultDropAfterCommit, // the provider drops its first reply
	}
	_, err := gw.Charge(ctx, req)
	fmt.Println("unknown outcome:", payment.IsUnknownOutcome(err), "retryable:", payment.IsRetryable(err))

	c, err := gw.Lookup(ctx, req.IdempotencyKey)
	fmt.Println("lookup:", c.Status, c.Amount, c.Currency, err)

	again, _ := gw.Charge(ctx, req)
	fmt.Println("same charge:", again.ID == c.ID)
	// Output:
	// unknown outcome: true retryable: false
	// lookup: captured 4200 USD <nil>
	// same charge: true
}
