package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
)

// Example creates an order against a server whose first answer is a 503
// with Retry-After: the client waits, retries with the same Idempotency-Key
// and body, and reports the attempts. A decline is then a typed error.
func Example() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/orders/ord_1/pay" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusPaymentRequired)
			fmt.Fprint(w, `{"type":"https://orderly.dev/problems/payment_declined","title":"Payment declined",`+
				`"status":402,"detail":"the payment was declined: card_declined"}`)
			return
		}
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"type":"https://orderly.dev/problems/unavailable","title":"Service unavailable","status":503}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"ord_1","customer_id":"cus_42","currency":"USD",`+
			`"items":[{"sku":"book","quantity":2,"unit_price":1250}],"amount":2500,"state":"RCVD","version":1}`)
	}))
	defer srv.Close()

	c, err := client.New(srv.URL, "sk_dev_orderly_local")
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := c.CreateOrder(ctx, order.NewOrderInput{
		CustomerID: "cus_42", Currency: "USD",
		Items: []order.Item{{SKU: "book", Quantity: 2, UnitPrice: 1250}},
	}, client.WithIdempotencyKey("create-001"))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Value.ID, res.Value.State, res.Value.Amount, "after", res.Attempts, "attempts with key", res.IdempotencyKey)

	_, err = c.PayOrder(ctx, res.Value.ID, client.PayInput{Amount: 2500, Currency: "USD", PaymentMethod: "pm_card_declined"})
	var apiErr *client.Error
	if errors.As(err, &apiErr) && client.IsDeclined(err) {
		fmt.Println(apiErr.StatusCode, apiErr.Code+":", apiErr.Detail)
	}
	// Output:
	// ord_1 RCVD 2500 after 2 attempts with key create-001
	// 402 payment_declined: the payment was declined: card_declined
}
