package console

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

func contextWith(r *http.Request, v viewer) context.Context {
	return context.WithValue(r.Context(), viewerKey{}, v)
}

var pageNames = []string{"login", "problem", "overview", "orders", "order", "attempts", "endpoints", "endpoint",
	"deliveries", "audit", "result"}

var funcs = template.FuncMap{
	// pair passes the page and one item to a shared template.
	"pair": func(p page, x any) map[string]any { return map[string]any{"P": p, "X": x} },
	// money formats minor units of cur in its major unit with the code.
	"money": func(minor int64, cur string) string {
		if s, ok := order.MajorUnits(minor, cur); ok {
			return s + " " + cur
		}
		return strconv.FormatInt(minor, 10) + " minor units of " + cur
	},
	"ts": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		case *time.Time:
			if v == nil || v.IsZero() {
				return "—"
			}
			return v.UTC().Format("2006-01-02 15:04:05Z")
		}
		return ""
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "none"
		}
		return d.Round(time.Second).String()
	},
	// ikey is a fresh Idempotency-Key for one rendered form.
	"ikey": func() string { return "console-" + randomToken(12) },
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n] + "…"
	},
	// query is "?k=v&…" of the pairs with a value (escaped again where
	// it is placed: html/template normalizes it in an href).
	"query": func(kv ...string) string {
		var b strings.Builder
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				continue
			}
			if b.Len() == 0 {
				b.WriteByte('?')
			} else {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(kv[i]) + "=" + url.QueryEscape(kv[i+1]))
		}
		return b.String()
	},
}

func parsePages() map[string]*template.Template {
	layout := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	out := map[string]*template.Template{}
	for _, n := range pageNames {
		out[n] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+n+".html"))
	}
	return out
}

// tenantFilter reads the optional "tenant" query parameter.
func tenantFilter(r *http.Request) store.TenantFilter {
	if t := strings.TrimSpace(r.URL.Query().Get("tenant")); t != "" {
		return store.OneTenant(t)
	}
	return store.AnyTenant
}

// failed answers a store error on a page.
func (h *handler) failed(w http.ResponseWriter, r *http.Request, err error) {
	v := viewerOf(r)
	if errors.Is(err, store.ErrNotFound) {
		h.problem(w, r, &v, http.StatusNotFound, "Not found", "nothing here has that id (in the selected tenant)")
		return
	}
	h.log.Error("console: read", "path", r.URL.Path, "err", err)
	h.problem(w, r, &v, http.StatusServiceUnavailable, "Store unavailable", "the store could not be read; try again")
}

func (h *handler) show(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	v := viewerOf(r)
	h.render(w, r, &v, http.StatusOK, name, title, data)
}

type overviewData struct {
	Work       store.WorkBacklog
	WorkKnown  bool
	Outbox     store.DeliveryBacklog
	OutboxLag  time.Duration
	SweeperLag time.Duration
	Parked     []service.AttemptView
	Failed     []event.Delivery
	Actions    []actionRow
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, st := r.Context(), h.ops.Store()
	var d overviewData
	var err error
	if d.Work, d.WorkKnown, err = h.ops.Backlog(ctx); err != nil {
		h.failed(w, r, err)
		return
	}
	if d.WorkKnown && !d.Work.OldestUnswept.IsZero() {
		d.SweeperLag = d.Work.Now.Sub(d.Work.OldestUnswept)
	}
	if d.Outbox, err = st.DeliveryBacklog(ctx); err != nil {
		h.failed(w, r, err)
		return
	}
	if !d.Outbox.OldestPending.IsZero() {
		d.OutboxLag = d.Outbox.Now.Sub(d.Outbox.OldestPending)
	}
	tf := tenantFilter(r)
	as, err := st.ParkedAttempts(ctx, store.ParkedFilter{Tenants: tf, Limit: 10})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	for _, a := range as {
		d.Parked = append(d.Parked, service.ViewAttempt(a))
	}
	if d.Failed, err = st.SearchDeliveries(ctx, store.DeliverySearch{Tenants: tf, Status: event.DeliveryFailed, Limit: 10}); err != nil {
		h.failed(w, r, err)
		return
	}
	acts, err := st.ListOperatorActions(ctx, store.ActionSearch{Tenants: tf, Limit: 5})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	d.Actions = actionRows(acts)
	h.show(w, r, "overview", "Overview", d)
}

