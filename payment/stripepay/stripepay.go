// Package stripepay is Orderly's payment.Gateway on Stripe's PaymentIntents
// (github.com/stripe/stripe-go/v85, API version stripe.APIVersion, pinned by
// that module): Prepare creates a PaymentIntent with confirm=false and
// metadata orderly_order_id and orderly_reference, Confirm confirms it,
// Retrieve reads it, Find searches it by metadata, Cancel cancels it, Refund
// and FindRefund create and list its refunds. ParseWebhook verifies Stripe's
// webhooks with stripe-go's webhook package and turns them into
// payment.ProviderEvent.
//
// # Outcomes (docs.stripe.com/error-low-level, /error-codes, /api/idempotent_requests)
//
//	Stripe's answer                                   Gateway error
//	2xx                                               none
//	402 card_error (decline_code or code)             *payment.DeclineError (final)
//	resource_missing of param payment_method          *payment.DeclineError invalid_payment_method
//	400 idempotency_error                             final *payment.ProviderError wrapping payment.ErrIdempotencyKeyReused
//	404 resource_missing                              final, wraps payment.ErrNotFound
//	409 idempotency_key_in_use                        *payment.ProviderError{Retryable: true}: same key, later
//	429 (rate_limit, lock_timeout)                    *payment.ProviderError{Retryable: true, RetryAfter}
//	other 4xx (payment_intent_unexpected_state, …)    final *payment.ProviderError with Code
//	5xx on a POST, fresh or replayed                  payment.ErrUnknownOutcome: read the intent, never a new key
//	5xx on a GET                                      retryable (nothing changes)
//	no answer after the request was written           payment.ErrUnknownOutcome (GET: retryable)
//	connection refused (nothing sent)                 retryable
//
// Stripe-Should-Retry: true makes any error retryable under the same key;
// false makes a 409 or 429 final. A replayed 500 (Idempotent-Replayed: true)
// stays an unknown outcome for as long as Stripe keeps the key; the caller
// resolves it with Retrieve.
//
// Nothing is resent behind the caller's back: stripe-go's MaxNetworkRetries
// is 0, and the HTTP transport never lets net/http replay a POST on a
// keep-alive connection that closed before an answer (net/http resends a
// request with an Idempotency-Key header and a GetBody once,
// Request.isReplayable; the transport clears GetBody). Orderly alone decides
// when a request is resent and under which key.
//
// Stripe prunes idempotency keys once they are at least 24 hours old
// (KeyRetention); a caller must not resend a key older than its margin below
// that, and resolve the attempt by Retrieve or Find instead.
package stripepay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stripe/stripe-go/v85"

	"github.com/orderly/orderly/payment"
)

// Metadata keys Prepare and Refund set.
const (
	MetaOrderID   = "orderly_order_id"
	MetaReference = "orderly_reference"
)

// KeyRetention is how long Stripe keeps an idempotency key's saved answer at
// least (docs.stripe.com/api/idempotent_requests: keys "can be removed once
// they're at least 24 hours old").
const KeyRetention = 24 * time.Hour

// DefaultSearchLag is how long a new PaymentIntent may stay invisible to
// search: "under normal operating conditions, data is searchable in under 1
// minute" (docs.stripe.com/search#data-freshness).
const DefaultSearchLag = time.Minute

// DefaultAPIBase is Stripe's API.
const DefaultAPIBase = "https://api.stripe.com"

