package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/testmode"
)

// feedPage is the body of GET /v1/events.
type feedPage struct {
	Data       []event.Event `json:"data"`
	NextCursor string        `json:"next_cursor"`
	HasMore    bool          `json:"has_more"`
}

// feed reads the tenant's feed after cursor, a page of limit at a time,
// until it holds at least want events (bounded: the PostgreSQL feed shows
// an event once older transactions have ended), and returns the events and
// the cursor to resume after.
func feed(t *testing.T, env *testenv.Env, apiKey, after string, q url.Values, want int) ([]event.Event, string) {
	t.Helper()
	var out []event.Event
	cursor := after
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := url.Values{"limit": {"2"}}
		for k, vs := range q {
			v[k] = vs
		}
		if cursor != "" {
			v.Set("after", cursor)
		}
		r := do(t, env, http.MethodGet, "/v1/events?"+v.Encode(), apiKey, "", nil)
		wantStatus(t, r, http.StatusOK)
		p := decode[feedPage](t, r)
		out = append(out, p.Data...)
		if p.NextCursor != "" {
			cursor = p.NextCursor
		}
		if len(p.Data) == 0 {
			if len(out) >= want || time.Now().After(deadline) {
				return out, cursor
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestEventFeed(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{})
		o := create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		wantStatus(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventPay), testenv.KeyA, newKey(t), payBody(o, testmode.MethodApproved)), http.StatusOK)
		other := create(t, env, testenv.KeyB, newKey(t), newCustomer(t))

		evs, cursor := feed(t, env, testenv.KeyA, "", nil, 2)
		if len(evs) != 2 || evs[0].Type != event.OrderCreated || evs[1].Type != event.OrderPaid || evs[1].Order.State != order.Paid {
			t.Fatalf("feed = %+v", evs)
		}
		// Resuming after the cursor sees only what is new.
		wantStatus(t, do(t, env, http.MethodPost, eventPath(o.ID, order.EventFulfill), testenv.KeyA, newKey(t), nil), http.StatusOK)
		more, _ := feed(t, env, testenv.KeyA, cursor, nil, 1)
		if len(more) != 1 || more[0].Type != event.OrderFulfilled || more[0].Sequence != 3 {
			t.Fatalf("after the cursor = %+v", more)
		}
		paid, _ := feed(t, env, testenv.KeyA, "", url.Values{"type": {"order.paid"}, "order_id": {o.ID}}, 1)
		if len(paid) != 1 || paid[0].ID != evs[1].ID {
			t.Fatalf("filtered = %+v", paid)
		}

		r := do(t, env, http.MethodGet, "/v1/events/"+evs[1].ID, testenv.KeyA, "", nil)
		wantStatus(t, r, http.StatusOK)
		if got := decode[event.Event](t, r); got.ID != evs[1].ID || got.Order.ID != o.ID {
			t.Fatalf("GET event = %+v", got)
		}
		wantProblem(t, do(t, env, http.MethodGet, "/v1/events/"+evs[1].ID, testenv.KeyB, "", nil), http.StatusNotFound, apperr.ENotFound)
		wantProblem(t, do(t, env, http.MethodGet, "/v1/events/evt_nope", testenv.KeyA, "", nil), http.StatusNotFound, apperr.ENotFound)
		bEvents, _ := feed(t, env, testenv.KeyB, "", nil, 1)
		if len(bEvents) != 1 || bEvents[0].OrderID != other.ID {
			t.Fatalf("tenant B sees %+v", bEvents)
		}
		for q, field := range map[string]string{"limit=0": "limit", "limit=101": "limit", "limit=x": "limit",
			"type=order.shipped": "type", "order_id=nope": "order_id", "after=!!!": "after", "after=bm9wZQ": "after"} {
			p := wantProblem(t, doMalformed(t, env, http.MethodGet, "/v1/events?"+q, testenv.KeyA, "", nil), http.StatusBadRequest, apperr.EInvalid)
			wantFields(t, p, field)
		}
	})
}

