package postgres_test

import (
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
	"github.com/orderly/orderly/store/storetest"
)

// poolSize caps each test store's connections, so parallel subtests stay
// well under the server's default max_connections (100).
const poolSize = "4"

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		t.Helper()
		s, err := postgres.Open(t.Context(), withPoolSize(t, pgtest.NewDatabase(t)))
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestMigrationsConcurrent starts several instances on one fresh database at
// once, as a rolling deploy does: goose's advisory lock lets exactly one
// apply each migration and the others find the schema up to date.
func TestMigrationsConcurrent(t *testing.T) {
	dbURL := withPoolSize(t, pgtest.NewDatabase(t))
	const n = 4
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = postgres.Open(t.Context(), dbURL)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if stores[i] != nil {
			t.Cleanup(func() { _ = stores[i].Close() })
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	ctx := t.Context()
	var applied int
	err := stores[0].Pool().QueryRow(ctx,
		`SELECT count(*) FROM goose_db_version WHERE version_id = 1 AND is_applied`).Scan(&applied)
	if err != nil {
		t.Fatalf("read goose_db_version: %v", err)
	}
	if applied != 1 {
		t.Errorf("migration 1 recorded %d times, want 1", applied)
	}

	// Every instance serves the one schema: what one writes, another reads.
	o, err := order.New("tenant-a", order.NewOrderInput{
		CustomerID: "cust-1", Currency: "USD",
		Items: []order.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 100}},
	}, time.Now())
	if err != nil {
		t.Fatalf("order.New: %v", err)
	}
	if held, err := stores[1].CreateOrder(ctx, nil, o); err != nil || held != nil {
		t.Fatalf("CreateOrder = %v, %v; want nil, nil", held, err)
	}
	for i, s := range stores {
		if _, err := s.GetOrder(ctx, "tenant-a", o.ID); err != nil {
			t.Errorf("store %d: GetOrder: %v", i, err)
		}
	}
}

// withPoolSize adds pool_max_conns to a database URL.
func withPoolSize(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	q := u.Query()
	q.Set("pool_max_conns", poolSize)
	u.RawQuery = q.Encode()
	return u.String()
}