type ordersData struct {
	Q, Customer, State string
	States             []order.State
	Orders             []order.Order
	Searched           bool
}

// orders searches by q (an order id, an idempotency key or a provider
// object id, in that order of lookups, all merged), or else by customer
// and state.
func (h *handler) orders(w http.ResponseWriter, r *http.Request) {
	ctx, st, q := r.Context(), h.ops.Store(), r.URL.Query()
	d := ordersData{Q: strings.TrimSpace(q.Get("q")), Customer: strings.TrimSpace(q.Get("customer")), State: q.Get("state"),
		States: []order.State{order.Received, order.Paid, order.Fulfilled, order.Cancelled}}
	tf := tenantFilter(r)
	seen := map[string]bool{}
	add := func(tenants store.TenantFilter, id string) error {
		if seen[id] || !order.ValidID(id) {
			return nil
		}
		o, err := st.FindOrder(ctx, tenants, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err == nil {
			seen[id] = true
			d.Orders = append(d.Orders, o)
		}
		return err
	}
	if d.Q != "" {
		d.Searched = true
		if err := add(tf, d.Q); err != nil {
			h.failed(w, r, err)
			return
		}
		ks, err := st.FindKeys(ctx, tf, idempotency.HashKey(d.Q))
		if err != nil {
			h.failed(w, r, err)
			return
		}
		for _, k := range ks {
			if err := add(store.OneTenant(k.TenantID), k.ResourceID); err != nil {
				h.failed(w, r, err)
				return
			}
		}
		as, err := st.AttemptsByProviderRef(ctx, tf, d.Q)
		if err != nil {
			h.failed(w, r, err)
			return
		}
		for _, a := range as {
			if err := add(store.OneTenant(a.TenantID), a.OrderID); err != nil {
				h.failed(w, r, err)
				return
			}
		}
	} else {
		os, err := st.SearchOrders(ctx, store.OrderSearch{Tenants: tf, CustomerID: d.Customer, State: order.State(d.State), Limit: 50})
		if err != nil {
			h.failed(w, r, err)
			return
		}
		d.Orders, d.Searched = os, d.Customer != "" || d.State != ""
	}
	h.show(w, r, "orders", "Orders", d)
}

// timelineEntry is one line of an order's timeline.
type timelineEntry struct {
	At     time.Time
	Kind   string // event, attempt, delivery, key
	What   string
	Detail string
	Status string
}

type orderData struct {
	Order      order.Order
	Events     []eventRow
	Attempts   []service.AttemptView
	Deliveries []event.Delivery
	Keys       []idempotency.Record
	Timeline   []timelineEntry
	Parked     bool
	CanCancel  bool
}

type eventRow struct {
	event.Stored
	At time.Time
}

func (h *handler) orderPage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !order.ValidID(id) {
		h.failed(w, r, store.ErrNotFound)
		return
	}
	hist, err := h.ops.Store().History(r.Context(), tenantFilter(r), id)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	d := orderData{Order: hist.Order, Deliveries: hist.Deliveries, Keys: hist.Keys,
		CanCancel: hist.Order.State == order.Received || hist.Order.State == order.Paid}
	for _, e := range hist.Events {
		var body struct {
			CreatedAt time.Time `json:"created_at"`
		}
		_ = json.Unmarshal(e.Body, &body)
		d.Events = append(d.Events, eventRow{Stored: e, At: body.CreatedAt})
		d.Timeline = append(d.Timeline, timelineEntry{At: body.CreatedAt, Kind: "event", What: string(e.Type),
			Detail: "sequence " + strconv.FormatInt(e.Sequence, 10) + " · " + e.ID})
	}
	for _, a := range hist.Attempts {
		v := service.ViewAttempt(a)
		d.Attempts = append(d.Attempts, v)
		if a.Status == payment.AttemptNeedsAttention {
			d.Parked = true
		}
		detail := v.ProviderKey
		if v.ProviderRef != "" {
			detail += " · provider id " + v.ProviderRef
		}
		if v.ErrorCode != "" {
			detail += " · " + v.ErrorCode
		}
		d.Timeline = append(d.Timeline, timelineEntry{At: a.CreatedAt, Kind: "attempt", What: v.Kind + " sent", Detail: detail})
		if !a.UpdatedAt.Equal(a.CreatedAt) {
			d.Timeline = append(d.Timeline, timelineEntry{At: a.UpdatedAt, Kind: "attempt", What: v.Kind + " " + v.Status,
				Detail: detail, Status: v.Status})
		}
	}
	for _, dl := range hist.Deliveries {
		detail := dl.EndpointID + " · " + strconv.Itoa(dl.Attempts) + " attempt(s)"
		if dl.LastStatus != 0 {
			detail += " · last HTTP " + strconv.Itoa(dl.LastStatus)
		}
		if dl.LastError != "" {
			detail += " · " + dl.LastError
		}
		d.Timeline = append(d.Timeline, timelineEntry{At: dl.UpdatedAt, Kind: "delivery", What: string(dl.Type) + " delivery " +
			string(dl.Status), Detail: detail, Status: string(dl.Status)})
	}
	for _, k := range hist.Keys {
		d.Timeline = append(d.Timeline, timelineEntry{At: k.CreatedAt, Kind: "key", What: "idempotency key " + string(k.State),
			Detail: string(k.Operation) + " · sha256 " + k.KeyHash[:min(12, len(k.KeyHash))] + "…", Status: string(k.State)})
	}
	sort.SliceStable(d.Timeline, func(i, j int) bool { return d.Timeline[i].At.Before(d.Timeline[j].At) })
	h.show(w, r, "order", "Order "+hist.Order.ID, d)
}

