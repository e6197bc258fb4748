package operator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/event"
	"github.com/orderly/orderly/fulfillment"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/internal/testenv"
	"github.com/orderly/orderly/operator"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/payment"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/paysimclient"
	"github.com/orderly/orderly/service"
	"github.com/orderly/orderly/store"
)

const (
	readerToken   = "reader-token-000000000001"
	operatorToken = "operator-token-0000000001"
	otherToken    = "operator-token-0000000002"
)

// splitGateway is paysim over HTTP: charges with a short client timeout,
// so a charge paysim holds (pm_fault_timeout) loses its answer the way the
// fault tests lose it; lookups and refunds with a long one, so asking is
// never what times out on a loaded machine.
type splitGateway struct {
	*paysimclient.Intents // reads, prepares, refunds
	short                 *paysimclient.Intents
}

func (g splitGateway) Confirm(ctx context.Context, req payment.ConfirmRequest) (payment.Intent, error) {
	return g.short.Confirm(ctx, req)
}

// splitWarehouse is splitGateway for shipments (sku_fault_timeout).
type splitWarehouse struct {
	*paysimclient.Warehouse
	short *paysimclient.Warehouse
}

func (w splitWarehouse) Ship(ctx context.Context, req fulfillment.ShipmentRequest) (fulfillment.Shipment, error) {
	return w.short.Ship(ctx, req)
}

type fixture struct {
	t    *testing.T
	env  *testenv.Env
	clk  *testclock.Clock
	pay  *paysimclient.Intents // the test's own client of paysim
	ops  *service.Operations
	http *httptest.Server
}

func newFixture(t *testing.T, kind string) *fixture { return newFixtureFailures(t, kind, 100) }

