package simulator_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/paysim/testmode"
)

// A repeated confirm with the same idempotency key replays the original
// answer and does not move money again; a declined confirm leaves the
// intent open for another payment method under another key.
func ExampleIntentGateway() {
	ctx := context.Background()
	gw := simulator.NewIntentGateway()
	ref := payment.Reference{OrderID: "ord_123", Key: "ord_123/pay/1"}
	in, _ := gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_123/pay/1/prepare", Reference: ref,
		Amount: 4200, Currency: "USD"}) // $42.00, no money moved yet
	req := payment.ConfirmRequest{IdempotencyKey: "ord_123/pay/1/confirm", IntentID: in.ID,
		PaymentMethod: testmode.MethodApproved, Reference: ref}
	first, _ := gw.Confirm(ctx, req)
	again, _ := gw.Confirm(ctx, req) // e.g. a retry after a timeout
	fmt.Println(first.Status, first.AmountReceived, first.Currency)
	fmt.Println("same answer:", again.ID == first.ID && again.AmountReceived == first.AmountReceived)
	fmt.Println("captures:", gw.Captures("ord_123"), "calls:", gw.Calls())

	ref = payment.Reference{OrderID: "ord_456", Key: "ord_456/pay/1"}
	in, _ = gw.Prepare(ctx, payment.PrepareRequest{IdempotencyKey: "ord_456/pay/1/prepare", Reference: ref,
		Amount: 100, Currency: "USD"})
	_, err := gw.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: "ord_456/pay/1/confirm", IntentID: in.ID,
		PaymentMethod: testmode.MethodDeclined, Reference: ref})
	fmt.Println("declined:", errors.Is(err, payment.ErrDeclined), "retryable:", payment.IsRetryable(err))
	// Output:
	// succeeded 4200 USD
	// same answer: true
	// captures: 1 calls: 2
	// declined: true retryable: false
}

// A repeated shipment with the same idempotency key returns the original
// shipment and does not ship again.
func ExampleWarehouse() {
	ctx := context.Background()
	wh := simulator.NewWarehouse()
	req := fulfillment.ShipmentRequest{
		IdempotencyKey: "ord_123/fulfill",
		Reference:      fulfillment.Reference{OrderID: "ord_123", Key: "ord_123/fulfill"},
		OrderID:        "ord_123",
		Items:          []order.Item{{SKU: "sku_mug", Quantity: 2, UnitPrice: 1500}},
	}
	first, _ := wh.Ship(ctx, req)
	again, _ := wh.Ship(ctx, req) // e.g. a retry after a timeout
	fmt.Println("same shipment:", again.ID == first.ID)
	fmt.Println("shipments:", wh.Shipments("ord_123"), "calls:", wh.Calls())

	wh.FailNext(1)
	_, err := wh.Ship(ctx, req)
	fmt.Println("transient failure retryable:", fulfillment.IsRetryable(err))
	// Output:
	// same shipment: true
	// shipments: 1 calls: 2
	// transient failure retryable: true
}
