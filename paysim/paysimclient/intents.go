package paysimclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/orderly/orderly/internal/provhttp"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/paysimwire"
)

// Intents is a payment.Gateway over paysim's payment intents API (the seam
// of issue 15): Prepare is POST /v1/payment_intents, Confirm POST
// /v1/payment_intents/{id}/confirm, Retrieve GET /v1/payment_intents/{id},
// Find GET /v1/payment_intents?reference=&order_id= (paysim's index never
// lags), Refund POST /v1/refunds with payment_intent, FindRefund GET
// /v1/refunds?payment_intent=, Cancel POST /v1/payment_intents/{id}/cancel.
// A Reference travels as order_id and reference (its Key). Errors are
// classed as Gateway's are: a 402 is a *payment.DeclineError, a 404 wraps
// payment.ErrNotFound, a 422 idempotency_error wraps
// payment.ErrIdempotencyKeyReused, a lost or timed-out answer to a POST
// wraps payment.ErrUnknownOutcome, other 4xx are final and 5xx retryable.
// It is safe for concurrent use.
type Intents struct {
	c *provhttp.Client
}

var _ payment.Gateway = (*Intents)(nil)

// NewIntents returns an Intents for the paysim at baseURL, such as
// "http://127.0.0.1:8090", with the same options as NewGateway.
func NewIntents(baseURL string, opts ...Option) (*Intents, error) {
	c, err := dial(baseURL, opts)
	if err != nil {
		return nil, err
	}
	return &Intents{c: c}, nil
}

func intent(in paysimwire.Intent) payment.Intent {
	out := payment.Intent{ID: in.ID, Reference: payment.Reference{OrderID: in.OrderID, Key: in.Reference},
		Amount: in.Amount, Currency: strings.ToUpper(in.Currency), Status: payment.IntentStatus(in.Status),
		AmountReceived: in.AmountReceived, AmountRefunded: in.AmountRefunded, CreatedAt: in.CreatedAt.UTC()}
	if in.LastDecline != nil {
		out.LastDecline = &payment.DeclineError{Code: in.LastDecline.Code, Message: in.LastDecline.Message}
	}
	return out
}

func refund(r paysimwire.Refund) payment.Refund {
	return payment.Refund{ID: r.ID, IntentID: r.PaymentIntent, Reference: payment.Reference{OrderID: r.OrderID, Key: r.Reference},
		Amount: r.Amount, Status: payment.RefundSucceeded, CreatedAt: r.CreatedAt.UTC()}
}

// Prepare implements payment.Gateway.
func (g *Intents) Prepare(ctx context.Context, req payment.PrepareRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	if req.Reference.OrderID == "" {
		return payment.Intent{}, &payment.ProviderError{Err: errors.New("reference order id is required")}
	}
	var in paysimwire.Intent
	err := g.c.Call(ctx, http.MethodPost, "/v1/payment_intents", req.IdempotencyKey, paysimwire.IntentParams{
		OrderID: req.Reference.OrderID, Reference: req.Reference.Key, Amount: req.Amount, Currency: req.Currency,
	}, &in)
	if err != nil {
		return payment.Intent{}, payments.translate(err, payment.ErrNotFound)
	}
	return intent(in), nil
}

// Confirm implements payment.Gateway.
func (g *Intents) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	var in paysimwire.Intent
	err := g.c.Call(ctx, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(req.IntentID)+"/confirm", req.IdempotencyKey,
		paysimwire.ConfirmParams{PaymentMethod: req.PaymentMethod}, &in)
	if err != nil {
		return payment.Intent{}, payments.translate(err, payment.ErrNotFound)
	}
	return intent(in), nil
}

// Retrieve implements payment.Gateway.
func (g *Intents) Retrieve(ctx context.Context, intentID string) (payment.Intent, error) {
	if intentID == "" {
		return payment.Intent{}, &payment.ProviderError{Err: errors.New("intent id is required")}
	}
	var in paysimwire.Intent
	if err := g.c.Call(ctx, http.MethodGet, "/v1/payment_intents/"+url.PathEscape(intentID), "", nil, &in); err != nil {
		return payment.Intent{}, payments.translate(err, payment.ErrNotFound)
	}
	return intent(in), nil
}

// Find implements payment.Gateway; paysim's index never lags.
func (g *Intents) Find(ctx context.Context, ref payment.Reference) (payment.Intent, error) {
	if ref.Key == "" || ref.OrderID == "" {
		return payment.Intent{}, &payment.ProviderError{Err: errors.New("a reference needs an order id and a key")}
	}
	q := url.Values{"reference": {ref.Key}, "order_id": {ref.OrderID}}
	var in paysimwire.Intent
	if err := g.c.Call(ctx, http.MethodGet, "/v1/payment_intents?"+q.Encode(), "", nil, &in); err != nil {
		return payment.Intent{}, payments.translate(err, payment.ErrNotFound)
	}
	return intent(in), nil
}

// Refund implements payment.Gateway.
func (g *Intents) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	if err := req.Validate(); err != nil {
		return payment.Refund{}, err
	}
	var r paysimwire.Refund
	err := g.c.Call(ctx, http.MethodPost, "/v1/refunds", req.IdempotencyKey, paysimwire.RefundParams{
		PaymentIntent: req.IntentID, Amount: req.Amount, Reference: req.Reference.Key,
	}, &r)
	if err != nil {
		return payment.Refund{}, payments.translate(err, payment.ErrNotFound)
	}
	return refund(r), nil
}

// FindRefund implements payment.Gateway: the intent's refunds, matched on
// the reference's key (and order id, when given).
func (g *Intents) FindRefund(ctx context.Context, intentID string, ref payment.Reference) (payment.Refund, error) {
	if intentID == "" || ref.Key == "" {
		return payment.Refund{}, &payment.ProviderError{Err: errors.New("an intent id and a reference key are required")}
	}
	var list paysimwire.RefundList
	if err := g.c.Call(ctx, http.MethodGet, "/v1/refunds?payment_intent="+url.QueryEscape(intentID), "", nil, &list); err != nil {
		return payment.Refund{}, payments.translate(err, payment.ErrNotFound)
	}
	for _, r := range list.Data {
		if r.Reference == ref.Key && (ref.OrderID == "" || r.OrderID == ref.OrderID) {
			return refund(r), nil
		}
	}
	return payment.Refund{}, fmt.Errorf("%w: intent %s has no refund with reference %s", payment.ErrNotFound, intentID, ref)
}

// Cancel implements payment.Gateway.
func (g *Intents) Cancel(ctx context.Context, req payment.CancelRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	var in paysimwire.Intent
	err := g.c.Call(ctx, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(req.IntentID)+"/cancel", req.IdempotencyKey,
		struct{}{}, &in)
	if err != nil {
		return payment.Intent{}, payments.translate(err, payment.ErrNotFound)
	}
	return intent(in), nil
}
