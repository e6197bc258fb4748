package faulttest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/orderly/orderly/client"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store/pgtest"
)

// EnvPGRestart enables the subtest that restarts the machine's PostgreSQL.
const EnvPGRestart = "ORDERLY_FAULT_PG_RESTART"

// newKey returns a fresh Idempotency-Key naming its purpose.
func newKey(purpose string) string { return "ft-" + purpose + "-" + uuid.NewString() }

// TestFaults runs one paysim and one orderd (provider timeout 1s, lease 3s,
// completer every 200ms) on a fresh PostgreSQL database, injects one fault
// per subtest, and logs the fault matrix at the end. Faults are selected by
// payment method (or set and reset around their subtest), so the subtests
// share the processes; the SIGKILL and PostgreSQL restart subtests run
// their own orderd on their own database. Subtests run one after another
// so that paysim's fault counters can be attributed to each.
func TestFaults(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ps := startPaysim(t)
	e := &env{paysim: ps, psa: newPaysimAdmin(ps.addr), dbURL: dbURL, m: &matrix{}}
	e.orderd = startOrderd(t, "orderd", dbURL, ps.addr, fastTimings)

	t.Run("latency", func(t *testing.T) { testLatency(t, e) })
	t.Run("503", func(t *testing.T) { test503(t, e) })
	t.Run("timeout", func(t *testing.T) { testTimeout(t, e) })
	t.Run("drop_after_commit/client_retries", func(t *testing.T) { testDropClientRetries(t, e) })
	t.Run("drop_after_commit/completer_only", func(t *testing.T) { testDropCompleterOnly(t, e) })
	t.Run("sigkill/before_provider_commit", func(t *testing.T) { testKillBeforeCommit(t, e) })
	t.Run("sigkill/after_provider_commit", func(t *testing.T) { testKillAfterCommit(t, e) })
	t.Run("declines", func(t *testing.T) { testDeclines(t, e) })
	t.Run("shipment_drop_after_commit", func(t *testing.T) { testShipmentDropAfterCommit(t, e) })
	t.Run("lookup_fails_after_unknown_outcome", func(t *testing.T) { testLookupFailsAfterUnknownOutcome(t, e) })
	t.Run("postgres_restart", func(t *testing.T) { testPostgresRestart(t, e) })

	// The paysim ledger as a whole: no order anywhere was captured twice.
	if st := e.psa.stats(t); st.MaxCapturesPerOrder > 1 {
		t.Errorf("paysim max_captures_per_order = %d over the whole run, want at most 1", st.MaxCapturesPerOrder)
	}
	if n := e.m.log(t); n > 0 {
		t.Errorf("the fault matrix shows %d anomalies, want 0", n)
	}
}

// testLatency: with 300ms of paysim latency on every request, 20 orders
// paid concurrently all end PAID with one capture each.
func testLatency(t *testing.T, e *env) {
	const n = 20
	fr := e.begin(t, "latency 300ms (run-level), 20 concurrent", e.orderd.addr, e.dbURL)
	e.psa.setFaults(t, paysim.Faults{Latency: 300 * time.Millisecond})
	t.Cleanup(func() { e.psa.setFaults(t, paysim.Faults{}) })

	ids := make([]string, n)
	keys := make([]string, n)
	for i := range n {
		ids[i] = fr.create(newKey("latency-create")).ID
		keys[i] = newKey("latency-pay")
	}
	first := make([]reply, n)
	final := make([]reply, n)
	tries := make([]int, n)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-gate
			first[i] = fr.api.pay(context.Background(), ids[i], keys[i], "pm_card_visa")
			final[i], tries[i] = first[i], 1
			if retryable(first[i]) {
				var more int
				final[i], more = fr.api.payUntilFinal(ids[i], keys[i], "pm_card_visa")
				tries[i] += more
			}
		})
	}
	close(gate)
	wg.Wait()
	retried := 0
	for i := range n {
		fr.track(ids[i], keys[i], "pm_card_visa")
		if tries[i] > 1 {
			retried++
			t.Logf("order %s: first answer %v, final %v after %d tries", ids[i], first[i], final[i], tries[i])
		}
		if final[i].status != http.StatusOK || final[i].order.State != "PAID" {
			t.Errorf("pay %s = %v, want 200 PAID", ids[i], final[i])
		}
	}
	e.psa.setFaults(t, paysim.Faults{})
	if d := fr.injectedDelta(paysim.FaultLatency); d < n {
		t.Errorf("paysim injected latency %d times, want at least %d", d, n)
	}
	fr.row.note = fmt.Sprintf("%d of %d needed a retry", retried, n)
	fr.finish()
}

