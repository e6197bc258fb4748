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

// A repeated charge with the same idempotency key returns the original
// charge and does not capture again.
func ExampleGateway() {
	ctx := context.Background()
	gw := simulator.NewGateway()
	req := payment.ChargeRequest{
		IdempotencyKey: "ord_123/pay",
		OrderID:        "ord_123",
		Amount:         4200, // $42.00
		Currency:       "USD",
		PaymentMethod:  testmode.MethodApproved,
	}
	first, _ := gw.Charge(ctx, req)
	again, _ := gw.Charge(ctx, req) // e.g. a retry after a timeout
	fmt.Println(first.Status, first.Amount, first.Currency)
	fmt.Println("same charge:", again.ID == first.ID)
	fmt.Println("captures:", gw.Captures("ord_123"), "calls:", gw.Calls())

	_, err := gw.Charge(ctx, payment.ChargeRequest{
		IdempotencyKey: "ord_456/pay", OrderID: "ord_456", Amount: 100, Currency: "USD",
		PaymentMethod: testmode.MethodDeclined,
	})
	fmt.Println("declined:", errors.Is(err, payment.ErrDeclined), "retryable:", payment.IsRetryable(err))
	// Output:
	// captured 4200 USD
	// same charge: true
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