// newFixtureFailures is newFixture with failures allowed failed logins
// per minute.
func newFixtureFailures(t *testing.T, kind string, failures int) *fixture {
	t.Helper()
	ctx := context.Background()
	l, err := paysim.OpenLedger(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := paysim.NewServer(l, paysim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() { srv.StopDelays(); ts.Close(); l.Close() })
	short, err := paysimclient.NewIntents(ts.URL, paysimclient.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	long, err := paysimclient.NewIntents(ts.URL, paysimclient.WithTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	shortWH, err := paysimclient.NewWarehouse(ts.URL, paysimclient.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	longWH, err := paysimclient.NewWarehouse(ts.URL, paysimclient.WithTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(testclock.Start)
	env := testenv.New(t, kind, testenv.Options{Clock: clk, UnresolvedAfter: time.Hour,
		WrapGateway: func(payment.Gateway) payment.Gateway { return splitGateway{Intents: long, short: short} },
		WrapWarehouse: func(fulfillment.Warehouse) fulfillment.Warehouse {
			return splitWarehouse{Warehouse: longWH, short: shortWH}
		}})
	ops, err := env.Service.Operations()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := operator.ParseCredentials("reader:rita:" + readerToken + ", operator:olga:" + operatorToken +
		"\noperator:omar:" + otherToken)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(operator.New(ops, operator.Config{Credentials: creds, AuthFailuresPerMinute: failures, Now: clk.Now}))
	t.Cleanup(hs.Close)
	return &fixture{t: t, env: env, clk: clk, pay: long, ops: ops, http: hs}
}

var input = order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR", Items: []order.Item{{SKU: "sku", Quantity: 2, UnitPrice: 750}}}

// park creates an order of tenant A and pays it with pm_fault_timeout
// under key "pay-1": paysim holds the charge past the client's timeout and
// captures nothing, so the answer is lost; past UnresolvedAfter the
// completer asks, paysim knows no such charge, and the attempt is parked
// as needs_attention. It returns the order and the parked attempt.
func (f *fixture) park() (order.Order, payment.Attempt) {
	f.t.Helper()
	ctx := context.Background()
	res, err := f.env.Service.Create(ctx, testenv.TenantA, idempotency.Key{}, input)
	if err != nil {
		f.t.Fatal(err)
	}
	o := res.Order
	r := f.tenant("POST", "/v1/orders/"+o.ID+"/pay", "pay-1",
		map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": paysim.MethodFaultTimeout})
	if r.status != http.StatusServiceUnavailable {
		f.t.Fatalf("pay with a lost answer: %d %s, want 503", r.status, r.body)
	}
	return o, f.waitParked(o)
}

// parkShipment creates a paid order of tenant A whose item is
// sku_fault_timeout and fulfils it under shipKey: the shipment's
// answer is lost and, past UnresolvedAfter, it is parked.
func (f *fixture) parkShipment(shipKey string) (order.Order, payment.Attempt) {
	f.t.Helper()
	ctx := context.Background()
	in := order.NewOrderInput{CustomerID: "cus_2", Currency: "EUR", Items: []order.Item{{SKU: paysim.SKUFaultTimeout, Quantity: 1, UnitPrice: 900}}}
	res, err := f.env.Service.Create(ctx, testenv.TenantA, idempotency.Key{}, in)
	if err != nil {
		f.t.Fatal(err)
	}
	o := res.Order
	if r := f.tenant("POST", "/v1/orders/"+o.ID+"/pay", "pay-"+shipKey, map[string]any{"amount": o.Amount, "currency": o.Currency,
		"payment_method": "pm_card_visa"}); r.status != http.StatusOK {
		f.t.Fatalf("pay: %d %s", r.status, r.body)
	}
	if r := f.tenant("POST", "/v1/orders/"+o.ID+"/fulfill", shipKey, nil); r.status != http.StatusServiceUnavailable {
		f.t.Fatalf("fulfil with a lost answer: %d %s, want 503", r.status, r.body)
	}
	return f.order(o.ID), f.waitParked(o)
}

// waitParked moves the clock past UnresolvedAfter and runs the completer
// until o's attempt is parked.
func (f *fixture) waitParked(o order.Order) payment.Attempt {
	f.t.Helper()
	ctx := context.Background()
	f.clk.Advance(2 * time.Hour)
	for range 50 { // each pass asks once; a lookup that failed is asked again after the backoff
		if _, err := f.env.Service.RecoverAbandoned(ctx, 10); err != nil {
			f.t.Logf("completer: %v", err)
		}
		as, err := f.ops.Store().ParkedAttempts(ctx, store.ParkedFilter{Tenants: store.OneTenant(testenv.TenantA), Limit: 10})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, a := range as {
			if a.OrderID == o.ID {
				return a
			}
		}
		f.clk.Advance(15 * time.Minute)
	}
	f.t.Fatalf("the attempt of %s was never parked", o.ID)
	return payment.Attempt{}
}

// capture makes paysim capture the parked charge after all, under its
// provider key (pm_fault_timeout holds the first request per key only):
// from now on the provider's answer is "captured".
func (f *fixture) capture(o order.Order, a payment.Attempt) {
	f.t.Helper()
	ctx := context.Background()
	ref := payment.Reference{OrderID: o.ID, Key: a.ProviderKey}
	in, err := f.pay.Find(ctx, ref)
	if err != nil {
		f.t.Fatalf("find the intent at the provider: %v", err)
	}
	if _, err := f.pay.Confirm(ctx, payment.ConfirmRequest{IdempotencyKey: a.ProviderKey + "/confirm", IntentID: in.ID,
		PaymentMethod: paysim.MethodFaultTimeout, Reference: ref}); err != nil {
		f.t.Fatalf("capture at the provider: %v", err)
	}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) problemType() string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(r.body, &p)
	return strings.TrimPrefix(p.Type, "https://orderly.dev/problems/")
}

func do(t *testing.T, base, token, method, path, key string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, b}
}

func (f *fixture) op(token, method, path, key string, body any) reply {
	f.t.Helper()
	return do(f.t, f.http.URL, token, method, path, key, body)
}

func (f *fixture) tenant(method, path, key string, body any) reply {
	f.t.Helper()
	return do(f.t, f.env.Server.URL, testenv.KeyA, method, path, key, body)
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
	return v
}

type actionReply struct {
	Action       event.Action         `json:"action"`
	Provider     string               `json:"provider_answer"`
	Order        *order.Order         `json:"order"`
	Attempt      *service.AttemptView `json:"attempt"`
	KeysResolved int                  `json:"keys_resolved"`
}

// auditEvents returns tenant A's operator.action events in the feed, once
// at least want are there (the feed shows an event once every older
// transaction has ended: on PostgreSQL, cluster-wide), waiting up to two
// minutes.
func (f *fixture) auditEvents(want int) []event.Event {
	f.t.Helper()
	var evs []event.Stored
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var err error
		evs, err = f.env.Store.(store.EventStore).ListEvents(context.Background(), testenv.TenantA,
			event.Filter{Type: event.OperatorAction, Limit: 100})
		if err != nil {
			f.t.Fatal(err)
		}
		if len(evs) >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var out []event.Event
	for _, s := range evs {
		var e event.Event
		if err := json.Unmarshal(s.Body, &e); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func (f *fixture) order(id string) order.Order {
	f.t.Helper()
	o, err := f.env.Store.GetOrder(context.Background(), testenv.TenantA, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

func (f *fixture) attempt(key string) payment.Attempt {
	f.t.Helper()
	a, err := f.env.Store.GetAttempt(context.Background(), key)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// TestRoles: no credential and a tenant API key are 401; a reader reads
// and may not act (403); an operator acts.
func TestRoles(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			for name, tok := range map[string]string{"none": "", "tenant API key": testenv.KeyA, "unknown": "nope-nope-nope-nope"} {
				if r := f.op(tok, "GET", "/operator/v1/attempts", "", nil); r.status != http.StatusUnauthorized || r.problemType() != "unauthorized" {
					t.Errorf("%s: %d %s, want 401 unauthorized", name, r.status, r.body)
				}
			}
			if r := f.op(readerToken, "GET", "/operator/v1/attempts", "", nil); r.status != http.StatusOK {
				t.Fatalf("reader lists: %d %s", r.status, r.body)
			}
			_, a := f.park()
			body := map[string]any{"provider_key": a.ProviderKey, "outcome": "not_succeeded", "reason": "r"}
			if r := f.op(readerToken, "POST", "/operator/v1/attempts/resolve", "k1", body); r.status != http.StatusForbidden || r.problemType() != "forbidden" {
				t.Fatalf("reader acts: %d %s, want 403 forbidden", r.status, r.body)
			}
			if got := f.attempt(a.ProviderKey); got.Status != payment.AttemptNeedsAttention {
				t.Fatalf("a reader's refused action changed the attempt to %s", got.Status)
			}
			if n := len(f.auditEvents(0)); n != 0 {
				t.Fatalf("a refused action wrote %d audit events", n)
			}
			// The tenant API key cannot reach the operator API's writes either.
			if r := do(t, f.http.URL, testenv.KeyA, "POST", "/operator/v1/attempts/resolve", "k1", body); r.status != http.StatusUnauthorized {
				t.Fatalf("tenant key acts: %d", r.status)
			}
		})
	}
}

// TestFailedLoginsRateLimited: past the allowance of failures, even the
// right credential is answered 429 with Retry-After until the bucket
// refills.
func TestFailedLoginsRateLimited(t *testing.T) {
	f := newFixtureFailures(t, testenv.SQLite, 3)
	for i := range 3 {
		if r := f.op("wrong-wrong-wrong-wrong", "GET", "/operator/v1/attempts", "", nil); r.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, r.status)
		}
	}
	r := f.op(readerToken, "GET", "/operator/v1/attempts", "", nil)
	if r.status != http.StatusTooManyRequests || r.problemType() != "rate_limited" || r.header.Get("Retry-After") == "" {
		t.Fatalf("after 3 failures: %d %q %s, want 429 rate_limited with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
	}
	f.clk.Advance(time.Minute)
	if r := f.op(readerToken, "GET", "/operator/v1/attempts", "", nil); r.status != http.StatusOK {
		t.Fatalf("after the bucket refilled: %d, want 200", r.status)
	}
}

// TestParkedOrderSaysSo: while the charge is parked, a pay with the same
// key, a pay with a new key and a cancel all answer 409 needs_attention
// without Retry-After; after an operator's finding "not succeeded", which
// the provider cannot contradict (it knows no such charge), the order's
// version moves on, the parked key replays the outcome, the action is
// audited in the outbox, and a new pay is accepted.
func TestParkedOrderSaysSo(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			ep := event.Endpoint{ID: "we_" + strings.Repeat("a", 32), TenantID: testenv.TenantA, URL: "http://127.0.0.1:9/hook",
				Types: []event.Type{event.OperatorAction}, Secret: "whsec_x", Enabled: true, CreatedAt: f.clk.Now()}
			if err := f.env.Store.(store.EventStore).CreateEndpoint(context.Background(), ep, 0); err != nil {
				t.Fatal(err)
			}
			pay := func(key, method string) reply {
				return f.tenant("POST", "/v1/orders/"+o.ID+"/pay", key,
					map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": method})
			}
			for name, r := range map[string]reply{
				"same key":             pay("pay-1", paysim.MethodFaultTimeout),
				"new key":              pay("pay-2", "pm_card_visa"),
				"new key, same method": pay("pay-3", paysim.MethodFaultTimeout),
				"cancel":               f.tenant("POST", "/v1/orders/"+o.ID+"/cancel", "cancel-1", nil),
			} {
				if r.status != http.StatusConflict || r.problemType() != "needs_attention" || r.header.Get("Retry-After") != "" {
					t.Errorf("%s: %d %s Retry-After=%q; want 409 needs_attention without Retry-After",
						name, r.status, r.body, r.header.Get("Retry-After"))
				}
				if !strings.Contains(string(r.body), "/operator/v1/attempts/resolve") {
					t.Errorf("%s: the problem does not point at the operator's action: %s", name, r.body)
				}
			}
			body := map[string]any{"provider_key": a.ProviderKey, "outcome": "not_succeeded",
				"note": "the PSP dashboard shows no charge", "reason": "ticket 42"}
			r := f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-1", body)
			if r.status != http.StatusOK {
				t.Fatalf("resolve: %d %s", r.status, r.body)
			}
			got := decode[actionReply](t, r)
			if got.Provider != "nothing" || got.Order == nil || got.Order.State != order.Received || got.Order.Version != o.Version+1 ||
				got.Attempt.Status != string(payment.AttemptDeclined) || got.Action.Outcome != "not_succeeded" || got.KeysResolved < 1 {
				t.Fatalf("resolve answered %s", r.body)
			}
			if now := f.order(o.ID); now.State != order.Received || now.Version != o.Version+1 {
				t.Fatalf("order is %s v%d, want RCVD v%d", now.State, now.Version, o.Version+1)
			}
			// Replay: same answer, marked; the same key with another body is refused.
			again := f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-1", body)
			if again.status != http.StatusOK || again.header.Get(operator.ReplayedHeader) != "true" ||
				decode[actionReply](t, again).Action.ID != got.Action.ID {
				t.Fatalf("replay: %d %q %s", again.status, again.header.Get(operator.ReplayedHeader), again.body)
			}
			other := map[string]any{"provider_key": a.ProviderKey, "outcome": "succeeded", "reason": "ticket 42"}
			if r := f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-1", other); r.status != http.StatusUnprocessableEntity ||
				r.problemType() != "idempotency_key_reused" {
				t.Fatalf("same key, other body: %d %s, want 422", r.status, r.body)
			}
			// The audit event, in the outbox: who, what, why, when, target.
			audit := f.auditEvents(1)
			if len(audit) != 1 {
				t.Fatalf("%d audit events, want 1", len(audit))
			}
			act := audit[0].Action
			if audit[0].Type != event.OperatorAction || act == nil || act.Actor != "olga" || act.Role != "operator" ||
				act.Name != service.ActionResolve || act.Reason != "ticket 42" || act.Target != a.ProviderKey ||
				act.OrderID != o.ID || act.Note == "" || act.At.IsZero() || act.ID != got.Action.ID {
				t.Fatalf("audit event = %+v", audit[0])
			}
			ds, err := f.env.Store.(store.EventStore).ListDeliveries(context.Background(), testenv.TenantA, ep.ID, 10)
			if err != nil || len(ds) != 1 || ds[0].Type != event.OperatorAction {
				t.Fatalf("deliveries to the operator.action endpoint = %+v, %v; want the audit event", ds, err)
			}
			// The parked key now replays the resolution; the order accepts requests again.
			if r := pay("pay-1", paysim.MethodFaultTimeout); r.status != http.StatusPaymentRequired {
				t.Fatalf("the parked key after resolution: %d %s, want its 402 replayed", r.status, r.body)
			}
			if r := pay("pay-4", "pm_card_visa"); r.status != http.StatusOK {
				t.Fatalf("a new pay after resolution: %d %s", r.status, r.body)
			}
			if now := f.order(o.ID); now.State != order.Paid {
				t.Fatalf("order is %s after a new pay, want PAID", now.State)
			}
		})
	}
}

// TestFindingContradictingProviderRefused: the provider has captured the
// parked charge after all; a finding "not succeeded" is refused with 409
// finding_contradicts_provider and changes nothing; "succeeded" pays the
// order and completes the parked key with success.
func TestFindingContradictingProviderRefused(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			f.capture(o, a)
			r := f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-1",
				map[string]any{"provider_key": a.ProviderKey, "outcome": "not_succeeded", "reason": "customer says so"})
			if r.status != http.StatusConflict || r.problemType() != "finding_contradicts_provider" || r.header.Get("Retry-After") != "" {
				t.Fatalf("contradicting finding: %d %s", r.status, r.body)
			}
			if got := f.attempt(a.ProviderKey); got.Status != payment.AttemptNeedsAttention {
				t.Fatalf("a refused finding left the attempt %s", got.Status)
			}
			if now := f.order(o.ID); now.Version != o.Version || now.State != order.Received {
				t.Fatalf("a refused finding moved the order to %s v%d", now.State, now.Version)
			}
			if n := len(f.auditEvents(0)); n != 0 {
				t.Fatalf("a refused finding wrote %d audit events", n)
			}
			r = f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-2",
				map[string]any{"provider_key": a.ProviderKey, "outcome": "succeeded", "reason": "PSP confirms"})
			if r.status != http.StatusOK {
				t.Fatalf("agreeing finding: %d %s", r.status, r.body)
			}
			if got := decode[actionReply](t, r); got.Provider != "succeeded" || got.Order.State != order.Paid ||
				got.Attempt.Status != string(payment.AttemptSucceeded) || got.Attempt.ProviderRef == "" {
				t.Fatalf("agreeing finding answered %s", r.body)
			}
			if r := f.tenant("POST", "/v1/orders/"+o.ID+"/pay", "pay-1",
				map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": paysim.MethodFaultTimeout}); r.status != http.StatusOK ||
				r.header.Get("Idempotency-Replayed") != "true" {
				t.Fatalf("the parked key after resolution: %d %v %s, want its 200 replayed", r.status, r.header, r.body)
			}
			// The resolved attempt is no longer parked: resolving again is refused.
			if r := f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-3",
				map[string]any{"provider_key": a.ProviderKey, "outcome": "succeeded", "reason": "again"}); r.status != http.StatusConflict ||
				r.problemType() != "attempt_not_parked" {
				t.Fatalf("resolving a settled attempt: %d %s", r.status, r.body)
			}
		})
	}
}

