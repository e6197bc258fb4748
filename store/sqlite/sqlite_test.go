package sqlite_test

import (
	"errors"
	"testing"
	"time"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/internal/sqlitefile"
	"github.com/orderly/orderly/internal/testclock"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/sqlite"
	"github.com/orderly/orderly/store/sqlite/sqlitetest"
	"github.com/orderly/orderly/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clk *testclock.Clock) store.Store {
		t.Helper()
		s, err := sqlite.Open(t.Context(), sqlitetest.NewDir(t), sqlite.WithClock(clk.Now))
		if err != nil {
			t.Fatalf("sqlite.Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	})
}

// TestDurableAcrossReopen checks that a committed order and its key are in
// the file, not only in a connection: they survive Close and a new Open.
func TestDurableAcrossReopen(t *testing.T) {
	ctx, dir := t.Context(), t.TempDir()
	now := time.Date(2025, time.March, 14, 15, 9, 26, 535_897_000, time.UTC)
	o, err := order.New("tenant-a", order.NewOrderInput{
		CustomerID: "cust-1", Currency: "USD",
		Items: []order.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 150}},
	}, now)
	if err != nil {
		t.Fatalf("order.New: %v", err)
	}
	rec := idempotency.Record{
		TenantID: "tenant-a", KeyHash: idempotency.HashKey("create-1"), Fingerprint: "sha256:abc",
		Operation: idempotency.OpCreate, ResourceID: o.ID,
		CreatedAt: now, ExpiresAt: now.Add(idempotency.DefaultKeyTTL),
		State: idempotency.StateCompleted,
	}

	clock := sqlite.WithClock(func() time.Time { return now })
	s, err := sqlite.Open(ctx, dir, clock)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	claim := store.Claim{Record: rec, TTL: idempotency.DefaultKeyTTL}
	if held, err := s.CreateOrder(ctx, &claim, o); err != nil || held != nil {
		t.Fatalf("CreateOrder = %v, %v; want nil, nil", held, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s, err = sqlite.Open(ctx, dir, clock)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	got, err := s.GetOrder(ctx, "tenant-a", o.ID)
	if err != nil {
		t.Fatalf("GetOrder after reopen: %v", err)
	}
	if got.ID != o.ID || got.Amount != 300 || got.Version != 1 || !got.CreatedAt.Equal(now) || len(got.Items) != 1 {
		t.Errorf("order after reopen = %+v, want %+v", got, o)
	}
	gotRec, err := s.LookupKey(ctx, "tenant-a", idempotency.HashKey("create-1"))
	if err != nil {
		t.Fatalf("LookupKey after reopen: %v", err)
	}
	sameTimes := gotRec.CreatedAt.Equal(rec.CreatedAt) && gotRec.ExpiresAt.Equal(rec.ExpiresAt)
	gotRec.CreatedAt, gotRec.ExpiresAt = rec.CreatedAt, rec.ExpiresAt
	if gotRec != rec || !sameTimes {
		t.Errorf("record after reopen = %+v, want %+v", gotRec, rec)
	}
	// The reopened store still holds the key: a retry replays.
	held, err := s.CreateOrder(ctx, &claim, o)
	if err != nil || held == nil || held.ResourceID != o.ID {
		t.Errorf("retry after reopen = %v, %v; want the held record of %s", held, err, o.ID)
	}
}

// TestOneStorePerDirectory: the embedded store is single-node, so a second
// Open of a directory in use fails, naming the lock, and succeeds once the
// first Store is closed.
func TestOneStorePerDirectory(t *testing.T) {
	ctx, dir := t.Context(), t.TempDir()
	first, err := sqlite.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if second, err := sqlite.Open(ctx, dir); !errors.Is(err, sqlitefile.ErrDirLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second Open = %v, want ErrDirLocked", err)
	}
	if err := first.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	again, err := sqlite.Open(ctx, dir)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
