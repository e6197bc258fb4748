package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/api"
	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/service"
)

// actionFields are the form fields each action takes besides csrf, ikey
// (the form's Idempotency-Key), back (the page to return to) and reason.
var actionFields = map[string][]string{
	"recheck":       {"provider_key"},
	"resolve":       {"provider_key", "outcome", "note"},
	"resend":        {"endpoint_id", "event_id"},
	"resend-failed": {"endpoint_id", "since"},
	"enable":        {"endpoint_id"},
	"cancel":        {"order_id"},
	"rotate-secret": {"endpoint_id", "grace"},
}

type resultData struct {
	Result service.ActionResult
	Back   string
}

// back is the console page to return to: a path within the console
// ("/orders/ord_…?tenant=a"), or the overview.
func back(v string) string {
	if !strings.HasPrefix(v, "/") || strings.HasPrefix(v, "//") || strings.ContainsAny(v, "\\\r\n") {
		return "/"
	}
	return v
}

// act runs one action of a form: only an operator may (403 otherwise);
// its Idempotency-Key is the form's, its fingerprint the action's name
// and fields, so the same form submitted again replays the first answer.
func (h *handler) act(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	name := chi.URLParam(r, "action")
	fields, known := actionFields[name]
	if !known {
		h.notFound(w, r)
		return
	}
	backTo := back(r.PostForm.Get("back"))
	fail := func(err error) {
		p, _ := api.ProblemFor(err)
		if p.Status >= 500 {
			h.log.Error("console: action", "action", name, "err", err)
		}
		d := problemData{Status: p.Status, Title: p.Title, Detail: p.Detail, Code: p.Code(), Back: backTo}
		for _, f := range p.Errors {
			d.Fields = append(d.Fields, f.Field+": "+f.Reason)
		}
		h.render(w, r, &v, p.Status, "problem", p.Title, d)
	}
	if v.Role != operator.RoleOperator {
		fail(apperr.Errorf(apperr.EForbidden, "operator %s has role %s, which may only read; acting needs role %s",
			v.Name, v.Role, operator.RoleOperator))
		return
	}
	key, err := idempotency.ParseKey(r.PostForm.Get("ikey"))
	if err != nil {
		fail(apperr.Errorf(apperr.EKeyRequired, "the form has no valid Idempotency-Key: reload the page and submit it again"))
		return
	}
	in := map[string]string{"reason": strings.TrimSpace(r.PostForm.Get("reason"))}
	for _, f := range fields {
		in[f] = strings.TrimSpace(r.PostForm.Get(f))
	}
	body, _ := json.Marshal(in) // map keys are sorted: a canonical body
	fp, err := idempotency.Fingerprinter{VolatileFields: []string{}}.Fingerprint(idempotency.Request{
		Method: http.MethodPost, Route: Prefix + "actions/" + name, Body: body})
	if err != nil {
		fail(err)
		return
	}
	c := service.OperatorCall{Operator: service.Operator{Name: v.Name, Role: string(v.Role)}, Key: key, Fingerprint: fp,
		Reason: in["reason"]}
	ctx := r.Context()
	var res service.ActionResult
	switch name {
	case "recheck":
		res, err = h.ops.Recheck(ctx, c, in["provider_key"])
	case "resolve":
		res, err = h.ops.Resolve(ctx, c, in["provider_key"], service.Finding(in["outcome"]), in["note"])
	case "resend":
		if !event.ValidEndpointID(in["endpoint_id"]) || !event.ValidID(in["event_id"]) {
			err = apperr.Errorf(apperr.ENotFound, "no delivery of event %q to endpoint %q", in["event_id"], in["endpoint_id"])
			break
		}
		res, err = h.ops.ResendDelivery(ctx, c, in["endpoint_id"], in["event_id"])
	case "resend-failed":
		since, perr := parseSince(in["since"])
		if perr != nil {
			err = perr
			break
		}
		if !event.ValidEndpointID(in["endpoint_id"]) {
			err = apperr.Errorf(apperr.ENotFound, "no webhook endpoint %q", in["endpoint_id"])
			break
		}
		res, err = h.ops.ResendFailedDeliveries(ctx, c, in["endpoint_id"], since)
	case "enable":
		if !event.ValidEndpointID(in["endpoint_id"]) {
			err = apperr.Errorf(apperr.ENotFound, "no webhook endpoint %q", in["endpoint_id"])
			break
		}
		res, err = h.ops.EnableEndpoint(ctx, c, in["endpoint_id"])
	case "rotate-secret":
		grace, perr := time.ParseDuration(in["grace"])
		if perr != nil || grace < 0 {
			err = &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields",
				Fields: []apperr.FieldError{{Field: "grace", Reason: "must be a duration such as 24h (0s: none)"}}}
			break
		}
		if !event.ValidEndpointID(in["endpoint_id"]) {
			err = apperr.Errorf(apperr.ENotFound, "no webhook endpoint %q", in["endpoint_id"])
			break
		}
		res, err = h.ops.RotateEndpointSecret(ctx, c, in["endpoint_id"], grace)
	case "cancel":
		if !order.ValidID(in["order_id"]) {
			err = apperr.Errorf(apperr.ENotFound, "order %q not found", in["order_id"])
			break
		}
		res, err = h.ops.CancelOrder(ctx, c, in["order_id"])
	}
	if err != nil {
		fail(err)
		return
	}
	h.render(w, r, &v, http.StatusOK, "result", "Done: "+res.Action.Name, resultData{Result: res, Back: backTo})
}

// parseSince reads a datetime-local value ("2026-12-01T10:00", UTC) or an
// RFC 3339 time.
func parseSince(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, &apperr.Error{Code: apperr.EInvalid, Message: "the action has invalid fields",
		Fields: []apperr.FieldError{{Field: "since", Reason: "must be a UTC time such as 2026-12-01T10:00"}}}
}
