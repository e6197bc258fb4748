package fulfillment_test

import (
	"context"
	"fmt"

	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/order"
)

// A repeated shipment with the same idempotency key returns the original
// shipment and does not ship again.
func ExampleSimulator() {
	ctx := context.Background()
	wh := fulfillment.NewSimulator()
	req := fulfillment.ShipmentRequest{
		IdempotencyKey: "ord_123/fulfill",
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
