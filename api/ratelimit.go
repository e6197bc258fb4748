package api

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/orderly/orderly/apperr"
)

// maxLimiterEntries is the number of limiters a limiterSet holds before it
// drops those whose bucket is full again (a full bucket behaves as a new
// one, so dropping it changes nothing).
const maxLimiterEntries = 10_000

// limiterSet is one token bucket (golang.org/x/time/rate) per key: a tenant,
// or a client address. A limiterSet is safe for concurrent use.
type limiterSet struct {
	name  string     // the quota policy's name in the RateLimit headers
	limit rate.Limit // tokens per second
	burst int        // bucket size
	now   func() time.Time

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newLimiterSet(name string, perSecond float64, burst int) *limiterSet {
	return &limiterSet{name: name, limit: rate.Limit(perSecond), burst: burst, now: time.Now, m: map[string]*rate.Limiter{}}
}

// get returns key's limiter, making it (with a full bucket) if needed.
func (l *limiterSet) get(key string, now time.Time) *rate.Limiter {
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

// window is the time in whole seconds a bucket takes to refill from empty:
// the "w" of the quota policy.
func (l *limiterSet) window() int {
	return int(math.Ceil(float64(l.burst) / float64(l.limit)))
}

// policy is the RateLimit-Policy field value (draft-ietf-httpapi-ratelimit-headers,
// §4: a structured-field list item naming the policy, with its quota q and
// window w in seconds).
func (l *limiterSet) policy() string {
	return fmt.Sprintf("%q;q=%d;w=%d", l.name, l.burst, l.window())
}

// state is the RateLimit field value for a bucket holding tokens
// (draft-ietf-httpapi-ratelimit-headers §5: the remaining quota r and the
// seconds t until the quota is whole again).
func (l *limiterSet) state(tokens float64) string {
	tokens = max(tokens, 0)
	reset := math.Ceil((float64(l.burst) - tokens) / float64(l.limit))
	return fmt.Sprintf("%q;r=%d;t=%d", l.name, int(math.Floor(tokens)), int(max(reset, 0)))
}

// retryAfter returns the whole seconds, at least 1, until a bucket holding
// tokens holds one token again (RFC 9110 §10.2.3 delay-seconds).
func (l *limiterSet) retryAfter(tokens float64) string {
	return strconv.Itoa(max(1, int(math.Ceil((1-tokens)/float64(l.limit)))))
}

// limitTenant answers 429 "rate_limited" with Retry-After once the request's
// tenant has used its burst and exceeds its sustained rate; every answer of
// a limited tenant carries RateLimit-Policy and RateLimit. It runs after
// authenticate.
func (s *server) limitTenant(l *limiterSet) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			now := l.now()
			lim := l.get(tenantOf(r.Context()), now)
			allowed := lim.AllowN(now, 1)
			tokens := lim.TokensAt(now)
			w.Header().Set("RateLimit-Policy", l.policy())
			w.Header().Set("RateLimit", l.state(tokens))
			if !allowed {
				w.Header().Set("Retry-After", l.retryAfter(tokens))
				writeError(w, r, s.log, apperr.Errorf(codeRateLimited,
					"this tenant exceeds its rate of %g requests per second (burst %d); retry after Retry-After", float64(l.limit), l.burst))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// authFailures counts failed authentications per client address (the host
// of the connection's remote address: behind a proxy, the proxy's). An
// address that has used up its allowance is refused with a 429 before its
// credentials are looked at, until its bucket refills; successful
// authentications cost nothing.
type authFailures struct{ *limiterSet }

// clientAddr returns the host of r.RemoteAddr.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// refused reports whether r's address has no failed authentication left;
// if so it has answered r with a 429 and Retry-After.
func (a authFailures) refused(s *server, w http.ResponseWriter, r *http.Request) bool {
	if a.limiterSet == nil {
		return false
	}
	now := a.now()
	tokens := a.get(clientAddr(r), now).TokensAt(now)
	if tokens >= 1 {
		return false
	}
	w.Header().Set("Retry-After", a.retryAfter(tokens))
	writeError(w, r, s.log, apperr.Errorf(codeRateLimited,
		"too many failed authentications from this address; retry after Retry-After"))
	return true
}

// failed records one failed authentication from r's address.
func (a authFailures) failed(r *http.Request) {
	if a.limiterSet == nil {
		return
	}
	now := a.now()
	a.get(clientAddr(r), now).AllowN(now, 1)
}
