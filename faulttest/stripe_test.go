package faulttest

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/orderly/orderly/paysim"
	"github.com/orderly/orderly/store/pgtest"
)

// TestStripeCancelRefundsOnceAcrossSIGKILL: orderd pays through the Stripe
// adapter (ORDERD_PAYMENT_PROVIDER=stripe) against paysim -api stripe, and
// is killed with SIGKILL while the refund of a PAID order's cancel is at
// paysim — before paysim committed it (held by a timeout fault), or after
// (orderd frozen by SIGSTOP while paysim commits). A new orderd's completer
// finishes the cancel by itself (FindRefund finds the refund, or finds none
// and refunds under a key of its own lease), and a retry of the cancel with
// its key answers CANCELLED: one refund of the whole amount, on each store.
func TestStripeCancelRefundsOnceAcrossSIGKILL(t *testing.T) {
	for _, kind := range []string{"postgres", "sqlite"} {
		for _, when := range []string{"before_commit", "after_commit"} {
			t.Run(kind+"/"+when, func(t *testing.T) {
				t.Parallel()
				ps := startProc(t, "paysim-stripe", "paysim", "PAYSIM_ADDR=127.0.0.1:0", "PAYSIM_DATA_DIR="+t.TempDir(),
					"PAYSIM_API=stripe", "PAYSIM_STRIPE_SEARCH_LAG=0", "PAYSIM_LOG_LEVEL=info")
				psa := newPaysimAdmin(ps.addr)
				env := []string{"ORDERD_ADDR=127.0.0.1:0", "ORDERD_ADMIN_ADDR=127.0.0.1:0", "ORDERD_API_KEYS=" + tenant + ":" + apiKey,
					"ORDERD_PAYMENT_PROVIDER=stripe", "ORDERD_STRIPE_SECRET_KEY=sk_test_faults",
					"ORDERD_STRIPE_API_BASE=http://" + ps.addr, "ORDERD_WAREHOUSE_URL=http://" + ps.addr,
					"ORDERD_PROVIDER_TIMEOUT=" + killTimings.providerTimeout.String(), "ORDERD_LEASE=" + killTimings.lease.String(),
					"ORDERD_COMPLETER_INTERVAL=" + killTimings.completer.String(), "ORDERD_SWEEP_INTERVAL=1m", "ORDERD_LOG_LEVEL=info"}
				if kind == "postgres" {
					env = append(env, "ORDERD_DATABASE_URL="+pgtest.NewDatabase(t))
				} else {
					env = append(env, "ORDERD_DATA_DIR="+t.TempDir())
				}
				od := startProc(t, "orderd-stripe", "orderd", env...)
				api := &orderdAPI{base: "http://" + od.addr, hc: &http.Client{Timeout: 20 * time.Second}, ct: &countingTransport{}}

				o := api.create(t, newKey("stripe-kill-create"))
				if r, _ := api.payUntilFinal(o.ID, newKey("stripe-kill-pay"), "pm_card_visa"); r.status != http.StatusOK || r.order.State != "PAID" {
					t.Fatalf("pay = %v %s, want 200 PAID", r, r.body)
				}
				if c := psa.captures(t, o.ID); c != 1 {
					t.Fatalf("%d captures after the pay, want 1", c)
				}

				before := psa.stats(t).FaultsInjected
				if when == "before_commit" {
					psa.setFaults(t, paysim.Faults{TimeoutRate: 1, TimeoutDelay: paysim.MaxDelay}) // POSTs only
				} else {
					psa.setFaults(t, paysim.Faults{Latency: 2 * time.Second}) // every /v1/ request, before it runs
				}
				cancelKey := newKey("stripe-kill-cancel")
				inflight := make(chan reply, 1)
				go func() {
					inflight <- api.do(context.Background(), http.MethodPost, "/v1/orders/"+o.ID+"/cancel", cancelKey, nil)
				}()
				if when == "before_commit" {
					// The refund POST is held at paysim, nothing committed.
					awaitCond(t, "paysim to hold the refund", func() bool {
						return psa.stats(t).FaultsInjected[paysim.FaultTimeout] > before[paysim.FaultTimeout]
					})
					od.signal(t, syscall.SIGKILL)
				} else {
					// The intent's read, then the refund POST, are delayed;
					// orderd is frozen while paysim commits the refund.
					awaitCond(t, "paysim to delay the refund", func() bool {
						return psa.stats(t).FaultsInjected[paysim.FaultLatency] >= before[paysim.FaultLatency]+2
					})
					od.signal(t, syscall.SIGSTOP)
					awaitCond(t, "paysim to commit the refund", func() bool { return len(refundsOf(t, psa, o.ID)) == 1 })
					od.signal(t, syscall.SIGKILL)
				}
				if r := <-inflight; r.err == nil {
					t.Errorf("the cancel to the killed orderd answered %v, want no answer", r)
				}
				if exited, err := od.Wait(30 * time.Second); !exited {
					t.Fatalf("orderd did not die: %v", err)
				}
				psa.setFaults(t, paysim.Faults{})
				if err := od.Restart(); err != nil {
					t.Fatal(err)
				}
				api.base = "http://" + od.Addr()

				posts := api.ct.posts.Load()
				if got := api.awaitState(o.ID, "CANCELLED", 60*time.Second); got != "CANCELLED" {
					t.Fatalf("order is %s after the new orderd's completer ran, want CANCELLED", got)
				}
				if api.ct.posts.Load() != posts {
					t.Fatal("the test sent a POST while waiting for the completer")
				}
				if r := api.do(context.Background(), http.MethodPost, "/v1/orders/"+o.ID+"/cancel", cancelKey, nil); r.status != http.StatusOK || r.order.State != "CANCELLED" {
					t.Errorf("cancel retried with its key = %v %s, want 200 CANCELLED", r, r.body)
				}
				if rs := refundsOf(t, psa, o.ID); len(rs) != 1 || rs[0] != orderAmount {
					t.Errorf("paysim refunds of the order %v, want one of %d", rs, orderAmount)
				}
				if c := psa.captures(t, o.ID); c != 1 {
					t.Errorf("%d captures, want 1", c)
				}
			})
		}
	}
}

// refundsOf returns the amounts of paysim's refunds of order id's charges
// (in Stripe mode a refund names its charge, not its order).
func refundsOf(t *testing.T, psa *paysimAdmin, id string) []int64 {
	t.Helper()
	s := psa.ledger(t)
	mine := map[string]bool{}
	for _, c := range s.Charges {
		mine[c.ID] = c.OrderID == id
	}
	var out []int64
	for _, r := range s.Refunds {
		if mine[r.ChargeID] {
			out = append(out, r.Amount)
		}
	}
	return out
}

// awaitCond polls cond every 20ms, failing the test if it does not hold
// within a minute (a bound for a loaded machine, not a timing).
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
