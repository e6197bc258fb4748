package paysimclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/orderly/orderly/internal/provhttp"
	"github.com/orderly/orderly/paysim/paysimwire"
)

// DefaultTimeout is the per-call timeout of an Intents or a Warehouse made
// without WithTimeout.
const DefaultTimeout = 5 * time.Second

// Option configures an Intents or a Warehouse.
type Option func(*options)

// options are what the Options set.
type options struct {
	timeout time.Duration
	client  *http.Client
}

// WithTimeout sets the timeout of each call, from sending the request to
// reading the whole answer. Non-positive values are ignored; the default is
// DefaultTimeout.
func WithTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	}
}

// WithHTTPClient sets the client that sends the requests. The default is a
// client on http.DefaultTransport that does not follow redirects.
func WithHTTPClient(c *http.Client) Option {
	return func(o *options) {
		if c != nil {
			o.client = c
		}
	}
}

// dial returns the provhttp.Client for paysim at baseURL with opts applied.
func dial(baseURL string, opts []Option) (*provhttp.Client, error) {
	o := options{timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	c, err := provhttp.New(baseURL, o.timeout, o.client)
	if err != nil {
		return nil, fmt.Errorf("paysimclient: paysim %w", err) // "paysimclient: paysim URL ... must be"
	}
	return c, nil
}

// errorBody is the body of paysim's error answers.
type errorBody struct {
	Error struct {
		Type    string `json:"type"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// vocabulary is the error vocabulary of one seam (package payment or
// fulfillment): what translate needs to turn a failed call into the errors
// that seam documents.
type vocabulary struct {
	// fail returns the seam's error for a failure of the provider or of
	// the call: a *payment.ProviderError or a *fulfillment.WarehouseError.
	fail func(retryable bool, cause error) error
	// unknownOutcome and keyReused are the seam's ErrUnknownOutcome and
	// ErrIdempotencyKeyReused.
	unknownOutcome, keyReused error
	// refusal returns the seam's own error for an answer it has one for
	// (a decline, an out-of-stock SKU), or nil.
	refusal func(status int, body errorBody) error
}

// translate returns the error, in v's vocabulary, of a call that failed with
// err, an error of provhttp.Client.Call. notFound, if not nil, is wrapped by
// the error of a 404 answer. The rules, in order:
//
//   - An answer the seam has its own error for is that error (see
//     vocabulary.refusal).
//   - A 404 wraps notFound, if it is not nil.
//   - A 422 with error type paysimwire.ErrTypeIdempotency is final and wraps
//     keyReused.
//   - A provhttp.Unknown verdict is final and wraps unknownOutcome (and the
//     cause, such as a context error).
//   - Everything else is retryable or final as its provhttp.Verdict says.
func (v vocabulary) translate(err error, notFound error) error {
	var f *provhttp.Failure
	if !errors.As(err, &f) {
		return v.fail(false, err)
	}
	var b errorBody
	_ = json.Unmarshal(f.Body, &b)
	cause := describe(f, b)
	if refused := v.refusal(f.Status, b); refused != nil {
		return refused
	}
	switch {
	case f.Status == http.StatusNotFound && notFound != nil:
		return fmt.Errorf("%w: %w", notFound, cause)
	case f.Status == http.StatusUnprocessableEntity && b.Error.Type == paysimwire.ErrTypeIdempotency:
		return v.fail(false, fmt.Errorf("%w: %w", cause, v.keyReused))
	case f.Verdict == provhttp.Unknown:
		return v.fail(false, fmt.Errorf("%w: %w", v.unknownOutcome, cause))
	}
	return v.fail(f.Verdict == provhttp.Retryable, cause)
}

// describe returns f with what paysim said about it, such as "paysim
// answered 503 api_error: injected error: nothing was committed".
func describe(f *provhttp.Failure, b errorBody) error {
	detail := ""
	if b.Error.Type != "" {
		detail += " " + b.Error.Type
	}
	if b.Error.Message != "" {
		detail += ": " + b.Error.Message
	}
	return fmt.Errorf("paysim %w%s", f, detail)
}