// TestRecheck: asking the provider again while it knows nothing changes
// nothing (still parked, audited); once it has captured, the recheck pays
// the order.
func TestRecheck(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			r := f.op(operatorToken, "POST", "/operator/v1/attempts/recheck", "chk-1",
				map[string]any{"provider_key": a.ProviderKey, "reason": "morning check"})
			if got := decode[actionReply](t, r); r.status != http.StatusOK || got.Provider != "nothing" || got.Action.Outcome != "still_parked" {
				t.Fatalf("recheck with nothing to say: %d %s", r.status, r.body)
			}
			if got := f.attempt(a.ProviderKey); got.Status != payment.AttemptNeedsAttention {
				t.Fatalf("attempt %s after a recheck that learnt nothing", got.Status)
			}
			f.capture(o, a)
			r = f.op(operatorToken, "POST", "/operator/v1/attempts/recheck", "chk-2",
				map[string]any{"provider_key": a.ProviderKey, "reason": "afternoon check"})
			if got := decode[actionReply](t, r); r.status != http.StatusOK || got.Provider != "succeeded" || got.Order.State != order.Paid {
				t.Fatalf("recheck after capture: %d %s", r.status, r.body)
			}
			if n := len(f.auditEvents(2)); n != 2 {
				t.Fatalf("%d audit events, want 2 (both rechecks)", n)
			}
		})
	}
}