// test503: paysim answers 503 to the first charge; orderd answers 503 with
// Retry-After and stores nothing final; the retry with the same key pays.
func test503(t *testing.T, e *env) {
	fr := e.begin(t, "503 (pm_fault_503)", e.orderd.addr, e.dbURL)
	o := fr.create(newKey("503-create"))
	key := newKey("503-pay")
	fr.track(o.ID, key, paysim.MethodFault503)

	r := fr.api.pay(context.Background(), o.ID, key, paysim.MethodFault503)
	if r.status != http.StatusServiceUnavailable || r.retryAfter == "" || r.problem != "unavailable" {
		t.Errorf("first pay = %v (Retry-After %q), want 503 unavailable with Retry-After", r, r.retryAfter)
	}
	if ks, err := fr.api.keyStatus(key); err != nil || ks.State != "retryable_failure" {
		t.Errorf("key after the 503 = %+v, %v; want retryable_failure (nothing final stored)", ks, err)
	}
	if c := e.psa.captures(t, o.ID); c != 0 {
		t.Errorf("paysim captured %d times after its 503, want 0", c)
	}
	r, n := fr.api.payUntilFinal(o.ID, key, paysim.MethodFault503)
	if r.status != http.StatusOK || r.order.State != "PAID" || r.replayed {
		t.Errorf("retry with the same key = %v after %d tries, want 200 PAID (not a replay: the 503 stored nothing)", r, n)
	}
	if d := fr.injectedDelta(paysim.FaultError); d != 1 {
		t.Errorf("paysim injected %d errors, want 1", d)
	}
	fr.finish()
}

// testTimeout: paysim holds the first charge past orderd's 1s provider
// timeout (committing nothing); orderd answers 503 with the outcome
// unknown; the retry with the same key (or the completer) asks paysim,
// finds nothing, charges once, and the order is PAID with one capture.
func testTimeout(t *testing.T, e *env) {
	fr := e.begin(t, "timeout (pm_fault_timeout, provider 1s)", e.orderd.addr, e.dbURL)
	o := fr.create(newKey("timeout-create"))
	key := newKey("timeout-pay")
	fr.track(o.ID, key, paysim.MethodFaultTimeout)

	start := time.Now()
	r := fr.api.pay(context.Background(), o.ID, key, paysim.MethodFaultTimeout)
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable || r.retryAfter == "" {
		t.Errorf("first pay = %v after %s, want 503 with Retry-After", r, took)
	}
	if took < 900*time.Millisecond {
		t.Errorf("first pay answered after %s, before the 1s provider timeout", took)
	}
	ks, err := fr.api.keyStatus(key)
	switch {
	case err != nil:
		t.Errorf("key status: %v", err)
	case ks.State == "unknown_outcome", ks.State == "in_progress":
		t.Logf("key after the timeout: %s", ks.State)
	case ks.State == "completed" && ks.StatusCode == http.StatusOK:
		t.Logf("key after the timeout: already completed by the completer")
	default:
		t.Errorf("key after the timeout = %+v, want unknown_outcome (or taken over by the completer); "+
			"a retryable_failure would mean a timed-out charge was treated as never sent", ks)
	}
	fr.row.note = "key seen " + ks.State + " after the 503"
	r, n := fr.api.payUntilFinal(o.ID, key, paysim.MethodFaultTimeout)
	if r.status != http.StatusOK || r.order.State != "PAID" {
		t.Errorf("retry with the same key = %v after %d tries, want 200 PAID", r, n)
	}
	if d := fr.injectedDelta(paysim.FaultTimeout); d != 1 {
		t.Errorf("paysim injected %d timeouts, want 1", d)
	}
	fr.finish()
}