// Options configure a Gateway.
type Options struct {
	// SecretKey is the API key, sk_test_… or sk_live_… (rk_ restricted keys
	// too); required.
	SecretKey string
	// APIBase is the API's base URL (DefaultAPIBase when empty); paysim's
	// Stripe mode for tests.
	APIBase string
	// HTTPClient sends the requests (a client with Timeout when nil). Its
	// Transport is wrapped so that net/http never resends a request.
	HTTPClient *http.Client
	// Timeout bounds one request when HTTPClient is nil (default 30s).
	Timeout time.Duration
	// SearchLag is how long Find treats a search miss for a Prepare this
	// process sent as the index lagging (DefaultSearchLag when zero).
	SearchLag time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Gateway is a payment.Gateway on Stripe. It is safe for concurrent use.
type Gateway struct {
	sc   *stripe.Client
	lag  time.Duration
	now  func() time.Time
	sent sync.Map // reference key → time.Time of the first Prepare this process sent
}

var _ payment.Gateway = (*Gateway)(nil)

// New returns a Gateway. It fails on a missing key or a bad APIBase.
func New(o Options) (*Gateway, error) {
	if o.SecretKey == "" {
		return nil, errors.New("stripepay: a secret key is required")
	}
	base := o.APIBase
	if base == "" {
		base = DefaultAPIBase
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("stripepay: API base %q is not an http(s) URL", base)
	}
	hc := o.HTTPClient
	if hc == nil {
		t := o.Timeout
		if t <= 0 {
			t = 30 * time.Second
		}
		hc = &http.Client{Timeout: t}
	}
	c := *hc
	c.Transport = NoResend(hc.Transport)
	if o.SearchLag <= 0 {
		o.SearchLag = DefaultSearchLag
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	cfg := &stripe.BackendConfig{HTTPClient: &c, MaxNetworkRetries: stripe.Int64(0), URL: stripe.String(strings.TrimSuffix(base, "/")),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}, EnableTelemetry: stripe.Bool(false)}
	sc := stripe.NewClient(o.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(cfg)))
	return &Gateway{sc: sc, lag: o.SearchLag, now: o.Now}, nil
}

// NoResend wraps rt (http.DefaultTransport when nil) so that net/http never
// resends a request with a body by itself: it clears the request's GetBody,
// which net/http needs to replay a request on a reused connection that
// closed before an answer (net/http Transport: a request is replayable when
// its body can be recreated and it is idempotent or carries an
// Idempotency-Key header).
func NoResend(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return noResend{rt}
}

type noResend struct{ rt http.RoundTripper }

func (n noResend) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody && r.GetBody != nil {
		r = r.Clone(r.Context())
		r.GetBody = nil
	}
	return n.rt.RoundTrip(r)
}

// --- the seam

// Prepare implements payment.Gateway: POST /v1/payment_intents, confirm
// false, amount and currency (lower case), metadata orderly_order_id and
// orderly_reference, under req.IdempotencyKey.
func (g *Gateway) Prepare(ctx context.Context, req payment.PrepareRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	if req.Amount == 0 {
		// Nothing is sent: Stripe refuses a PaymentIntent of no amount
		// (docs.stripe.com/api/payment_intents/create: amount "a positive
		// integer"). Final and nothing moved, as a decline: answered as one
		// (402), never as a provider outage the client would retry forever.
		return payment.Intent{}, &payment.DeclineError{Code: DeclineAmountTooSmall,
			Message: "stripe: a PaymentIntent needs a positive amount"}
	}
	p := &stripe.PaymentIntentCreateParams{
		Amount:   stripe.Int64(req.Amount),
		Currency: stripe.String(strings.ToLower(req.Currency)),
		Confirm:  stripe.Bool(false),
	}
	if req.CaptureMode.Manual() {
		// Authorize only; Capture moves the money (docs.stripe.com/payments/
		// place-a-hold-on-a-payment-method). Automatic sends nothing: Stripe's
		// default (automatic_async) captures at confirm.
		p.CaptureMethod = stripe.String(string(stripe.PaymentIntentCaptureMethodManual))
	}
	p.AddMetadata(MetaOrderID, req.Reference.OrderID)
	p.AddMetadata(MetaReference, req.Reference.Key)
	p.SetIdempotencyKey(req.IdempotencyKey)
	g.sent.LoadOrStore(req.Reference.Key, g.now())
	pi, err := g.sc.V1PaymentIntents.Create(ctx, p)
	var se *stripe.Error
	if err == nil || errors.As(err, &se) {
		// An answer came: the create is no longer executing, and an intent
		// it made is in the list Find reads.
		g.sent.Delete(req.Reference.Key)
	}
	if err != nil {
		if se != nil && se.HTTPStatusCode == http.StatusBadRequest && se.Type == stripe.ErrorTypeInvalidRequest && se.Param == "amount" {
			// Stripe refused the amount itself (amount_too_small,
			// amount_too_large, parameter_invalid_integer;
			// docs.stripe.com/error-codes): no intent was created and the
			// same amount is refused again, so it is final, as a decline.
			return payment.Intent{}, &payment.DeclineError{Code: string(se.Code), Message: se.Msg}
		}
		return payment.Intent{}, classify(ctx, err, true)
	}
	return intentOf(pi), nil
}

