package paysimclient

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/orderly/orderly/internal/provhttp"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim/paysimwire"
)

// Gateway is a payment.ChargeGateway over paysim's HTTP API: POST /v1/charges and
// /v1/refunds with an Idempotency-Key header, GET
// /v1/charges?idempotency_key=K for Lookup.
//
// Its errors follow these rules, in order:
//
//   - 2xx is success.
//   - 402 is a decline: a *payment.DeclineError with the answer's
//     error.code (payment.DeclineCardDeclined if it has none). Final.
//   - 404 from a refund or a lookup wraps payment.ErrChargeNotFound; 422
//     with error type "idempotency_error" is a final *payment.ProviderError
//     wrapping payment.ErrIdempotencyKeyReused.
//   - 408 and 429 are retryable *payment.ProviderErrors (paysim did not
//     take the request); every other 4xx is a final *payment.ProviderError.
//   - 5xx is a retryable *payment.ProviderError: paysim commits nothing
//     when it answers 5xx.
//   - A failure before the request was fully written (a dial error,
//     connection refused, the caller's context ending first) is a retryable
//     *payment.ProviderError wrapping the cause, so nothing was sent.
//   - A failure after the request was written (a timeout, a reset or closed
//     connection while awaiting the answer, a 2xx whose body cannot be read)
//     leaves the outcome unknown: a non-retryable *payment.ProviderError
//     wrapping payment.ErrUnknownOutcome (and the context error, if that was
//     the cause), for which payment.IsRetryable is false and
//     payment.IsUnknownOutcome true. Call Lookup, or repeat the call with
//     the same idempotency key.
//   - Lookup changes nothing, so for Lookup that last case is retryable too.
//
// The Gateway never lets net/http resend a request by itself, so every
// failure is reported to the caller. A Gateway is safe for concurrent use.
type Gateway struct {
	c *provhttp.Client
}

var _ payment.ChargeGateway = (*Gateway)(nil)

// NewGateway returns a Gateway for paysim at baseURL, an http or https URL
// such as "http://127.0.0.1:8090".
func NewGateway(baseURL string, opts ...Option) (*Gateway, error) {
	c, err := dial(baseURL, opts)
	if err != nil {
		return nil, err
	}
	return &Gateway{c: c}, nil
}

// Charge implements payment.ChargeGateway with POST /v1/charges. A request that
// req.Validate refuses fails with its final *payment.ProviderError without
// a call.
func (g *Gateway) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	if err := req.Validate(); err != nil {
		return payment.Charge{}, err
	}
	var c paysimwire.Charge
	err := g.c.Call(ctx, http.MethodPost, "/v1/charges", req.IdempotencyKey, paysimwire.ChargeParams{
		OrderID: req.OrderID, Amount: req.Amount, Currency: req.Currency, PaymentMethod: req.PaymentMethod,
	}, &c)
	if err != nil {
		return payment.Charge{}, payments.translate(err, nil)
	}
	return charge(c), nil
}

// Refund implements payment.ChargeGateway with POST /v1/refunds. A request that
// req.Validate refuses fails with its final *payment.ProviderError without
// a call.
func (g *Gateway) Refund(ctx context.Context, req payment.ChargeRefundRequest) (payment.ChargeRefund, error) {
	if err := req.Validate(); err != nil {
		return payment.ChargeRefund{}, err
	}
	var r paysimwire.Refund
	err := g.c.Call(ctx, http.MethodPost, "/v1/refunds", req.IdempotencyKey, paysimwire.RefundParams{
		ChargeKey: req.ChargeKey, Amount: req.Amount,
	}, &r)
	if err != nil {
		return payment.ChargeRefund{}, payments.translate(err, payment.ErrChargeNotFound)
	}
	return payment.ChargeRefund{ID: r.ID, ChargeID: r.ChargeID, Amount: r.Amount, CreatedAt: r.CreatedAt.UTC()}, nil
}

// Lookup implements payment.ChargeGateway with GET
// /v1/charges?idempotency_key=K. An empty key fails with a final
// *payment.ProviderError without a call.
func (g *Gateway) Lookup(ctx context.Context, idempotencyKey string) (payment.Charge, error) {
	if idempotencyKey == "" {
		return payment.Charge{}, &payment.ProviderError{Err: errors.New("idempotency key is required")}
	}
	var c paysimwire.Charge
	err := g.c.Call(ctx, http.MethodGet, "/v1/charges?idempotency_key="+url.QueryEscape(idempotencyKey), "", nil, &c)
	if err != nil {
		return payment.Charge{}, payments.translate(err, payment.ErrChargeNotFound)
	}
	return charge(c), nil
}

// payments is package payment's error vocabulary.
var payments = vocabulary{
	fail: func(retryable bool, cause error) error {
		return &payment.ProviderError{Retryable: retryable, Err: cause}
	},
	unknownOutcome: payment.ErrUnknownOutcome,
	keyReused:      payment.ErrIdempotencyKeyReused,
	refusal: func(status int, b errorBody) error {
		if status != http.StatusPaymentRequired {
			return nil
		}
		code := b.Error.Code
		if code == "" {
			code = payment.DeclineCardDeclined
		}
		return &payment.DeclineError{Code: code, Message: b.Error.Message}
	},
}

// charge returns paysim's charge as a payment.Charge.
func charge(c paysimwire.Charge) payment.Charge {
	return payment.Charge{
		ID: c.ID, IdempotencyKey: c.IdempotencyKey, OrderID: c.OrderID, Amount: c.Amount,
		Currency: c.Currency, Status: payment.ChargeStatus(c.Status), CreatedAt: c.CreatedAt.UTC(),
	}
}