// testDropClientRetries: paysim captures the first charge and drops the
// reply; orderd answers 503; the charge is in paysim's ledger; the retry
// with the same key is 200 PAID with no second capture.
func testDropClientRetries(t *testing.T, e *env) {
	fr := e.begin(t, "drop after commit, client retries", e.orderd.addr, e.dbURL)
	o := fr.create(newKey("drop-create"))
	key := newKey("drop-pay")
	fr.track(o.ID, key, paysim.MethodFaultDropAfterCommit)

	r := fr.api.pay(context.Background(), o.ID, key, paysim.MethodFaultDropAfterCommit)
	if r.status != http.StatusServiceUnavailable || r.retryAfter == "" {
		t.Errorf("first pay = %v, want 503 with Retry-After (the provider's answer was lost)", r)
	}
	if c := e.psa.captures(t, o.ID); c != 1 {
		t.Errorf("paysim holds %d captures after the dropped reply, want 1 (the charge was committed)", c)
	}
	r, n := fr.api.payUntilFinal(o.ID, key, paysim.MethodFaultDropAfterCommit)
	if r.status != http.StatusOK || r.order.State != "PAID" {
		t.Errorf("retry with the same key = %v after %d tries, want 200 PAID", r, n)
	}
	if c := e.psa.captures(t, o.ID); c != 1 {
		t.Errorf("paysim holds %d captures after the retry, want still 1", c)
	}
	if d := fr.injectedDelta(paysim.FaultDrop); d != 1 {
		t.Errorf("paysim injected %d drops, want 1", d)
	}
	fr.finish()
}

// testDropCompleterOnly: as testDropClientRetries, but the client never
// retries: the completer alone brings the order to PAID.
func testDropCompleterOnly(t *testing.T, e *env) {
	fr := e.begin(t, "drop after commit, no retry (completer)", e.orderd.addr, e.dbURL)
	o := fr.create(newKey("drop-nr-create"))
	key := newKey("drop-nr-pay")
	fr.track(o.ID, key, paysim.MethodFaultDropAfterCommit)

	r := fr.api.pay(context.Background(), o.ID, key, paysim.MethodFaultDropAfterCommit)
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("first pay = %v, want 503", r)
	}
	posts := fr.ct.posts.Load()
	if got := fr.api.awaitState(o.ID, "PAID", 15*time.Second); got != "PAID" {
		t.Errorf("order is %s 15s after the dropped reply without a retry, want PAID (completer)", got)
	}
	if fr.ct.posts.Load() != posts {
		t.Fatal("the test sent a POST while waiting for the completer")
	}
	if ks, err := fr.api.keyStatus(key); err != nil || ks.State != "completed" || ks.StatusCode != http.StatusOK {
		t.Errorf("key after the completer = %+v, %v; want completed 200", ks, err)
	}
	if d := fr.injectedDelta(paysim.FaultDrop); d != 1 {
		t.Errorf("paysim injected %d drops, want 1", d)
	}
	fr.finish() // the retry with the original key is checked here: 200, replayed
}

