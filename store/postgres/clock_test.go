package postgres_test

import (
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

// TestLeasesRunOnTheServersClock checks the production clock, orderly_now()
// as migrated (no test clock): a key is created, expires and is leased on
// the server's clock whatever the caller's clock says (and Now and a
// create's claim report that clock), a live lease is not
// taken over by a caller whose clock says it ran out, and a lease that ran
// out on the server's clock is taken over by a caller whose clock says it
// has a day left. The last step waits for the server's clock to pass a
// one-millisecond lease; it polls without a deadline of its own (the
// test's context bounds it), so a slow machine only makes it slower.
func TestLeasesRunOnTheServersClock(t *testing.T) {
	s, err := postgres.Open(t.Context(), withPoolSize(t, pgtest.NewDatabase(t)))
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	serverNow := func() time.Time {
		t.Helper()
		var now time.Time
		if err := s.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatalf("read the server's clock: %v", err)
		}
		return now
	}
	// What the caller's clock says: a year ahead or behind of the server.
	skewed := func(c store.Claim, by time.Duration) store.Claim {
		at := time.Now().Add(by)
		c.CreatedAt, c.ExpiresAt, c.LockedUntil = at, at.Add(c.TTL), at.Add(c.Lease)
		return c
	}
	claim := store.Claim{Record: idempotency.Record{TenantID: "t1", KeyHash: idempotency.HashKey("pay-1"),
		Fingerprint: "fp-1", Operation: idempotency.OpPay, ResourceID: order.NewID()},
		TTL: 24 * time.Hour, Lease: time.Hour}

	before := serverNow()
	first, ok, err := s.AcquireLease(ctx, skewed(claim, -365*24*time.Hour))
	after := serverNow()
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %t, %v; want acquired", ok, err)
	}
	if first.CreatedAt.Before(before.Truncate(time.Microsecond)) || first.CreatedAt.After(after) {
		t.Errorf("CreatedAt = %s, want the server's clock, between %s and %s", first.CreatedAt, before, after)
	}
	if got := first.ExpiresAt.Sub(first.CreatedAt); got != claim.TTL {
		t.Errorf("ExpiresAt − CreatedAt = %s, want %s", got, claim.TTL)
	}
	if got := first.LockedUntil.Sub(first.CreatedAt); got != claim.Lease {
		t.Errorf("LockedUntil − CreatedAt = %s, want %s", got, claim.Lease)
	}

	// A caller a year ahead: its clock says the lease ran out long ago.
	held, ok, err := s.AcquireLease(ctx, skewed(claim, 365*24*time.Hour))
	if err != nil || ok || held.FencingToken != 1 {
		t.Fatalf("AcquireLease by a caller a year ahead = %t (token %d), %v; want not acquired", ok, held.FencingToken, err)
	}
	// Nor does the completer take it.
	if recs, err := s.TakeOverAbandoned(ctx, store.TakeOver{Lease: time.Hour, Limit: 10}); err != nil || len(recs) != 0 {
		t.Fatalf("TakeOverAbandoned of a live lease = %d keys, %v; want none", len(recs), err)
	}

	// Now, and a create's claim, read the server's clock too.
	before = serverNow()
	now, err := s.Now(ctx)
	created := skewed(store.Claim{Record: idempotency.Record{TenantID: "t1", KeyHash: idempotency.HashKey("create-1"),
		Fingerprint: "fp-c", Operation: idempotency.OpCreate}, TTL: time.Hour}, 365*24*time.Hour)
	o, oerr := order.New("t1", order.NewOrderInput{CustomerID: "c1", Currency: "EUR",
		Items: []order.Item{{SKU: "s", Quantity: 1, UnitPrice: 100}}}, time.Now())
	if oerr != nil {
		t.Fatal(oerr)
	}
	created.ResourceID = o.ID
	h, cerr := s.CreateOrder(ctx, &created, o)
	after = serverNow()
	if err != nil || cerr != nil || h != nil {
		t.Fatalf("Now = %v; CreateOrder = %v, %v", err, h, cerr)
	}
	for name, at := range map[string]time.Time{"Now": now, "the create's CreatedAt": created.CreatedAt} {
		if at.Before(before.Truncate(time.Microsecond)) || at.After(after) {
			t.Errorf("%s = %s, want the server's clock, between %s and %s", name, at, before, after)
		}
	}
	if stored, err := s.LookupKey(ctx, "t1", created.KeyHash); err != nil ||
		!stored.CreatedAt.Equal(created.CreatedAt) || !stored.ExpiresAt.Equal(created.ExpiresAt) {
		t.Errorf("stored key = %+v, %v; want the times CreateOrder reported, %s and %s", stored, err, created.CreatedAt, created.ExpiresAt)
	}

	// A one-millisecond lease runs out on the server's clock; a caller a
	// year behind (its claim says a year is left) takes it over then.
	short := claim
	short.KeyHash, short.Lease = idempotency.HashKey("pay-2"), time.Millisecond
	if _, ok, err := s.AcquireLease(ctx, short); err != nil || !ok {
		t.Fatalf("AcquireLease(pay-2) = %t, %v", ok, err)
	}
	for {
		got, ok, err := s.AcquireLease(ctx, skewed(short, -365*24*time.Hour))
		if err != nil {
			t.Fatalf("AcquireLease(pay-2) again: %v", err)
		}
		if ok {
			if got.FencingToken != 2 {
				t.Fatalf("takeover token = %d, want 2", got.FencingToken)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the lease never ran out on the server's clock")
		case <-time.After(time.Millisecond):
		}
	}
}