// DeclineAmountTooSmall is the decline code of a charge of amount 0, which
// Stripe cannot take (its own code for an amount below its minimum,
// docs.stripe.com/error-codes/amount-too-small).
const DeclineAmountTooSmall = "amount_too_small"

// Confirm implements payment.Gateway: POST /v1/payment_intents/{id}/confirm
// with payment_method and expand[]=latest_charge (for CaptureBefore of a
// manual capture's authorization and AmountRefunded), under
// req.IdempotencyKey. A decline is a *payment.DeclineError.
func (g *Gateway) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	p := &stripe.PaymentIntentConfirmParams{}
	if req.PaymentMethod != "" {
		p.PaymentMethod = stripe.String(req.PaymentMethod)
	}
	p.AddExpand("latest_charge")
	p.SetIdempotencyKey(req.IdempotencyKey)
	pi, err := g.sc.V1PaymentIntents.Confirm(ctx, req.IntentID, p)
	if err != nil {
		return payment.Intent{}, classify(ctx, err, true)
	}
	return intentOf(pi), nil
}

// Retrieve implements payment.Gateway: GET /v1/payment_intents/{id} with
// expand[]=latest_charge (for AmountRefunded).
func (g *Gateway) Retrieve(ctx context.Context, intentID string) (payment.Intent, error) {
	if intentID == "" {
		return payment.Intent{}, fmt.Errorf("stripepay: retrieve: %w", payment.ErrNotFound)
	}
	p := &stripe.PaymentIntentRetrieveParams{}
	p.AddExpand("latest_charge")
	pi, err := g.sc.V1PaymentIntents.Retrieve(ctx, intentID, p)
	if err != nil {
		return payment.Intent{}, classify(ctx, err, false)
	}
	return intentOf(pi), nil
}

// maxRecentPages bounds Find's consistent listing of the intents created
// within the search lag (100 per page).
const maxRecentPages = 10

// Find implements payment.Gateway. It searches
// metadata['orderly_reference']:'<ref.Key>' (an index that lags,
// docs.stripe.com/search#data-freshness), and, when the search finds
// nothing, lists the intents created within the search lag (the list API
// is read-after-write consistent) and matches their metadata. Neither
// finding it is ErrNotFound, except that a miss for a reference whose
// Prepare this process sent less than the lag ago is a retryable
// *payment.ProviderError with Code "search_lag" (the create may still be
// executing). A match whose orderly_order_id differs from ref.OrderID is
// not the caller's intent and is ignored. Should several intents carry ref
// (a create retried under another key), the one that received money wins,
// then one still collecting, then the newest.
func (g *Gateway) Find(ctx context.Context, ref payment.Reference) (payment.Intent, error) {
	if ref.Key == "" {
		return payment.Intent{}, fmt.Errorf("stripepay: find: %w", payment.ErrNotFound)
	}
	var best *stripe.PaymentIntent
	consider := func(pi *stripe.PaymentIntent) {
		if matches(pi.Metadata, ref) && (best == nil || rank(pi) > rank(best)) {
			best = pi
		}
	}
	sp := &stripe.PaymentIntentSearchParams{}
	sp.Query = "metadata['" + MetaReference + "']:'" + strings.ReplaceAll(ref.Key, "'", `\'`) + "'"
	for pi, err := range g.sc.V1PaymentIntents.Search(ctx, sp).All(ctx) {
		if err != nil {
			return payment.Intent{}, classify(ctx, err, false)
		}
		consider(pi)
	}
	lp := &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{GreaterThanOrEqual: g.now().Add(-2 * g.lag).Unix()}}
	lp.Limit = stripe.Int64(100)
	n := 0
	for pi, err := range g.sc.V1PaymentIntents.List(ctx, lp).All(ctx) {
		if err != nil {
			return payment.Intent{}, classify(ctx, err, false)
		}
		consider(pi)
		if n++; n >= maxRecentPages*100 {
			return payment.Intent{}, &payment.ProviderError{Retryable: true, Code: "search_lag",
				Err: fmt.Errorf("stripe: more than %d intents created within the search lag; cannot tell whether %s exists yet", n, ref)}
		}
	}
	if best != nil {
		return g.Retrieve(ctx, best.ID)
	}
	if t, ok := g.sent.Load(ref.Key); ok {
		if age := g.now().Sub(t.(time.Time)); age < g.lag {
			return payment.Intent{}, &payment.ProviderError{Retryable: true, Code: "search_lag", RetryAfter: g.lag - age,
				Err: fmt.Errorf("stripe: no intent for %s yet; its Prepare was sent %s ago", ref, age.Round(time.Millisecond))}
		}
	}
	return payment.Intent{}, fmt.Errorf("stripepay: no PaymentIntent for %s: %w", ref, payment.ErrNotFound)
}