// testShipmentDropAfterCommit: paysim ships and drops the reply; orderd
// answers 503; paysim's ledger holds the one shipment, stored with the
// attempt's reference; the retry with the same key finds it by that
// reference (the warehouse seam never looks a request up by key): 200
// FULFILLED, still one shipment, and the key replays.
func testShipmentDropAfterCommit(t *testing.T, e *env) {
	fr := e.begin(t, "shipment: drop after commit, client retries", e.orderd.addr, e.dbURL)
	ctx := context.Background()
	r := fr.api.do(ctx, http.MethodPost, "/v1/orders", newKey("ship-create"), map[string]any{"customer_id": "cus_fault",
		"currency": "USD", "items": []map[string]any{{"sku": paysim.SKUFaultDropAfterCommit, "quantity": 3, "unit_price": 999}}})
	if r.status != http.StatusCreated {
		t.Fatalf("create = %v %s", r, r.body)
	}
	o := r.order
	if r, n := fr.api.payUntilFinal(o.ID, newKey("ship-pay"), "pm_card_visa"); r.status != http.StatusOK {
		t.Fatalf("pay = %v after %d tries, want 200", r, n)
	}
	key := newKey("ship-fulfil")
	fulfil := func() reply { return fr.api.do(ctx, http.MethodPost, "/v1/orders/"+o.ID+"/fulfill", key, nil) }
	if r := fulfil(); r.status != http.StatusServiceUnavailable {
		t.Errorf("first fulfil = %v, want 503 (the warehouse's answer was lost)", r)
	}
	var shipped []paysim.Shipment
	for _, sh := range fr.e.psa.ledger(t).Shipments {
		if sh.OrderID == o.ID {
			shipped = append(shipped, sh)
		}
	}
	if len(shipped) != 1 || shipped[0].Reference != o.ID+"/fulfill" {
		t.Fatalf("paysim holds %+v for the order, want one shipment with reference %s/fulfill", shipped, o.ID)
	}
	var got reply
	for range 60 {
		if got = fulfil(); !retryable(got) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got.status != http.StatusOK || got.order.State != "FULFILLED" {
		t.Errorf("retry with the same key = %v, want 200 FULFILLED", got)
	}
	if n := fr.e.psa.stats(t).ShipmentsByOrder[o.ID]; n != 1 {
		t.Errorf("paysim made %d shipments of the order, want 1", n)
	}
	if r := fulfil(); r.status != http.StatusOK || !r.replayed {
		t.Errorf("another retry = %v, want the stored 200 replayed", r)
	}
	d := fr.injectedDelta(paysim.FaultDrop)
	if d != 1 {
		t.Errorf("paysim injected %d drops, want 1", d)
	}
	// finish checks pay keys and PAID orders; this row's checks are above.
	fr.done, fr.row.orders, fr.row.injected = true, 1, fmt.Sprintf("drop=%d", d)
}

// killTimings give pm_fault_latency (2s at paysim) room within the provider
// timeout, and a lease the completer waits out after a crash.
var killTimings = orderdTimings{providerTimeout: 3 * time.Second, lease: 7 * time.Second, completer: 200 * time.Millisecond}

// holdTimings give a call held by paysim ten seconds before orderd gives it
// up itself, and a lease (above twice that) the completer waits out after
// a crash.
var holdTimings = orderdTimings{providerTimeout: 10 * time.Second, lease: 21 * time.Second, completer: 200 * time.Millisecond}

const completerLog = `"msg":"completer finished an abandoned request"`

// payInFlight sends a pay that is expected to die with its orderd; the
// answer (an error) arrives on the channel.
func payInFlight(api *orderdAPI, id, key, method string) <-chan reply {
	c := make(chan reply, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		c <- api.pay(ctx, id, key, method)
	}()
	return c
}

// testKillBeforeCommit: orderd is SIGKILLed while paysim holds its charge
// (a run-level latency of 5 minutes). paysim's latency wait ends when its client goes
// away (Server.delay returns false on the request's context), so the
// charge is NOT committed. A new orderd on the same database, with no
// client retry, finds the key whose lease lapsed with an attempt recorded,
// charges with the same provider key, and the order is PAID with one
// capture; the original key then replays 200.
//
// Ordered by conditions, not by the clock: the kill comes once paysim
// reports the charge held; the new orderd starts only once paysim reports
// the held request abandoned (Stats.DelaysAbandoned) and no capture, so
// the check cannot race the new orderd's takeover however slow the
// machine or the process spawn.
func testKillBeforeCommit(t *testing.T, e *env) {
	dbURL := pgtest.NewDatabase(t)
	od1 := startOrderd(t, "orderd-kill-a1", dbURL, e.paysim.addr, holdTimings)
	fr := e.begin(t, "SIGKILL orderd mid-call, before commit", od1.addr, dbURL)
	fr.extra = []string{"SIGKILL=1"}
	o := fr.create(newKey("kill-a-create"))
	key := newKey("kill-a-pay")
	fr.track(o.ID, key, "pm_card_visa")

	// paysim holds every request for 5 minutes or until its client goes away
	// (no short timer to race), and orderd's provider timeout is 10s: the kill
	// below comes while the charge is held, unless the machine stalls for
	// ten seconds.
	e.psa.setFaults(t, paysim.Faults{Latency: 5 * time.Minute})
	t.Cleanup(func() { e.psa.setFaults(t, paysim.Faults{}) })
	before := e.psa.stats(t)
	inflight := payInFlight(fr.api, o.ID, key, "pm_card_visa")
	e.psa.awaitHolding(t, before.FaultsInjected[paysim.FaultLatency])
	// paysim holds the charge, so orderd holds the key.
	if ks, err := fr.api.keyStatus(key); err != nil || ks.State != "in_progress" {
		t.Errorf("key while paysim holds the charge = %+v, %v; want in_progress", ks, err)
	}
	od1.signal(t, syscall.SIGKILL)
	if r := <-inflight; r.err == nil {
		t.Errorf("the pay to the killed orderd answered %v, want no answer", r)
	}
	// paysim gave the killed request up: nothing was charged.
	for deadline := time.Now().Add(2 * time.Minute); e.psa.stats(t).DelaysAbandoned <= before.DelaysAbandoned; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("paysim never gave up the killed orderd's held charge")
		}
	}
	if c := e.psa.captures(t, o.ID); c != 0 {
		t.Errorf("paysim captured %d times although orderd died during the latency, want 0", c)
	}
	e.psa.setFaults(t, paysim.Faults{})
	od2 := startOrderd(t, "orderd-kill-a2", dbURL, e.paysim.addr, holdTimings)
	fr.api = fr.apiFor(od2.addr)
	posts := fr.ct.posts.Load()
	if got := fr.api.awaitState(o.ID, "PAID", 2*time.Minute); got != "PAID" {
		t.Errorf("order is %s after the new orderd's completer ran, want PAID", got)
	}
	if fr.ct.posts.Load() != posts {
		t.Fatal("the test sent a POST while waiting for the completer")
	}
	if !od2.logContains(completerLog) {
		t.Errorf("the new orderd did not log that its completer finished the request")
	}
	fr.finish()
}