// TestResolutionRacesWebhookAndCompleter: two operators' resolutions, a
// recheck, the provider's late charge.succeeded webhook and completer
// passes, all at once: the order is paid once (one order.paid event, one
// version step), one action resolves it and the others are refused.
func TestResolutionRacesWebhookAndCompleter(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			f.capture(o, a)
			ctx := context.Background()
			var wg sync.WaitGroup
			replies := make([]reply, 3)
			resolve := map[string]any{"provider_key": a.ProviderKey, "outcome": "succeeded", "reason": "race"}
			recheck := map[string]any{"provider_key": a.ProviderKey, "reason": "race"}
			for i, c := range []struct {
				token, path, key string
				body             any
			}{
				{operatorToken, "/operator/v1/attempts/resolve", "race-olga", resolve},
				{otherToken, "/operator/v1/attempts/resolve", "race-omar", resolve},
				{operatorToken, "/operator/v1/attempts/recheck", "race-check", recheck},
			} {
				wg.Go(func() { replies[i] = f.op(c.token, "POST", c.path, c.key, c.body) })
			}
			var hook service.InboxOutcome
			wg.Go(func() {
				var err error
				if hook, err = f.env.Service.TakeProviderEvent(ctx, payment.ProviderEvent{Source: "paysim", EventID: "evt_late",
					Type: payment.EventPaymentSucceeded, Reference: payment.Reference{OrderID: a.OrderID, Key: a.ProviderKey},
					Amount: a.Amount, Currency: a.Currency}); err != nil {
					t.Errorf("late webhook: %v", err)
				}
			})
			for range 2 {
				wg.Go(func() { _, _ = f.env.Service.RecoverAbandoned(ctx, 10) })
			}
			wg.Wait()
			won := 0
			for _, r := range replies {
				switch {
				case r.status == http.StatusOK && decode[actionReply](t, r).Order.State == order.Paid &&
					decode[actionReply](t, r).Action.Outcome == "succeeded":
					won++
				case r.status == http.StatusConflict && r.problemType() == "attempt_not_parked":
				default:
					t.Errorf("racing action: %d %s", r.status, r.body)
				}
			}
			switch hook {
			case service.InboxApplied:
				won++ // the provider's webhook settled it first
			case service.InboxAlreadySettled:
			default:
				t.Errorf("late webhook outcome %q", hook)
			}
			if won != 1 {
				t.Fatalf("%d of the operators' actions and the webhook resolved the attempt, want exactly 1 (webhook: %s)", won, hook)
			}
			hist, err := f.ops.Store().History(ctx, store.AnyTenant, o.ID)
			if err != nil {
				t.Fatal(err)
			}
			paid := 0
			for _, e := range hist.Events {
				if e.Type == event.OrderPaid {
					paid++
				}
			}
			if hist.Order.State != order.Paid || hist.Order.Version != o.Version+1 || paid != 1 {
				t.Fatalf("order %s v%d with %d order.paid events; want PAID v%d with 1", hist.Order.State, hist.Order.Version, paid, o.Version+1)
			}
			actions := 1
			if hook == service.InboxApplied {
				actions = 0
			}
			if n := len(f.auditEvents(actions)); n != actions {
				t.Fatalf("%d audit events, want %d (the winning action's)", n, actions)
			}
			if k, err := f.env.Store.LookupKey(ctx, testenv.TenantA, idempotency.HashKey("pay-1")); err != nil ||
				k.State != idempotency.StateCompleted || k.ErrorCode != "" {
				t.Fatalf("the parked key after the race = %+v, %v; want completed with success", k, err)
			}
		})
	}
}