// rank orders the intents of one reference, should there be several (a
// create retried under another key): the one that took money first, then
// one still collecting, then the newest.
func rank(pi *stripe.PaymentIntent) int64 {
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		return 3 << 40
	case stripe.PaymentIntentStatusProcessing, stripe.PaymentIntentStatusRequiresCapture, stripe.PaymentIntentStatusRequiresAction:
		return 2 << 40
	}
	return pi.Created
}

func matches(meta map[string]string, ref payment.Reference) bool {
	return meta[MetaReference] == ref.Key && (ref.OrderID == "" || meta[MetaOrderID] == ref.OrderID)
}

// Capture implements payment.Gateway: POST /v1/payment_intents/{id}/capture
// with amount_to_capture = req.Amount and expand[]=latest_charge, under
// req.IdempotencyKey (docs.stripe.com/api/payment_intents/capture). Stripe's
// refusals are final *payment.ProviderErrors with its codes: 400
// payment_intent_unexpected_state for an intent not in requires_capture
// (captured already, canceled, expired), 400 amount_too_large for an
// amount above amount_capturable.
func (g *Gateway) Capture(ctx context.Context, req payment.CaptureRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	p := &stripe.PaymentIntentCaptureParams{AmountToCapture: stripe.Int64(req.Amount)}
	p.AddExpand("latest_charge")
	p.SetIdempotencyKey(req.IdempotencyKey)
	pi, err := g.sc.V1PaymentIntents.Capture(ctx, req.IntentID, p)
	if err != nil {
		return payment.Intent{}, classify(ctx, err, true)
	}
	return intentOf(pi), nil
}

// Refund implements payment.Gateway: POST /v1/refunds with payment_intent,
// amount and metadata, under req.IdempotencyKey.
func (g *Gateway) Refund(ctx context.Context, req payment.RefundRequest) (payment.Refund, error) {
	if err := req.Validate(); err != nil {
		return payment.Refund{}, err
	}
	p := &stripe.RefundCreateParams{PaymentIntent: stripe.String(req.IntentID), Amount: stripe.Int64(req.Amount)}
	p.AddMetadata(MetaOrderID, req.Reference.OrderID)
	p.AddMetadata(MetaReference, req.Reference.Key)
	p.SetIdempotencyKey(req.IdempotencyKey)
	rf, err := g.sc.V1Refunds.Create(ctx, p)
	if err != nil {
		return payment.Refund{}, classify(ctx, err, true)
	}
	return refundOf(rf), nil
}

