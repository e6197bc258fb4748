package api

import (
	"context"
	"net/http"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/orderly/orderly/apperr"
)

// admit bounds the requests served at once to n. A request past the bound is
// refused at once with a 503 "overloaded" problem and Retry-After: it never
// waits for a slot, so an overload cannot build an unbounded queue of
// requests that time out before they start. A slot is held until the
// handler returns, including a provider call that outlives the client.
func (s *server) admit(n int) func(http.Handler) http.Handler {
	slots := semaphore.NewWeighted(int64(n))
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !slots.TryAcquire(1) {
				writeError(w, r, s.log, apperr.Errorf(codeOverloaded,
					"the server is serving its limit of %d requests; retry after Retry-After", n))
				return
			}
			defer slots.Release(1)
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
			// Reading the body counts too: a client that trickles it in
			// would otherwise hold its admission slot until the server's
			// ReadTimeout (408 request_timeout instead).
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}
