package operator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/webhook"
)

// TestResendFailedSince: every failed delivery of an endpoint since a
// time is requeued at once, audited with the count; a time after the
// failures requeues none; a bad time is a 400, a reader a 403.
func TestResendFailedSince(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			epID, evID := f.failedDelivery()
			path := "/operator/v1/webhook-endpoints/" + epID + "/resend-failed"
			if r := f.op(readerToken, "POST", path, "rf-0", map[string]any{"since": "2000-01-01T00:00:00Z", "reason": "r"}); r.status != http.StatusForbidden {
				t.Fatalf("reader: %d", r.status)
			}
			if r := f.op(operatorToken, "POST", path, "rf-1", map[string]any{"since": "yesterday", "reason": "r"}); r.status != http.StatusBadRequest {
				t.Fatalf("bad since: %d %s", r.status, r.body)
			}
			later := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
			r := f.op(operatorToken, "POST", path, "rf-2", map[string]any{"since": later, "reason": "after the outage"})
			if r.status != http.StatusOK || decode[struct {
				Action   event.Action `json:"action"`
				Requeued int          `json:"requeued"`
			}](t, r).Action.Outcome != "none_failed" {
				t.Fatalf("since after the failure: %d %s, want none_failed", r.status, r.body)
			}
			r = f.op(operatorToken, "POST", path, "rf-3", map[string]any{"since": "2000-01-01T00:00:00Z", "reason": "receiver fixed"})
			got := decode[struct {
				Action   event.Action `json:"action"`
				Requeued int          `json:"requeued"`
			}](t, r)
			if r.status != http.StatusOK || got.Requeued != 1 || got.Action.Name != service.ActionResendFailed || got.Action.Target != epID {
				t.Fatalf("resend failed since 2000: %d %s", r.status, r.body)
			}
			d, err := f.ops.Store().FindDelivery(context.Background(), store.AnyTenant, epID, evID)
			if err != nil || d.Status != event.DeliveryPending {
				t.Fatalf("delivery after the bulk resend = %+v, %v", d, err)
			}
			if again := f.op(operatorToken, "POST", path, "rf-3", map[string]any{"since": "2000-01-01T00:00:00Z", "reason": "receiver fixed"}); again.status != http.StatusOK ||
				again.header.Get(operator.ReplayedHeader) != "true" {
				t.Fatalf("replay: %d %s", again.status, again.body)
			}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-endpoints/we_00000000000000000000000000000000/resend-failed", "rf-4",
				map[string]any{"since": "2000-01-01T00:00:00Z", "reason": "r"}); r.status != http.StatusNotFound {
				t.Fatalf("unknown endpoint: %d %s", r.status, r.body)
			}
			// The audit log lists both actions, newest first.
			acts := decode[struct {
				Data []operator.ActionView `json:"data"`
			}](t, f.op(readerToken, "GET", "/operator/v1/actions", "", nil))
			if len(acts.Data) != 2 || acts.Data[0].Action != service.ActionResendFailed || acts.Data[0].Reason != "receiver fixed" ||
				acts.Data[0].Actor != "olga" || acts.Data[1].Reason != "after the outage" {
				t.Fatalf("audit log = %+v", acts.Data)
			}
			if other := decode[struct {
				Data []operator.ActionView `json:"data"`
			}](t, f.op(readerToken, "GET", "/operator/v1/actions?tenant="+testenv.TenantB, "", nil)); len(other.Data) != 0 {
				t.Fatalf("audit log of another tenant = %+v", other.Data)
			}
		})
	}
}

