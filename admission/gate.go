package admission

import (
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/orderly/orderly/apperr"
)

// Error codes of the bounds (package api maps them to HTTP statuses; natsbus
// retries a command refused with any of them after its RetryAfter).
const (
	// CodeRateLimited: the tenant exceeds its rate (Config.TenantRate), or
	// a client address its failed authentications; 429 with Retry-After.
	CodeRateLimited apperr.Code = "rate_limited"
	// CodeTooManyRequests: the tenant already has Config.TenantMaxInFlight
	// requests and commands running; 429 with Retry-After. Nothing was done.
	CodeTooManyRequests apperr.Code = "too_many_requests"
	// CodeOverloaded: the server already serves Config.MaxInFlight requests
	// and commands; 503 with Retry-After. Nothing was done.
	CodeOverloaded apperr.Code = "overloaded"
)

// Config configures a Gate. Zero turns a bound off.
type Config struct {
	// MaxInFlight bounds the requests and commands served at once by the
	// whole server.
	MaxInFlight int
	// TenantMaxInFlight bounds those of one tenant; it should be below
	// MaxInFlight, so that one tenant's excess is its own 429 and never the
	// server's 503.
	TenantMaxInFlight int
	// TenantRate is each tenant's sustained rate in requests per second and
	// TenantBurst what it may send at once above it (at least 1).
	TenantRate  float64
	TenantBurst int
}

// Gate applies a Config's bounds. Its methods are safe for concurrent use.
type Gate struct {
	cfg    Config
	global *semaphore.Weighted
	rate   *Limiters

	mu      sync.Mutex
	running map[string]int // in-flight count per tenant, absent at zero
}

// New returns a Gate applying cfg.
func New(cfg Config) *Gate {
	g := &Gate{cfg: cfg, running: map[string]int{}}
	if cfg.MaxInFlight > 0 {
		g.global = semaphore.NewWeighted(int64(cfg.MaxInFlight))
	}
	if cfg.TenantRate > 0 {
		g.rate = NewLimiters("tenant", cfg.TenantRate, max(cfg.TenantBurst, 1))
	}
	return g
}

// Config returns the gate's configuration.
func (g *Gate) Config() Config { return g.cfg }

// RateLimiters returns the tenant buckets, nil when there is no rate limit.
func (g *Gate) RateLimiters() *Limiters { return g.rate }

// Allow takes one token of tenant's rate. It returns the tokens left (for
// the RateLimit field) and, when the bucket was empty, an *apperr.Error
// CodeRateLimited with the RetryAfter the bucket computes. Without a rate
// limit it returns (0, nil).
func (g *Gate) Allow(tenant string) (tokens float64, err error) {
	if g.rate == nil {
		return 0, nil
	}
	ok, tokens := g.rate.Take(tenant)
	if ok {
		return tokens, nil
	}
	return tokens, &apperr.Error{Code: CodeRateLimited, RetryAfter: g.rate.RetryAfter(tokens),
		Message: fmt.Sprintf("this tenant exceeds its rate of %g requests per second (burst %d); retry after Retry-After",
			g.rate.Rate(), g.rate.Burst())}
}

// Enter takes one of tenant's in-flight slots, then one of the server's.
// It never waits: a tenant at its bound gets CodeTooManyRequests, a server
// at its bound CodeOverloaded (both *apperr.Error; the transport adds a
// Retry-After of a second or two: a slot frees as soon as one request
// ends). On
// success the caller must call release exactly once when the work is done.
func (g *Gate) Enter(tenant string) (release func(), err error) {
	if n := g.cfg.TenantMaxInFlight; n > 0 {
		g.mu.Lock()
		if g.running[tenant] >= n {
			g.mu.Unlock()
			return nil, &apperr.Error{Code: CodeTooManyRequests,
				Message: fmt.Sprintf("this tenant already has its limit of %d requests in flight; retry after Retry-After", n)}
		}
		g.running[tenant]++
		g.mu.Unlock()
	}
	if g.global != nil && !g.global.TryAcquire(1) {
		g.leave(tenant)
		return nil, &apperr.Error{Code: CodeOverloaded,
			Message: fmt.Sprintf("the server is serving its limit of %d requests; retry after Retry-After", g.cfg.MaxInFlight)}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if g.global != nil {
				g.global.Release(1)
			}
			g.leave(tenant)
		})
	}, nil
}

// leave gives back one of tenant's slots.
func (g *Gate) leave(tenant string) {
	if g.cfg.TenantMaxInFlight <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running[tenant]--; g.running[tenant] <= 0 {
		delete(g.running, tenant)
	}
}

// InFlight returns how many requests and commands tenant has running (0
// without a per-tenant bound).
func (g *Gate) InFlight(tenant string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[tenant]
}

// ProviderTenant is the key under which the payment provider's webhooks
// take their slots: it cannot be a tenant name (see ValidTenant), so the
// provider has bounds of its own.
const ProviderTenant = ":provider"
