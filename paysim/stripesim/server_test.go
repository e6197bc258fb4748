package stripesim_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/paysim/stripesim"
)

func captures(s paysim.Snapshot, order string) int {
	n := 0
	for _, c := range s.Charges {
		if c.OrderID == order && c.Status != paysim.ChargeFailed {
			n++
		}
	}
	return n
}

func TestLifecycleCreateConfirmRetrieveRefund(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("o1/prepare", "o1", "1250")
	r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o1/pay/1", url.Values{"payment_method": {stripesim.MethodVisa}})
	if r.status != 200 || r.json(t)["status"] != "succeeded" || r.json(t)["amount_received"].(float64) != 1250 {
		t.Fatalf("confirm: %d %s", r.status, r.body)
	}
	g := e.must("GET", "/v1/payment_intents/"+id, "", url.Values{"expand[0]": {"latest_charge"}})
	ch, _ := g.json(t)["latest_charge"].(map[string]any)
	if g.status != 200 || ch["captured"] != true || ch["amount_captured"].(float64) != 1250 {
		t.Fatalf("retrieve: %d %s", g.status, g.body)
	}
	rf := e.must("POST", "/v1/refunds", "o1/refund/1", url.Values{"payment_intent": {id}, "amount": {"1250"}, "metadata[orderly_reference]": {"o1/refund/1"}})
	if rf.status != 200 || rf.json(t)["status"] != "succeeded" {
		t.Fatalf("refund: %d %s", rf.status, rf.body)
	}
	again := e.must("POST", "/v1/refunds", "o1/refund/2", url.Values{"payment_intent": {id}})
	if again.status != 400 || again.errField(t, "code") != "charge_already_refunded" {
		t.Fatalf("second refund: %d %s", again.status, again.body)
	}
	list := e.must("GET", "/v1/refunds", "", url.Values{"payment_intent": {id}})
	data, _ := list.json(t)["data"].([]any)
	if len(data) != 1 || data[0].(map[string]any)["metadata"].(map[string]any)["orderly_reference"] != "o1/refund/1" {
		t.Fatalf("list refunds: %s", list.body)
	}
	snap := e.ledger()
	if captures(snap, "o1") != 1 || len(snap.Refunds) != 1 || snap.Refunds[0].ChargeKey != snap.Charges[0].IdempotencyKey ||
		snap.Charges[0].Status != paysim.ChargeRefunded {
		t.Fatalf("ledger: %+v", snap)
	}
}

func TestIdempotencyReplayMismatchAndEndpoint(t *testing.T) {
	e := start(t, stripesim.Config{})
	form := url.Values{"amount": {"500"}, "currency": {"usd"}, "metadata[orderly_order_id]": {"o2"}}
	a := e.must("POST", "/v1/payment_intents", "k1", form)
	b := e.must("POST", "/v1/payment_intents", "k1", form)
	if a.status != 200 || b.status != 200 || string(a.body) != string(b.body) || b.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s / %d %s %v", a.status, a.body, b.status, b.body, b.header)
	}
	if a.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first answer marked replayed")
	}
	form.Set("amount", "501")
	c := e.must("POST", "/v1/payment_intents", "k1", form)
	if c.status != 400 || c.errField(t, "type") != "idempotency_error" {
		t.Fatalf("other parameters: %d %s", c.status, c.body)
	}
	id := a.json(t)["id"].(string)
	d := e.must("POST", "/v1/payment_intents/"+id+"/cancel", "k1", nil)
	if d.status != 400 || d.errField(t, "type") != "idempotency_error" {
		t.Fatalf("other endpoint: %d %s", d.status, d.body)
	}
	// Validation errors save nothing: the key stays free.
	v := e.must("POST", "/v1/payment_intents", "k2", url.Values{"amount": {"5"}, "bogus": {"1"}})
	if v.status != 400 || v.errField(t, "code") != "parameter_unknown" {
		t.Fatalf("unknown parameter: %d %s", v.status, v.body)
	}
	if ok := e.must("POST", "/v1/payment_intents", "k2", url.Values{"amount": {"5"}, "currency": {"usd"}}); ok.status != 200 || ok.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("key after a validation error: %d %s", ok.status, ok.body)
	}
	if u := e.must("GET", "/v1/payment_intents/"+id, "", nil, "Authorization", "Bearer sk_live_x"); u.status != 401 {
		t.Fatalf("live key: %d", u.status)
	}
}