// TestCancelOnBehalf: an operator cancels a RCVD order and refunds and
// cancels a PAID one through the tenant API's cancel, each audited; the
// same key replays; a reader may not; a FULFILLED order is refused by the
// state machine. The paid order's charge is found by its provider id.
func TestCancelOnBehalf(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			ctx := context.Background()
			create := func() order.Order {
				res, err := f.env.Service.Create(ctx, testenv.TenantA, idempotency.Key{}, input)
				if err != nil {
					t.Fatal(err)
				}
				return res.Order
			}
			rcvd, paid := create(), create()
			if r := f.tenant("POST", "/v1/orders/"+paid.ID+"/pay", "pay-ok", map[string]any{"amount": paid.Amount,
				"currency": paid.Currency, "payment_method": "pm_card_visa"}); r.status != http.StatusOK {
				t.Fatalf("pay: %d %s", r.status, r.body)
			}
			if r := f.op(readerToken, "POST", "/operator/v1/orders/"+rcvd.ID+"/cancel", "c-0", map[string]any{"reason": "r"}); r.status != http.StatusForbidden {
				t.Fatalf("reader cancels: %d", r.status)
			}
			for _, c := range []struct {
				o       order.Order
				key     string
				outcome string
			}{{rcvd, "c-1", "cancelled"}, {paid, "c-2", "refunded"}} {
				r := f.op(operatorToken, "POST", "/operator/v1/orders/"+c.o.ID+"/cancel", c.key, map[string]any{"reason": "customer called"})
				got := decode[actionReply](t, r)
				if r.status != http.StatusOK || got.Action.Name != service.ActionCancelOrder || got.Action.Outcome != c.outcome ||
					got.Order == nil || got.Order.State != order.Cancelled {
					t.Fatalf("cancel %s: %d %s", c.outcome, r.status, r.body)
				}
				if now := f.order(c.o.ID); now.State != order.Cancelled {
					t.Fatalf("order is %s after the operator's cancel", now.State)
				}
				again := f.op(operatorToken, "POST", "/operator/v1/orders/"+c.o.ID+"/cancel", c.key, map[string]any{"reason": "customer called"})
				if again.status != http.StatusOK || again.header.Get(operator.ReplayedHeader) != "true" || decode[actionReply](t, again).Action.ID != got.Action.ID {
					t.Fatalf("replay: %d %s", again.status, again.body)
				}
			}
			if n := len(f.auditEvents(2)); n != 2 {
				t.Fatalf("%d audit events, want 2", n)
			}
			// The paid order's charge, by its provider id.
			h, err := f.ops.Store().History(ctx, store.AnyTenant, paid.ID)
			if err != nil {
				t.Fatal(err)
			}
			var ref string
			for _, a := range h.Attempts {
				if a.Kind == payment.AttemptCharge && a.ProviderRef != "" {
					ref = a.ProviderRef
				}
			}
			if ref == "" {
				t.Fatalf("the paid order's charge has no provider id: %+v", h.Attempts)
			}
			objs := decode[struct {
				Data []service.AttemptView `json:"data"`
			}](t, f.op(readerToken, "GET", "/operator/v1/provider-objects/"+ref, "", nil))
			if len(objs.Data) != 1 || objs.Data[0].OrderID != paid.ID {
				t.Fatalf("provider object %s = %+v", ref, objs.Data)
			}
			if other := decode[struct {
				Data []service.AttemptView `json:"data"`
			}](t, f.op(readerToken, "GET", "/operator/v1/provider-objects/"+ref+"?tenant="+testenv.TenantB, "", nil)); len(other.Data) != 0 {
				t.Fatalf("provider object in another tenant = %+v", other.Data)
			}
			// The state machine refuses a cancel it does not allow.
			shipped := create()
			if r := f.tenant("POST", "/v1/orders/"+shipped.ID+"/pay", "pay-s", map[string]any{"amount": shipped.Amount,
				"currency": shipped.Currency, "payment_method": "pm_card_visa"}); r.status != http.StatusOK {
				t.Fatalf("pay: %d %s", r.status, r.body)
			}
			if r := f.tenant("POST", "/v1/orders/"+shipped.ID+"/fulfill", "ship-s", nil); r.status != http.StatusOK {
				t.Fatalf("fulfil: %d %s", r.status, r.body)
			}
			if r := f.op(operatorToken, "POST", "/operator/v1/orders/"+shipped.ID+"/cancel", "c-3", map[string]any{"reason": "too late"}); r.status != http.StatusConflict {
				t.Fatalf("cancel of a FULFILLED order: %d %s, want 409", r.status, r.body)
			}
		})
	}
}

