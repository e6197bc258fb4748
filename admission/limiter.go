package admission

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLimiterEntries is the number of buckets a Limiters holds before it
// drops those that are full again (a full bucket behaves as a new one, so
// dropping it changes nothing).
const maxLimiterEntries = 10_000

// Limiters is one token bucket (golang.org/x/time/rate) per key: a tenant,
// or a client address. It is safe for concurrent use.
type Limiters struct {
	name  string     // the quota policy's name in the RateLimit headers
	limit rate.Limit // tokens per second
	burst int        // bucket size
	// Now is the clock (default time.Now); tests replace it.
	Now func() time.Time

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

// NewLimiters returns buckets named name (the quota policy's name) that
// refill at perSecond tokens a second and hold burst tokens.
func NewLimiters(name string, perSecond float64, burst int) *Limiters {
	return &Limiters{name: name, limit: rate.Limit(perSecond), burst: burst, Now: time.Now, m: map[string]*rate.Limiter{}}
}

// get returns key's bucket, making it (full) if needed.
func (l *Limiters) get(key string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.m[key]
	if ok {
		return lim
	}
	if len(l.m) >= maxLimiterEntries {
		for k, v := range l.m {
			if v.TokensAt(now) >= float64(l.burst) {
				delete(l.m, k)
			}
		}
	}
	lim = rate.NewLimiter(l.limit, l.burst)
	l.m[key] = lim
	return lim
}

// Take takes one token from key's bucket and reports whether there was one,
// with the tokens left.
func (l *Limiters) Take(key string) (allowed bool, tokens float64) {
	now := l.Now()
	lim := l.get(key, now)
	allowed = lim.AllowN(now, 1)
	return allowed, lim.TokensAt(now)
}

// Tokens returns the tokens in key's bucket without taking one.
func (l *Limiters) Tokens(key string) float64 {
	now := l.Now()
	return l.get(key, now).TokensAt(now)
}

// Rate is the sustained rate in tokens per second; Burst the bucket size.
func (l *Limiters) Rate() float64 { return float64(l.limit) }

// Burst is the bucket size.
func (l *Limiters) Burst() int { return l.burst }

// window is the time in whole seconds a bucket takes to refill from empty:
// the "w" of the quota policy.
func (l *Limiters) window() int {
	return int(math.Ceil(float64(l.burst) / float64(l.limit)))
}

// Policy is the RateLimit-Policy field value (draft-ietf-httpapi-ratelimit-headers,
// §4: a structured-field list item naming the policy, with its quota q and
// window w in seconds).
func (l *Limiters) Policy() string {
	return fmt.Sprintf("%q;q=%d;w=%d", l.name, l.burst, l.window())
}

// State is the RateLimit field value for a bucket holding tokens
// (draft-ietf-httpapi-ratelimit-headers §5: the remaining quota r and the
// seconds t until the quota is whole again).
func (l *Limiters) State(tokens float64) string {
	tokens = max(tokens, 0)
	reset := math.Ceil((float64(l.burst) - tokens) / float64(l.limit))
	return fmt.Sprintf("%q;r=%d;t=%d", l.name, int(math.Floor(tokens)), int(max(reset, 0)))
}

// RetryAfter returns the whole seconds, at least 1, until a bucket holding
// tokens holds one token again (RFC 9110 §10.2.3 delay-seconds).
func (l *Limiters) RetryAfter(tokens float64) time.Duration {
	return time.Duration(max(1, int(math.Ceil((1-tokens)/float64(l.limit))))) * time.Second
}

// RetryAfterHeader is RetryAfter as a Retry-After field value.
func (l *Limiters) RetryAfterHeader(tokens float64) string {
	return strconv.Itoa(int(l.RetryAfter(tokens) / time.Second))
}