// TestCommit500IsSavedAndReplayed: the money moves, a 500 is saved under
// the key and every retry gets the same 500; reading the intent shows it
// succeeded; one capture.
func TestCommit500IsSavedAndReplayed(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("o3/prepare", "o3", "700")
	form := url.Values{"payment_method": {stripesim.MethodVisa}}
	first := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o3/pay/1", form, paysim.FaultHeader, "commit-500")
	if first.status != 500 || first.errField(t, "type") != "api_error" || first.header.Get("Stripe-Should-Retry") != "false" {
		t.Fatalf("first: %d %s %v", first.status, first.body, first.header)
	}
	for range 3 {
		r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o3/pay/1", form)
		if r.status != 500 || string(r.body) != string(first.body) || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %s %v", r.status, r.body, r.header)
		}
	}
	if g := e.must("GET", "/v1/payment_intents/"+id, "", nil); g.json(t)["status"] != "succeeded" {
		t.Fatalf("retrieve: %s", g.body)
	}
	if n := captures(e.ledger(), "o3"); n != 1 {
		t.Fatalf("%d captures", n)
	}
	// A new key cannot pay twice: the intent already succeeded.
	if r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o3/pay/2", form); r.status != 400 || r.errField(t, "code") != "payment_intent_unexpected_state" {
		t.Fatalf("confirm with a new key: %d %s", r.status, r.body)
	}
}