// TestRotateSecret: a rotation answers the new secret once (a replay
// does not, nor the audit log or event); for the grace period every
// delivery carries a v1 signature under each secret, so a receiver on
// either verifies it; with no grace the former secret stops at once.
func TestRotateSecret(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			ctx := context.Background()
			var mu sync.Mutex
			var got []struct {
				sig  string
				body []byte
			}
			rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				got = append(got, struct {
					sig  string
					body []byte
				}{r.Header.Get(event.SignatureHeader), b})
				mu.Unlock()
			}))
			t.Cleanup(rcv.Close)
			es := f.env.Store.(store.EventStore)
			ep := event.Endpoint{ID: "we_" + strings.Repeat("c", 32), TenantID: testenv.TenantA, URL: rcv.URL,
				Types: []event.Type{event.OrderCreated}, Secret: "whsec_old_old_old_old", Enabled: true, CreatedAt: f.clk.Now()}
			if err := es.CreateEndpoint(ctx, ep, 0); err != nil {
				t.Fatal(err)
			}
			path := "/operator/v1/webhook-endpoints/" + ep.ID + "/rotate-secret"
			if r := f.op(readerToken, "POST", path, "rot-0", map[string]any{"grace_seconds": 3600, "reason": "r"}); r.status != http.StatusForbidden {
				t.Fatalf("reader rotates: %d", r.status)
			}
			if r := f.op(operatorToken, "POST", path, "rot-1", map[string]any{"grace_seconds": 8 * 86400, "reason": "r"}); r.status != http.StatusBadRequest {
				t.Fatalf("a grace of 8 days: %d %s", r.status, r.body)
			}
			type rotated struct {
				Action event.Action `json:"action"`
				Secret string       `json:"secret"`
				Shown  bool         `json:"secret_shown"`
			}
			r := f.op(operatorToken, "POST", path, "rot-2", map[string]any{"grace_seconds": 3600, "reason": "secret leaked in a log"})
			first := decode[rotated](t, r)
			if r.status != http.StatusOK || !strings.HasPrefix(first.Secret, event.SecretPrefix) || len(first.Secret) != 70 ||
				first.Action.Name != service.ActionRotateSecret {
				t.Fatalf("rotate: %d %s", r.status, r.body)
			}
			if s, err := es.EndpointSecret(ctx, testenv.TenantA, ep.ID); err != nil || s != first.Secret {
				t.Fatalf("stored secret %q, %v; want the one answered", s, err)
			}
			again := f.op(operatorToken, "POST", path, "rot-2", map[string]any{"grace_seconds": 3600, "reason": "secret leaked in a log"})
			if rep := decode[rotated](t, again); again.header.Get(operator.ReplayedHeader) != "true" || rep.Secret != "" || !rep.Shown ||
				strings.Contains(string(again.body), first.Secret) {
				t.Fatalf("the replay shows the secret again: %s", again.body)
			}
			if log := f.op(readerToken, "GET", "/operator/v1/actions", "", nil); strings.Contains(string(log.body), first.Secret) {
				t.Fatalf("the audit log holds the secret: %s", log.body)
			}
			for _, e := range f.auditEvents(1) {
				if b, _ := json.Marshal(e); strings.Contains(string(b), first.Secret) {
					t.Fatalf("the audit event holds the secret: %s", b)
				}
			}
			disp := webhook.NewDispatcher(es, webhook.Config{AllowPrivate: true, Now: f.clk.Now, InFlightPerTenant: -1, InFlightPerEndpoint: -1})
			deliver := func() (string, []byte) {
				t.Helper()
				if _, err := f.env.Service.Create(ctx, testenv.TenantA, idempotency.Key{}, input); err != nil {
					t.Fatal(err)
				}
				if _, err := disp.RunOnce(ctx); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(got) == 0 {
					t.Fatal("nothing delivered")
				}
				last := got[len(got)-1]
				return last.sig, last.body
			}
			sig, body := deliver()
			for _, secret := range []string{first.Secret, ep.Secret} {
				if err := event.Verify(secret, sig, body, f.clk.Now(), time.Minute); err != nil {
					t.Fatalf("within the grace, the signature %q does not verify with %s: %v", sig, secret[:10], err)
				}
			}
			f.clk.Advance(61 * time.Minute)
			sig, body = deliver()
			if err := event.Verify(first.Secret, sig, body, f.clk.Now(), time.Minute); err != nil || strings.Count(sig, "v1=") != 1 {
				t.Fatalf("past the grace: %q, %v; want one v1 under the new secret", sig, err)
			}
			if err := event.Verify(ep.Secret, sig, body, f.clk.Now(), time.Minute); err == nil {
				t.Fatal("past the grace the former secret still verifies")
			}
		})
	}
}
