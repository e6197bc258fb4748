package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/admission"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/service"
)

// ProblemBaseURI prefixes every problem type; the slug after it is stable.
// docs/problems.md describes each type.
const ProblemBaseURI = "https://orderly.dev/problems/"

// HTTP-level error codes, beside the application's in package apperr.
const (
	codeUnauthorized     apperr.Code = "unauthorized"
	codeTooLarge         apperr.Code = "payload_too_large"
	codeRequestTimeout   apperr.Code = "request_timeout"
	codeUnsupportedMedia apperr.Code = "unsupported_media_type"
	codeMethodNotAllowed apperr.Code = "method_not_allowed"
	// codeOverloaded: the server already serves its limit of requests at
	// once (Config.MaxInFlight); the request was refused before it did
	// anything (503 with Retry-After).
	codeOverloaded = admission.CodeOverloaded
	// codeTooManyRequests: the tenant already has its limit of requests in
	// flight (Config.TenantMaxInFlight); refused before it did anything
	// (429 with Retry-After).
	codeTooManyRequests = admission.CodeTooManyRequests
	// codeRateLimited: the tenant exceeds its rate (Config.TenantRateLimit),
	// or the client address its failed authentications
	// (Config.AuthFailuresPerMinute); the request did nothing (429 with a
	// Retry-After the limiter computes).
	codeRateLimited = admission.CodeRateLimited
)

// problemKind is one row of the table: HTTP status, title, and, for a
// problem the client should retry later, the Retry-After in seconds (0: none).
type problemKind struct {
	status     int
	title      string
	retryAfter int
}

// problems is the one table from error code to HTTP status and problem type
// (RFC 9457 §3.1: type, title, status).
var problems = map[apperr.Code]problemKind{
	apperr.EInvalid:               {http.StatusBadRequest, "Invalid request", 0},
	apperr.ENotFound:              {http.StatusNotFound, "Not found", 0},
	apperr.EInvalidTransition:     {http.StatusConflict, "Invalid state transition", 0},
	apperr.EMismatch:              {http.StatusUnprocessableEntity, "Request does not match the order", 0},
	apperr.EDeclined:              {http.StatusPaymentRequired, "Payment declined", 0},
	apperr.EFulfillmentRejected:   {http.StatusUnprocessableEntity, "Fulfillment rejected", 0},
	apperr.ERefundRejected:        {http.StatusUnprocessableEntity, "Refund rejected", 0},
	apperr.ERefundExceedsCaptured: {http.StatusConflict, "Refund exceeds the captured amount", 0},
	apperr.ENotCaptured:           {http.StatusConflict, "Payment not captured", 0},
	apperr.EKeyReused:             {http.StatusUnprocessableEntity, "Idempotency key reused", 0},
	apperr.EKeyInProgress:         {http.StatusConflict, "Request in progress", 1},
	apperr.EKeyExpired:            {http.StatusUnprocessableEntity, "Idempotency key expired", 0},
	apperr.EOrderBusy:             {http.StatusConflict, "Order busy", 1},
	apperr.ENeedsAttention:        {http.StatusConflict, "Needs attention", 0},
	apperr.ELimitReached:          {http.StatusConflict, "Limit reached", 0},
	apperr.EForbidden:             {http.StatusForbidden, "Forbidden", 0},
	apperr.EFindingContradicted:   {http.StatusConflict, "Finding contradicts the provider", 0},
	apperr.EAttemptNotParked:      {http.StatusConflict, "Attempt not parked", 0},
	apperr.EDeliveryNotFailed:     {http.StatusConflict, "Delivery not failed", 0},
	apperr.EEndpointEnabled:       {http.StatusConflict, "Endpoint enabled", 0},
	apperr.EKeyRequired:           {http.StatusBadRequest, "Idempotency key required", 0},
	apperr.EUnavailable:           {http.StatusServiceUnavailable, "Service unavailable", 2},
	apperr.EInternal:              {http.StatusInternalServerError, "Internal error", 0},
	codeUnauthorized:              {http.StatusUnauthorized, "Unauthorized", 0},
	codeTooLarge:                  {http.StatusRequestEntityTooLarge, "Payload too large", 0},
	codeRequestTimeout:            {http.StatusRequestTimeout, "Request timeout", 0},
	codeUnsupportedMedia:          {http.StatusUnsupportedMediaType, "Unsupported media type", 0},
	codeMethodNotAllowed:          {http.StatusMethodNotAllowed, "Method not allowed", 0},
	codeOverloaded:                {http.StatusServiceUnavailable, "Server overloaded", 1},
	codeRateLimited:               {http.StatusTooManyRequests, "Too many requests", 1},
	codeTooManyRequests:           {http.StatusTooManyRequests, "Too many requests in flight", 1},
}

// retryAfter returns the Retry-After value (RFC 9110 §10.2.3) of a row: its
// seconds plus up to as many again, at random, so that clients refused in
// the same instant (an overload, a database timeout) come back spread over a
// window rather than in one wave. The rows ask for 1s (so 1–2s) where a slot
// or a key frees as soon as one request or provider call ends (overloaded,
// in progress, order busy), and 2s (2–4s) after a dependency failed or timed
// out, which takes longer to recover.
func retryAfter(seconds int) string {
	return strconv.Itoa(seconds + rand.IntN(seconds+1))
}

// maxRetryAfter bounds a Retry-After the server computed (a lease's
// remaining time), in seconds: a client is never told to stay away longer.
const maxRetryAfter = 60