func TestErrorBeforeCommitIsSavedAndNothingMoved(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("o4/prepare", "o4", "700")
	form := url.Values{"payment_method": {stripesim.MethodFaultError}}
	first := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o4/pay/1", form)
	replay := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o4/pay/1", form)
	if first.status != 500 || replay.status != 500 || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d, replay %d", first.status, replay.status)
	}
	if g := e.must("GET", "/v1/payment_intents/"+id, "", nil); g.json(t)["status"] != "requires_payment_method" {
		t.Fatalf("retrieve: %s", g.body)
	}
	// The fault was one-shot: a new key pays.
	if r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o4/pay/2", form); r.status != 200 || r.json(t)["status"] != "succeeded" {
		t.Fatalf("new key: %d %s", r.status, r.body)
	}
	if n := captures(e.ledger(), "o4"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

func TestDropAfterCommit(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("o5/prepare", "o5", "900")
	form := url.Values{"payment_method": {stripesim.MethodFaultDropAfterCommit}}
	if r, err := e.do("POST", "/v1/payment_intents/"+id+"/confirm", "o5/pay/1", form); err == nil {
		t.Fatalf("answered %d %s; want the connection closed", r.status, r.body)
	}
	r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o5/pay/1", form)
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" || r.json(t)["status"] != "succeeded" {
		t.Fatalf("replay: %d %s", r.status, r.body)
	}
	if n := captures(e.ledger(), "o5"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

// TestConcurrentSameKey: racing requests under one key get the first
// request's answer or 409 idempotency_key_in_use — never two charges.
func TestConcurrentSameKey(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("o6/prepare", "o6", "300")
	form := url.Values{"payment_method": {stripesim.MethodVisa}}
	const n = 8
	var wg sync.WaitGroup
	results := make([]resp, n)
	for i := range n {
		wg.Go(func() {
			// latency holds the first request while it executes... but
			// latency applies before the claim; the in-flight window is the
			// transaction, so also race plainly.
			results[i] = e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o6/pay/1", form)
		})
	}
	wg.Wait()
	counts := map[int]int{}
	for _, r := range results {
		counts[r.status]++
		if r.status == 409 && (r.errField(t, "code") != "idempotency_key_in_use" || r.header.Get("Stripe-Should-Retry") != "true") {
			t.Fatalf("409: %s %v", r.body, r.header)
		}
	}
	if counts[200]+counts[409] != n || counts[200] < 1 {
		t.Fatalf("statuses %v", counts)
	}
	if c := captures(e.ledger(), "o6"); c != 1 {
		t.Fatalf("%d captures", c)
	}
}

// TestInUseWhileFirstRequestHeld: a timeout fault holds the first request
// with its key claimed; a retry meanwhile is a 409; after the hold nothing
// was saved and the key pays.
func TestInUseWhileFirstRequestHeld(t *testing.T) {
	e := start(t, stripesim.Config{Faults: paysim.Faults{TimeoutDelay: paysim.MaxDelay}})
	id := e.createIntent("o7/prepare", "o7", "300")
	form := url.Values{"payment_method": {stripesim.MethodVisa}}
	done := make(chan error, 1)
	go func() {
		_, err := e.do("POST", "/v1/payment_intents/"+id+"/confirm", "o7/pay/1", form, paysim.FaultHeader, "timeout")
		done <- err
	}()
	// Wait until the held request has claimed the key (its fault fired).
	admin := paysim.NewAdminClient(e.ts.URL)
	for {
		st, err := admin.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.FaultsInjected[paysim.FaultTimeout] > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o7/pay/1", form)
	if r.status != 409 {
		t.Fatalf("while held: %d %s", r.status, r.body)
	}
	e.sim.StopDelays() // ends the hold: the connection closes, nothing saved
	if err := <-done; err == nil {
		t.Fatal("the held request was answered")
	}
	for {
		r = e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o7/pay/1", form)
		if r.status != 409 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after the hold: %d %s %v", r.status, r.body, r.header)
	}
}

func TestKeyPrunedAfterRetentionStartsANewRequest(t *testing.T) {
	e := start(t, stripesim.Config{IdempotencyRetention: time.Hour})
	a := e.createIntent("k", "o8", "100")
	e.clock.Advance(59 * time.Minute)
	if b := e.createIntent("k", "o8", "100"); b != a {
		t.Fatalf("within retention: %s then %s", a, b)
	}
	e.clock.Advance(2 * time.Minute)
	if c := e.createIntent("k", "o8", "100"); c == a {
		t.Fatalf("after retention the key replayed %s", c)
	}
}

func TestSearchLags(t *testing.T) {
	e := start(t, stripesim.Config{SearchLag: time.Minute})
	id := e.createIntent("o9/prepare", "o9", "100")
	q := url.Values{"query": {"metadata['orderly_reference']:'o9/pay/1'"}}
	if r := e.must("GET", "/v1/payment_intents/search", "", q); len(r.json(t)["data"].([]any)) != 0 {
		t.Fatalf("found before the lag: %s", r.body)
	}
	e.clock.Advance(time.Minute)
	r := e.must("GET", "/v1/payment_intents/search", "", q)
	data := r.json(t)["data"].([]any)
	if r.json(t)["object"] != "search_result" || len(data) != 1 || data[0].(map[string]any)["id"] != id {
		t.Fatalf("after the lag: %s", r.body)
	}
	if r := e.must("GET", "/v1/payment_intents/search", "", url.Values{"query": {"metadata['orderly_reference']:'nope'"}}); len(r.json(t)["data"].([]any)) != 0 {
		t.Fatalf("other reference: %s", r.body)
	}
}

func TestDeclinesAreSavedAndTheIntentCanBePaidAgain(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("o10/prepare", "o10", "100")
	cases := []struct{ pm, code, decline string }{
		{stripesim.MethodDeclined, "card_declined", "generic_decline"},
		{stripesim.MethodInsufficientFunds, "card_declined", "insufficient_funds"},
		{stripesim.MethodLostCard, "card_declined", "lost_card"},
		{stripesim.MethodExpiredCard, "expired_card", ""},
	}
	for i, c := range cases {
		key := fmt.Sprintf("o10/pay/%d", i)
		form := url.Values{"payment_method": {c.pm}}
		r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", key, form)
		if r.status != 402 || r.errField(t, "type") != "card_error" || r.errField(t, "code") != c.code || r.errField(t, "decline_code") != c.decline {
			t.Fatalf("%s: %d %s", c.pm, r.status, r.body)
		}
		pi, _ := r.json(t)["error"].(map[string]any)["payment_intent"].(map[string]any)
		if pi["status"] != "requires_payment_method" || pi["last_payment_error"] == nil {
			t.Fatalf("%s: intent %v", c.pm, pi)
		}
		if again := e.must("POST", "/v1/payment_intents/"+id+"/confirm", key, form); again.status != 402 || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s replay: %d", c.pm, again.status)
		}
	}
	if r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "o10/pay/ok", url.Values{"payment_method": {stripesim.MethodVisa}}); r.status != 200 {
		t.Fatalf("another method: %d %s", r.status, r.body)
	}
	if n := captures(e.ledger(), "o10"); n != 1 {
		t.Fatalf("%d captures", n)
	}
}

func TestThreeDSecureAndBankDebitReachTheirStates(t *testing.T) {
	e := start(t, stripesim.Config{})
	a := e.createIntent("a/prepare", "oa", "100")
	r := e.must("POST", "/v1/payment_intents/"+a+"/confirm", "a/pay", url.Values{"payment_method": {stripesim.Method3DS2Required}})
	if r.json(t)["status"] != "requires_action" || r.json(t)["next_action"].(map[string]any)["type"] != "redirect_to_url" {
		t.Fatalf("3DS: %s", r.body)
	}
	if c := e.must("POST", "/admin/stripe/payment_intents/"+a+"/authenticate", "", nil); c.json(t)["status"] != "succeeded" {
		t.Fatalf("authenticate: %s", c.body)
	}
	b := e.createIntent("b/prepare", "ob", "100")
	r = e.must("POST", "/v1/payment_intents/"+b+"/confirm", "b/pay", url.Values{"payment_method": {stripesim.MethodUSBankAccount}})
	if r.json(t)["status"] != "processing" {
		t.Fatalf("bank debit: %s", r.body)
	}
	if n := captures(e.ledger(), "ob"); n != 0 {
		t.Fatalf("processing counted as a capture")
	}
	if c := e.must("POST", "/admin/stripe/payment_intents/"+b+"/settle?outcome=failure", "", nil); c.json(t)["status"] != "requires_payment_method" {
		t.Fatalf("settle failure: %s", c.body)
	}
	if n := captures(e.ledger(), "oa"); n != 1 {
		t.Fatalf("3DS capture count %d", n)
	}
}

func TestCancelAndManualCapture(t *testing.T) {
	e := start(t, stripesim.Config{})
	id := e.createIntent("c/prepare", "oc", "100")
	if r := e.must("POST", "/v1/payment_intents/"+id+"/cancel", "c/cancel", nil); r.json(t)["status"] != "canceled" {
		t.Fatalf("cancel: %s", r.body)
	}
	if r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "c/pay", url.Values{"payment_method": {stripesim.MethodVisa}}); r.status != 400 {
		t.Fatalf("confirm canceled: %d", r.status)
	}
	m := e.must("POST", "/v1/payment_intents", "m/prepare", url.Values{"amount": {"400"}, "currency": {"eur"}, "capture_method": {"manual"},
		"confirm": {"true"}, "payment_method": {stripesim.MethodVisa}, "metadata[orderly_order_id]": {"om"}})
	if m.json(t)["status"] != "requires_capture" {
		t.Fatalf("manual: %s", m.body)
	}
	mid := m.json(t)["id"].(string)
	if n := captures(e.ledger(), "om"); n != 0 {
		t.Fatal("an authorization counted as a capture")
	}
	if r := e.must("POST", "/v1/payment_intents/"+mid+"/capture", "m/capture", nil); r.json(t)["status"] != "succeeded" {
		t.Fatalf("capture: %s", r.body)
	}
	if n := captures(e.ledger(), "om"); n != 1 {
		t.Fatalf("%d captures", n)
	}
	if r := e.must("POST", "/v1/payment_intents/"+mid+"/cancel", "m/cancel", nil); r.status != 400 || r.errField(t, "code") != "payment_intent_unexpected_state" {
		t.Fatalf("cancel succeeded: %d %s", r.status, r.body)
	}
}