func (h *handler) attempts(w http.ResponseWriter, r *http.Request) {
	as, err := h.ops.Store().ParkedAttempts(r.Context(), store.ParkedFilter{Tenants: tenantFilter(r), Limit: 100})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	var out []service.AttemptView
	for _, a := range as {
		out = append(out, service.ViewAttempt(a))
	}
	h.show(w, r, "attempts", "Attempts needing attention", out)
}

func (h *handler) endpoints(w http.ResponseWriter, r *http.Request) {
	eps, err := h.ops.Store().AllEndpoints(r.Context(), tenantFilter(r))
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.show(w, r, "endpoints", "Webhook endpoints", eps)
}

type endpointData struct {
	Endpoint   event.Endpoint
	Deliveries []event.Delivery
	Status     string
	Since      string
}

func (h *handler) endpointPage(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if !event.ValidEndpointID(id) {
		h.failed(w, r, store.ErrNotFound)
		return
	}
	ctx, st := r.Context(), h.ops.Store()
	ep, err := st.FindEndpoint(ctx, tenantFilter(r), id)
	if err != nil {
		h.failed(w, r, err)
		return
	}
	d := endpointData{Endpoint: ep, Status: r.URL.Query().Get("status"),
		Since: h.cfg.Now().UTC().Add(-24 * time.Hour).Format("2006-01-02T15:04")}
	if d.Deliveries, err = st.SearchDeliveries(ctx, store.DeliverySearch{Tenants: store.OneTenant(ep.TenantID), EndpointID: ep.ID,
		Status: event.DeliveryStatus(d.Status), Limit: 100}); err != nil {
		h.failed(w, r, err)
		return
	}
	h.show(w, r, "endpoint", "Endpoint "+ep.ID, d)
}

func (h *handler) deliveries(w http.ResponseWriter, r *http.Request) {
	ds, err := h.ops.Store().SearchDeliveries(r.Context(), store.DeliverySearch{Tenants: tenantFilter(r),
		Status: event.DeliveryFailed, Limit: 100})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.show(w, r, "deliveries", "Failed deliveries", ds)
}

// actionRow is an audit log line.
type actionRow struct {
	store.OperatorAction
	Outcome string
	Note    string
}

func actionRows(as []store.OperatorAction) []actionRow {
	var out []actionRow
	for _, a := range as {
		var res struct {
			Action event.Action `json:"action"`
		}
		_ = json.Unmarshal(a.Result, &res)
		out = append(out, actionRow{OperatorAction: a, Outcome: res.Action.Outcome, Note: res.Action.Note})
	}
	return out
}

func (h *handler) audit(w http.ResponseWriter, r *http.Request) {
	as, err := h.ops.Store().ListOperatorActions(r.Context(), store.ActionSearch{Tenants: tenantFilter(r), Limit: 100})
	if err != nil {
		h.failed(w, r, err)
		return
	}
	h.show(w, r, "audit", "Audit log", actionRows(as))
}