// testKillAfterCommit: orderd is frozen (SIGSTOP) 500ms into a pay with
// pm_fault_latency, so its connection to paysim stays open and paysim
// commits the charge after its 2s; then orderd is SIGKILLed before it can
// read the answer and write the post-call. A new orderd's completer
// re-sends the charge with the same provider key, paysim replays it, and
// the order is PAID with still one capture; the original key replays 200.
func testKillAfterCommit(t *testing.T, e *env) {
	dbURL := pgtest.NewDatabase(t)
	od1 := startOrderd(t, "orderd-kill-b1", dbURL, e.paysim.addr, killTimings)
	fr := e.begin(t, "SIGKILL orderd after provider commit", od1.addr, dbURL)
	fr.extra = []string{"SIGSTOP+SIGKILL=1"}
	o := fr.create(newKey("kill-b-create"))
	key := newKey("kill-b-pay")
	fr.track(o.ID, key, paysim.MethodFaultLatency)

	t0 := time.Now()
	held := e.psa.stats(t).FaultsInjected[paysim.FaultLatency]
	inflight := payInFlight(fr.api, o.ID, key, paysim.MethodFaultLatency)
	e.psa.awaitHolding(t, held)
	time.Sleep(time.Until(t0.Add(500 * time.Millisecond)))
	od1.signal(t, syscall.SIGSTOP)
	if c := e.psa.awaitCaptures(t, o.ID, 1, 8*time.Second); c != 1 {
		t.Fatalf("paysim holds %d captures while orderd is frozen, want 1", c)
	}
	od1.signal(t, syscall.SIGKILL)
	if r := <-inflight; r.err == nil {
		t.Errorf("the pay to the killed orderd answered %v, want no answer", r)
	}
	od2 := startOrderd(t, "orderd-kill-b2", dbURL, e.paysim.addr, killTimings)
	fr.api = fr.apiFor(od2.addr)
	if ks, err := fr.api.keyStatus(key); err == nil {
		fr.row.note = "key " + ks.State + " when the new orderd started"
	}
	posts := fr.ct.posts.Load()
	if got := fr.api.awaitState(o.ID, "PAID", 20*time.Second); got != "PAID" {
		t.Errorf("order is %s after the new orderd's completer ran, want PAID", got)
	}
	if fr.ct.posts.Load() != posts {
		t.Fatal("the test sent a POST while waiting for the completer")
	}
	if !od2.logContains(completerLog) {
		t.Errorf("the new orderd did not log that its completer finished the request")
	}
	if c := e.psa.captures(t, o.ID); c != 1 {
		t.Errorf("paysim holds %d captures after recovery, want 1", c)
	}
	fr.finish()
}

