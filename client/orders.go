package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/orderly/orderly/order"
)

// PayInput is the body of a pay request. Amount (minor currency units) and
// Currency must equal the order's; PaymentMethod is a payment method id such
// as "pm_card_visa".
type PayInput struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
}

// ListParams filters and pages ListOrders. Zero values select everything
// with the server's default page size (20).
type ListParams struct {
	// State keeps orders in this state only.
	State order.State
	// CustomerID keeps this customer's orders only.
	CustomerID string
	// Limit is the page size, 1 to 100 (0: the server's default).
	Limit int
	// Cursor is the NextCursor of the previous page ("" for the first).
	Cursor string
}

// OrderList is one page of orders, newest first.
type OrderList struct {
	// Data holds the page's orders.
	Data []order.Order `json:"data"`
	// NextCursor fetches the next page; "" on the last page.
	NextCursor string `json:"next_cursor"`
}

// KeyState is the state of an idempotency key as KeyStatus reports it.
type KeyState string

// Idempotency key states.
const (
	// KeyInProgress: a request with the key is running.
	KeyInProgress KeyState = "in_progress"
	// KeyCompleted: the outcome is stored and a retry replays it.
	KeyCompleted KeyState = "completed"
	// KeyRetryableFailure: the request failed retryably; retry with the key.
	KeyRetryableFailure KeyState = "retryable_failure"
	// KeyUnknownOutcome: the server cannot tell whether the request took
	// effect; retry with the key to find out.
	KeyUnknownOutcome KeyState = "unknown_outcome"
	// KeyExpired: the key is past retention; a retry needs a new key.
	KeyExpired KeyState = "expired"
	// KeyNeedsAttention: the provider's answer stayed unknown past its key
	// retention; the server will not retry it, and support must settle it.
	KeyNeedsAttention KeyState = "needs_attention"
)

// KeyStatus is what the server knows about an idempotency key.
type KeyStatus struct {
	// Key is the idempotency key.
	Key string `json:"key"`
	// State is the key's state.
	State KeyState `json:"state"`
	// ExpiresAt is when the server forgets the key.
	ExpiresAt time.Time `json:"expires_at"`
	// ResourceID is the order the key's request concerned, if known.
	ResourceID string `json:"resource_id"`
	// StatusCode is the stored outcome's HTTP status, if completed.
	StatusCode int `json:"status_code"`
}

// CreateOrder creates an order (POST /v1/orders, 201). Retrying with the same
// key returns the same order with Replayed set.
func (c *Client) CreateOrder(ctx context.Context, in order.NewOrderInput, opts ...CallOption) (*Response[order.Order], error) {
	return post[order.Order](ctx, c, "/v1/orders", in, opts)
}

// GetOrder returns the order with the given id (GET /v1/orders/{id}).
// Another tenant's order
// is a 404 (IsNotFound).
func (c *Client) GetOrder(ctx context.Context, id string) (*Response[order.Order], error) {
	return get[order.Order](ctx, c, "/v1/orders/"+url.PathEscape(id), nil)
}

