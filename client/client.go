package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Defaults of the options of New.
const (
	// DefaultMaxAttempts is how many attempts a call makes at most.
	DefaultMaxAttempts = 5
	// DefaultBaseDelay is the backoff cap of the first retry.
	DefaultBaseDelay = 200 * time.Millisecond
	// DefaultMaxDelay caps every backoff delay.
	DefaultMaxDelay = 10 * time.Second
	// DefaultMaxRetryAfter caps a delay requested by Retry-After.
	DefaultMaxRetryAfter = 30 * time.Second
	// DefaultUserAgent is the User-Agent sent unless WithUserAgent replaces it.
	DefaultUserAgent = "orderly-go-client/1"
)

// Client calls the Orderly API. It is safe for concurrent use; create one and
// reuse it.
type Client struct {
	base          *url.URL
	apiKey        string
	http          *http.Client
	maxAttempts   int
	baseDelay     time.Duration
	maxDelay      time.Duration
	maxRetryAfter time.Duration
	attemptTO     time.Duration
	sleep         func(context.Context, time.Duration) error
	now           func() time.Time
	newKey        func() string
	userAgent     string
	jitter        func(n int64) int64 // uniform in [0, n)
}

// Option configures a Client in New.
type Option func(*Client)

// WithHTTPClient sets the *http.Client that sends requests (default
// http.DefaultClient). Its Timeout, if any, bounds each attempt.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithMaxAttempts sets how many attempts a call makes at most, the first
// included (default DefaultMaxAttempts). n < 1 is taken as 1: no retries.
func WithMaxAttempts(n int) Option {
	return func(c *Client) { c.maxAttempts = max(n, 1) }
}

// WithBackoff sets the exponential backoff: retry n (from 0) waits a random
// delay in [0, min(maxDelay, base·2ⁿ)] (defaults DefaultBaseDelay and
// DefaultMaxDelay). A Retry-After on the response takes precedence.
func WithBackoff(base, maxDelay time.Duration) Option {
	return func(c *Client) {
		c.baseDelay = max(base, 0)
		c.maxDelay = max(maxDelay, c.baseDelay)
	}
}

// WithMaxRetryAfter caps the delay a response's Retry-After may request
// (default DefaultMaxRetryAfter).
func WithMaxRetryAfter(d time.Duration) Option {
	return func(c *Client) { c.maxRetryAfter = max(d, 0) }
}

// WithAttemptTimeout bounds each attempt, response body included, by d
// (default none: only the caller's context bounds it). An attempt that
// times out is retried like any network error.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *Client) { c.attemptTO = max(d, 0) }
}

// WithSleep replaces how the client waits between attempts, for tests. sleep
// must return ctx's error, without waiting further, when ctx ends first. The
// default waits on a timer.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) {
		if sleep != nil {
			c.sleep = sleep
		}
	}
}

// WithClock replaces the clock used to turn a Retry-After HTTP date into a
// delay, for tests (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *Client) {
		if now != nil {
			c.now = now
		}
	}
}

// WithRandSource sets the random source of the backoff jitter, for
// reproducible tests (default the math/rand/v2 global source). The client
// serialises its use of src.
func WithRandSource(src rand.Source) Option {
	return func(c *Client) {
		if src == nil {
			return
		}
		var mu sync.Mutex
		r := rand.New(src)
		c.jitter = func(n int64) int64 {
			mu.Lock()
			defer mu.Unlock()
			return r.Int64N(n)
		}
	}
}

// WithKeyGenerator replaces the generator of idempotency keys, one per
// logical operation (default a random UUIDv4). Keys must be 1 to 255
// visible ASCII characters.
func WithKeyGenerator(gen func() string) Option {
	return func(c *Client) {
		if gen != nil {
			c.newKey = gen
		}
	}
}

// WithUserAgent sets the User-Agent header (default DefaultUserAgent).
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a Client for the API at baseURL (such as
// "http://127.0.0.1:8080") that authenticates with apiKey. It fails if
// baseURL is not an absolute http or https URL.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("orderly: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("orderly: base URL %q: want http:// or https:// and a host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("orderly: base URL %q: must not have a query or fragment", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	c := &Client{
		base:          u,
		apiKey:        apiKey,
		http:          http.DefaultClient,
		maxAttempts:   DefaultMaxAttempts,
		baseDelay:     DefaultBaseDelay,
		maxDelay:      DefaultMaxDelay,
		maxRetryAfter: DefaultMaxRetryAfter,
		sleep:         sleepTimer,
		now:           time.Now,
		newKey:        uuid.NewString,
		userAgent:     DefaultUserAgent,
		jitter:        rand.Int64N,
	}
	for _, opt := range opts {
		opt(c)
	}
	return c, nil
}

// sleepTimer waits d or until ctx ends, whichever is first.
func sleepTimer(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CallOption adjusts one side-effecting call.
type CallOption func(*callConfig)

type callConfig struct {
	key string
}

// WithIdempotencyKey makes a side-effecting call use key instead of a
// generated one: pass the key of an earlier call to retry that operation
// later, or a key of your own making (1 to 255 visible ASCII characters).
func WithIdempotencyKey(key string) CallOption {
	return func(cc *callConfig) { cc.key = key }
}

// Response is the outcome of a successful call, and what is known of a
// failed one (Value is then the zero value).
type Response[T any] struct {
	// Value is the decoded response body.
	Value T
	// StatusCode is the HTTP status of the last response received (0 if
	// none arrived).
	StatusCode int
	// Header is the header of the last response received (nil if none
	// arrived).
	Header http.Header
	// Replayed is true when the server answered with the stored outcome of
	// an earlier request with the same key (Idempotency-Replayed: true).
	Replayed bool
	// IdempotencyKey is the key sent with a side-effecting call ("" for a
	// GET). Calling again with WithIdempotencyKey(IdempotencyKey) is a safe
	// retry of the same operation.
	IdempotencyKey string
	// KeyExpiresAt is when the server forgets the key
	// (Idempotency-Key-Expires); zero if not sent.
	KeyExpiresAt time.Time
	// Attempts is how many requests were sent, retries included.
	Attempts int
}

// validKey reports whether k is 1 to 255 visible ASCII characters, the keys
// Orderly accepts.
func validKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// keyHeader encodes k as a structured-field string (RFC 9651 §3.3.3), the
// form the Idempotency-Key draft specifies.
func keyHeader(k string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(k) + `"`
}

// errInvalidKey is returned before anything is sent when a key is unusable.
var errInvalidKey = errors.New("idempotency key must be 1 to 255 visible ASCII characters")
