package payment

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/orderly/orderly/internal/provhttp"
)

// DefaultHTTPTimeout is the per-call timeout of an HTTPGateway without
// WithTimeout.
const DefaultHTTPTimeout = 5 * time.Second

// HTTPGateway is a Gateway that talks to a Stripe-like provider over HTTP,
// such as paysim: POST /v1/charges and /v1/refunds with an Idempotency-Key
// header, GET /v1/charges?idempotency_key=K for Lookup.
//
// Its errors follow these rules, in order:
//
//   - 2xx is success.
//   - 402 is a decline: a *DeclineError with the answer's error.code. Final.
//   - 404 from a refund or a lookup wraps ErrChargeNotFound; 422 with error
//     type "idempotency_error" is a final *ProviderError wrapping
//     ErrIdempotencyKeyReused.
//   - 408 and 429 are retryable *ProviderErrors (the provider did not take
//     the request); every other 4xx is a final *ProviderError.
//   - 5xx is a retryable *ProviderError: a well-behaved provider commits
//     nothing when it answers 5xx.
//   - A failure before the request was fully written (a dial error,
//     connection refused, the caller's context ending first) is a retryable
//     *ProviderError wrapping the cause, so nothing was sent.
//   - A failure after the request was written (a timeout, a reset or closed
//     connection while awaiting the answer, a 2xx whose body cannot be read)
//     leaves the outcome unknown: a non-retryable *ProviderError wrapping
//     ErrUnknownOutcome (and the context error, if that was the cause), for
//     which IsRetryable is false and IsUnknownOutcome true. Call Lookup, or
//     repeat the call with the same idempotency key.
//   - Lookup changes nothing, so for Lookup that last case is retryable too.
//
// The gateway never lets net/http resend a request by itself, so every
// failure is reported to the caller. An HTTPGateway is safe for concurrent
// use.
type HTTPGateway struct {
	c *provhttp.Client
	// Set by the options, then handed to c.
	client  *http.Client
	timeout time.Duration
}

var _ Gateway = (*HTTPGateway)(nil)

// HTTPOption configures an HTTPGateway.
type HTTPOption func(*HTTPGateway)

// WithTimeout sets the timeout of each call, from sending the request to
// reading the whole answer. Non-positive values are ignored; the default is
// DefaultHTTPTimeout.
func WithTimeout(d time.Duration) HTTPOption {
	return func(g *HTTPGateway) {
		if d > 0 {
			g.timeout = d
		}
	}
}

// WithHTTPClient sets the client that sends the requests. The default is a
// client on http.DefaultTransport that does not follow redirects.
func WithHTTPClient(c *http.Client) HTTPOption {
	return func(g *HTTPGateway) {
		if c != nil {
			g.client = c
		}
	}
}

// NewHTTPGateway returns a Gateway for the provider at baseURL, an http or
// https URL such as "http://127.0.0.1:8090".
func NewHTTPGateway(baseURL string, opts ...HTTPOption) (*HTTPGateway, error) {
	g := &HTTPGateway{timeout: DefaultHTTPTimeout}
	for _, o := range opts {
		o(g)
	}
	c, err := provhttp.New(baseURL, g.timeout, g.client)
	if err != nil {
		return nil, fmt.Errorf("payment: provider %w", err) // "payment: provider URL ... must be"
	}
	g.c = c
	return g, nil
}

// Charge implements Gateway with POST /v1/charges.
func (g *HTTPGateway) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	if err := validateCharge(req); err != nil {
		return Charge{}, err
	}
	ans, err := g.call(ctx, http.MethodPost, "/v1/charges", req.IdempotencyKey, wireChargeRequest{
		OrderID: req.OrderID, Amount: req.Amount, Currency: req.Currency, PaymentMethod: req.PaymentMethod,
	})
	if err != nil {
		return Charge{}, err
	}
	var c wireCharge
	if err := ans.result(&c, true, nil); err != nil {
		return Charge{}, err
	}
	return c.charge(), nil
}

// Refund implements Gateway with POST /v1/refunds.
func (g *HTTPGateway) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	if req.IdempotencyKey == "" {
		return Refund{}, &ProviderError{Err: errors.New("idempotency key is required")}
	}
	ans, err := g.call(ctx, http.MethodPost, "/v1/refunds", req.IdempotencyKey, wireRefundRequest{
		ChargeKey: req.ChargeKey, Amount: req.Amount,
	})
	if err != nil {
		return Refund{}, err
	}
	var r wireRefund
	if err := ans.result(&r, true, ErrChargeNotFound); err != nil {
		return Refund{}, err
	}
	return Refund{ID: r.ID, ChargeID: r.ChargeID, Amount: r.Amount, CreatedAt: r.CreatedAt.UTC()}, nil
}

