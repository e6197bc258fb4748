package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/orderly/orderly/order"
)

// ProblemBaseURI prefixes every problem type; the slug after it is stable.
// docs/problems.md describes each type.
const ProblemBaseURI = "https://orderly.dev/problems/"

// HTTP-level error codes, beside the application's in package order.
const (
	codeUnauthorized     order.Code = "unauthorized"
	codeTooLarge         order.Code = "payload_too_large"
	codeUnsupportedMedia order.Code = "unsupported_media_type"
	codeMethodNotAllowed order.Code = "method_not_allowed"
)

// problemKind is one row of the table: HTTP status, title, and whether the
// client should retry later (Retry-After is set).
type problemKind struct {
	status     int
	title      string
	retryAfter bool
}

// problems is the one table from error code to HTTP status and problem type
// (RFC 9457 §3.1: type, title, status).
var problems = map[order.Code]problemKind{
	order.EInvalid:             {http.StatusBadRequest, "Invalid request", false},
	order.ENotFound:            {http.StatusNotFound, "Not found", false},
	order.EInvalidTransition:   {http.StatusConflict, "Invalid state transition", false},
	order.EMismatch:            {http.StatusUnprocessableEntity, "Request does not match the order", false},
	order.EDeclined:            {http.StatusPaymentRequired, "Payment declined", false},
	order.EFulfillmentRejected: {http.StatusUnprocessableEntity, "Fulfillment rejected", false},
	order.ERefundRejected:      {http.StatusUnprocessableEntity, "Refund rejected", false},
	order.EKeyReused:           {http.StatusUnprocessableEntity, "Idempotency key reused", false},
	order.EKeyInProgress:       {http.StatusConflict, "Request in progress", true},
	order.EKeyExpired:          {http.StatusUnprocessableEntity, "Idempotency key expired", false},
	order.EOrderBusy:           {http.StatusConflict, "Order busy", true},
	order.EKeyRequired:         {http.StatusBadRequest, "Idempotency key required", false},
	order.EUnavailable:         {http.StatusServiceUnavailable, "Service unavailable", true},
	order.EInternal:            {http.StatusInternalServerError, "Internal error", false},
	codeUnauthorized:           {http.StatusUnauthorized, "Unauthorized", false},
	codeTooLarge:               {http.StatusRequestEntityTooLarge, "Payload too large", false},
	codeUnsupportedMedia:       {http.StatusUnsupportedMediaType, "Unsupported media type", false},
	codeMethodNotAllowed:       {http.StatusMethodNotAllowed, "Method not allowed", false},
}

// StatusOf returns the HTTP status for an error code (500 for an unknown
// one). The service records it for final errors.
func StatusOf(c order.Code) int {
	if k, ok := problems[c]; ok {
		return k.status
	}
	return http.StatusInternalServerError
}

// Problem is an RFC 9457 problem details object. Errors lists invalid
// fields for "invalid" problems (an extension member).
type Problem struct {
	Type     string             `json:"type"`
	Title    string             `json:"title"`
	Status   int                `json:"status"`
	Detail   string             `json:"detail,omitempty"`
	Instance string             `json:"instance,omitempty"`
	Errors   []order.FieldError `json:"errors,omitempty"`
}

// retryAfterSeconds is the Retry-After sent with retryable problems.
const retryAfterSeconds = "1"

// writeError writes err as problem+json. An error that is not an
// *order.Error is logged and answered as a bare 500, never with its text.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var oe *order.Error
	if !errors.As(err, &oe) {
		log.ErrorContext(r.Context(), "internal error", "err", err, "method", r.Method, "path", r.URL.Path)
		oe = &order.Error{Code: order.EInternal, Message: "an unexpected error occurred; it has been logged"}
	}
	if oe.Code == order.EUnavailable {
		log.WarnContext(r.Context(), "unavailable", "detail", oe.Message, "method", r.Method, "path", r.URL.Path)
	}
	k, ok := problems[oe.Code]
	if !ok {
		k = problems[order.EInternal]
	}
	if k.retryAfter {
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	p := Problem{
		Type:     ProblemBaseURI + string(oe.Code),
		Title:    k.title,
		Status:   k.status,
		Detail:   oe.Message,
		Instance: r.URL.Path,
		Errors:   oe.Fields,
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(k.status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(p)
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
