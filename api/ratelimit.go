package api

import (
	"net"
	"net/http"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/apperr"
)

// limitTenant answers 429 "rate_limited" with Retry-After once the request's
// tenant has used its burst and exceeds its sustained rate
// (admission.Gate.Allow, the bucket its commands share); every answer of a
// limited tenant carries RateLimit-Policy and RateLimit. It runs after
// authenticate.
func (s *server) limitTenant(next http.Handler) http.Handler {
	l := s.gate.RateLimiters()
	if l == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens, err := s.gate.Allow(tenantOf(r.Context()))
		w.Header().Set("RateLimit-Policy", l.Policy())
		w.Header().Set("RateLimit", l.State(tokens))
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authFailures counts failed authentications per client address (the host
// of the connection's remote address: behind a proxy, the proxy's). An
// address that has used up its allowance is refused with a 429 before its
// credentials are looked at, until its bucket refills; successful
// authentications cost nothing.
type authFailures struct{ *admission.Limiters }

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
	if a.Limiters == nil {
		return false
	}
	tokens := a.Tokens(clientAddr(r))
	if tokens >= 1 {
		return false
	}
	writeError(w, r, s.log, &apperr.Error{Code: codeRateLimited, RetryAfter: a.RetryAfter(tokens),
		Message: "too many failed authentications from this address; retry after Retry-After"})
	return true
}

// failed records one failed authentication from r's address.
func (a authFailures) failed(r *http.Request) {
	if a.Limiters == nil {
		return
	}
	a.Take(clientAddr(r))
}