// Lookup implements Gateway with GET /v1/charges?idempotency_key=K.
func (g *HTTPGateway) Lookup(ctx context.Context, idempotencyKey string) (Charge, error) {
	if idempotencyKey == "" {
		return Charge{}, &ProviderError{Err: errors.New("idempotency key is required")}
	}
	ans, err := g.call(ctx, http.MethodGet, "/v1/charges?idempotency_key="+url.QueryEscape(idempotencyKey), "", nil)
	if err != nil {
		return Charge{}, err
	}
	var c wireCharge
	if err := ans.result(&c, false, ErrChargeNotFound); err != nil {
		return Charge{}, err
	}
	return c.charge(), nil
}

// answer is the provider's reply to one call.
type answer provhttp.Answer

// call sends one request and returns the answer, or the classified error of
// a call that got none (see HTTPGateway).
func (g *HTTPGateway) call(ctx context.Context, method, path, key string, body any) (answer, error) {
	a, err := g.c.Do(ctx, method, path, key, body)
	var se *provhttp.SendError
	switch {
	case err == nil:
		return answer(a), nil
	case !errors.As(err, &se):
		return answer{}, &ProviderError{Err: err}
	case se.Sent && method != http.MethodGet:
		return answer{}, unknownOutcome(se.Err)
	default:
		return answer{}, &ProviderError{Retryable: true, Err: se.Err}
	}
}

// result classifies a, decoding a 2xx into v. effect says whether the call
// changes something (so that an unreadable success leaves the outcome
// unknown); notFound, if not nil, is wrapped by the error of a 404.
func (a answer) result(v any, effect bool, notFound error) error {
	var e wireError
	_ = json.Unmarshal(a.Body, &e)
	detail := fmt.Sprintf("provider answered %d", a.Status)
	if e.Error.Type != "" {
		detail += " " + e.Error.Type
	}
	if e.Error.Message != "" {
		detail += ": " + e.Error.Message
	}
	switch s := a.Status; {
	case s >= 200 && s < 300:
		err := a.ReadErr
		if err == nil {
			err = json.Unmarshal(a.Body, v)
		}
		if err == nil {
			return nil
		}
		err = fmt.Errorf("reading the %d answer: %w", s, err)
		if effect {
			return unknownOutcome(err)
		}
		return &ProviderError{Retryable: true, Err: err}
	case s == http.StatusPaymentRequired:
		code := e.Error.Code
		if code == "" {
			code = DeclineCardDeclined
		}
		return &DeclineError{Code: code, Message: e.Error.Message}
	case s == http.StatusNotFound && notFound != nil:
		return fmt.Errorf("%w: %s", notFound, detail)
	case s == http.StatusUnprocessableEntity && e.Error.Type == "idempotency_error":
		return &ProviderError{Err: fmt.Errorf("%s: %w", detail, ErrIdempotencyKeyReused)}
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests:
		return &ProviderError{Retryable: true, Err: errors.New(detail)}
	case s >= 400 && s < 500:
		return &ProviderError{Err: errors.New(detail)}
	case s >= 500 && s < 600:
		return &ProviderError{Retryable: true, Err: errors.New(detail)}
	case effect:
		return unknownOutcome(errors.New(detail))
	default:
		return &ProviderError{Retryable: true, Err: errors.New(detail)}
	}
}

// Wire forms of the provider's API.
type (
	wireChargeRequest struct {
		OrderID       string `json:"order_id"`
		Amount        int64  `json:"amount"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"payment_method"`
	}
	wireCharge struct {
		ID             string    `json:"id"`
		IdempotencyKey string    `json:"idempotency_key"`
		OrderID        string    `json:"order_id"`
		Amount         int64     `json:"amount"`
		Currency       string    `json:"currency"`
		Status         string    `json:"status"`
		CreatedAt      time.Time `json:"created_at"`
	}
	wireRefundRequest struct {
		ChargeKey string `json:"charge_key"`
		Amount    int64  `json:"amount"`
	}
	wireRefund struct {
		ID        string    `json:"id"`
		ChargeID  string    `json:"charge_id"`
		Amount    int64     `json:"amount"`
		CreatedAt time.Time `json:"created_at"`
	}
	wireError struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
)

func (c wireCharge) charge() Charge {
	return Charge{
		ID: c.ID, IdempotencyKey: c.IdempotencyKey, OrderID: c.OrderID, Amount: c.Amount,
		Currency: c.Currency, Status: ChargeStatus(c.Status), CreatedAt: c.CreatedAt.UTC(),
	}
}