// TestLateWebhookSettlesParkedAttempt: the provider's signed webhook for a
// parked charge (it captured after all) settles it as a resolution would:
// the order is paid, the parked key replays the success, and the order
// accepts requests again.
func TestLateWebhookSettlesParkedAttempt(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			f.capture(o, a)
			out, err := f.env.Service.TakeProviderEvent(context.Background(), payment.ProviderEvent{Source: "paysim",
				EventID: "evt_late", Type: payment.EventPaymentSucceeded, Reference: payment.Reference{OrderID: a.OrderID, Key: a.ProviderKey},
				Amount: a.Amount, Currency: a.Currency})
			if err != nil || out != service.InboxApplied {
				t.Fatalf("late webhook = %q, %v; want applied", out, err)
			}
			if now := f.order(o.ID); now.State != order.Paid || now.Version != o.Version+1 {
				t.Fatalf("order %s v%d, want PAID v%d", now.State, now.Version, o.Version+1)
			}
			r := f.tenant("POST", "/v1/orders/"+o.ID+"/pay", "pay-1",
				map[string]any{"amount": o.Amount, "currency": o.Currency, "payment_method": paysim.MethodFaultTimeout})
			if r.status != http.StatusOK || r.header.Get("Idempotency-Replayed") != "true" {
				t.Fatalf("the parked key after the webhook: %d %s, want its 200 replayed", r.status, r.body)
			}
			if r := f.tenant("POST", "/v1/orders/"+o.ID+"/fulfill", "ship-1", nil); r.status != http.StatusOK {
				t.Fatalf("fulfil after the webhook: %d %s", r.status, r.body)
			}
		})
	}
}

