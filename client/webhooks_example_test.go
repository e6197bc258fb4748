package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/event"
)

// ExampleReadWebhook is a webhook receiver: it verifies the signature,
// deduplicates on the event id (delivery is at least once) and answers 2xx
// only once the event is handled, so a failure is retried.
func ExampleReadWebhook() {
	const secret = "whsec_example"
	seen := map[string]bool{}
	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := client.ReadWebhook(r, secret)
		if err != nil {
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		if !seen[ev.ID] {
			seen[ev.ID] = true
			fmt.Println("handled", ev.Type, ev.OrderID, "sequence", ev.Sequence)
		}
		w.WriteHeader(http.StatusNoContent)
	})

	body := `{"id":"evt_0194f1c2a3b47c8d9e0f112233445566","type":"order.paid","tenant":"acme",` +
		`"order_id":"ord_0194f1c2a3b47c8d9e0f112233445566","order_version":2,"sequence":2,` +
		`"created_at":"2025-03-14T15:09:26Z","order":{"id":"ord_0194f1c2a3b47c8d9e0f112233445566","state":"PAID"}}`
	send := func(signature string) int {
		req := httptest.NewRequest(http.MethodPost, "/webhooks/orderly", strings.NewReader(body))
		req.Header.Set(event.SignatureHeader, signature)
		rec := httptest.NewRecorder()
		receiver.ServeHTTP(rec, req)
		return rec.Code
	}
	good := event.Sign(secret, time.Now(), []byte(body))
	fmt.Println(send(good))
	fmt.Println(send(good)) // a redelivery: acknowledged, not handled twice
	fmt.Println(send(event.Sign("whsec_wrong", time.Now(), []byte(body))))
	// Output:
	// handled order.paid ord_0194f1c2a3b47c8d9e0f112233445566 sequence 2
	// 204
	// 204
	// 400
}
