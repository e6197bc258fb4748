package client

import (
	"context"
	"net/url"
	"time"
)

// RefundInput is the body of a partial refund (issue 16): Amount in minor
// currency units (> 0), Currency the order's, Reason optional free text (at
// most 500 bytes).
type RefundInput struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Reason   string `json:"reason,omitempty"`
}

// Refund is the answer to a partial refund: the refund (ID, its provider
// key; Amount in minor units of Currency; Status "succeeded"; ProviderRef,
// the provider's refund id) and the order's totals after it, in minor
// units: AmountCaptured and AmountRefunded.
type Refund struct {
	ID             string    `json:"id"`
	OrderID        string    `json:"order_id"`
	Amount         int64     `json:"amount"`
	Currency       string    `json:"currency"`
	Reason         string    `json:"reason"`
	Status         string    `json:"status"`
	ProviderRef    string    `json:"provider_ref"`
	CreatedAt      time.Time `json:"created_at"`
	AmountCaptured int64     `json:"amount_captured"`
	AmountRefunded int64     `json:"amount_refunded"`
}

// RefundOrder refunds part of a PAID or FULFILLED order's charge (POST
// /v1/orders/{id}/refunds); the order keeps its state. Retries reuse one
// Idempotency-Key (WithIdempotencyKey sets it), so a refund happens once.
// Errors include 409 refund_exceeds_captured (the order's refunds would
// exceed what was captured), 409 invalid_transition (the order is neither
// PAID nor FULFILLED), 422 mismatch (another currency) and 422
// idempotency_key_reused.
func (c *Client) RefundOrder(ctx context.Context, id string, in RefundInput, opts ...CallOption) (*Response[Refund], error) {
	return post[Refund](ctx, c, "/v1/orders/"+url.PathEscape(id)+"/refunds", in, opts)
}