// testDeclines: a declined card is a final 402 that leaves the order RCVD
// and replays; a new key with a good card then pays (a new logical charge),
// and a second order declined for insufficient funds stays RCVD for good.
func testDeclines(t *testing.T, e *env) {
	fr := e.begin(t, "declines", e.orderd.addr, e.dbURL)
	ctx := context.Background()
	o := fr.create(newKey("decline-create"))
	k1 := newKey("decline-pay")
	fr.track(o.ID, k1, paysim.MethodDeclined)
	r := fr.api.pay(ctx, o.ID, k1, paysim.MethodDeclined)
	if r.status != http.StatusPaymentRequired || r.problem != "payment_declined" || r.replayed {
		t.Errorf("pay with %s = %v, want 402 payment_declined", paysim.MethodDeclined, r)
	}
	if g := fr.api.getOrder(o.ID); g.order.State != "RCVD" {
		t.Errorf("order after the decline is %v, want RCVD", g)
	}
	if r := fr.api.pay(ctx, o.ID, k1, paysim.MethodDeclined); r.status != http.StatusPaymentRequired || !r.replayed {
		t.Errorf("retry of the declined pay = %v, want 402 replayed", r)
	}
	if c := e.psa.captures(t, o.ID); c != 0 {
		t.Errorf("paysim captured %d times for a declined card, want 0", c)
	}
	k2 := newKey("decline-repay")
	fr.track(o.ID, k2, "pm_card_visa")
	if r, n := fr.api.payUntilFinal(o.ID, k2, "pm_card_visa"); r.status != http.StatusOK || r.order.State != "PAID" || r.replayed {
		t.Errorf("pay with a new key and pm_card_visa = %v after %d tries, want 200 PAID", r, n)
	}

	o2 := fr.create(newKey("decline-nsf-create"))
	k3 := newKey("decline-nsf-pay")
	fr.track(o2.ID, k3, paysim.MethodInsufficientFunds)
	if r := fr.api.pay(ctx, o2.ID, k3, paysim.MethodInsufficientFunds); r.status != http.StatusPaymentRequired {
		t.Errorf("pay with %s = %v, want 402", paysim.MethodInsufficientFunds, r)
	}
	fr.finish()
}

