package operator

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

// limitParam reads the optional "limit" query parameter (1–100, default
// 100); ok is false when it answered 400.
func limitParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 100, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		api.WriteError(w, r, nil, &apperr.Error{Code: apperr.EInvalid, Message: "invalid query parameters",
			Fields: []apperr.FieldError{{Field: "limit", Reason: "must be an integer from 1 to 100"}}})
		return 0, false
	}
	return n, true
}

// ActionView is a recorded operator action as the audit log shows it:
// who, what, on which target, why and when, and the answer it gave
// (Result, the action's JSON answer).
type ActionView struct {
	ID       string          `json:"id"`
	Actor    string          `json:"actor"`
	Action   string          `json:"action"`
	TenantID string          `json:"tenant"`
	Target   string          `json:"target"`
	Reason   string          `json:"reason"`
	EventID  string          `json:"event_id"`
	At       time.Time       `json:"at"`
	Result   json.RawMessage `json:"result"`
}

// ViewAction returns a's ActionView.
func ViewAction(a store.OperatorAction) ActionView {
	res := json.RawMessage(a.Result)
	if !json.Valid(res) {
		res = json.RawMessage("null")
	}
	return ActionView{ID: a.ID, Actor: a.Actor, Action: a.Action, TenantID: a.TenantID, Target: a.Target, Reason: a.Reason,
		EventID: a.EventID, At: a.CreatedAt, Result: res}
}

// listActions answers GET /actions?tenant=&limit=: the audit log, newest
// first.
func (h *handler) listActions(w http.ResponseWriter, r *http.Request) {
	limit, ok := limitParam(w, r)
	if !ok {
		return
	}
	as, err := h.ops.Store().ListOperatorActions(r.Context(), store.ActionSearch{Tenants: tenants(r), Limit: limit})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := struct {
		Data []ActionView `json:"data"`
	}{Data: []ActionView{}}
	for _, a := range as {
		out.Data = append(out.Data, ViewAction(a))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// getProviderObject answers GET /provider-objects/{ref}?tenant=: the
// provider attempts whose provider object id (a charge's or shipment's id
// at the provider) is ref, oldest first.
func (h *handler) getProviderObject(w http.ResponseWriter, r *http.Request) {
	as, err := h.ops.Store().AttemptsByProviderRef(r.Context(), tenants(r), chi.URLParam(r, "ref"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := struct {
		Data []service.AttemptView `json:"data"`
	}{Data: []service.AttemptView{}}
	for _, a := range as {
		out.Data = append(out.Data, service.ViewAttempt(a))
	}
	api.WriteJSON(w, http.StatusOK, out)
}

// resendFailed answers POST /webhook-endpoints/{id}/resend-failed {since,
// reason}: every failed delivery of the endpoint that failed at or after
// since (RFC 3339) is sent again.
func (h *handler) resendFailed(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Since  string `json:"since"`
		Reason string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	id, ok := h.endpointParam(w, r)
	if !ok {
		return
	}
	since, err := time.Parse(time.RFC3339, in.Since)
	if err != nil {
		h.fail(w, r, &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields",
			Fields: []apperr.FieldError{{Field: "since", Reason: "must be an RFC 3339 time, such as 2026-12-01T00:00:00Z"}}})
		return
	}
	res, err := h.ops.ResendFailedDeliveries(r.Context(), c, id, since)
	h.answer(w, r, res, err)
}

// cancelOrder answers POST /orders/{id}/cancel {reason}: the order is
// cancelled (refunded first when paid) on its customer's behalf.
func (h *handler) cancelOrder(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Reason string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	id := chi.URLParam(r, "id")
	if !order.ValidID(id) {
		h.fail(w, r, apperr.Errorf(apperr.ENotFound, "order %s not found", id))
		return
	}
	res, err := h.ops.CancelOrder(r.Context(), c, id)
	h.answer(w, r, res, err)
}

// rotateSecret answers POST /webhook-endpoints/{id}/rotate-secret
// {grace_seconds, reason}: a new signing secret, in this answer only
// ("secret"); the former one signs beside it for grace_seconds (0 to
// 604800).
func (h *handler) rotateSecret(w http.ResponseWriter, r *http.Request) {
	var in struct {
		GraceSeconds int64  `json:"grace_seconds"`
		Reason       string `json:"reason"`
	}
	c, ok := h.write(w, r, &in, &in.Reason)
	if !ok {
		return
	}
	id, ok := h.endpointParam(w, r)
	if !ok {
		return
	}
	if in.GraceSeconds < 0 || in.GraceSeconds > int64(service.MaxRotationGrace/time.Second) {
		h.fail(w, r, &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields",
			Fields: []apperr.FieldError{{Field: "grace_seconds", Reason: "must be from 0 to 604800 (7 days)"}}})
		return
	}
	res, err := h.ops.RotateEndpointSecret(r.Context(), c, id, time.Duration(in.GraceSeconds)*time.Second)
	h.answer(w, r, res, err)
}

// endpointParam returns the {id} path parameter of a webhook-endpoint
// action. An id that cannot name an endpoint answers 404 (problem type
// not-found) and ok is false: the caller returns at once.
func (h *handler) endpointParam(w http.ResponseWriter, r *http.Request) (id string, ok bool) {
	id = chi.URLParam(r, "id")
	if !event.ValidEndpointID(id) {
		h.fail(w, r, apperr.Errorf(apperr.ENotFound, "no webhook endpoint %s", id))
		return "", false
	}
	return id, true
}
