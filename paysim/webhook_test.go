package paysim_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
)

var secret = []byte("whsec_test_secret")

func TestSignature(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"id":"evt_1","type":"charge.succeeded"}`)
	good := paysim.Sign(secret, now, body)
	for _, tc := range []struct {
		name   string
		secret []byte
		header string
		body   []byte
		at     time.Time
		ok     bool
	}{
		{"good", secret, good, body, now, true},
		{"good within tolerance", secret, good, body, now.Add(4 * time.Minute), true},
		{"good among rotated signatures", secret, "t=1800000000,v1=00ff," + good[len("t=1800000000,"):], body, now, true},
		{"tampered body", secret, good, []byte(`{"id":"evt_1","type":"charge.failed"}`), now, false},
		{"wrong secret", []byte("other"), good, body, now, false},
		{"stale timestamp", secret, good, body, now.Add(6 * time.Minute), false},
		{"timestamp from the future", secret, good, body, now.Add(-6 * time.Minute), false},
		{"timestamp changed", secret, "t=1800000001" + good[len("t=1800000000"):], body, now, false},
		{"no v1", secret, "t=1800000000", body, now, false},
		{"empty", secret, "", body, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := paysim.VerifySignature(tc.secret, tc.header, tc.body, tc.at, paysim.DefaultSignatureTolerance)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, paysim.ErrSignature)) {
				t.Fatalf("VerifySignature = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// receiver is a loopback webhook endpoint that verifies signatures, fails
// the first failFirst deliveries with a 503, and keeps the events it took.
type receiver struct {
	t         *testing.T
	failFirst int32
	tries     atomic.Int32
	mu        sync.Mutex
	events    []paysim.WebhookEvent
	ts        *httptest.Server
}

func newReceiver(t *testing.T, failFirst int32) *receiver {
	r := &receiver{t: t, failFirst: failFirst}
	r.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if err := paysim.VerifySignature(secret, req.Header.Get(paysim.SignatureHeader), body, time.Now(), paysim.DefaultSignatureTolerance); err != nil {
			t.Errorf("delivery with a bad signature: %v", err)
		}
		if r.tries.Add(1) <= r.failFirst {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		var ev paysim.WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			t.Errorf("delivery body: %v", err)
		}
		r.mu.Lock()
		r.events = append(r.events, ev)
		r.mu.Unlock()
	}))
	t.Cleanup(r.ts.Close)
	return r
}

// await waits until n events arrived, polling (no wall-clock deadline on
// the scheduler: the test's own timeout bounds it).
func (r *receiver) await(n int) []paysim.WebhookEvent {
	for {
		r.mu.Lock()
		got := append([]paysim.WebhookEvent(nil), r.events...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWebhooksDeliveredSignedWithRetries(t *testing.T) {
	rcv := newReceiver(t, 2)
	e := startWith(t, t.TempDir(), paysim.Config{Webhooks: paysim.WebhookConfig{URL: rcv.ts.URL, Secret: secret}})
	if r := e.charge("o1/pay/1", "o1", "pm_card_visa", ""); r.status != http.StatusCreated {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	if r := e.charge("o2/pay/1", "o2", "pm_card_declined", ""); r.status != http.StatusPaymentRequired {
		t.Fatalf("declined charge: %d %s", r.status, r.body)
	}
	e.charge("o1/pay/1", "o1", "pm_card_visa", "") // a replay sends nothing
	if r := e.do(request{method: "POST", path: "/v1/refunds", key: "o1/refund", body: paysim.RefundParams{ChargeKey: "o1/pay/1", Amount: 4200}}); r.status != http.StatusCreated {
		t.Fatalf("refund: %d %s", r.status, r.body)
	}
	got := map[string]string{}
	for _, ev := range rcv.await(3) {
		if ev.ID == "" {
			t.Errorf("event without id: %+v", ev)
		}
		got[ev.Data.IdempotencyKey] = ev.Type
	}
	want := map[string]string{"o1/pay/1": paysim.EventChargeSucceeded, "o2/pay/1": paysim.EventChargeFailed, "o1/refund": paysim.EventRefundSucceeded}
	for k, typ := range want {
		if got[k] != typ {
			t.Errorf("event for %s = %q, want %q (all: %v)", k, got[k], typ, got)
		}
	}
	if st := e.stats().Webhooks; st.Events != 3 || st.Failed < 2 {
		t.Errorf("stats = %+v, want 3 events and at least 2 failed tries", st)
	}
}

func TestWebhookFaults(t *testing.T) {
	t.Run("duplicate", func(t *testing.T) {
		rcv := newReceiver(t, 0)
		e := startWith(t, t.TempDir(), paysim.Config{Webhooks: paysim.WebhookConfig{URL: rcv.ts.URL, Secret: secret,
			Faults: paysim.WebhookFaults{DuplicateRate: 1, ReorderWindow: 20 * time.Millisecond}}})
		e.charge("d1", "o1", "pm_card_visa", "")
		evs := rcv.await(2)
		if evs[0].ID != evs[1].ID {
			t.Fatalf("duplicate deliveries have ids %s and %s, want one event id", evs[0].ID, evs[1].ID)
		}
	})
	t.Run("drop", func(t *testing.T) {
		rcv := newReceiver(t, 0)
		e := startWith(t, t.TempDir(), paysim.Config{Webhooks: paysim.WebhookConfig{URL: rcv.ts.URL, Secret: secret,
			Faults: paysim.WebhookFaults{DropRate: 1}}})
		e.charge("x1", "o1", "pm_card_visa", "")
		if st := e.stats().Webhooks; st.Events != 1 || st.Dropped != 1 {
			t.Fatalf("stats = %+v, want the one event dropped", st)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		l, err := paysim.OpenLedger(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := paysim.NewServer(l, paysim.Config{Webhooks: paysim.WebhookConfig{Faults: paysim.WebhookFaults{DropRate: 2}}}); err == nil {
			t.Fatal("NewServer accepted a drop rate of 2")
		}
	})
}

// TestRefundFailsLater (issue 16): a refund of a charge paid with
// MethodRefundFail succeeds, then POST /admin/refunds/{id}/fail fails it
// (as Stripe's refund_fail card's refunds fail after they succeeded): the
// refund reads failed, its amount is the charge's again (the whole amount
// refunds afterwards), refund.failed is sent with the refund's key, amount
// and currency, and the ledger's counts leave it out. A second fail, a
// refund of another method and an unknown refund are refused.
func TestRefundFailsLater(t *testing.T) {
	rcv := newReceiver(t, 0)
	e := startWith(t, t.TempDir(), paysim.Config{Webhooks: paysim.WebhookConfig{URL: rcv.ts.URL, Secret: secret}})
	refund := func(key, chargeKey string, amount int64) paysim.Refund {
		t.Helper()
		r := e.do(request{method: "POST", path: "/v1/refunds", key: key, body: paysim.RefundParams{ChargeKey: chargeKey, Amount: amount}})
		var rf paysim.Refund
		decode(t, r, http.StatusCreated, &rf)
		return rf
	}
	fail := func(id string) reply { return e.do(request{method: "POST", path: "/admin/refunds/" + id + "/fail"}) }
	decode(t, e.charge("o1/pay/1", "o1", paysim.MethodRefundFail, ""), http.StatusCreated, &paysim.Charge{})
	decode(t, e.charge("o2/pay/1", "o2", "pm_card_visa", ""), http.StatusCreated, &paysim.Charge{})
	rf := refund("o1/refund/a", "o1/pay/1", 1000)
	if rf.Status != paysim.RefundSucceeded {
		t.Fatalf("refund = %+v, want succeeded", rf)
	}
	var failed paysim.Refund
	decode(t, fail(rf.ID), http.StatusOK, &failed)
	if failed.Status != paysim.RefundFailed || failed.ID != rf.ID || failed.Amount != 1000 {
		t.Fatalf("failed refund = %+v, want %s failed", failed, rf.ID)
	}
	if c, _ := e.chargeUnder("o1/pay/1"); c.AmountRefunded != 0 || c.Status != paysim.ChargeCaptured {
		t.Fatalf("charge after the failure = %+v, want captured with nothing refunded", c)
	}
	var found paysim.Refund
	decode(t, e.lookup("refunds", "o1/refund/a"), http.StatusOK, &found)
	if found.Status != paysim.RefundFailed {
		t.Fatalf("lookup after the failure = %+v, want failed", found)
	}
	if r := fail(rf.ID); r.status != http.StatusBadRequest {
		t.Errorf("second fail = %d %s, want 400", r.status, r.body)
	}
	other := refund("o2/refund/a", "o2/pay/1", 100)
	if r := fail(other.ID); r.status != http.StatusBadRequest {
		t.Errorf("fail of a pm_card_visa refund = %d %s, want 400", r.status, r.body)
	}
	if r := fail("re_nope"); r.status != http.StatusNotFound {
		t.Errorf("fail of an unknown refund = %d %s, want 404", r.status, r.body)
	}
	if all := refund("o1/refund/b", "o1/pay/1", 4200); all.Amount != 4200 {
		t.Fatalf("refund of the whole amount after the failure = %+v", all)
	}
	var ev *paysim.WebhookEvent
	for _, got := range rcv.await(6) { // 2 charges, 3 refunds, 1 failure
		if got.Type == paysim.EventRefundFailed {
			ev = &got
		}
	}
	if ev == nil || ev.Data.ObjectID != rf.ID || ev.Data.IdempotencyKey != "o1/refund/a" || ev.Data.Amount != 1000 || ev.Data.Currency == "" {
		t.Fatalf("refund.failed event = %+v, want one about %s (key o1/refund/a, 1000)", ev, rf.ID)
	}
	if st := e.stats(); st.Refunds != 2 {
		t.Errorf("stats count %d refunds, want 2 (the failed one left out)", st.Refunds)
	}
}
