package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

	"github.com/orderly/orderly/admission"
)

// admitTenant takes one of the request's tenant's in-flight slots, then one
// of the server's (admission.Gate.Enter), for as long as the handler runs,
// including a provider call that outlives the client. A request past a
// bound is refused at once and never waits for a slot, so an overload
// cannot build an unbounded queue of requests that time out before they
// start: a tenant at its bound gets 429 "too_many_requests", the server at
// its bound 503 "overloaded", both with Retry-After.
//
// It runs after authenticate and bufferBody: a request takes a slot only
// once it is authenticated and its bounded body has arrived, so a client
// that trickles a body in holds no slot, and one tenant's excess is its own
// 429. tenant picks the slot's owner (the authenticated tenant, or
// admission.ProviderTenant for the provider's webhooks).
func (s *server) admitTenant(tenant func(*http.Request) string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			release, err := s.gate.Enter(tenant(r))
			if err != nil {
				writeError(w, r, s.log, err)
				return
			}
			defer release()
			next.ServeHTTP(w, r)
		})
	}
}

// bufferBody reads the request body before the request takes a slot: at
// most cfg.MaxBodyBytes (else 413 payload_too_large), within the
// connection's read deadline (readDeadline; else 408 request_timeout). The
// handler then reads it from memory.
func (s *server) bufferBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body, err := s.readAll(w, r)
		if err != nil {
			writeError(w, r, s.log, err)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// readDeadline sets the connection's read deadline to d from the request's
// arrival: a body that has not arrived by then is answered 408
// request_timeout (readAll), whoever sends it, before it holds anything but
// its connection.
func readDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
			next.ServeHTTP(w, r)
		})
	}
}

// deadline gives each request's context a deadline d from its admission.
// Whatever waits on the request's context (the pool, a statement, a lock, a
// Prefer: wait) then ends by d, and the stores answer
// context.DeadlineExceeded as apperr.EUnavailable: a 503 with Retry-After.
// Work the service carries on past the client (a provider call and its
// recording, on context.WithoutCancel bounded by the lease) drops the
// deadline with the cancellation, by design.
//
// The deadline replaces the client's connection as what ends a request: a
// client that goes away does not cancel the work it started. Cancelling
// would save little (the statement is usually done), leave the outcome as
// unknown to the server as to the client, and cost a database connection:
// pgx closes a connection whose statement was interrupted. The client's
// retry with the same key replays the outcome instead.
func deadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// providerSlot is the slot owner of the provider's webhooks.
func providerSlot(*http.Request) string { return admission.ProviderTenant }

// tenantSlot is the slot owner of an authenticated API request.
func tenantSlot(r *http.Request) string { return tenantOf(r.Context()) }