// ListOrders returns one page of orders, newest first (GET /v1/orders).
func (c *Client) ListOrders(ctx context.Context, p ListParams) (*Response[OrderList], error) {
	q := url.Values{}
	if p.State != "" {
		q.Set("state", string(p.State))
	}
	if p.CustomerID != "" {
		q.Set("customer_id", p.CustomerID)
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	return get[OrderList](ctx, c, "/v1/orders", q)
}

// PayOrder charges the order and moves it to PAID (POST
// /v1/orders/{id}/pay). Paying a paid order is a no-op 200. A payment that
// waits on the customer or the bank is a 202 Accepted (Response.StatusCode
// 202) whose Value.Payment says what the client must do next (README
// "Asynchronous payments"); the order is still RCVD and a retry under the
// same key (Response.IdempotencyKey) settles it. Errors include 402
// (IsDeclined, final), 409 (IsInvalidTransition) and 422 mismatch.
func (c *Client) PayOrder(ctx context.Context, id string, in PayInput, opts ...CallOption) (*Response[PayResult], error) {
	return post[PayResult](ctx, c, "/v1/orders/"+url.PathEscape(id)+"/pay", in, opts)
}

// PayResult is the body of a pay: the order, and on a 202 Accepted its
// pending payment (OpenAPI PendingOrder). Payment is nil when the pay
// settled (200: the order is PAID).
type PayResult struct {
	order.Order
	// Payment is the pending payment of a 202, nil otherwise.
	Payment *PendingPayment `json:"payment,omitempty"`
}

// Pending reports whether the pay is waiting on the customer or the bank
// (a 202 with a pending payment): the order is still RCVD.
func (r PayResult) Pending() bool { return r.Payment != nil }

// PendingPayment is a payment that has not settled, in Stripe's terms
// (docs.stripe.com/api/payment_intents/object).
type PendingPayment struct {
	// Status is PaymentRequiresAction (the customer must complete
	// NextAction, such as 3-D Secure) or PaymentProcessing (a bank debit,
	// settled by the provider's webhook, possibly days later).
	Status PaymentStatus `json:"status"`
	// IntentID is the provider's payment intent id (pi_...).
	IntentID string `json:"intent_id"`
	// ClientSecret is what a browser passes to the provider's SDK (Stripe.js
	// handleNextAction) to complete NextAction; "" for processing.
	ClientSecret string `json:"client_secret,omitempty"`
	// NextAction is what the customer must do, nil when nothing (processing).
	NextAction *NextAction `json:"next_action"`
}

// PaymentStatus is a pending payment's status.
type PaymentStatus string

// The pending payment statuses of a 202 pay.
const (
	PaymentRequiresAction PaymentStatus = "requires_action"
	PaymentProcessing     PaymentStatus = "processing"
)

// NextAction is the customer's next step (Stripe's next_action): Type
// "redirect_to_url" with RedirectToURL, or "use_stripe_sdk" handled by
// Stripe.js with the client secret.
type NextAction struct {
	Type          string         `json:"type"`
	RedirectToURL *RedirectToURL `json:"redirect_to_url,omitempty"`
}

// RedirectToURL is where a redirect_to_url next action sends the customer,
// and where the provider returns them.
type RedirectToURL struct {
	URL       string `json:"url"`
	ReturnURL string `json:"return_url,omitempty"`
}

// FulfillOrder ships a paid order and moves it to FULFILLED (POST
// /v1/orders/{id}/fulfill). Errors include 409 (IsInvalidTransition, such as
// an unpaid order) and 422 fulfillment_rejected.
func (c *Client) FulfillOrder(ctx context.Context, id string, opts ...CallOption) (*Response[order.Order], error) {
	return post[order.Order](ctx, c, "/v1/orders/"+url.PathEscape(id)+"/fulfill", nil, opts)
}

// CancelOrder cancels an order that has not been fulfilled (POST
// /v1/orders/{id}/cancel): a PAID order's payment is refunded in full, a
// pending payment's provider object is cancelled first. Cancelling a
// cancelled order is a no-op 200; a FULFILLED order is a 409
// (IsInvalidTransition), and an order whose bank debit is still processing
// a 409 order_busy.
func (c *Client) CancelOrder(ctx context.Context, id string, opts ...CallOption) (*Response[order.Order], error) {
	return post[order.Order](ctx, c, "/v1/orders/"+url.PathEscape(id)+"/cancel", nil, opts)
}

// KeyStatus reports what the server knows about an idempotency key of this
// tenant (GET /v1/idempotency-keys/{key}), such as whether an operation
// whose reply was lost completed.
func (c *Client) KeyStatus(ctx context.Context, key string) (*Response[KeyStatus], error) {
	return get[KeyStatus](ctx, c, "/v1/idempotency-keys/"+url.PathEscape(key), nil)
}

// get sends a GET of path with query q: no body, no Idempotency-Key.
func get[T any](ctx context.Context, c *Client, path string, q url.Values) (*Response[T], error) {
	return send[T](ctx, c, request{method: http.MethodGet, path: path, url: c.url(path, q)})
}

// post sends a side-effecting POST of path with body (nil for none),
// encoded once, and one idempotency key for every attempt.
func post[T any](ctx context.Context, c *Client, path string, body any, opts []CallOption) (*Response[T], error) {
	var cc callConfig
	for _, opt := range opts {
		opt(&cc)
	}
	key := cc.key
	if key == "" {
		key = c.newKey()
	}
	rq := request{method: http.MethodPost, path: path, url: c.url(path, nil), key: key}
	if !validKey(key) {
		return &Response[T]{IdempotencyKey: key}, fmt.Errorf("orderly: %s %s: %w", rq.method, path, errInvalidKey)
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return &Response[T]{IdempotencyKey: key}, fmt.Errorf("orderly: %s %s: encoding the body: %w", rq.method, path, err)
		}
		rq.body = b
	}
	return send[T](ctx, c, rq)
}

// url joins the base URL, path (already escaped) and query.
func (c *Client) url(path string, q url.Values) string {
	u := c.base.String() + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}