// TestParkedShipment: a shipment parked while the warehouse knows nothing
// blocks a cancel (needs_attention); "not succeeded" rejects it (the order
// stays PAID, the parked key replays fulfillment_rejected) and a cancel
// then refunds and cancels; "succeeded" on another order fulfils it.
func TestParkedShipment(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.parkShipment("ship-1")
			if a.Kind != payment.AttemptShipment {
				t.Fatalf("parked %s, want the shipment", a.Kind)
			}
			if r := f.tenant("POST", "/v1/orders/"+o.ID+"/cancel", "cancel-1", nil); r.status != http.StatusConflict || r.problemType() != "needs_attention" {
				t.Fatalf("cancel beside a parked shipment: %d %s", r.status, r.body)
			}
			r := f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-1",
				map[string]any{"provider_key": a.ProviderKey, "outcome": "not_succeeded", "reason": "warehouse: nothing left"})
			if got := decode[actionReply](t, r); r.status != http.StatusOK || got.Order.State != order.Paid ||
				got.Attempt.Status != string(payment.AttemptRejected) {
				t.Fatalf("resolve not shipped: %d %s", r.status, r.body)
			}
			if r := f.tenant("POST", "/v1/orders/"+o.ID+"/fulfill", "ship-1", nil); r.status != http.StatusUnprocessableEntity ||
				r.problemType() != "fulfillment_rejected" {
				t.Fatalf("the parked key after resolution: %d %s, want its 422 replayed", r.status, r.body)
			}
			if r := f.tenant("POST", "/v1/orders/"+o.ID+"/cancel", "cancel-2", nil); r.status != http.StatusOK {
				t.Fatalf("cancel after resolution: %d %s", r.status, r.body)
			}
			if now := f.order(o.ID); now.State != order.Cancelled {
				t.Fatalf("order %s after cancel, want CANCELLED", now.State)
			}
			o2, a2 := f.parkShipment("ship-2")
			r = f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "res-2",
				map[string]any{"provider_key": a2.ProviderKey, "outcome": "succeeded", "note": "carrier tracking shows it", "reason": "ticket 9"})
			if got := decode[actionReply](t, r); r.status != http.StatusOK || got.Order.State != order.Fulfilled || got.Provider != "nothing" {
				t.Fatalf("resolve shipped: %d %s", r.status, r.body)
			}
			if now := f.order(o2.ID); now.State != order.Fulfilled {
				t.Fatalf("order %s, want FULFILLED", now.State)
			}
		})
	}
}