// TestWebhooksVerifyWithStripeGo: events are signed with every secret
// (rotation) and stripe-go's webhook package accepts them under either.
func TestWebhooksVerifyWithStripeGo(t *testing.T) {
	type got struct {
		body []byte
		sig  string
	}
	ch := make(chan got, 16)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- got{b, r.Header.Get("Stripe-Signature")}
	}))
	defer recv.Close()
	secrets := []string{"whsec_old_0123456789abcdef", "whsec_new_0123456789abcdef"}
	e := start(t, stripesim.Config{Webhooks: stripesim.WebhookConfig{URL: recv.URL, Secrets: secrets}})
	id := e.createIntent("w/prepare", "ow", "100")
	e.must("POST", "/v1/payment_intents/"+id+"/confirm", "w/pay", url.Values{"payment_method": {stripesim.MethodVisa}})
	seen := map[string]bool{}
	for len(seen) < 3 {
		var g got
		select {
		case g = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("events seen: %v", seen)
		}
		for _, s := range secrets {
			ev, err := webhook.ConstructEvent(g.body, g.sig, s)
			if err != nil {
				t.Fatalf("verify with %s: %v", s, err)
			}
			seen[string(ev.Type)] = true
			if ev.Type == "payment_intent.succeeded" {
				var pi stripe.PaymentIntent
				if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil || pi.ID != id || pi.Amount != 100 || pi.Metadata["orderly_order_id"] != "ow" {
					t.Fatalf("event object: %v %+v", err, pi)
				}
			}
		}
		if _, err := webhook.ConstructEvent(g.body, g.sig, "whsec_other"); err == nil {
			t.Fatal("verified with a wrong secret")
		}
	}
	for _, want := range []string{"payment_intent.created", "charge.succeeded", "payment_intent.succeeded"} {
		if !seen[want] {
			t.Fatalf("missing %s in %v", want, seen)
		}
	}
}

