package postgres_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3/lock"

	"github.com/orderly/orderly/internal/testclock"
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
	storetest.Run(t, func(t *testing.T, clk *testclock.Clock) store.Store {
		t.Helper()
		url := withPoolSize(t, pgtest.NewDatabase(t))
		s, err := postgres.Open(t.Context(), url)
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		pgtest.FollowClock(t, url, clk)
		return s
	})
}

// TestMigrationsConcurrent starts several instances on one fresh database at
// once, as a rolling deploy does: goose's advisory lock lets exactly one
// apply each migration and the others find the schema up to date.
func TestMigrationsConcurrent(t *testing.T) {
	dbURL := withPoolSize(t, pgtest.NewEmptyDatabase(t))
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

// TestOpenWaitsForMigrationLock checks that Open migrates under goose's
// session advisory lock: while another session holds it, Open neither
// returns nor touches the schema; once it is released, Open migrates.
// (TestMigrationsConcurrent alone cannot tell, as goose also retries a
// failed creation of its version table.)
func TestOpenWaitsForMigrationLock(t *testing.T) {
	dbURL := pgtest.NewEmptyDatabase(t)
	ctx := t.Context()
	holder, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", lock.DefaultLockID); err != nil {
		t.Fatalf("take the migration lock: %v", err)
	}

	type opened struct {
		s   *postgres.Store
		err error
	}
	poolURL := withPoolSize(t, dbURL)
	done := make(chan opened, 1)
	go func() {
		s, err := postgres.Open(ctx, poolURL)
		done <- opened{s, err}
	}()
	select {
	case r := <-done:
		if r.s != nil {
			_ = r.s.Close()
		}
		t.Fatalf("Open returned (err %v) while another session held the migration lock", r.err)
	case <-time.After(time.Second):
	}
	if tableExists(t, holder, "orders") {
		t.Fatal("Open migrated while another session held the migration lock")
	}

	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", lock.DefaultLockID); err != nil {
		t.Fatalf("release the migration lock: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Open after the lock was released: %v", r.err)
		}
		t.Cleanup(func() { _ = r.s.Close() })
	case <-time.After(30 * time.Second):
		t.Fatal("Open did not return within 30s of the migration lock being released")
	}
	if !tableExists(t, holder, "orders") {
		t.Error("Open returned without migrating")
	}
}

func tableExists(t *testing.T, c *pgx.Conn, name string) bool {
	t.Helper()
	var ok bool
	if err := c.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
		t.Fatalf("to_regclass(%s): %v", name, err)
	}
	return ok
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
