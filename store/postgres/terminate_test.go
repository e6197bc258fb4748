package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderly/orderly/idempotency"
	"github.com/orderly/orderly/order"
	"github.com/orderly/orderly/store"
	"github.com/orderly/orderly/store/pgtest"
	"github.com/orderly/orderly/store/postgres"
)

// TestCreateOrderTerminatedWhileWaitingForKey: a keyed create that waits
// for another transaction's uncommitted claim of the same key, and whose
// backend is then terminated (pg_terminate_backend, SQLSTATE 57P01, as an
// operator, a failover or the storm test does), answers ErrUnavailable: a
// retry with the same key finds out what happened. It used to answer
// ErrNotFound (an HTTP 500), because the statement's scan took "no row" for
// "no such key" and hid the connection's error.
func TestCreateOrderTerminatedWhileWaitingForKey(t *testing.T) {
	ctx := t.Context()
	dbURL := pgtest.NewDatabase(t)
	s, err := postgres.Open(ctx, withPoolSize(t, dbURL))
	if err != nil {
		t.Fatalf("postgres.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })

	const tenant, key = "tenant-terminated", "key-terminated"
	hash := idempotency.HashKey(key)

	// Another request's claim of the key, not yet committed.
	holder, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, derived, state, operation,
		resource_id, locked_until, fencing_token, recovery_point, created_at, expires_at)
		VALUES ($1, $2, 'sha256:other', false, 'in_progress', 'create', NULL, now() + interval '1 minute', 1, 'started',
		now(), now() + interval '1 day')`, tenant, hash); err != nil {
		t.Fatalf("insert the holder's key: %v", err)
	}

	o, err := order.New(tenant, order.NewOrderInput{CustomerID: "cus_1", Currency: "EUR",
		Items: []order.Item{{SKU: "SKU-RED", Quantity: 2, UnitPrice: 1250}}}, time.Now())
	if err != nil {
		t.Fatalf("order.New: %v", err)
	}
	claim := store.Claim{Record: idempotency.Record{TenantID: tenant, KeyHash: hash, Fingerprint: "sha256:mine",
		Operation: idempotency.OpCreate, ResourceID: o.ID, State: idempotency.StateCompleted}, TTL: idempotency.DefaultKeyTTL}
	done := createAsync(ctx, s, &claim, o)
	pid := waitForClaimWait(t, dbURL, holder.PgConn().PID(), done)
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	var terminated bool
	if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, terminated, err)
	}
	r := <-done
	if errors.Is(r.err, store.ErrNotFound) || !errors.Is(r.err, store.ErrUnavailable) {
		t.Fatalf("CreateOrder on a terminated backend = (%v, %v), want ErrUnavailable", r.held, r.err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	// The key is free again: a retry claims it and creates the order once.
	if h, err := s.CreateOrder(ctx, &claim, o); err != nil || h != nil {
		t.Fatalf("retry CreateOrder = (%v, %v), want claimed", h, err)
	}
	if got, err := s.GetOrder(ctx, tenant, o.ID); err != nil || got.ID != o.ID {
		t.Fatalf("GetOrder after the retry = (%v, %v)", got.ID, err)
	}
}

// createResult is what CreateOrder returned.
type createResult struct {
	held *store.Holder
	err  error
}

// createAsync runs s.CreateOrder(key, o) in a goroutine.
func createAsync(ctx context.Context, s *postgres.Store, key *store.Claim, o order.Order) <-chan createResult {
	done := make(chan createResult, 1)
	go func() {
		h, err := s.CreateOrder(ctx, key, o)
		done <- createResult{h, err}
	}()
	return done
}

// waitForClaimWait waits (bounded: minutes, polling) until a backend
// inserting into idempotency_keys waits for a lock that the backend
// holderPID holds, and returns its pid. It fails the test if the create
// answers first.
func waitForClaimWait(t *testing.T, dbURL string, holderPID uint32, done <-chan createResult) int32 {
	t.Helper()
	ctx := t.Context()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var pid int32
		err := c.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND $1 = ANY (pg_blocking_pids(pid))
			  AND query LIKE '%INSERT INTO idempotency_keys%'`, int32(holderPID)).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("find the waiting create: %v", err)
		}
		select {
		case r := <-done:
			t.Fatalf("CreateOrder returned (%+v, %v) before waiting for the other request's key", r.held, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the create never waited for the other request's key")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