// boundedRetryAfter returns d as a Retry-After in whole seconds, rounded
// up, from 1 to maxRetryAfter.
func boundedRetryAfter(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return min(max(s, 1), maxRetryAfter)
}

// statusOf returns the HTTP status for an error code (500 for an unknown
// one).
func statusOf(c apperr.Code) int {
	if k, ok := problems[c]; ok {
		return k.status
	}
	return http.StatusInternalServerError
}

// outcomeStatus is the HTTP status of a completed key's stored outcome, as
// its replay answers: the error code's, else 201 for a create and 200 for a
// transition. It is 0 for a key that is not completed.
func outcomeStatus(k service.KeyInfo) int {
	switch {
	case k.State != service.KeyCompleted:
		return 0
	case k.ErrorCode != "":
		return statusOf(k.ErrorCode)
	case k.Operation == idempotency.OpCreate:
		return http.StatusCreated
	}
	return http.StatusOK
}

// Problem is an RFC 9457 problem details object. Errors lists invalid
// fields for "invalid" problems (an extension member).
type Problem struct {
	Type     string              `json:"type"`
	Title    string              `json:"title"`
	Status   int                 `json:"status"`
	Detail   string              `json:"detail,omitempty"`
	Instance string              `json:"instance,omitempty"`
	Errors   []apperr.FieldError `json:"errors,omitempty"`
}

// writeError writes err as problem+json. An error that is not an
// *apperr.Error is logged and answered as a bare 500, never with its text —
// unless it is the request's own deadline or cancellation, which is a 503
// like the stores' translation of it: a request past its deadline is never
// a 500. Logs go to log (a nil log logs nothing) and name the route
// template, never the path, which may hold an idempotency key.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var oe *apperr.Error
	switch {
	case errors.As(err, &oe):
	case r.Context().Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		oe = &apperr.Error{Code: apperr.EUnavailable, Message: "the request was cancelled or timed out"}
	default:
		if log != nil {
			log.ErrorContext(r.Context(), "internal error", "err", err, "method", r.Method, "route", routeOf(r))
		}
		oe = &apperr.Error{Code: apperr.EInternal, Message: "an unexpected error occurred; it has been logged"}
	}
	if oe.Code == apperr.EUnavailable && log != nil {
		log.WarnContext(r.Context(), "unavailable", "detail", oe.Message, "method", r.Method, "route", routeOf(r))
	}
	p, ra := problemOf(oe)
	if ra != "" {
		w.Header().Set("Retry-After", ra)
	}
	p.Instance = r.URL.Path
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
}

// problemOf returns the problem of oe by the one table, and its Retry-After
// field value ("" for none): oe's own RetryAfter, bounded, when the row
// asks for one, else the row's jittered default.
func problemOf(oe *apperr.Error) (Problem, string) {
	k, ok := problems[oe.Code]
	code := oe.Code
	if !ok {
		k, code = problems[apperr.EInternal], apperr.EInternal
	}
	ra := ""
	switch {
	case oe.RetryAfter > 0 && code == codeRateLimited:
		// The limiter's own computation: exact, never capped (a bucket
		// that refills slowly means a long wait).
		ra = strconv.Itoa(int((oe.RetryAfter + time.Second - 1) / time.Second))
	case oe.RetryAfter > 0 && k.retryAfter > 0:
		ra = strconv.Itoa(boundedRetryAfter(oe.RetryAfter))
	case k.retryAfter > 0:
		ra = retryAfter(k.retryAfter)
	}
	return Problem{Type: ProblemBaseURI + string(code), Title: k.title, Status: k.status, Detail: oe.Message, Errors: oe.Fields}, ra
}

// ProblemFor returns the problem a request failing with err is answered
// with, as the HTTP API would answer it (the one table), and the
// Retry-After it would carry (0: none). An error that is not an
// *apperr.Error is an internal error whose text is not shown. Transports
// other than HTTP (package natsbus) use it, so every transport answers one
// failure with one problem.
func ProblemFor(err error) (Problem, time.Duration) {
	var oe *apperr.Error
	if !errors.As(err, &oe) {
		oe = &apperr.Error{Code: apperr.EInternal, Message: "an unexpected error occurred; it has been logged"}
	}
	p, ra := problemOf(oe)
	n, _ := strconv.Atoi(ra)
	return p, time.Duration(n) * time.Second
}

// Code returns the stable slug of p's type ("idempotency_key_reused").
func (p Problem) Code() string { return strings.TrimPrefix(p.Type, ProblemBaseURI) }

// routeOf returns the route template of r ("/v1/idempotency-keys/{key}"),
// never its path: a path may hold an idempotency key, which is never logged.
// It is "" before routing and for a path no route matches.
func routeOf(r *http.Request) string {
	if rc := chi.RouteContext(r.Context()); rc != nil {
		return rc.RoutePattern()
	}
	return ""
}

// CodeUnauthorized and CodeRateLimited are the HTTP-level codes other
// entry points (package operator) answer with: a missing or unknown
// credential (401), and too many failed authentications from one client
// address (429; the caller sets Retry-After).
const (
	CodeUnauthorized = codeUnauthorized
	CodeRateLimited  = codeRateLimited
)

// WriteError writes err as RFC 9457 problem+json through the one table
// of problem types, for entry points beside the tenant API (package
// operator): an *apperr.Error with its type, status and Retry-After, and
// anything else as a logged, opaque 500.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	writeError(w, r, log, err)
}

// WriteJSON writes v as JSON with status, not cached.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