func TestWebhookEndpoints(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{})
		r := do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, "",
			map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"order.paid", "order.created"}})
		wantStatus(t, r, http.StatusCreated)
		ep := decode[event.Endpoint](t, r)
		if len(ep.Secret) < 20 || ep.ID == "" || !ep.Enabled || r.Header.Get("Location") != "/v1/webhook-endpoints/"+ep.ID {
			t.Fatalf("created = %+v (%s)", ep, r)
		}
		r = do(t, env, http.MethodGet, "/v1/webhook-endpoints/"+ep.ID, testenv.KeyA, "", nil)
		wantStatus(t, r, http.StatusOK)
		var raw map[string]any
		if err := json.Unmarshal(r.Body, &raw); err != nil || raw["secret"] != nil || raw["url"] != "http://127.0.0.1:9/hook" {
			t.Fatalf("GET endpoint = %s; the secret is shown only at creation", r)
		}
		list := decode[struct{ Data []event.Endpoint }](t, do(t, env, http.MethodGet, "/v1/webhook-endpoints", testenv.KeyA, "", nil))
		if len(list.Data) != 1 || list.Data[0].Secret != "" {
			t.Fatalf("list = %+v", list)
		}
		wantProblem(t, do(t, env, http.MethodGet, "/v1/webhook-endpoints/"+ep.ID, testenv.KeyB, "", nil), http.StatusNotFound, apperr.ENotFound)

		create(t, env, testenv.KeyA, newKey(t), newCustomer(t))
		ds := decode[struct{ Data []event.Delivery }](t, do(t, env, http.MethodGet, "/v1/webhook-endpoints/"+ep.ID+"/deliveries", testenv.KeyA, "", nil))
		if len(ds.Data) != 1 || ds.Data[0].Type != event.OrderCreated || ds.Data[0].Status != event.DeliveryPending {
			t.Fatalf("deliveries = %+v", ds)
		}
		wantProblem(t, do(t, env, http.MethodGet, "/v1/webhook-endpoints/"+ep.ID+"/deliveries", testenv.KeyB, "", nil), http.StatusNotFound, apperr.ENotFound)

		for _, bad := range []struct {
			body  any
			field string
		}{
			{map[string]any{"events": []string{"order.paid"}}, "url"},
			{map[string]any{"url": "gopher://127.0.0.1/", "events": []string{"order.paid"}}, "url"},
			{map[string]any{"url": "http://127.0.0.1:9/h", "events": []string{}}, "events"},
			{map[string]any{"url": "http://127.0.0.1:9/h", "events": []string{"order.shipped"}}, "events[0]"},
		} {
			p := wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, "", bad.body), http.StatusBadRequest, apperr.EInvalid)
			wantFields(t, p, bad.field)
		}
		wantProblem(t, doMalformed(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, "",
			map[string]any{"url": "http://127.0.0.1:9/h", "events": []string{"order.paid"}, "extra": 1}), http.StatusBadRequest, apperr.EInvalid)

		wantProblem(t, do(t, env, http.MethodDelete, "/v1/webhook-endpoints/"+ep.ID, testenv.KeyB, "", nil), http.StatusNotFound, apperr.ENotFound)
		wantStatus(t, do(t, env, http.MethodDelete, "/v1/webhook-endpoints/"+ep.ID, testenv.KeyA, "", nil), http.StatusNoContent)
		wantProblem(t, do(t, env, http.MethodGet, "/v1/webhook-endpoints/"+ep.ID, testenv.KeyA, "", nil), http.StatusNotFound, apperr.ENotFound)
	})
}

// TestWebhookEndpointsPerTenantCapped: past Endpoints.MaxPerTenant a
// registration is a 409 limit_reached and creates nothing; another tenant
// is not affected; a deletion frees a place. Both stores.
func TestWebhookEndpointsPerTenantCapped(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		t.Parallel()
		env := testenv.New(t, kind, testenv.Options{EndpointsPerTenant: 2})
		// One key per registration: identical registrations without a key
		// share a derived key, and the second replays the first.
		body := map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"order.paid"}}
		var ids []string
		for range 2 {
			r := do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, newKey(t), body)
			wantStatus(t, r, http.StatusCreated)
			ids = append(ids, decode[event.Endpoint](t, r).ID)
		}
		p := wantProblem(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, newKey(t), body), http.StatusConflict, apperr.ELimitReached)
		if !strings.Contains(p.Detail, "2 webhook endpoints") {
			t.Errorf("detail %q does not name the limit", p.Detail)
		}
		list := decode[struct{ Data []event.Endpoint }](t, do(t, env, http.MethodGet, "/v1/webhook-endpoints", testenv.KeyA, "", nil))
		if len(list.Data) != 2 {
			t.Fatalf("tenant A has %d endpoints after a refused create, want 2", len(list.Data))
		}
		wantStatus(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyB, newKey(t), body), http.StatusCreated)
		wantStatus(t, do(t, env, http.MethodDelete, "/v1/webhook-endpoints/"+ids[0], testenv.KeyA, "", nil), http.StatusNoContent)
		wantStatus(t, do(t, env, http.MethodPost, "/v1/webhook-endpoints", testenv.KeyA, newKey(t), body), http.StatusCreated)
	})
}
