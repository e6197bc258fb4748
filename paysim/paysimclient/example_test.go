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

// A confirm whose reply is lost after the provider captured it has an
// unknown outcome; reading the intent tells what happened, and repeating
// the confirm with the same key replays the capture.
func ExampleIntents() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "paysim-example")
	defer os.RemoveAll(dir)
	ledger, _ := paysim.OpenLedger(ctx, dir)
	defer ledger.Close()
	sim, _ := paysim.NewServer(ledger, paysim.Config{})
	provider := httptest.NewServer(sim)
	defer provider.Close()

	gw, _ := paysimclient.NewIntents(provider.URL)
	ref := payment.Reference{OrderID: "ord_123", Key: "ord_123/pay/1"}
	in, _ := gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_123/pay/1/prepare", Reference: ref,
		Amount: 4200, Currency: "USD"})
	req := payment.ConfirmRequest{IdempotencyKey: "ord_123/pay/1/confirm", IntentID: in.ID, Reference: ref,
		PaymentMethod: paysim.MethodFaultDropAfterCommit} // the provider drops its first reply
	_, err := gw.Confirm(ctx, req)
	fmt.Println("unknown outcome:", payment.IsUnknownOutcome(err), "retryable:", payment.IsRetryable(err))

	got, err := gw.Retrieve(ctx, in.ID)
	fmt.Println("retrieve:", got.Status, got.AmountReceived, got.Currency, err)

	again, _ := gw.Confirm(ctx, req)
	fmt.Println("same intent:", again.ID == in.ID, again.Status)
	// Output:
	// unknown outcome: true retryable: false
	// retrieve: succeeded 4200 USD <nil>
	// same intent: true succeeded
}
