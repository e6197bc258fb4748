package api

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/webhook"
)

// mountEvents adds the event feed and the webhook endpoints to r.
func (s *server) mountEvents(r chi.Router, ep *webhook.Endpoints) {
	h := eventsHandler{s: s, ep: ep}
	r.Get("/events", h.list)
	r.Get("/events/{id}", h.get)
	r.Post("/webhook-endpoints", h.createEndpoint)
	r.Get("/webhook-endpoints", h.listEndpoints)
	r.Get("/webhook-endpoints/{id}", h.getEndpoint)
	r.Delete("/webhook-endpoints/{id}", h.deleteEndpoint)
	r.Get("/webhook-endpoints/{id}/deliveries", h.deliveries)
}

type eventsHandler struct {
	s  *server
	ep *webhook.Endpoints
}

// eventPage is the body of GET /v1/events. NextCursor is the cursor of the
// last event of the page (the request's own after when the page is
// empty): a consumer stores it and asks again with after=<it>.
type eventPage struct {
	Data       []json.RawMessage `json:"data"`
	NextCursor string            `json:"next_cursor,omitempty"`
	HasMore    bool              `json:"has_more"`
}

func (h eventsHandler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := event.Filter{Type: event.Type(q.Get("type")), OrderID: q.Get("order_id")}
	var fe []apperr.FieldError
	if f.Type != "" && !f.Type.Valid() {
		fe = append(fe, apperr.FieldError{Field: "type", Reason: "is not an event type"})
	}
	if f.OrderID != "" && !order.ValidID(f.OrderID) {
		fe = append(fe, apperr.FieldError{Field: "order_id", Reason: "is not an order id"})
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > event.MaxLimit {
			fe = append(fe, apperr.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"})
		}
		f.Limit = n
	}
	after := q.Get("after")
	if after != "" {
		c, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || len(c) == 0 {
			fe = append(fe, apperr.FieldError{Field: "after", Reason: "is not a cursor this feed returned"})
		}
		f.After = string(c)
	}
	if len(fe) > 0 {
		writeError(w, r, h.s.log, &apperr.Error{Code: apperr.EInvalid, Message: "invalid query parameters", Fields: fe})
		return
	}
	f = f.Clamp()
	evs, err := h.ep.Events(r.Context(), tenantOf(r.Context()), f)
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	page := eventPage{Data: make([]json.RawMessage, len(evs)), NextCursor: after, HasMore: len(evs) == f.Limit}
	for i, ev := range evs {
		page.Data[i] = ev.Body
	}
	if len(evs) > 0 {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(evs[len(evs)-1].Cursor))
	}
	writeJSON(w, http.StatusOK, page)
}

func (h eventsHandler) get(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !event.ValidID(id) {
		writeError(w, r, h.s.log, apperr.Errorf(apperr.ENotFound, "event %s not found", id))
		return
	}
	ev, err := h.ep.Event(r.Context(), tenantOf(r.Context()), id)
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, ev.Body)
}

// endpointInput is the body of POST /v1/webhook-endpoints.
type endpointInput struct {
	URL    *string      `json:"url"`
	Events []event.Type `json:"events"`
}

// endpointsRoute is the route template registrations are fingerprinted
// under.
const endpointsRoute = "/v1/webhook-endpoints"

// createEndpoint registers an endpoint, honouring Idempotency-Key as a
// create of an order does (webhook.Endpoints.CreateOnce): a retry with the
// key replays the registration, its secret included, with
// Idempotency-Replayed: true; the key with another body is a 422.
func (h eventsHandler) createEndpoint(w http.ResponseWriter, r *http.Request) {
	var in endpointInput
	body, err := h.s.readBody(w, r, &in, true)
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	key, err := h.s.decoder().Key(keyValues(r), endpointsRoute, nil, body)
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	url := ""
	if in.URL != nil {
		url = *in.URL
	}
	res, err := h.ep.CreateOnce(r.Context(), tenantOf(r.Context()), key, url, in.Events)
	if res.Replayed {
		w.Header().Set("Idempotency-Replayed", "true")
	}
	if !res.KeyExpiresAt.IsZero() {
		w.Header().Set("Idempotency-Key-Expires", res.KeyExpiresAt.UTC().Format(http.TimeFormat))
	}
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	w.Header().Set("Location", "/v1/webhook-endpoints/"+res.Endpoint.ID)
	writeJSON(w, http.StatusCreated, res.Endpoint)
}

// endpointList is the body of GET /v1/webhook-endpoints.
type endpointList struct {
	Data []event.Endpoint `json:"data"`
}

func (h eventsHandler) listEndpoints(w http.ResponseWriter, r *http.Request) {
	eps, err := h.ep.List(r.Context(), tenantOf(r.Context()))
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	if eps == nil {
		eps = []event.Endpoint{}
	}
	writeJSON(w, http.StatusOK, endpointList{Data: eps})
}

func (h eventsHandler) getEndpoint(w http.ResponseWriter, r *http.Request) {
	ep, err := h.ep.Get(r.Context(), tenantOf(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

func (h eventsHandler) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	if err := h.ep.Delete(r.Context(), tenantOf(r.Context()), chi.URLParam(r, "id")); err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// deliveryList is the body of GET /v1/webhook-endpoints/{id}/deliveries.
type deliveryList struct {
	Data []event.Delivery `json:"data"`
}

func (h eventsHandler) deliveries(w http.ResponseWriter, r *http.Request) {
	limit := event.DefaultLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > event.MaxLimit {
			writeError(w, r, h.s.log, &apperr.Error{Code: apperr.EInvalid, Message: "invalid query parameters",
				Fields: []apperr.FieldError{{Field: "limit", Reason: "must be an integer from 1 to 100"}}})
			return
		}
		limit = n
	}
	ds, err := h.ep.Deliveries(r.Context(), tenantOf(r.Context()), chi.URLParam(r, "id"), limit)
	if err != nil {
		writeError(w, r, h.s.log, err)
		return
	}
	if ds == nil {
		ds = []event.Delivery{}
	}
	writeJSON(w, http.StatusOK, deliveryList{Data: ds})
}
