package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
)

// skewedInstance is another instance on f's store whose clock reads f's
// database clock plus skew (an hour ahead, or behind), with f's lease.
func skewedInstance(t *testing.T, f *fixture, skew time.Duration) *service.Service {
	t.Helper()
	s := service.New(f.st, f.gw, simulator.NewWarehouse(), service.Config{
		KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 2 * time.Hour,
		LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second,
		Now: func() time.Time { return f.clk.Now().Add(skew) },
	})
	t.Cleanup(s.Close)
	return s
}

// TestSkewedInstancesAgreeOnLeases: instances whose clocks disagree by an
// hour share one store, and leases are decided on the database's clock
// alone. An instance an hour ahead neither takes over a live lease with a
// retry nor with its completer (its clock says the lease ran out 59
// minutes ago); an instance an hour behind still takes over a lease that
// ran out on the database's clock (its clock says the lease has an hour
// left). One capture per order throughout.
func TestSkewedInstancesAgreeOnLeases(t *testing.T) {
	eachStore(t, func(t *testing.T, f *fixture) {
		ctx := context.Background()
		ahead, behind := skewedInstance(t, f, time.Hour), skewedInstance(t, f, -time.Hour)

		// Instance A (f.svc) holds the lease of K and is inside the
		// provider call.
		o := f.order(t)
		release := make(chan struct{})
		f.gw.hold, f.gw.entered = release, make(chan struct{})
		entered := f.gw.entered
		first := make(chan error, 1)
		call := service.Call{TenantID: "t1", OrderID: o.ID, Key: key("K")}
		go func() {
			_, err := f.svc.Pay(ctx, call, payIn)
			first <- err
		}()
		<-entered

		f.clk.Advance(time.Second) // one second into A's ten-second lease
		_, err := ahead.Pay(ctx, call, payIn)
		var e *apperr.Error
		if !errors.As(err, &e) || e.Code != apperr.EKeyInProgress {
			t.Fatalf("retry on the instance an hour ahead = %v, want EKeyInProgress (the lease is live)", err)
		}
		// Retry-After is the lease's time left on the database's clock,
		// not on the instance's (which says it ran out an hour ago).
		if e.RetryAfter != 9*time.Second {
			t.Errorf("Retry-After on the instance an hour ahead = %s, want 9s", e.RetryAfter)
		}
		if n, err := ahead.RecoverAbandoned(ctx, 10); err != nil || n != 0 {
			t.Fatalf("completer an hour ahead took over %d keys (%v), want 0", n, err)
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatalf("A's pay: %v", err)
		}
		if rec, err := f.st.LookupKey(ctx, "t1", idempotency.HashKey("K")); err != nil ||
			rec.State != idempotency.StateCompleted || rec.FencingToken != 1 {
			t.Fatalf("K = %+v, %v; want completed by its first holder (token 1)", rec, err)
		}

		// A crashed holder of C: leased for ten seconds on the database's
		// clock, its charge recorded and never sent.
		crashed := f.order(t)
		crashPay(t, f, crashed, "C")
		if n, err := behind.RecoverAbandoned(ctx, 10); err != nil || n != 0 {
			t.Fatalf("completer an hour behind, lease live: took over %d keys (%v), want 0", n, err)
		}
		f.clk.Advance(11 * time.Second) // the lease ran out on the database's clock
		if n, err := behind.RecoverAbandoned(ctx, 10); err != nil || n != 1 {
			t.Fatalf("completer an hour behind, lease expired: took over %d keys (%v), want 1", n, err)
		}
		rec, err := f.st.LookupKey(ctx, "t1", idempotency.HashKey("C"))
		if err != nil || rec.FencingToken != 2 || rec.State == idempotency.StateInProgress {
			t.Fatalf("C after the takeover = %+v, %v; want token 2, no longer in progress", rec, err)
		}
		for _, id := range []string{o.ID, crashed.ID} {
			if n := f.gw.Captures(id); n > 1 {
				t.Errorf("order %s captured %d times", id, n)
			}
		}
		if got, err := f.st.GetOrder(ctx, "t1", o.ID); err != nil || got.State != order.Paid {
			t.Errorf("order = %s (%v), want PAID", got.State, err)
		}
	})
}