// FindRefund implements payment.Gateway: GET /v1/refunds?payment_intent=…,
// every page, matched on metadata orderly_reference (the list API has no
// lag).
func (g *Gateway) FindRefund(ctx context.Context, intentID string, ref payment.Reference) (payment.Refund, error) {
	if intentID == "" || ref.Key == "" {
		return payment.Refund{}, fmt.Errorf("stripepay: find refund: %w", payment.ErrNotFound)
	}
	p := &stripe.RefundListParams{PaymentIntent: stripe.String(intentID)}
	p.Limit = stripe.Int64(100)
	for rf, err := range g.sc.V1Refunds.List(ctx, p).All(ctx) {
		if err != nil {
			return payment.Refund{}, classify(ctx, err, false)
		}
		if matches(rf.Metadata, ref) {
			return refundOf(rf), nil
		}
	}
	return payment.Refund{}, fmt.Errorf("stripepay: no refund of %s for %s: %w", intentID, ref, payment.ErrNotFound)
}

// Cancel implements payment.Gateway: POST /v1/payment_intents/{id}/cancel
// under req.IdempotencyKey. An intent already canceled is returned as it is
// (Stripe answers 400 payment_intent_unexpected_state; the intent is read).
func (g *Gateway) Cancel(ctx context.Context, req payment.CancelRequest) (payment.Intent, error) {
	if err := req.Validate(); err != nil {
		return payment.Intent{}, err
	}
	p := &stripe.PaymentIntentCancelParams{}
	p.SetIdempotencyKey(req.IdempotencyKey)
	pi, err := g.sc.V1PaymentIntents.Cancel(ctx, req.IntentID, p)
	if err == nil {
		return intentOf(pi), nil
	}
	var se *stripe.Error
	if errors.As(err, &se) && se.Code == stripe.ErrorCodePaymentIntentUnexpectedState && se.PaymentIntent != nil &&
		se.PaymentIntent.Status == stripe.PaymentIntentStatusCanceled {
		return intentOf(se.PaymentIntent), nil
	}
	return payment.Intent{}, classify(ctx, err, true)
}

// --- mapping

func intentOf(pi *stripe.PaymentIntent) payment.Intent {
	in := payment.Intent{ID: pi.ID, Reference: payment.Reference{OrderID: pi.Metadata[MetaOrderID], Key: pi.Metadata[MetaReference]},
		Amount: pi.Amount, Currency: strings.ToUpper(string(pi.Currency)), Status: payment.IntentStatus(pi.Status),
		AmountReceived: pi.AmountReceived, CreatedAt: time.Unix(pi.Created, 0).UTC(), ClientSecret: pi.ClientSecret}
	if na := pi.NextAction; na != nil && in.Status == payment.IntentRequiresAction {
		in.NextAction = &payment.NextAction{Type: string(na.Type)}
		if r := na.RedirectToURL; r != nil {
			in.NextAction.RedirectURL, in.NextAction.ReturnURL = r.URL, r.ReturnURL
		}
	}
	in.CaptureMode = payment.CaptureAutomatic
	if pi.CaptureMethod == stripe.PaymentIntentCaptureMethodManual {
		in.CaptureMode = payment.CaptureManual
	}
	if ch := pi.LatestCharge; ch != nil {
		in.AmountRefunded = ch.AmountRefunded
		if d := ch.PaymentMethodDetails; in.Status == payment.IntentRequiresCapture && d != nil && d.Card != nil && d.Card.CaptureBefore > 0 {
			in.CaptureBefore = time.Unix(d.Card.CaptureBefore, 0).UTC()
		}
	}
	if e := pi.LastPaymentError; e != nil && in.Status == payment.IntentRequiresPaymentMethod {
		in.LastDecline = declineOf(e)
	}
	return in
}

func refundOf(rf *stripe.Refund) payment.Refund {
	out := payment.Refund{ID: rf.ID, Reference: payment.Reference{OrderID: rf.Metadata[MetaOrderID], Key: rf.Metadata[MetaReference]},
		Amount: rf.Amount, Status: string(rf.Status), CreatedAt: time.Unix(rf.Created, 0).UTC()}
	if rf.PaymentIntent != nil {
		out.IntentID = rf.PaymentIntent.ID
	}
	return out
}

