package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orderly/orderly/apperr"
	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/paysim/simulator"
	"github.com/orderly/orderly/service"
)

// skewedInstance is another instance on f's store whose clock reads f's
// database clock plus skew (an hour ahead, or behind), with f's lease and
// retention, and group commit when groupCommit.
func skewedInstance(t *testing.T, f *fixture, skew time.Duration, groupCommit ...bool) *service.Service {
	t.Helper()
	s := service.New(f.st, f.gw, simulator.NewWarehouse(), service.Config{
		KeyTTL: time.Hour, DerivedKeyTTL: 10 * time.Minute, TombstoneTTL: 2 * time.Hour,
		LeaseDuration: 10 * time.Second, MaxWait: 5 * time.Second,
		Now:         func() time.Time { return f.clk.Now().Add(skew) },
		GroupCommit: len(groupCommit) > 0 && groupCommit[0],
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

// TestSkewedInstancesJudgeKeyExpiryOnTheDatabasesClock: whether a create's
// key has expired, what GET /v1/idempotency-keys says of it, and the
// Idempotency-Key expiry a create answers with are decided on the
// database's clock, like the leases. An instance an hour ahead replays a
// live key (a double click without a key, a client's retry) and reports it
// completed; an instance an hour behind refuses a key that expired on the
// database's clock. Both with and without group commit. (Found by a
// review with real processes: the instance ahead told a client that never
// sent a key that its key had expired, inviting a second order.)
func TestSkewedInstancesJudgeKeyExpiryOnTheDatabasesClock(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(fmt.Sprintf("groupcommit=%t", gc), func(t *testing.T) {
			eachStore(t, func(t *testing.T, f *fixture) {
				ctx := context.Background()
				ahead, behind := skewedInstance(t, f, time.Hour, gc), skewedInstance(t, f, -time.Hour, gc)

				// A double click without a key (a derived key, kept 10
				// minutes): the first on the instance on time, the second on
				// the one ahead, one second later.
				derived := idempotency.Key{Value: "derived-1", Fingerprint: "fp-derived-1", Derived: true}
				first, err := f.svc.Create(ctx, "t1", derived, input)
				if err != nil {
					t.Fatal(err)
				}
				f.clk.Advance(time.Second)
				res, err := ahead.Create(ctx, "t1", derived, input)
				if err != nil || !res.Replayed || res.Order.ID != first.Order.ID {
					t.Errorf("double click on the instance an hour ahead = replayed %t, order %s, %v; want a replay of %s",
						res.Replayed, res.Order.ID, err, first.Order.ID)
				}

				// A client key (kept an hour) created on the instance ahead:
				// its expiry is the database's, and a replay says the same.
				k := key("create-1")
				created := f.clk.Now()
				first, err = ahead.Create(ctx, "t1", k, input)
				if err != nil {
					t.Fatal(err)
				}
				if want := created.Add(time.Hour); !first.KeyExpiresAt.Equal(want) {
					t.Errorf("create on the instance an hour ahead: key expires %s, want %s (the database's clock)", first.KeyExpiresAt, want)
				}
				// Retried 30 minutes later on the instance ahead: live.
				f.clk.Advance(30 * time.Minute)
				res, err = ahead.Create(ctx, "t1", k, input)
				if err != nil || !res.Replayed || res.Order.ID != first.Order.ID || !res.KeyExpiresAt.Equal(first.KeyExpiresAt) {
					t.Errorf("retry on the instance an hour ahead = replayed %t, expires %s, %v; want a replay of %s expiring %s",
						res.Replayed, res.KeyExpiresAt, err, first.Order.ID, first.KeyExpiresAt)
				}
				if info, err := ahead.KeyStatus(ctx, "t1", k.Value); err != nil || info.State != service.KeyCompleted {
					t.Errorf("KeyStatus on the instance an hour ahead = %q, %v; want completed", info.State, err)
				}

				// 31 minutes later the key expired on the database's clock
				// (the sweeper has not run): the instance behind says so.
				f.clk.Advance(31 * time.Minute)
				_, err = behind.Create(ctx, "t1", k, input)
				var e *apperr.Error
				if !errors.As(err, &e) || e.Code != apperr.EKeyExpired {
					t.Errorf("retry of an expired key on the instance an hour behind = %v; want EKeyExpired", err)
				}
				if info, err := behind.KeyStatus(ctx, "t1", k.Value); err != nil || info.State != service.KeyExpired {
					t.Errorf("KeyStatus on the instance an hour behind = %q, %v; want expired", info.State, err)
				}
			})
		})
	}
}
