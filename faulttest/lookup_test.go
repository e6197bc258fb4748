package faulttest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store/pgtest"
)

// testLookupFailsAfterUnknownOutcome: a charge is captured and its reply
// dropped (outcome unknown); the retry's Lookup then times out. The
// attempt must stay "unknown" (the charge may exist), so that a later pay —
// here with a new key and another card — asks paysim first and finds the
// capture: PAID, one capture.
//
// Regression: the service once classed the failed Lookup as "retryable",
// marked the attempt "failed", and a later pay re-opened it with another
// card; the provider refused the reused key, and the order stayed RCVD with
// its money captured.
func testLookupFailsAfterUnknownOutcome(t *testing.T, e *env) {
	dbURL := pgtest.NewDatabase(t)
	// No completer after its first pass, so the client's retry is the one
	// that looks the charge up.
	od := startOrderd(t, "orderd-lookup", dbURL, e.paysim.addr,
		orderdTimings{providerTimeout: time.Second, lease: 3 * time.Second, completer: time.Hour})
	fr := e.begin(t, "drop, then the Lookup times out", od.addr, dbURL)
	t.Cleanup(func() { e.psa.setFaults(t, paysim.Faults{}) })
	ctx := context.Background()
	o := fr.create(newKey("lookup-create"))
	k1 := newKey("lookup-pay")
	fr.track(o.ID, k1, paysim.MethodFaultDropAfterCommit)

	if r := fr.api.pay(ctx, o.ID, k1, paysim.MethodFaultDropAfterCommit); r.status != http.StatusServiceUnavailable {
		t.Fatalf("first pay = %v, want 503 (reply dropped)", r)
	}
	if c := e.psa.captures(t, o.ID); c != 1 {
		t.Fatalf("paysim holds %d captures, want 1", c)
	}
	// Every paysim request now outlasts orderd's 1s provider timeout.
	e.psa.setFaults(t, paysim.Faults{Latency: 1500 * time.Millisecond})
	r := fr.api.pay(ctx, o.ID, k1, paysim.MethodFaultDropAfterCommit)
	e.psa.setFaults(t, paysim.Faults{})
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("retry while paysim is slow = %v, want 503", r)
	}
	ks, _ := fr.api.keyStatus(k1)
	status := attemptStatus(t, dbURL, o.ID+"/pay/1")
	t.Logf("after the failed Lookup: key %s, attempt %s", ks.State, status)
	if status != "unknown" {
		t.Errorf("attempt %s/pay/1 is %q after a failed Lookup, want still \"unknown\" (the charge is captured at paysim)", o.ID, status)
	}

	// Another card may not join the unresolved charge (it would take on
	// another request's outcome): 409 order_busy, and nothing is charged.
	k2 := newKey("lookup-repay")
	fr.track(o.ID, k2, "pm_card_visa")
	if first := fr.api.pay(ctx, o.ID, k2, "pm_card_visa"); first.status != http.StatusConflict {
		t.Errorf("pay with a new key and another card while the charge is unresolved = %v, want 409 order_busy", first)
	}
	// The first key's own retry (the completer is off here) asks paysim,
	// finds the capture and completes: a 200, not a second charge.
	if r1, n := fr.api.payUntilFinal(o.ID, k1, paysim.MethodFaultDropAfterCommit); r1.status != http.StatusOK || r1.order.State != "PAID" {
		t.Errorf("retry of the first key = %v after %d tries, want 200 PAID", r1, n)
	}
	// Now the other card's pay is a no-op on a PAID order.
	r2, n := fr.api.payUntilFinal(o.ID, k2, "pm_card_visa")
	if r2.status != http.StatusOK || r2.order.State != "PAID" {
		t.Errorf("pay with a new key after the first resolved = %v after %d tries, want 200 PAID", r2, n)
	}
	fr.row.note = "attempt " + status + " after the failed Lookup; new key: " + r2.String()
	fr.finish()
}

// attemptStatus reads a provider attempt's status from orderd's database.
func attemptStatus(t *testing.T, dbURL, providerKey string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, `SELECT status FROM provider_attempts WHERE provider_key = $1`, providerKey).Scan(&s); err != nil {
		t.Fatalf("read attempt %s: %v", providerKey, err)
	}
	return s
}
