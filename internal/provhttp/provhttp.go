// Package provhttp is the HTTP plumbing shared by Orderly's clients of
// external providers (payment.HTTPGateway, fulfillment.HTTPWarehouse): it
// sends one JSON request with an Idempotency-Key header under a per-call
// timeout and tells a failure before the request was written (nothing was
// sent, so the call may be repeated) from one after it (the provider may
// have acted). What an answer means is left to the caller.
package provhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// MaxAnswerBytes bounds the body of an answer: Do reads no more of it.
const MaxAnswerBytes = 1 << 20

// Client sends requests to one provider. A Client is safe for concurrent
// use.
type Client struct {
	base    string
	hc      *http.Client
	timeout time.Duration
}

// New returns a Client for the provider at baseURL, an http or https URL
// such as "http://127.0.0.1:8090" (a trailing slash is dropped), that gives
// each call timeout, from sending the request to reading the whole answer.
// hc sends the requests; if it is nil, a client on http.DefaultTransport
// that does not follow redirects does. The error of a bad baseURL reads
// `URL "..." must be an http:// or https:// URL`, for the caller to prefix.
func New(baseURL string, timeout time.Duration, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("URL %q must be an http:// or https:// URL", baseURL)
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("timeout %s must be positive", timeout)
	}
	if hc == nil {
		hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), hc: hc, timeout: timeout}, nil
}

// Answer is the provider's reply to one call, whatever its status.
type Answer struct {
	// Status is the HTTP status code.
	Status int
	// Body is the body, at most MaxAnswerBytes of it.
	Body []byte
	// ReadErr is the error that ended reading Body early, such as the
	// call's timeout or a dropped connection; nil if Body was read whole
	// (or up to MaxAnswerBytes).
	ReadErr error
}

// SendError is the error of a call that got no answer.
type SendError struct {
	// Sent reports whether the request was fully written before the
	// failure. If false (a dial error, a refused connection, the context
	// ending first), the provider cannot have acted on it. If true (a
	// timeout, a reset or closed connection while awaiting the answer), the
	// outcome is unknown.
	Sent bool
	// Err is the cause; it wraps the context's error when the context's
	// end (or the call's timeout) was the cause.
	Err error
}

// Error implements error.
func (e *SendError) Error() string {
	if e.Sent {
		return fmt.Sprintf("request sent, no answer: %v", e.Err)
	}
	return fmt.Sprintf("request not sent: %v", e.Err)
}

// Unwrap returns Err.
func (e *SendError) Unwrap() error { return e.Err }

// Do sends method path (path is appended to the base URL and may carry a
// query) with header Idempotency-Key if idempotencyKey is not empty and,
// unless body is nil, body as JSON, and returns the answer, whatever its
// status. Redirects are answers too unless the Client's http.Client follows
// them.
//
// If ctx has ended already, Do sends nothing and fails with a *SendError
// whose Sent is false and whose Err is ctx.Err(). Every other failure to get
// an answer is a *SendError too. Any other error (body cannot be marshalled,
// path makes a bad URL) is a request that can never be sent.
//
// Do never lets net/http resend a request with a body by itself (which the
// transport would do for a request with an Idempotency-Key on a reused
// connection), so every dropped answer to a request with a body is reported.
// A request without a body, such as a GET, net/http may still send again
// once when a reused connection drops it, which is harmless for a read.
func (c *Client) Do(ctx context.Context, method, path, idempotencyKey string, body any) (Answer, error) {
	if err := ctx.Err(); err != nil {
		return Answer{}, &SendError{Err: err}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Answer{}, err
		}
		rd = bytes.NewReader(b)
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var wrote atomic.Bool
	cctx = httptrace.WithClientTrace(cctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(cctx, method, c.base+path, rd)
	if err != nil {
		return Answer{}, err
	}
	// Without GetBody the transport never resends the request on its own,
	// so every dropped answer is reported.
	req.GetBody = nil
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Answer{}, &SendError{Sent: wrote.Load(), Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	return Answer{Status: resp.StatusCode, Body: b, ReadErr: err}, nil
}
