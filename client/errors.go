package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// ProblemBaseURI prefixes every problem type Orderly sends; the rest of the
// type is the Code.
const ProblemBaseURI = "https://orderly.dev/problems/"

// Problem codes, the last path segment of a problem type (docs/problems.md).
const (
	CodeInvalid             = "invalid"
	CodeUnauthorized        = "unauthorized"
	CodeDeclined            = "payment_declined"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeInvalidTransition   = "invalid_transition"
	CodeKeyInProgress       = "idempotency_key_in_progress"
	CodeOrderBusy           = "order_busy"
	CodeNeedsAttention      = "needs_attention"
	CodePayloadTooLarge     = "payload_too_large"
	CodeUnsupportedMedia    = "unsupported_media_type"
	CodeMismatch            = "mismatch"
	CodeFulfillmentRejected = "fulfillment_rejected"
	CodeRefundRejected      = "refund_rejected"
	CodeKeyReused           = "idempotency_key_reused"
	CodeKeyExpired          = "idempotency_key_expired"
	CodeKeyRequired         = "idempotency_key_required"
	CodeUnavailable         = "unavailable"
	CodeInternal            = "internal"
)

// FieldError names one invalid field of a request and why it is invalid.
// Field is a JSON path such as "items[2].quantity".
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Error is an error answer of the API, usually an RFC 9457 problem. Read it
// with errors.As:
//
//	var apiErr *client.Error
//	if errors.As(err, &apiErr) && apiErr.Code == client.CodeMismatch { … }
type Error struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Type is the problem type URI, such as
	// "https://orderly.dev/problems/payment_declined" ("" if the body was
	// not a problem).
	Type string
	// Code is the last path segment of Type, such as "payment_declined"; see
	// the Code constants.
	Code string
	// Title is the problem's short summary (the status text if the body was
	// not a problem).
	Title string
	// Detail explains this occurrence.
	Detail string
	// Instance is the request path the problem refers to.
	Instance string
	// Fields lists invalid fields of an "invalid" problem.
	Fields []FieldError
	// Retryable is true when the same call with the same key may succeed
	// later (409 in progress, 429, 500, 502, 503, 504); the client already
	// retried it as far as its options allow.
	Retryable bool
	// Replayed is true when the error is the stored outcome of an earlier
	// request with the same key (Idempotency-Replayed: true): a final error
	// such as a decline, replayed.
	Replayed bool
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "orderly: %d", e.StatusCode)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Title != "" {
		b.WriteString(": " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	if len(e.Fields) > 0 {
		parts := make([]string, len(e.Fields))
		for i, f := range e.Fields {
			parts[i] = f.Field + " " + f.Reason
		}
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	return b.String()
}

// NetworkError is a call that got no usable response in any of its
// attempts: the connection failed, was reset or timed out every time. The
// operation may or may not have happened; calling again with the same key is
// safe.
type NetworkError struct {
	// Method and Path identify the call.
	Method, Path string
	// Attempts is how many requests were sent.
	Attempts int
	// Err is the last attempt's error.
	Err error
	// NotSent reports that no attempt reached the server: each failed to
	// connect (a refused connection, say), so the operation did not happen.
	// When it is false the operation may or may not have happened.
	NotSent bool
}

// Error implements error.
func (e *NetworkError) Error() string {
	return fmt.Sprintf("orderly: %s %s: no response after %d attempts: %v", e.Method, e.Path, e.Attempts, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *NetworkError) Unwrap() error { return e.Err }

// problem is the RFC 9457 body.
type problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail"`
	Instance string       `json:"instance"`
	Errors   []FieldError `json:"errors"`
}

// parseError builds the *Error for a non-2xx response.
func parseError(status int, h http.Header, body []byte) *Error {
	e := &Error{StatusCode: status, Replayed: h.Get("Idempotency-Replayed") == "true"}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	var p problem
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(body, &p) == nil && p.Type != "" {
		e.Type, e.Title, e.Detail, e.Instance, e.Fields = p.Type, p.Title, p.Detail, p.Instance, p.Errors
		e.Code = e.Type[strings.LastIndex(e.Type, "/")+1:]
	} else {
		e.Detail = snippet(body)
	}
	if e.Title == "" {
		e.Title = http.StatusText(status)
	}
	e.Retryable = retryableStatus(status, e.Code)
	return e
}

// snippet is the start of a non-problem error body, for Detail.
func snippet(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// retryableStatus reports whether a response with status and problem code
// is worth retrying with the same key.
func retryableStatus(status int, code string) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return code == CodeKeyInProgress || code == CodeOrderBusy
	}
	return false
}

// asError returns the *Error in err's chain, or nil.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// IsNotFound reports whether err is a 404: no such order for this tenant (or
// no such route).
func IsNotFound(err error) bool {
	e := asError(err)
	return e != nil && e.StatusCode == http.StatusNotFound
}

// IsDeclined reports whether err is a 402 payment_declined: final, the order
// stays unpaid; pay with another method (and a new key).
func IsDeclined(err error) bool {
	e := asError(err)
	return e != nil && e.Code == CodeDeclined
}

// IsInvalidTransition reports whether err is a 409 invalid_transition: the
// order's state does not allow the event.
func IsInvalidTransition(err error) bool {
	e := asError(err)
	return e != nil && e.Code == CodeInvalidTransition
}

// IsConflict reports whether err is any 409: an invalid transition, or a
// request with the same key still in progress after every retry.
func IsConflict(err error) bool {
	e := asError(err)
	return e != nil && e.StatusCode == http.StatusConflict
}

// IsKeyReused reports whether err is a 422 idempotency_key_reused: the key
// was first used with a different request, whose outcome stands.
func IsKeyReused(err error) bool {
	e := asError(err)
	return e != nil && e.Code == CodeKeyReused
}

// IsRetryable reports whether calling again later with the same idempotency
// key may succeed: a retryable *Error or a *NetworkError. A cancelled or
// expired context is not retryable by this definition; the caller decides.
func IsRetryable(err error) bool {
	if e := asError(err); e != nil {
		return e.Retryable
	}
	var ne *NetworkError
	return errors.As(err, &ne) && !errors.Is(err, context.Canceled)
}