// TestConcurrentSameKeyActsOnce: the same resolution sent five times at
// once with one Idempotency-Key takes effect once; every answer is that
// one (the others replayed).
func TestConcurrentSameKeyActsOnce(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			body := map[string]any{"provider_key": a.ProviderKey, "outcome": "not_succeeded", "reason": "double click"}
			replies := make([]reply, 5)
			var wg sync.WaitGroup
			for i := range replies {
				wg.Go(func() { replies[i] = f.op(operatorToken, "POST", "/operator/v1/attempts/resolve", "same-key", body) })
			}
			wg.Wait()
			fresh, ids := 0, map[string]bool{}
			for _, r := range replies {
				if r.status != http.StatusOK {
					t.Fatalf("a copy answered %d %s, want 200", r.status, r.body)
				}
				if r.header.Get(operator.ReplayedHeader) != "true" {
					fresh++
				}
				ids[decode[actionReply](t, r).Action.ID] = true
			}
			if fresh != 1 || len(ids) != 1 {
				t.Fatalf("%d fresh answers and %d action ids, want 1 and 1", fresh, len(ids))
			}
			if now := f.order(o.ID); now.Version != o.Version+1 {
				t.Fatalf("order at v%d, want v%d (one effect)", now.Version, o.Version+1)
			}
			if n := len(f.auditEvents(1)); n != 1 {
				t.Fatalf("%d audit events, want 1", n)
			}
		})
	}
}

// failedDelivery creates an endpoint of tenant A, an order whose
// order.created is fanned out to it, and has a dispatcher's claim end in
// failure with the endpoint disabled (a 410 Gone).
func (f *fixture) failedDelivery() (endpointID, eventID string) {
	f.t.Helper()
	ctx := context.Background()
	es := f.env.Store.(store.EventStore)
	ep := event.Endpoint{ID: "we_" + strings.Repeat("b", 32), TenantID: testenv.TenantA, URL: "http://127.0.0.1:9/hook",
		Types: []event.Type{event.OrderCreated}, Secret: "whsec_x", Enabled: true, CreatedAt: f.clk.Now()}
	if err := es.CreateEndpoint(ctx, ep, 0); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.env.Service.Create(ctx, testenv.TenantA, idempotency.Key{}, input); err != nil {
		f.t.Fatal(err)
	}
	ds, err := es.ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10})
	if err != nil || len(ds) != 1 {
		f.t.Fatalf("claim = %+v, %v; want one delivery", ds, err)
	}
	d := ds[0]
	if err := es.FinishDelivery(ctx, store.DeliveryOutcome{EndpointID: d.EndpointID, EventID: d.EventID, Attempts: d.Attempts,
		Status: event.DeliveryFailed, LastStatus: 410, LastError: "410 Gone", DisableEndpoint: "the endpoint answered 410 Gone"}); err != nil {
		f.t.Fatal(err)
	}
	return d.EndpointID, d.EventID
}

// TestResendAndEnable: a failed delivery is made pending again and an
// endpoint disabled by a 410 enabled again, each once, audited; a second
// try is refused with a problem saying why.
func TestResendAndEnable(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			ctx := context.Background()
			epID, evID := f.failedDelivery()
			if r := f.op(readerToken, "POST", "/operator/v1/webhook-endpoints/"+epID+"/enable", "en-0", map[string]any{"reason": "r"}); r.status != http.StatusForbidden {
				t.Fatalf("reader enables: %d", r.status)
			}
			// An id that cannot name an endpoint is a 404 on every endpoint action.
			for i, a := range []struct {
				action string
				body   map[string]any
			}{
				{"enable", map[string]any{"reason": "r"}},
				{"resend-failed", map[string]any{"reason": "r", "since": "2000-01-01T00:00:00Z"}},
				{"rotate-secret", map[string]any{"reason": "r", "grace_seconds": 0}},
			} {
				action := a.action
				if r := f.op(operatorToken, "POST", "/operator/v1/webhook-endpoints/not-an-endpoint/"+action, "bad-id-"+strconv.Itoa(i), a.body); r.status != http.StatusNotFound ||
					r.problemType() != "not_found" {
					t.Fatalf("%s with a malformed endpoint id: %d %s", action, r.status, r.body)
				}
			}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-endpoints/"+epID+"/enable", "en-1", map[string]any{}); r.status != http.StatusBadRequest {
				t.Fatalf("enable without a reason: %d %s, want 400", r.status, r.body)
			}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-endpoints/"+epID+"/enable", "", map[string]any{"reason": "r"}); r.status != http.StatusBadRequest ||
				r.problemType() != "idempotency_key_required" {
				t.Fatalf("enable without a key: %d %s, want 400 idempotency_key_required", r.status, r.body)
			}
			r := f.op(operatorToken, "POST", "/operator/v1/webhook-endpoints/"+epID+"/enable", "en-1", map[string]any{"reason": "receiver is back"})
			if r.status != http.StatusOK {
				t.Fatalf("enable: %d %s", r.status, r.body)
			}
			if ep, err := f.ops.Store().FindEndpoint(ctx, store.AnyTenant, epID); err != nil || !ep.Enabled {
				t.Fatalf("endpoint after enable = %+v, %v", ep, err)
			}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-endpoints/"+epID+"/enable", "en-2", map[string]any{"reason": "again"}); r.status != http.StatusConflict ||
				r.problemType() != "endpoint_enabled" {
				t.Fatalf("enable an enabled endpoint: %d %s", r.status, r.body)
			}
			body := map[string]any{"endpoint_id": epID, "event_id": evID, "reason": "receiver is back"}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-deliveries/resend", "rs-1", body); r.status != http.StatusOK {
				t.Fatalf("resend: %d %s", r.status, r.body)
			}
			if d, err := f.ops.Store().FindDelivery(ctx, store.AnyTenant, epID, evID); err != nil || d.Status != event.DeliveryPending ||
				d.NextAttemptAt == nil {
				t.Fatalf("delivery after resend = %+v, %v; want pending", d, err)
			}
			ds, err := f.env.Store.(store.EventStore).ClaimDeliveries(ctx, store.DeliveryClaim{Lease: time.Minute, Limit: 10})
			if err != nil || len(ds) != 1 || ds[0].EventID != evID {
				t.Fatalf("the dispatcher's claim after resend = %+v, %v; want the resent delivery", ds, err)
			}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-deliveries/resend", "rs-2", body); r.status != http.StatusConflict ||
				r.problemType() != "delivery_not_failed" {
				t.Fatalf("resend a delivery in flight: %d %s", r.status, r.body)
			}
			missing := map[string]any{"endpoint_id": epID, "event_id": event.NewID(), "reason": "r"}
			if r := f.op(operatorToken, "POST", "/operator/v1/webhook-deliveries/resend", "rs-3", missing); r.status != http.StatusNotFound {
				t.Fatalf("resend a missing delivery: %d %s", r.status, r.body)
			}
			audit := f.auditEvents(2)
			if len(audit) != 2 || audit[0].Action.Name != service.ActionEnableEndpoint || audit[1].Action.Name != service.ActionResendDelivery ||
				audit[1].Action.Target != epID+"/"+evID {
				t.Fatalf("audit events = %+v", audit)
			}
		})
	}
}