// testPostgresRestart restarts the machine's PostgreSQL (only with
// ORDERLY_FAULT_PG_RESTART=1) while four workers create and pay orders
// through the Go client, which retries 5xx and in-progress answers with the
// same key. Every order ends PAID with one capture, and orderd still
// serves.
func testPostgresRestart(t *testing.T, e *env) {
	if os.Getenv(EnvPGRestart) != "1" {
		e.m.add(&matrixRow{fault: "PostgreSQL restart", status: "skipped", note: "set " + EnvPGRestart + "=1"})
		t.Skipf("restarts the shared PostgreSQL server: set %s=1 to run it "+
			"(CI runs it in a separate step: %s=1 go test -race -run 'TestFaults/postgres_restart' ./faulttest/)", EnvPGRestart, EnvPGRestart)
	}
	version := clusterVersion(t)
	t.Cleanup(func() { ensurePostgresUp(t, version) })

	dbURL := pgtest.NewDatabase(t)
	od := startOrderd(t, "orderd-pg", dbURL, e.paysim.addr, fastTimings)
	fr := e.begin(t, "PostgreSQL restart, 4 workers", od.addr, dbURL)
	fr.extra = []string{"pg_restart=1"}
	cl, err := client.New(fr.api.base, apiKey,
		client.WithHTTPClient(&http.Client{Transport: fr.ct, Timeout: 10 * time.Second}),
		client.WithMaxAttempts(80), client.WithBackoff(100*time.Millisecond, time.Second),
		client.WithMaxRetryAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}

	const workers, maxOrders = 4, 150
	var (
		mu         sync.Mutex
		issued     int
		paid       atomic.Int64
		restartBeg atomic.Int64 // unix nanos
		restartEnd atomic.Int64 // unix nanos
		overlap    atomic.Int64 // orders whose create or pay spanned part of the restart
		failures   []string
	)
	type done struct{ id, key string }
	var results []done
	deadline := time.Now().Add(60 * time.Second)
	more := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if issued >= maxOrders || time.Now().After(deadline) {
			return false
		}
		if end := restartEnd.Load(); end != 0 && time.Since(time.Unix(0, end)) > 1500*time.Millisecond {
			return false
		}
		issued++
		return true
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for more() {
				began := time.Now().UnixNano()
				ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
				ck, pk := newKey("pg-create"), newKey("pg-pay")
				res, err := cl.CreateOrder(ctx, order.NewOrderInput{CustomerID: "cus_pg", Currency: "USD",
					Items: []order.Item{{SKU: "sku_fault", Quantity: 3, UnitPrice: 999}}}, client.WithIdempotencyKey(ck))
				if err != nil {
					cancel()
					mu.Lock()
					failures = append(failures, fmt.Sprintf("create %s: %v", ck, err))
					mu.Unlock()
					continue
				}
				id := res.Value.ID
				mu.Lock()
				results = append(results, done{id, pk})
				mu.Unlock()
				pr, err := cl.PayOrder(ctx, id, client.PayInput{Amount: orderAmount, Currency: "USD", PaymentMethod: "pm_card_visa"},
					client.WithIdempotencyKey(pk))
				cancel()
				if err != nil || pr.Value.State != order.Paid {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("pay %s (key %s): %v", id, pk, err))
					mu.Unlock()
					continue
				}
				paid.Add(1)
				// Paced, so that the bounded load spans the restart.
				ended := time.Now().UnixNano()
				if b, e := restartBeg.Load(), restartEnd.Load(); b != 0 && ended > b && (e == 0 || began < e) {
					overlap.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}

	// Restart once a few orders went through, while the workers keep going.
	for i := 0; i < 100 && paid.Load() < 4; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	paidBefore := paid.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	start := time.Now()
	restartBeg.Store(start.UnixNano())
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart").CombinedOutput()
	cancel()
	restartEnd.Store(time.Now().UnixNano())
	if err != nil {
		t.Errorf("pg_ctlcluster %s main restart: %v\n%s", version, err, out)
	}
	t.Logf("PostgreSQL %s restarted in %s with %d orders paid before it", version, time.Since(start).Round(time.Millisecond), paidBefore)
	ensurePostgresUp(t, version)
	wg.Wait()

	for _, f := range failures {
		t.Errorf("a client call failed for good across the restart: %s", f)
	}
	for _, r := range results {
		fr.orders = append(fr.orders, r.id)
		fr.track(r.id, r.key, "pm_card_visa")
	}
	readyBy := time.Now().Add(30 * time.Second)
	for !fr.api.ready() && time.Now().Before(readyBy) {
		time.Sleep(200 * time.Millisecond)
	}
	if !fr.api.ready() {
		t.Errorf("orderd's /readyz is not 200 30s after the restart")
	}
	shared := &orderdAPI{base: "http://" + e.orderd.addr, hc: &http.Client{Timeout: 5 * time.Second}, ct: &countingTransport{}}
	for !shared.ready() && time.Now().Before(readyBy) {
		time.Sleep(200 * time.Millisecond)
	}
	if !shared.ready() {
		t.Errorf("the shared orderd's /readyz is not 200 30s after the restart")
	}
	if overlap.Load() == 0 {
		t.Errorf("no order was in flight during the restart: the test did not exercise it")
	}
	fr.row.note = fmt.Sprintf("%d orders, %d paid before the restart, %d in flight across it, %d 5xx answers seen",
		len(results), paidBefore, overlap.Load(), fr.ct.fivexx.Load())
	fr.finish()
}

// clusterVersion returns the PostgreSQL version directory under
// /etc/postgresql (the highest, if several).
func clusterVersion(t *testing.T) string {
	t.Helper()
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil {
		t.Fatalf("finding the PostgreSQL cluster: %v", err)
	}
	var versions []string
	for _, e := range entries {
		if e.IsDir() {
			versions = append(versions, e.Name())
		}
	}
	if len(versions) == 0 {
		t.Fatal("no cluster version under /etc/postgresql")
	}
	sort.Slice(versions, func(i, j int) bool {
		if len(versions[i]) != len(versions[j]) {
			return len(versions[i]) < len(versions[j])
		}
		return versions[i] < versions[j]
	})
	return versions[len(versions)-1]
}

// ensurePostgresUp waits, at most 60s, for pg_isready on 127.0.0.1, and
// starts the cluster if it is down after that.
func ensurePostgresUp(t *testing.T, version string) {
	t.Helper()
	isReady := func() bool { return exec.Command("pg_isready", "-h", "127.0.0.1", "-t", "2").Run() == nil }
	for i := 0; i < 60 && !isReady(); i++ {
		time.Sleep(time.Second)
	}
	if isReady() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start").CombinedOutput()
	if err != nil || !isReady() {
		t.Errorf("PostgreSQL is not accepting connections after the test; start: %v\n%s", err, strings.TrimSpace(string(out)))
	}
}