func TestRestartKeepsSavedAnswersAndFreesKeysInFlight(t *testing.T) {
	dir := t.TempDir()
	e := startIn(t, dir, stripesim.Config{})
	id := e.createIntent("r/prepare", "or", "100")
	first := e.must("POST", "/v1/payment_intents/"+id+"/confirm", "r/pay", url.Values{"payment_method": {stripesim.MethodVisa}})
	e.close()
	e2 := startIn(t, dir, stripesim.Config{})
	again := e2.must("POST", "/v1/payment_intents/"+id+"/confirm", "r/pay", url.Values{"payment_method": {stripesim.MethodVisa}})
	if again.status != 200 || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after restart: %d %s", again.status, again.body)
	}
}

func TestAdminFaultsKeepTheNativeShape(t *testing.T) {
	e := start(t, stripesim.Config{Commit500Rate: 0.25})
	admin := paysim.NewAdminClient(e.ts.URL)
	f, err := admin.Faults(context.Background()) // strict decoding of paysim.Faults
	if err != nil {
		t.Fatal(err)
	}
	f.DropRate = 0.5
	if err := admin.SetFaults(context.Background(), f); err != nil {
		t.Fatal(err)
	}
	r := e.must("GET", "/admin/stripe/faults", "", nil)
	if m := r.json(t); m["drop_rate"] != 0.5 || m["commit_500_rate"] != 0.25 {
		t.Fatalf("stripe faults: %s", r.body)
	}
	req, _ := http.NewRequest("PUT", e.ts.URL+"/admin/stripe/faults", strings.NewReader(`{"lock_timeout_rate":0.1}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("PUT: %v %v", res, err)
	}
	res.Body.Close()
	if m := e.must("GET", "/admin/stripe/faults", "", nil).json(t); m["lock_timeout_rate"] != 0.1 || m["drop_rate"] != 0.0 {
		t.Fatalf("after PUT: %v", m)
	}
}

// TestNativeTestMethodNames: paysim's native test names work in Stripe
// mode, so orderstorm's storms run unchanged.
func TestNativeTestMethodNames(t *testing.T) {
	e := start(t, stripesim.Config{})
	for pm, want := range map[string]int{"pm_card_declined": 402, "pm_card_insufficient_funds": 402, "pm_fault_503": 500,
		"pm_fault_latency": 200} {
		id := e.createIntent(pm+"/prepare", "n-"+pm, "100")
		if r := e.must("POST", "/v1/payment_intents/"+id+"/confirm", pm+"/pay", url.Values{"payment_method": {pm}}); r.status != want {
			t.Errorf("%s: %d %s", pm, r.status, r.body)
		}
	}
}