// TestLookups: an order's history, a key and an event across tenants,
// with the tenant filter hiding another tenant's.
func TestLookups(t *testing.T) {
	for _, kind := range testenv.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, kind)
			o, a := f.park()
			r := f.op(readerToken, "GET", "/operator/v1/orders/"+o.ID, "", nil)
			hist := decode[struct {
				Order    order.Order           `json:"order"`
				Events   []struct{ ID string } `json:"events"`
				Attempts []service.AttemptView `json:"attempts"`
				Keys     []struct {
					State      string `json:"state"`
					AttemptKey string `json:"attempt_key"`
				} `json:"idempotency_keys"`
			}](t, r)
			if r.status != http.StatusOK || hist.Order.ID != o.ID || len(hist.Events) != 1 || len(hist.Attempts) != 1 ||
				hist.Attempts[0].Status != "needs_attention" || len(hist.Keys) != 1 || hist.Keys[0].State != "needs_attention" ||
				hist.Keys[0].AttemptKey != a.ProviderKey {
				t.Fatalf("order history: %d %s", r.status, r.body)
			}
			if r := f.op(readerToken, "GET", "/operator/v1/orders/"+o.ID+"?tenant="+testenv.TenantB, "", nil); r.status != http.StatusNotFound {
				t.Fatalf("order with another tenant's filter: %d", r.status)
			}
			if r := f.op(readerToken, "GET", "/operator/v1/orders/"+o.ID+"?tenant="+testenv.TenantA, "", nil); r.status != http.StatusOK {
				t.Fatalf("order with its tenant's filter: %d", r.status)
			}
			keys := decode[struct {
				Data []struct {
					TenantID string `json:"tenant"`
				} `json:"data"`
			}](t, f.op(readerToken, "GET", "/operator/v1/idempotency-keys/pay-1", "", nil))
			if len(keys.Data) != 1 || keys.Data[0].TenantID != testenv.TenantA {
				t.Fatalf("key lookup = %+v", keys)
			}
			evID := hist.Events[0].ID
			if r := f.op(readerToken, "GET", "/operator/v1/events/"+evID, "", nil); r.status != http.StatusOK ||
				decode[struct{ Type string }](t, r).Type != "order.created" {
				t.Fatalf("event lookup: %d %s", r.status, r.body)
			}
			if r := f.op(readerToken, "GET", "/operator/v1/events/"+evID+"?tenant="+testenv.TenantB, "", nil); r.status != http.StatusNotFound {
				t.Fatalf("event with another tenant's filter: %d", r.status)
			}
			parked := decode[struct{ Data []service.AttemptView }](t, f.op(readerToken, "GET", "/operator/v1/attempts", "", nil))
			if len(parked.Data) != 1 || parked.Data[0].ProviderKey != a.ProviderKey {
				t.Fatalf("parked attempts = %+v", parked)
			}
			other := decode[struct{ Data []service.AttemptView }](t, f.op(readerToken, "GET", "/operator/v1/attempts?tenant="+testenv.TenantB, "", nil))
			if len(other.Data) != 0 {
				t.Fatalf("tenant B's parked attempts = %+v", other)
			}
		})
	}
}
