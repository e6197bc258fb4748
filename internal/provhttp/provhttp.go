// Package provhttp is the HTTP plumbing of Orderly's clients of external
// providers (package paysim/paysimclient): it sends one JSON request with an
// Idempotency-Key header under a per-call timeout, tells a failure before the
// request was written (nothing was sent, so the call may be repeated) from
// one after it (the provider may have acted), and classifies every way a
// call can fail in one place.
//
// Client.Do sends a request and returns whatever answer came. Client.Call
// sends it, decodes a 2xx answer, and turns everything else into a *Failure
// whose Verdict says whether the provider may have acted and whether the
// request may be sent again. What a provider's error answers mean beyond
// that (a decline, an unknown key) is left to the caller, which keeps its
// own error vocabulary.
package provhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/orderly/orderly/internal/requestid"
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
// query) with header Idempotency-Key if idempotencyKey is not empty, header
// X-Request-Id if ctx carries a request id (package internal/requestid) and,
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
	if id := requestid.FromContext(ctx); id != "" {
		req.Header.Set(requestid.Header, id)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Answer{}, &SendError{Sent: wrote.Load(), Err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	return Answer{Status: resp.StatusCode, Body: b, ReadErr: err}, nil
}

// Verdict is what a failed call means for its request: whether the provider
// may have acted on it, and whether the same request may be sent again.
type Verdict int

// Verdicts of a Failure.
const (
	// Retryable means the provider did not act on the request, or the
	// request changes nothing (a lookup): the same request, with the same
	// idempotency key, may be sent again.
	Retryable Verdict = iota + 1
	// Final means the provider refused the request and would refuse it
	// again, or the request could not be sent at all.
	Final
	// Unknown means the provider may or may not have acted on a request
	// that changes something. The caller must learn the outcome (look it up,
	// or repeat the request with the same idempotency key) before deciding.
	Unknown
)

// String returns "retryable", "final" or "unknown outcome".
func (v Verdict) String() string {
	switch v {
	case Retryable:
		return "retryable"
	case Final:
		return "final"
	case Unknown:
		return "unknown outcome"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Failure is the error of a Call that did not end in a readable 2xx answer.
type Failure struct {
	// Verdict classifies the failure; see Call for the rules.
	Verdict Verdict
	// Status is the answer's HTTP status, or 0 if no answer came.
	Status int
	// Body is the answer's body (at most MaxAnswerBytes of it), or nil if
	// no answer came. Callers read the provider's error details from it.
	Body []byte
	// Err is the cause: the *SendError of a call that got no answer, the
	// error reading or decoding a 2xx answer, or the error of a request
	// that could not be made; nil for an answer with a status other than
	// 2xx.
	Err error
}

// Error implements error: "answered 503", "answered 200: reading the
// answer: …", or the cause of a call that got no answer.
func (f *Failure) Error() string {
	switch {
	case f.Status == 0:
		return f.Err.Error()
	case f.Err != nil:
		return fmt.Sprintf("answered %d: %v", f.Status, f.Err)
	}
	return fmt.Sprintf("answered %d", f.Status)
}

// Unwrap returns Err.
func (f *Failure) Unwrap() error { return f.Err }

// Call sends a request as Do does and decodes a 2xx answer's JSON body into
// out. Every other end of the call is a *Failure whose Verdict follows these
// rules, in order. A request "changes something" unless its method is GET
// or HEAD.
//
//   - A request that cannot be made (body cannot be marshalled, bad URL) is
//     Final.
//   - No answer: Retryable if the request was not fully written (a dial
//     error, a refused connection, ctx ending first), so nothing was sent;
//     if it was (a timeout, a reset or closed connection while awaiting the
//     answer), Unknown for a request that changes something, else
//     Retryable.
//   - A 2xx whose body cannot be read or decoded: Unknown for a request
//     that changes something, else Retryable.
//   - 408 and 429 are Retryable (the provider did not take the request);
//     every other 4xx is Final.
//   - 5xx is Retryable: a well-behaved provider commits nothing when it
//     answers 5xx.
//   - Any other status (a redirect, say): Unknown for a request that changes
//     something, else Retryable.
func (c *Client) Call(ctx context.Context, method, path, idempotencyKey string, body, out any) error {
	// mayHaveActed is the verdict of a call the provider may have acted on.
	mayHaveActed := Unknown
	if method == http.MethodGet || method == http.MethodHead {
		mayHaveActed = Retryable
	}
	a, err := c.Do(ctx, method, path, idempotencyKey, body)
	var se *SendError
	switch {
	case errors.As(err, &se) && se.Sent:
		return &Failure{Verdict: mayHaveActed, Err: err}
	case errors.As(err, &se):
		return &Failure{Verdict: Retryable, Err: err}
	case err != nil:
		return &Failure{Verdict: Final, Err: err}
	}
	f := &Failure{Status: a.Status, Body: a.Body}
	switch s := a.Status; {
	case s >= 200 && s < 300:
		err := a.ReadErr
		if err == nil {
			err = json.Unmarshal(a.Body, out)
		}
		if err == nil {
			return nil
		}
		f.Verdict, f.Err = mayHaveActed, fmt.Errorf("reading the answer: %w", err)
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests:
		f.Verdict = Retryable
	case s >= 400 && s < 500:
		f.Verdict = Final
	case s >= 500 && s < 600:
		f.Verdict = Retryable
	default:
		f.Verdict = mayHaveActed
	}
	return f
}
