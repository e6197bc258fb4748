package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// maxResponseBytes bounds how much of a response body the client reads.
const maxResponseBytes = 8 << 20

// request is one logical operation: the same method, URL, key and body
// bytes on every attempt.
type request struct {
	method string
	path   string // for messages, such as "/v1/orders/ord_1/pay"
	url    string
	key    string // "" sends no Idempotency-Key
	body   []byte // nil sends no body
}

// wire is one attempt's response, body read in full.
type wire struct {
	status int
	header http.Header
	body   []byte
}

// send performs rq, retrying as the package documentation describes, and
// decodes a 2xx body into the Response's Value. The Response is never nil.
func send[T any](ctx context.Context, c *Client, rq request) (*Response[T], error) {
	res := &Response[T]{IdempotencyKey: rq.key}
	bo := c.newBackOff()
	reached := false // whether an attempt may have reached the server
	for {
		res.Attempts++
		w, err := c.attempt(ctx, rq)
		if err == nil || !notConnected(err) {
			reached = true
		}
		var last error
		retryAfter, hasRetryAfter := time.Duration(0), false
		if err != nil {
			if ctx.Err() != nil {
				return res, stopped(ctx, rq, res.Attempts, err)
			}
			if !retryableNetworkError(err) {
				return res, fmt.Errorf("orderly: %s %s: %w", rq.method, rq.path, err)
			}
			last = &NetworkError{Method: rq.method, Path: rq.path, Attempts: res.Attempts, Err: err, NotSent: !reached}
		} else {
			res.StatusCode, res.Header = w.status, w.header
			res.Replayed = w.header.Get("Idempotency-Replayed") == "true"
			res.KeyExpiresAt = time.Time{}
			if t, err := http.ParseTime(w.header.Get("Idempotency-Key-Expires")); err == nil {
				res.KeyExpiresAt = t
			}
			if w.status >= 200 && w.status < 300 {
				if len(bytes.TrimSpace(w.body)) > 0 {
					if err := json.Unmarshal(w.body, &res.Value); err != nil {
						return res, fmt.Errorf("orderly: %s %s: decoding the %d response: %w", rq.method, rq.path, w.status, err)
					}
				}
				return res, nil
			}
			apiErr := parseError(w.status, w.header, w.body)
			if !apiErr.Retryable {
				return res, apiErr
			}
			last = apiErr
			retryAfter, hasRetryAfter = parseRetryAfter(w.header.Get("Retry-After"), c.now())
		}
		if res.Attempts >= c.maxAttempts {
			return res, last
		}
		delay := bo.NextBackOff()
		if hasRetryAfter {
			delay = min(retryAfter, c.maxRetryAfter)
		}
		if err := c.sleep(ctx, delay); err != nil {
			if ctx.Err() != nil {
				return res, stopped(ctx, rq, res.Attempts, last)
			}
			return res, fmt.Errorf("orderly: %s %s: waiting to retry: %w", rq.method, rq.path, err)
		}
	}
}

// attempt sends rq once, within the per-attempt timeout if one is set, and
// reads the whole response.
func (c *Client) attempt(ctx context.Context, rq request) (*wire, error) {
	if c.attemptTO > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.attemptTO)
		defer cancel()
	}
	var body io.Reader
	if rq.body != nil {
		body = bytes.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, rq.url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.apiKey)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if rq.key != "" {
		req.Header.Set("Idempotency-Key", keyHeader(rq.key))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("reading the %d response: %w", resp.StatusCode, err)
	}
	return &wire{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// stopped is the error of a call whose context ended: it wraps the
// context's error (so errors.Is(err, context.Canceled) holds) and names the
// last failure, if any.
func stopped(ctx context.Context, rq request, attempts int, last error) error {
	cerr := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != cerr {
		cerr = fmt.Errorf("%w: %w", cerr, cause)
	}
	if last != nil && !errors.Is(last, ctx.Err()) {
		return fmt.Errorf("orderly: %s %s: stopped after %d attempts: %w (last error: %v)", rq.method, rq.path, attempts, cerr, last)
	}
	return fmt.Errorf("orderly: %s %s: stopped after %d attempts: %w", rq.method, rq.path, attempts, cerr)
}

// notConnected reports whether err is the failure to open a connection (a
// refused connection, an unknown host, a dial timeout): the request was not
// sent.
func notConnected(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// retryableNetworkError reports whether a transport error (with the
// caller's context still live) is worth another attempt: a refused, reset or
// aborted connection, EOF, a timeout, including the per-attempt one.
// Configuration errors such as an unsupported scheme or a bad certificate
// are not.

func retryableNetworkError(err error) bool {
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNREFUSED, syscall.ECONNRESET,
		syscall.ECONNABORTED, syscall.EPIPE, context.DeadlineExceeded} {
		if errors.Is(err, target) {
			return true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	return errors.As(err, &op)
}

// parseRetryAfter reads a Retry-After field value (RFC 9110 §10.2.3):
// delta-seconds or an HTTP date, relative to now. A date in the past is a
// zero delay.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 63); err == nil {
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		return time.Duration(min(int64(n), maxSeconds)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// fullJitter is a backoff.BackOff with "full jitter": each delay is drawn
// uniformly from [0, ceiling], where the ceilings come from an un-randomized
// backoff.ExponentialBackOff (base, 2·base, 4·base, …, capped at max).
type fullJitter struct {
	exp    backoff.ExponentialBackOff
	jitter func(n int64) int64 // uniform in [0, n)
}

var _ backoff.BackOff = (*fullJitter)(nil)

// newBackOff returns a fresh backoff for one logical operation.
func (c *Client) newBackOff() *fullJitter {
	b := &fullJitter{
		exp: backoff.ExponentialBackOff{
			InitialInterval:     c.baseDelay,
			RandomizationFactor: 0,
			Multiplier:          2,
			MaxInterval:         c.maxDelay,
		},
		jitter: c.jitter,
	}
	b.Reset()
	return b
}

// NextBackOff implements backoff.BackOff.
func (b *fullJitter) NextBackOff() time.Duration {
	ceiling := b.exp.NextBackOff()
	if ceiling <= 0 {
		return 0
	}
	if ceiling == math.MaxInt64 {
		ceiling--
	}
	return time.Duration(b.jitter(int64(ceiling) + 1))
}

// Reset implements backoff.BackOff.
func (b *fullJitter) Reset() { b.exp.Reset() }
