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
// lags), Capture POST /v1/payment_intents/{id}/capture, Refund POST
// /v1/refunds with payment_intent, FindRefund GET
// /v1/refunds?payment_intent=, Cancel POST /v1/payment_intents/{id}/cancel.
// A Reference travels as order_id and reference (its Key), and every call
// that changes something sends its idempotency key as Idempotency-Key.
//
// Its errors follow these rules, in order:
//
//   - 2xx is success.
//   - 402 is a decline: a *payment.DeclineError with the answer's
//     error.code (payment.DeclineCardDeclined if it has none). Final.
//   - 400 payment_intent_unexpected_state and 400 amount_too_large are
//     final *payment.ProviderErrors with that Code.
//   - 404 wraps payment.ErrNotFound (an unknown intent, or no intent or
//     refund under a reference); 422 with error type "idempotency_error"
//     is a final *payment.ProviderError wrapping
//     payment.ErrIdempotencyKeyReused.
//   - 408 and 429 are retryable *payment.ProviderErrors (paysim did not
//     take the request); every other 4xx is a final *payment.ProviderError.
//   - 5xx is a retryable *payment.ProviderError: paysim commits nothing
//     when it answers 5xx.
//   - A failure before the request was fully written (a dial error,
//     connection refused, the caller's context ending first) is a retryable
//     *payment.ProviderError wrapping the cause, so nothing was sent.
//   - A failure after a request that changes something was written (a
//     timeout, a reset or closed connection while awaiting the answer, a
//     2xx whose body cannot be read) leaves the outcome unknown: a
//     non-retryable *payment.ProviderError wrapping payment.ErrUnknownOutcome
//     (and the context error, if that was the cause), for which
//     payment.IsRetryable is false and payment.IsUnknownOutcome true.
//     Resolve it by Retrieve, Find or FindRefund, or repeat the call with
//     the same idempotency key. A read changes nothing, so for Retrieve,
//     Find and FindRefund that case is retryable.
//
// Intents never lets net/http resend a request by itself, so every failure
// is reported to the caller. It is safe for concurrent use.
type Intents struct {
	c *provhttp.Client
}

var _ payment.Gateway = (*Intents)(nil)

// NewIntents returns an Intents for the paysim at baseURL, such as
// "http://127.0.0.1:8090", with the same options as NewWarehouse.
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
		AmountReceived: in.AmountReceived, AmountRefunded: in.AmountRefunded, CreatedAt: in.CreatedAt.UTC(),
		CaptureMode: payment.CaptureAutomatic}
	if in.CaptureMethod == paysimwire.CaptureManual {
		out.CaptureMode = payment.CaptureManual
	}
	if in.CaptureBefore != nil && out.Status == payment.IntentRequiresCapture {
		out.CaptureBefore = in.CaptureBefore.UTC()
	}
	if in.LastDecline != nil {
		out.LastDecline = &payment.DeclineError{Code: in.LastDecline.Code, Message: in.LastDecline.Message}
	}
	return out
}

func refund(r paysimwire.Refund) payment.Refund {
	return payment.Refund{ID: r.ID, IntentID: r.PaymentIntent, Reference: payment.Reference{OrderID: r.OrderID, Key: r.Reference},
		Amount: r.Amount, Status: refundStatus(r.Status), CreatedAt: r.CreatedAt.UTC()}
}

// refundStatus maps paysim's refund status to the payment domain's: failed
// (a refund_fail test charge's refund failed later), else succeeded (""
// from a paysim older than refund statuses).
func refundStatus(s string) string {
	if s == paysimwire.RefundFailed {
		return payment.RefundFailed
	}
	return payment.RefundSucceeded
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
		CaptureMethod: captureMethod(req.CaptureMode),
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

// captureMethod is the wire's capture_method of m: omitted for automatic,
// so that a request is the same as before manual capture existed.
func captureMethod(m payment.CaptureMode) string {
	if m.Manual() {
		return paysimwire.CaptureManual
	}
	return ""
}

// Capture implements payment.Gateway: POST
// /v1/payment_intents/{id}/capture with {"amount"} under
// req.IdempotencyKey. paysim refuses an intent not in requires_capture
// (400 payment_intent_unexpected_state) and an amount above the
// authorization (400 amount_too_large), both final.
func (g *Intents) Capture(ctx context.Context, req payment.CaptureRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	var in paysimwire.Intent
	err := g.c.Call(ctx, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(req.IntentID)+"/capture", req.IdempotencyKey,
		paysimwire.CaptureParams{Amount: req.Amount}, &in)
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

// Error codes of paysim's 400 answers that the seam passes on as
// *payment.ProviderError.Code (paysim.CodeIntentState,
// paysim.CodeAmountTooLarge; Stripe's names).
const (
	codeIntentState    = "payment_intent_unexpected_state"
	codeAmountTooLarge = "amount_too_large"
)

// payments is package payment's error vocabulary.
var payments = vocabulary{
	fail: func(retryable bool, cause error) error {
		return &payment.ProviderError{Retryable: retryable, Err: cause}
	},
	unknownOutcome: payment.ErrUnknownOutcome,
	keyReused:      payment.ErrIdempotencyKeyReused,
	refusal: func(status int, b errorBody) error {
		if status == http.StatusBadRequest && (b.Error.Code == codeIntentState || b.Error.Code == codeAmountTooLarge) {
			// A final refusal with Stripe's code, which the seam's Capture
			// (and Cancel) name: the intent's status forbids it, or the
			// capture is above the authorization.
			return &payment.ProviderError{Code: b.Error.Code, Err: fmt.Errorf("paysim answered 400 %s: %s", b.Error.Code, b.Error.Message)}
		}
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
