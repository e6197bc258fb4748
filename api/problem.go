package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

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
	codeUnsupportedMedia apperr.Code = "unsupported_media_type"
	codeMethodNotAllowed apperr.Code = "method_not_allowed"
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
var problems = map[apperr.Code]problemKind{
	apperr.EInvalid:             {http.StatusBadRequest, "Invalid request", false},
	apperr.ENotFound:            {http.StatusNotFound, "Not found", false},
	apperr.EInvalidTransition:   {http.StatusConflict, "Invalid state transition", false},
	apperr.EMismatch:            {http.StatusUnprocessableEntity, "Request does not match the order", false},
	apperr.EDeclined:            {http.StatusPaymentRequired, "Payment declined", false},
	apperr.EFulfillmentRejected: {http.StatusUnprocessableEntity, "Fulfillment rejected", false},
	apperr.ERefundRejected:      {http.StatusUnprocessableEntity, "Refund rejected", false},
	apperr.EKeyReused:           {http.StatusUnprocessableEntity, "Idempotency key reused", false},
	apperr.EKeyInProgress:       {http.StatusConflict, "Request in progress", true},
	apperr.EKeyExpired:          {http.StatusUnprocessableEntity, "Idempotency key expired", false},
	apperr.EOrderBusy:           {http.StatusConflict, "Order busy", true},
	apperr.EKeyRequired:         {http.StatusBadRequest, "Idempotency key required", false},
	apperr.EUnavailable:         {http.StatusServiceUnavailable, "Service unavailable", true},
	apperr.EInternal:            {http.StatusInternalServerError, "Internal error", false},
	codeUnauthorized:            {http.StatusUnauthorized, "Unauthorized", false},
	codeTooLarge:                {http.StatusRequestEntityTooLarge, "Payload too large", false},
	codeUnsupportedMedia:        {http.StatusUnsupportedMediaType, "Unsupported media type", false},
	codeMethodNotAllowed:        {http.StatusMethodNotAllowed, "Method not allowed", false},
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

// retryAfterSeconds is the Retry-After sent with retryable problems.
const retryAfterSeconds = "1"

// writeError writes err as problem+json. An error that is not an
// *apperr.Error is logged and answered as a bare 500, never with its text.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var oe *apperr.Error
	if !errors.As(err, &oe) {
		log.ErrorContext(r.Context(), "internal error", "err", err, "method", r.Method, "path", r.URL.Path)
		oe = &apperr.Error{Code: apperr.EInternal, Message: "an unexpected error occurred; it has been logged"}
	}
	if oe.Code == apperr.EUnavailable {
		log.WarnContext(r.Context(), "unavailable", "detail", oe.Message, "method", r.Method, "path", r.URL.Path)
	}
	k, ok := problems[oe.Code]
	if !ok {
		k = problems[apperr.EInternal]
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
