package payment_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/orderly/orderly/payment"
)

// A repeated charge with the same idempotency key returns the original
// charge and does not capture again.
func ExampleSimulator() {
	ctx := context.Background()
	gw := payment.NewSimulator()
	req := payment.ChargeRequest{
		IdempotencyKey: "ord_123/pay",
		OrderID:        "ord_123",
		Amount:         4200, // $42.00
		Currency:       "USD",
		PaymentMethod:  payment.TestMethodApproved,
	}
	first, _ := gw.Charge(ctx, req)
	again, _ := gw.Charge(ctx, req) // e.g. a retry after a timeout
	fmt.Println(first.Status, first.Amount, first.Currency)
	fmt.Println("same charge:", again.ID == first.ID)
	fmt.Println("captures:", gw.Captures("ord_123"), "calls:", gw.Calls())

	_, err := gw.Charge(ctx, payment.ChargeRequest{
		IdempotencyKey: "ord_456/pay", OrderID: "ord_456", Amount: 100, Currency: "USD",
		PaymentMethod: payment.TestMethodDeclined,
	})
	fmt.Println("declined:", errors.Is(err, payment.ErrDeclined), "retryable:", payment.IsRetryable(err))
	// Output:
	// captured 4200 USD
	// same charge: true
	// captures: 1 calls: 2
	// declined: true retryable: false
}