// declineOf maps a card error to a decline: the decline_code when it is
// specific (insufficient_funds, lost_card, …), else the code (card_declined,
// expired_card, incorrect_cvc, …) (docs.stripe.com/declines/codes).
func declineOf(e *stripe.Error) *payment.DeclineError {
	code := string(e.Code)
	if e.DeclineCode != "" && e.DeclineCode != "generic_decline" {
		code = string(e.DeclineCode)
	}
	if code == "" {
		code = payment.DeclineCardDeclined
	}
	return &payment.DeclineError{Code: code, Message: e.Msg}
}

// classify maps a stripe-go error to the seam's (see the package
// documentation's table). changes says the request could have changed
// something (a POST).
func classify(ctx context.Context, err error, changes bool) error {
	var se *stripe.Error
	if !errors.As(err, &se) {
		return transportError(ctx, err, changes)
	}
	var h http.Header
	if se.LastResponse != nil {
		h = se.LastResponse.Header
	}
	should := h.Get("Stripe-Should-Retry")
	replayed := h.Get("Idempotent-Replayed") == "true"
	status := se.HTTPStatusCode
	cause := fmt.Errorf("stripe: %d %s %s: %s", status, se.Type, se.Code, se.Msg)
	if replayed {
		cause = fmt.Errorf("stripe: replayed %d %s %s: %s", status, se.Type, se.Code, se.Msg)
	}
	pe := &payment.ProviderError{Code: string(se.Code), Err: cause}
	switch {
	case se.Type == stripe.ErrorTypeCard || status == http.StatusPaymentRequired:
		return declineOf(se)
	case se.Code == stripe.ErrorCodeResourceMissing && se.Param == "payment_method":
		// An unknown payment method is the customer's to change, as a
		// decline is (docs.stripe.com/error-codes/resource-missing).
		return &payment.DeclineError{Code: payment.DeclineInvalidPaymentMethod, Message: se.Msg}
	case status >= 500:
		if !changes {
			pe.Retryable = true
			return pe
		}
		if should == "true" && !replayed {
			// Stripe says resending is safe (nothing was saved).
			pe.Retryable = true
			return pe
		}
		pe.Err = fmt.Errorf("%w: %w: %w", payment.ErrUnknownOutcome, errAnswered, cause)
		return pe
	case should == "true":
		pe.Retryable, pe.RetryAfter = true, retryAfter(h)
		return pe
	case should == "false":
		return pe
	case se.Type == stripe.ErrorTypeIdempotency:
		pe.Err = fmt.Errorf("%w: %w", payment.ErrIdempotencyKeyReused, cause)
		return pe
	case status == http.StatusConflict || status == http.StatusTooManyRequests:
		pe.Retryable, pe.RetryAfter = true, retryAfter(h)
		return pe
	case status == http.StatusNotFound || se.Code == stripe.ErrorCodeResourceMissing:
		pe.Err = fmt.Errorf("%w: %w", payment.ErrNotFound, cause)
		return pe
	}
	return pe
}

// errAnswered marks an unknown outcome that came as an answer (a 5xx,
// fresh or replayed): the request finished executing at Stripe, so nothing
// of it is still in flight.
var errAnswered = errors.New("stripe answered")

// Answered reports whether err is an unknown outcome Stripe answered (a
// 5xx), as opposed to one without an answer (a timeout, a closed
// connection), after which the request may still be executing.
func Answered(err error) bool { return errors.Is(err, errAnswered) }

func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// transportError maps an error without an answer: nothing was sent
// (connection refused, DNS) → retryable; otherwise the request may have
// arrived → unknown outcome for a POST, retryable for a GET. A context
// error stays matchable through errors.Is.
func transportError(ctx context.Context, err error, changes bool) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &payment.ProviderError{Retryable: true, Err: fmt.Errorf("stripe: not sent: %w", err)}
	}
	if !changes {
		return &payment.ProviderError{Retryable: true, Err: fmt.Errorf("stripe: %w", err)}
	}
	if ce := ctx.Err(); ce != nil && !errors.Is(err, ce) {
		err = fmt.Errorf("%w (%w)", err, ce)
	}
	return &payment.ProviderError{Err: fmt.Errorf("%w: stripe: no answer: %w", payment.ErrUnknownOutcome, err)}
}
